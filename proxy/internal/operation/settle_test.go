package operation

import (
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
	"github.com/hanzoai/lsp/proxy/internal/daemonclient"
	"github.com/hanzoai/lsp/proxy/internal/ledger"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
)

// settleDaemon answers Hello and Capabilities: warm under prepareID when
// it has published the workspace.
type settleDaemon struct {
	daemonv1.UnimplementedDaemonServer
	mu        sync.Mutex
	prepareID string // "" when it holds no workspace
}

func (d *settleDaemon) Hello(context.Context, *daemonv1.HelloRequest) (*daemonv1.HelloResponse, error) {
	return &daemonv1.HelloResponse{ProtocolVersion: uint32(daemonv1.ProtocolVersion_PROTOCOL_VERSION_CURRENT)}, nil
}

func (d *settleDaemon) Capabilities(context.Context, *daemonv1.CapabilitiesRequest) (*daemonv1.CapabilitiesResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return &daemonv1.CapabilitiesResponse{Warm: d.prepareID != "", PrepareId: d.prepareID}, nil
}

func (d *settleDaemon) publish(id string) {
	d.mu.Lock()
	d.prepareID = id
	d.mu.Unlock()
}

// holdBook is the ledger's side of settling: one pending hold, and what
// became of it.
type holdBook struct {
	hold               ledger.PendingHold
	captured, released int
}

func (b *holdBook) PendingHolds(context.Context, time.Time, int) ([]ledger.PendingHold, error) {
	if b.captured+b.released > 0 {
		return nil, nil
	}
	return []ledger.PendingHold{b.hold}, nil
}

func (b *holdBook) Capture(_ context.Context, r ledger.Row) (bool, error) {
	if r.PrepareID != b.hold.PrepareID {
		return false, nil
	}
	b.captured++
	return true, nil
}

func (b *holdBook) Release(_ context.Context, id string) error {
	if id == b.hold.PrepareID {
		b.released++
	}
	return nil
}

// TestSettleHoldsAsksEveryShard: a hold whose push broke is decided by
// every shard, not by the one the key would pick now. The push may have
// gone to another shard (its own was down then), and its own shard may be
// down now: a hold is captured when any shard published under its id, and
// released only when every shard answered that none did.
func TestSettleHoldsAsksEveryShard(t *testing.T) {
	dir := t.TempDir()
	daemons := make([]*settleDaemon, 2)
	stops := make([]func(), 2)
	addrs := make([]string, 2)
	for i := range daemons {
		daemons[i] = &settleDaemon{}
		ln, err := net.Listen("unix", filepath.Join(dir, string(rune('a'+i))+".sock"))
		if err != nil {
			t.Fatal(err)
		}
		g := grpc.NewServer()
		daemonv1.RegisterDaemonServer(g, daemons[i])
		go func() { _ = g.Serve(ln) }()
		stops[i] = g.Stop
		t.Cleanup(g.Stop)
		addrs[i] = "unix://" + ln.Addr().String()
	}
	pool, err := daemonclient.New(addrs, daemonclient.Options{HealthInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	key := daemonclient.Key{TenantKey: "t1", Repo: "r", Commit: "c0ffee"}
	// own is the shard the key picks while every shard is up; other took
	// the push while own was down.
	own, other := 0, 1
	if pool.Pick(key) == pool.Shards()[1] {
		own, other = 1, 0
	}
	s := New(nil, nil, pool, Config{}, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	ctx := context.Background()
	newBook := func(id string) *holdBook {
		return &holdBook{hold: ledger.PendingHold{PrepareID: id, Org: "o", TenantKey: key.TenantKey, Repo: key.Repo, Commit: key.Commit}}
	}

	// Every shard up, the tree published on the other one: captured.
	daemons[other].publish("p1")
	b := newBook("p1")
	if _, _, err := s.SettleHolds(ctx, b, 0); err != nil {
		t.Fatal(err)
	}
	if b.captured != 1 || b.released != 0 {
		t.Fatalf("published on a shard the key does not pick: captured %d, released %d; want captured", b.captured, b.released)
	}

	// Every shard up, none published it: released.
	b = newBook("p2")
	if _, _, err := s.SettleHolds(ctx, b, 0); err != nil {
		t.Fatal(err)
	}
	if b.captured != 0 || b.released != 1 {
		t.Fatalf("published nowhere: captured %d, released %d; want released", b.captured, b.released)
	}

	// The push went to own, which is down now; the other shard, which the
	// pool picks meanwhile, knows nothing of it: the hold stays.
	stops[own]()
	deadline := time.Now().Add(10 * time.Second)
	for pool.Shards()[own].Up() {
		if time.Now().After(deadline) {
			t.Fatal("the stopped shard was never marked down")
		}
		time.Sleep(10 * time.Millisecond)
	}
	daemons[other].publish("")
	b = newBook("p3")
	if _, _, err := s.SettleHolds(ctx, b, 0); err != nil {
		t.Fatal(err)
	}
	if b.captured != 0 || b.released != 0 {
		t.Fatalf("its shard down: captured %d, released %d; want the hold left for a later round", b.captured, b.released)
	}
}
