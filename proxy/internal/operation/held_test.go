package operation

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
	"github.com/hanzoai/lsp/proxy/internal/apierr"
	"github.com/hanzoai/lsp/proxy/internal/daemonclient"
	"github.com/hanzoai/lsp/proxy/internal/daemontest"
	"github.com/hanzoai/lsp/proxy/internal/forge"
	"github.com/hanzoai/lsp/proxy/internal/ledger"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// lostDaemon needs the tree (on the first Capabilities, and on every
// Query), then breaks the push and can no longer say what it holds: a
// daemon that crashed while it wrote the tree, or a proxy cut off from it.
type lostDaemon struct {
	daemonv1.UnimplementedDaemonServer
	asked atomic.Int32
}

func (d *lostDaemon) Hello(context.Context, *daemonv1.HelloRequest) (*daemonv1.HelloResponse, error) {
	return &daemonv1.HelloResponse{ProtocolVersion: uint32(daemonv1.ProtocolVersion_PROTOCOL_VERSION_CURRENT)}, nil
}

func (d *lostDaemon) Capabilities(context.Context, *daemonv1.CapabilitiesRequest) (*daemonv1.CapabilitiesResponse, error) {
	if d.asked.Add(1) == 1 {
		return &daemonv1.CapabilitiesResponse{}, nil
	}
	return nil, status.Error(codes.Unavailable, "gone")
}

func (d *lostDaemon) Query(context.Context, *daemonv1.QueryRequest) (*daemonv1.QueryResponse, error) {
	return &daemonv1.QueryResponse{Status: daemonv1.Status_STATUS_NEEDS_TREE}, nil
}

func (d *lostDaemon) Prepare(st grpc.ClientStreamingServer[daemonv1.PrepareRequest, daemonv1.PrepareResponse]) error {
	_, _ = st.Recv()
	return status.Error(codes.Unavailable, "the stream broke")
}

// memForge resolves every rev to one commit and fetches a one-file tree.
type memForge struct{ commit string }

func (f memForge) Resolve(context.Context, forge.Credential, string, string, forge.Rev) (string, error) {
	return f.commit, nil
}

func (f memForge) Fetch(context.Context, forge.Credential, string, string, string, forge.Limits) (*forge.Tree, error) {
	data := []byte("package a\n")
	return &forge.Tree{Files: []forge.File{{Path: "a.go", Data: data, Size: int64(len(data))}}}, nil
}

// TestPushLostKeepsTheHoldNamed: a push that broke where the daemon could
// not say whether it published leaves its hold live (CONTRACT §5: never
// released while the daemon may still publish under it), and the request's
// result names that prepare id, so that its Idempotency-Key is kept (a
// retry must not hold the org's funds again) — before, the 5xx looked as if
// it held nothing and the key was given back.
func TestPushLostKeepsTheHoldNamed(t *testing.T) {
	for _, door := range []string{"prepare", "hover"} {
		t.Run(door, func(t *testing.T) { pushLost(t, door) })
	}
}

