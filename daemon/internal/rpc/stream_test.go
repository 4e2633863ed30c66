package rpc

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hanzoai/lsp/daemon/internal/workspace"
	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// fakeStream is a Prepare stream without gRPC: Recv hands out msgs in
// order (dropping its own reference to each), then io.EOF, and counts its
// calls. Only what Prepare calls is implemented.
type fakeStream struct {
	grpc.ServerStream
	ctx context.Context

	mu    sync.Mutex
	msgs  []*daemonv1.PrepareRequest
	recvs int
	resp  *daemonv1.PrepareResponse
}

func (f *fakeStream) Context() context.Context { return f.ctx }

func (f *fakeStream) Recv() (*daemonv1.PrepareRequest, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.recvs++
	if len(f.msgs) == 0 {
		return nil, io.EOF
	}
	m := f.msgs[0]
	f.msgs[0], f.msgs = nil, f.msgs[1:]
	return m, nil
}

func (f *fakeStream) SendAndClose(r *daemonv1.PrepareResponse) error {
	f.mu.Lock()
	f.resp = r
	f.mu.Unlock()
	return nil
}

func (f *fakeStream) calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.recvs
}

// nextAhead is the prefetcher's next delivery, ok false once it closed
// its channel; a test that waits for one too long fails.
func nextAhead(t *testing.T, r *streamReader) (received, bool) {
	t.Helper()
	select {
	case rcv, ok := <-r.ahead:
		return rcv, ok
	case <-time.After(30 * time.Second):
		t.Fatal("the prefetcher delivered nothing and did not stop")
		return received{}, false
	}
}

// TestPrefetchRefusesOversizedData: gRPC receives messages of up to
// MaxPushMessageBytes, so the prefetcher itself refuses a data message
// over MaxPushChunkBytes: it never queues one, stops at it, and the
// reader's error is ErrInvalid (InvalidArgument; TestPrepareRefused has
// it over gRPC).
func TestPrefetchRefusesOversizedData(t *testing.T) {
	small := bytes.Repeat([]byte("x"), 1<<10)
	over := bytes.Repeat([]byte("y"), daemonv1.MaxPushChunkBytes+1)
	msgs := append(dataMsgs(small, 1<<9), dataMsgs(over, len(over))...)
	msgs = append(msgs, dataMsgs([]byte("after"), 5)...)
	f := &fakeStream{ctx: context.Background(), msgs: msgs}
	r := &streamReader{stream: f, left: int64(len(small) + len(over) + 5)}
	stop := r.prefetch(prefetchMessages)
	defer stop()
	var refused error
	for refused == nil {
		rcv, ok := nextAhead(t, r)
		if !ok {
			t.Fatal("the prefetcher stopped without refusing the oversized message")
		}
		if n := len(rcv.msg.GetData()); n > daemonv1.MaxPushChunkBytes {
			t.Fatalf("the prefetcher queued a data message of %d bytes, over %d", n, daemonv1.MaxPushChunkBytes)
		}
		refused = rcv.err
	}
	if !errors.Is(refused, workspace.ErrInvalid) {
		t.Fatalf("the oversized message's error: %v; want ErrInvalid", refused)
	}
	if _, ok := nextAhead(t, r); ok {
		t.Fatal("the prefetcher went on after refusing a message")
	}
	if n := f.calls(); n != 3 {
		t.Fatalf("Recv called %d times, want 3 (two chunks and the oversized one)", n)
	}
	// Through the reader, as the store reads it.
	f = &fakeStream{ctx: context.Background(), msgs: append(dataMsgs(small, 1<<9), dataMsgs(over, len(over))...)}
	r = &streamReader{stream: f, left: int64(len(small) + len(over))}
	defer r.prefetch(prefetchMessages)()
	if _, err := io.ReadAll(r); !errors.Is(err, workspace.ErrInvalid) {
		t.Fatalf("reading a stream with an oversized data message: %v; want ErrInvalid", err)
	}
}

// TestPrefetchStopsAfterOtherMessages: the prefetcher receives ahead only
// data. After a trailer (nothing valid follows it) or a second header
// (refused), it stops without calling Recv again, so it never holds more
// than one message larger than a chunk; the reader receives what follows
// itself.
func TestPrefetchStopsAfterOtherMessages(t *testing.T) {
	for _, tc := range []struct {
		name string
		stop *daemonv1.PrepareRequest
	}{
		{"trailer", trailerMsg([]string{"digest"})},
		{"header", headerMsg(keyFor(t, "prefetch"), newID(), nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msgs := append(dataMsgs([]byte("abcdef"), 3), tc.stop)
			msgs = append(msgs, dataMsgs([]byte("more"), 4)...)
			f := &fakeStream{ctx: context.Background(), msgs: msgs}
			r := &streamReader{stream: f, left: 6, follow: true}
			defer r.prefetch(prefetchMessages)()
			for i := range 3 {
				rcv, ok := nextAhead(t, r)
				if !ok || rcv.err != nil {
					t.Fatalf("message %d: %v, %v", i, ok, rcv.err)
				}
			}
			if rcv, ok := nextAhead(t, r); ok {
				t.Fatalf("after the %s the prefetcher received %v, %v", tc.name, rcv.msg, rcv.err)
			}
			if n := f.calls(); n != 3 {
				t.Fatalf("Recv called %d times, want 3", n)
			}
			// The reader goes on receiving directly.
			r.left = 0
			if data, err := r.next(); err != nil || string(data) != "more" {
				t.Fatalf("next after the prefetcher stopped: %q, %v", data, err)
			}
			if n := f.calls(); n != 4 {
				t.Fatalf("Recv called %d times, want 4", n)
			}
		})
	}
}

