package daemonclient

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// pushDaemon records what one Prepare stream carried and how it ended.
type pushDaemon struct {
	testDaemon
	mu      sync.Mutex
	header  *daemonv1.PrepareHeader
	tenant  []string // the stream's TenantHeader metadata
	data    bytes.Buffer
	trailer []string
	clean   bool // the stream ended with io.EOF (the client closed it), not an error
	done    chan struct{}
}

func (d *pushDaemon) Prepare(stream grpc.ClientStreamingServer[daemonv1.PrepareRequest, daemonv1.PrepareResponse]) error {
	defer close(d.done)
	md, _ := metadata.FromIncomingContext(stream.Context())
	d.mu.Lock()
	d.tenant = md.Get(daemonv1.TenantHeader)
	d.mu.Unlock()
	for {
		msg, err := stream.Recv()
		d.mu.Lock()
		if err != nil {
			d.clean = err == io.EOF
			d.mu.Unlock()
			if err == io.EOF {
				return stream.SendAndClose(&daemonv1.PrepareResponse{Prepared: true, PrepareId: d.header.GetPrepareId()})
			}
			return err
		}
		switch {
		case msg.GetHeader() != nil:
			d.header = msg.GetHeader()
		case msg.GetTrailer() != nil:
			d.trailer = msg.GetTrailer().GetSha256()
		default:
			d.data.Write(msg.GetData())
		}
		d.mu.Unlock()
	}
}

func startPushDaemon(t *testing.T) (*Shard, *pushDaemon) {
	t.Helper()
	d := &pushDaemon{done: make(chan struct{})}
	addr, _ := serve(t, d, "unix://"+filepath.Join(t.TempDir(), "d.sock"), nil)
	p, err := New([]string{addr}, Options{HealthInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p.Shards()[0], d
}

// TestPushStream: a streamed push sends the manifest without digests,
// the bytes in order, and a trailer of each file's SHA-256; a source that
// fails, or hands over a file of another size, abandons the stream
// before any trailer, with a SourceError.
func TestPushStream(t *testing.T) {
	contents := [][]byte{[]byte("package a\n"), bytes.Repeat([]byte("x"), ChunkSize+17), nil, []byte("last\n")}
	files := make([]File, len(contents))
	for i, c := range contents {
		files[i] = File{Path: string(rune('a'+i)) + ".txt", Size: int64(len(c))}
	}
	source := func(fail int, lie bool) func(context.Context, func(int, []byte) error) error {
		return func(_ context.Context, fn func(int, []byte) error) error {
			for i, c := range contents {
				if i == fail {
					return errors.New("forge read failed")
				}
				if lie && i == 1 {
					c = c[:10]
				}
				if err := fn(i, c); err != nil {
					return err
				}
			}
			return nil
		}
	}
	k := Key{TenantKey: string(bytes.Repeat([]byte("a"), 64)), Repo: "r", Commit: string(bytes.Repeat([]byte("c"), 40))}

	s, d := startPushDaemon(t)
	resp, err := s.PushStream(context.Background(), k, "00000000-0000-4000-8000-000000000001", files, PushMeta{}, source(-1, false))
	if err != nil || !resp.GetPrepared() {
		t.Fatalf("PushStream: %v, %v", resp, err)
	}
	<-d.done
	if !d.header.GetDigestsFollow() || !d.clean {
		t.Fatalf("header digests_follow=%v, clean end=%v", d.header.GetDigestsFollow(), d.clean)
	}
	// The tenant goes ahead of the header, for the daemon's shares.
	if len(d.tenant) != 1 || d.tenant[0] != k.TenantKey {
		t.Errorf("the stream named tenant %q, want %q", d.tenant, k.TenantKey)
	}
	for i, f := range d.header.GetFiles() {
		if f.GetSha256() != "" || f.GetSize() != uint64(len(contents[i])) || f.GetPath() != files[i].Path {
			t.Fatalf("manifest entry %d = %v", i, f)
		}
	}
	if !bytes.Equal(d.data.Bytes(), bytes.Join(contents, nil)) {
		t.Fatalf("the daemon received %d bytes, want the %d of the files in order", d.data.Len(), len(bytes.Join(contents, nil)))
	}
	if len(d.trailer) != len(contents) {
		t.Fatalf("trailer has %d digests, want %d", len(d.trailer), len(contents))
	}
	for i, c := range contents {
		sum := sha256.Sum256(c)
		if d.trailer[i] != hex.EncodeToString(sum[:]) {
			t.Fatalf("trailer digest %d = %s, want the file's", i, d.trailer[i])
		}
	}

	for _, c := range []struct {
		name string
		fail int
		lie  bool
	}{{"source fails", 2, false}, {"source hands over a short file", -1, true}} {
		t.Run(c.name, func(t *testing.T) {
			s, d := startPushDaemon(t)
			_, err := s.PushStream(context.Background(), k, "00000000-0000-4000-8000-000000000002", files, PushMeta{}, source(c.fail, c.lie))
			var se *SourceError
			if !errors.As(err, &se) {
				t.Fatalf("PushStream: %v, want a SourceError", err)
			}
			<-d.done
			if d.clean || d.trailer != nil {
				t.Fatalf("the daemon saw a clean end (%v) or a trailer (%v) of an abandoned push", d.clean, d.trailer)
			}
		})
	}
}

// TestPushOverTheMessageBound: a tree whose file list, or whose digests,
// would not fit the largest message a daemon receives is refused before
// anything is sent, ResourceExhausted (413: too large on any retry) with
// the bound named (TestPushStream pushes trees under it).
func TestPushOverTheMessageBound(t *testing.T) {
	k := Key{TenantKey: string(bytes.Repeat([]byte("a"), 64)), Repo: "r", Commit: string(bytes.Repeat([]byte("c"), 40))}
	// 70,000 paths of 975 bytes, each within the tree path rule: 70 MB of
	// file list.
	dir := strings.Repeat(strings.Repeat("d", 240)+"/", 4)
	long := make([]File, 70_000)
	for i := range long {
		long[i] = File{Path: fmt.Sprintf("%s%06d.txt", dir, i)}
		if err := daemonv1.CheckTreePath(long[i].Path); err != nil {
			t.Fatal(err)
		}
	}
	none := func(context.Context, func(int, []byte) error) error { return nil }
	s, d := startPushDaemon(t)
	_, err := s.PushStream(context.Background(), k, "00000000-0000-4000-8000-000000000003", long, PushMeta{}, none)
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "file list") {
		t.Fatalf("a 70 MB file list: %v", err)
	}
	select {
	case <-d.done:
		t.Fatal("the daemon saw a stream")
	case <-time.After(100 * time.Millisecond):
	}
	// A million empty files' digests are 66 MB: over the bound, though their
	// short paths fit.
	if err := pushFits(&daemonv1.PrepareRequest{}, true, 1_100_000); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "digests") {
		t.Fatalf("1,100,000 digests: %v", err)
	}
	if err := pushFits(&daemonv1.PrepareRequest{}, false, 1_100_000); err != nil {
		t.Fatalf("no trailer to bound: %v", err)
	}
}