func pushLost(t *testing.T, door string) {
	bg := context.Background()
	l := creditedLedger(t, "o")
	d := &lostDaemon{}
	if door != "prepare" {
		d.asked.Store(1) // a query asks no Capabilities before its push
	}
	pool := serveDaemon(t, d)
	s := New(memForge{commit: "c0ffee"}, l, pool, Config{PrepareCents: 2, PrepareTimeout: 5 * time.Second}, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	c := Caller{Org: "o", TenantKey: "t1", Subject: "s", RequestID: "r1"}

	var res *Result
	var err error
	if door == "prepare" {
		res, err = s.Prepare(bg, c, "app", forge.Rev{}, "")
	} else {
		res, err = s.Do(bg, c, Request{Op: daemonv1.Op_OP_HOVER, OpName: door, Repo: "app", Path: "a.go"})
	}
	if err == nil {
		t.Fatal("a prepare whose push broke succeeded")
	}
	var id, state string
	if err := l.Pool().QueryRow(bg, `SELECT prepare_id, state FROM holds WHERE org = 'o'`).Scan(&id, &state); err != nil {
		t.Fatal(err)
	}
	if state != "live" {
		t.Fatalf("the hold is %s; want it held while the daemon may still publish", state)
	}
	if res.PrepareID != id || res.Prepared {
		t.Fatalf("result prepare id %q (prepared %v); want the live hold's %q, not prepared", res.PrepareID, res.Prepared, id)
	}
	if e := apierr.From(err); e.Status != http.StatusServiceUnavailable && e.Status != http.StatusBadGateway {
		t.Fatalf("err %v (HTTP %d); want the push's own failure", err, e.Status)
	}
}

// deletingDaemon holds one workspace; its deletion waits for release once
// it has said so on deleting.
type deletingDaemon struct {
	daemonv1.UnimplementedDaemonServer
	mu        sync.Mutex
	prepareID string
	deleting  chan struct{}
	release   chan struct{}
}

func (d *deletingDaemon) Hello(context.Context, *daemonv1.HelloRequest) (*daemonv1.HelloResponse, error) {
	return &daemonv1.HelloResponse{ProtocolVersion: uint32(daemonv1.ProtocolVersion_PROTOCOL_VERSION_CURRENT)}, nil
}

func (d *deletingDaemon) Capabilities(context.Context, *daemonv1.CapabilitiesRequest) (*daemonv1.CapabilitiesResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return &daemonv1.CapabilitiesResponse{Warm: d.prepareID != "", PrepareId: d.prepareID}, nil
}

func (d *deletingDaemon) Prepare(st grpc.ClientStreamingServer[daemonv1.PrepareRequest, daemonv1.PrepareResponse]) error {
	id, err := daemontest.ReceivePush(st)
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.prepareID = id
	d.mu.Unlock()
	return st.SendAndClose(&daemonv1.PrepareResponse{Prepared: true, PrepareId: id})
}

func (d *deletingDaemon) DeleteWorkspace(context.Context, *daemonv1.DeleteWorkspaceRequest) (*daemonv1.DeleteWorkspaceResponse, error) {
	d.mu.Lock()
	d.prepareID = ""
	d.mu.Unlock()
	d.deleting <- struct{}{}
	<-d.release
	return &daemonv1.DeleteWorkspaceResponse{Deleted: true}, nil
}

// TestDeleteEndsTheGraceFirst: a prepare that meets the workspace gone
// while its deletion is still running is charged: the tenant's deletion
// ends the revision's grace before any shard deletes (before, it ended
// after, and a prepare in between was a free re-prepare, again and again).
func TestDeleteEndsTheGraceFirst(t *testing.T) {
	bg := context.Background()
	l := creditedLedger(t, "o")
	d := &deletingDaemon{deleting: make(chan struct{}), release: make(chan struct{})}
	pool := serveDaemon(t, d)
	s := New(memForge{commit: "c0ffee"}, l, pool, Config{PrepareCents: 2, PrepareTimeout: 5 * time.Second, PrepareGrace: time.Hour}, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	c := Caller{Org: "o", TenantKey: "t1", Subject: "s", RequestID: "r1"}
	available := func() int64 {
		t.Helper()
		b, err := l.Balance(bg, "o")
		if err != nil {
			t.Fatal(err)
		}
		return b.AvailableCents
	}
	if _, err := s.Prepare(bg, c, "app", forge.Rev{}, ""); err != nil {
		t.Fatal(err)
	}
	before := available()
	deleted := make(chan error, 1)
	go func() { _, err := s.DeleteWorkspace(bg, c, "app", forge.Rev{}); deleted <- err }()
	<-d.deleting
	res, err := s.Prepare(bg, c, "app", forge.Rev{}, "")
	close(d.release)
	if err != nil || !res.Prepared {
		t.Fatalf("prepare during the deletion: %+v, %v", res, err)
	}
	if err := <-deleted; err != nil {
		t.Fatal(err)
	}
	if got := available(); got != before-2 {
		t.Fatalf("available %d¢ after a prepare during the deletion, %d¢ before; want it charged 2¢", got, before)
	}
}

// captureFailsOnce is a ledger whose first capture fails as an unreachable ledger does.
type captureFailsOnce struct {
	*ledger.Ledger
	failed atomic.Bool
}

func (l *captureFailsOnce) Capture(ctx context.Context, r ledger.Row) (bool, error) {
	if l.failed.CompareAndSwap(false, true) {
		return false, fmt.Errorf("capture: %w", ledger.ErrUnavailable)
	}
	return l.Ledger.Capture(ctx, r)
}

// TestCaptureFailedAfterPublishIsCharged: a tree published under the
// request's prepare id is charged even when its capture failed: the
// request's result says prepared, with that id, so its answer says it was
// charged and its own row captures the hold (before, it said prepared:
// false and the settler charged the hold minutes later, tied to no
// request).
func TestCaptureFailedAfterPublishIsCharged(t *testing.T) {
	bg := context.Background()
	l := &captureFailsOnce{Ledger: creditedLedger(t, "o")}
	d := &deletingDaemon{}
	pool := serveDaemon(t, d)
	s := New(memForge{commit: "c0ffee"}, l, pool, Config{PrepareCents: 2, PrepareTimeout: 5 * time.Second}, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	res, err := s.Prepare(bg, Caller{Org: "o", TenantKey: "t1", Subject: "s", RequestID: "r1"}, "app", forge.Rev{}, "")
	if err == nil {
		t.Fatal("a prepare whose capture failed succeeded")
	}
	var id, state string
	if err := l.Pool().QueryRow(bg, `SELECT prepare_id, state FROM holds WHERE org = 'o'`).Scan(&id, &state); err != nil {
		t.Fatal(err)
	}
	if !res.Prepared || res.PrepareID != id {
		t.Fatalf("result prepared %v, id %q; want prepared under the hold's %q", res.Prepared, res.PrepareID, id)
	}
	if state != "captured" {
		t.Fatalf("the hold is %s; want it captured by the request's own row", state)
	}
}

// serveDaemon serves d on a unix socket and returns a pool of that one
// shard.
func serveDaemon(t *testing.T, d daemonv1.DaemonServer) *daemonclient.Pool {
	t.Helper()
	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "d.sock"))
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	daemonv1.RegisterDaemonServer(g, d)
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)
	pool, err := daemonclient.New([]string{"unix://" + ln.Addr().String()}, daemonclient.Options{HealthInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// releasedForge signals each fetch, waits for release, and hands out a
// one-file tree.
type releasedForge struct {
	memForge
	entered chan string
	release chan struct{}
}

func (f releasedForge) Fetch(ctx context.Context, cred forge.Credential, owner, repo, commit string, lim forge.Limits) (*forge.Tree, error) {
	f.entered <- commit
	<-f.release
	return f.memForge.Fetch(ctx, cred, owner, repo, commit, lim)
}

// A follower of a leader whose client left after its push began, the push
// then lost with its hold live, does not prepare again: the push started,
// so trying again would hold the org's funds a second time.
func TestFollowerSharesALostPush(t *testing.T) {
	l := creditedLedger(t, "o")
	f := releasedForge{memForge: memForge{commit: "c1"}, entered: make(chan string, 4), release: make(chan struct{})}
	d := &lostDaemon{}
	d.asked.Store(1) // no Capabilities before the push here: every one fails
	s := New(f, l, serveDaemon(t, d), Config{PrepareCents: 2, PrepareTimeout: 5 * time.Second, MaxPrepares: 4, MaxPreparesPerOrg: 2}, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	key := daemonclient.Key{TenantKey: "t1", Repo: "r", Commit: "c1"}
	leaderCtx, leave := context.WithCancel(context.Background())
	followerCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	leaderDone, followerDone := leadAndFollow(leaderCtx, followerCtx, s, key, f.entered)
	leave() // the leader's client goes; its fetch then returns, and its push runs detached
	close(f.release)
	bothFail(t, leaderDone, followerDone, f.entered, "the leader's push was lost with its hold live")
	var holds int
	if err := l.Pool().QueryRow(context.Background(), `SELECT count(*) FROM holds WHERE org = 'o'`).Scan(&holds); err != nil || holds != 1 {
		t.Fatalf("%d holds, %v; want the leader's one", holds, err)
	}
}