// blockedStream's Recv waits for release, then has nothing to give.
type blockedStream struct {
	fakeStream
	entered chan struct{}
	release chan struct{}
}

func (b *blockedStream) Recv() (*daemonv1.PrepareRequest, error) {
	close(b.entered)
	<-b.release
	return nil, io.EOF
}

// TestPreparesBounded: past MaxPrepares a Prepare call waits for a slot
// before it receives anything — its header, the manifest, is not even
// decoded — and one whose caller gives up meanwhile ends without.
func TestPreparesBounded(t *testing.T) {
	s := &Server{MaxPrepares: 1}
	a := &blockedStream{fakeStream: fakeStream{ctx: context.Background()}, entered: make(chan struct{}), release: make(chan struct{})}
	aDone := make(chan error, 1)
	go func() { aDone <- s.Prepare(a) }()
	<-a.entered

	b := &fakeStream{ctx: context.Background()}
	bDone := make(chan error, 1)
	go func() { bDone <- s.Prepare(b) }()
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	c := &fakeStream{ctx: gone}
	if err := s.Prepare(c); status.Code(err) != codes.Canceled || c.calls() != 0 {
		t.Errorf("a prepare whose caller left while waiting: %v after %d receives; want Canceled and none", err, c.calls())
	}
	select {
	case err := <-bDone:
		t.Fatalf("a prepare past the bound ran at once: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	if n := b.calls(); n != 0 {
		t.Fatalf("a prepare past the bound received %d messages", n)
	}
	close(a.release)
	for _, done := range []chan error{aDone, bDone} {
		if err := <-done; status.Code(err) != codes.InvalidArgument {
			t.Errorf("prepare without a header: %v, want InvalidArgument", err)
		}
	}
	if b.calls() != 1 {
		t.Errorf("the waiting prepare received %d messages once a slot was free, want 1", b.calls())
	}
}

// TestPreparesShareByTenant: a tenant takes at most a quarter of the
// prepare slots, known from the stream's metadata before its header is
// received; another tenant, or a stream that names none (an older proxy),
// still gets one; and a header of another tenant than the stream named is
// refused.
func TestPreparesShareByTenant(t *testing.T) {
	tenantA, tenantB := strings.Repeat("a", 64), strings.Repeat("b", 64)
	as := func(tenant string) context.Context {
		return metadata.NewIncomingContext(context.Background(), metadata.Pairs(daemonv1.TenantHeader, tenant))
	}
	s := &Server{MaxPrepares: 4} // a share of 1
	a := &blockedStream{fakeStream: fakeStream{ctx: as(tenantA)}, entered: make(chan struct{}), release: make(chan struct{})}
	aDone := make(chan error, 1)
	go func() { aDone <- s.Prepare(a) }()
	<-a.entered

	a2 := &fakeStream{ctx: as(tenantA)}
	a2Done := make(chan error, 1)
	go func() { a2Done <- s.Prepare(a2) }()
	for name, f := range map[string]*fakeStream{"another tenant": {ctx: as(tenantB)}, "no tenant named": {ctx: context.Background()}} {
		if err := s.Prepare(f); status.Code(err) != codes.InvalidArgument || f.calls() != 1 {
			t.Errorf("%s, while a tenant holds its share: %v after %d receives; want it served (no header: InvalidArgument)", name, err, f.calls())
		}
	}
	select {
	case err := <-a2Done:
		t.Fatalf("a tenant's prepare past its share ran at once: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	if n := a2.calls(); n != 0 {
		t.Fatalf("a tenant's prepare past its share received %d messages", n)
	}
	close(a.release)
	for _, done := range []chan error{aDone, a2Done} {
		if err := <-done; status.Code(err) != codes.InvalidArgument {
			t.Errorf("prepare without a header: %v, want InvalidArgument", err)
		}
	}

	// The stream names tenant A, its header tenant B.
	hdr := &daemonv1.PrepareHeader{
		Workspace: &daemonv1.WorkspaceKey{TenantKey: tenantB, Repo: "r", Commit: strings.Repeat("c", 40)},
		PrepareId: "00000000-0000-4000-8000-000000000000",
	}
	liar := &fakeStream{ctx: as(tenantA), msgs: []*daemonv1.PrepareRequest{{Part: &daemonv1.PrepareRequest_Header{Header: hdr}}}}
	if err := s.Prepare(liar); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "tenant") {
		t.Errorf("a header of another tenant than the stream's: %v; want InvalidArgument naming the tenant", err)
	}
}
