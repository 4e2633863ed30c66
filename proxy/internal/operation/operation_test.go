package operation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/apierr"

	"github.com/hanzoai/lsp/proxy/internal/daemonclient"
	"github.com/hanzoai/lsp/proxy/internal/forge"
	"github.com/hanzoai/lsp/proxy/internal/ledger"
	"github.com/hanzoai/lsp/proxy/internal/pgtest"
)

// cancelAfterHold is the ledger of a client that goes away once its hold
// has committed, before the hold's reply is read: Hold commits, cancels the
// request, and then fails as pgx does when it reads a reply on a cancelled
// context.
type cancelAfterHold struct {
	*ledger.Ledger
	cancel context.CancelFunc
}

func (l cancelAfterHold) Hold(ctx context.Context, h ledger.HoldRequest) (int64, error) {
	n, err := l.Ledger.Hold(ctx, h)
	l.cancel()
	if err == nil && ctx.Err() != nil {
		return 0, ctx.Err()
	}
	return n, err
}

// goneForge is the forge of a client that has gone: its fetch ends with
// the request's context.
type goneForge struct{ forge.Forge }

func (goneForge) Fetch(ctx context.Context, _ forge.Credential, _, _, _ string, _ forge.Limits) (*forge.Tree, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return nil, errors.New("fetch: the client is still there")
}

// A client that goes away between its hold's commit and the hold's reply
// does not leave the org's funds held until the hold expires: the hold is
// detached from the request, so it is known, and released when the fetch
// sees the client gone.
func TestPrepareReleasesAHoldItsClientLeft(t *testing.T) {
	bg := context.Background()
	l := creditedLedger(t, "o")
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	s := New(goneForge{}, cancelAfterHold{l, cancel}, nil, Config{PrepareCents: 2, PrepareTimeout: time.Minute}, slog.New(slog.DiscardHandler), nil)
	c := Caller{Org: "o", TenantKey: "t1", Subject: "s"}
	if _, err := s.prepare(ctx, c, daemonclient.Key{TenantKey: "t1", Repo: "r", Commit: "c0ffee"}, daemonclient.PushMeta{}); err == nil {
		t.Fatal("a prepare whose client left succeeded")
	}
	var state string
	if err := l.Pool().QueryRow(bg, `SELECT state FROM holds WHERE org = 'o'`).Scan(&state); err != nil {
		t.Fatal(err)
	}
	b, err := l.Balance(bg, "o")
	if err != nil {
		t.Fatal(err)
	}
	if state != "released" || b.HeldCents != 0 || b.AvailableCents != 10 {
		t.Fatalf("hold %s, %d¢ held, %d¢ available; want it released, 10¢ available", state, b.HeldCents, b.AvailableCents)
	}
}

// heldForge holds every fetch until its caller's context ends, saying so
// on entered.
type heldForge struct {
	forge.Forge
	entered chan string
}

func (f heldForge) Fetch(ctx context.Context, _ forge.Credential, _, _, commit string, _ forge.Limits) (*forge.Tree, error) {
	f.entered <- commit
	<-ctx.Done()
	return nil, ctx.Err()
}

// An org runs at most its share of the proxy's prepares at once: one more
// is 429 rate_limited before any hold, while another org's prepare still
// gets a slot.
func TestPrepareShareOfAnOrg(t *testing.T) {
	bg := context.Background()
	l := creditedLedger(t, "a", "b")
	f := heldForge{entered: make(chan string, 4)}
	s := New(f, l, nil, Config{PrepareCents: 2, PrepareTimeout: time.Minute, MaxPrepares: 4, MaxPreparesPerOrg: 1}, slog.New(slog.DiscardHandler), nil)
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	done := make(chan error, 2)
	run := func(org, commit string) {
		c := Caller{Org: org, TenantKey: "t-" + org, Subject: "s"}
		_, err := s.boundedPrepare(ctx, c, daemonclient.Key{TenantKey: c.TenantKey, Repo: "r", Commit: commit}, daemonclient.PushMeta{})
		done <- err
	}
	go run("a", "c1")
	<-f.entered
	go run("a", "c2")
	select {
	case err := <-done:
		if e := apierr.From(err); e.Status != http.StatusTooManyRequests || e.Code != apierr.RateLimited || e.RetryAfter <= 0 {
			t.Fatalf("org a's second prepare at once: %v; want 429 rate_limited with a Retry-After", err)
		}
	case commit := <-f.entered:
		t.Fatalf("org a's second prepare at once fetched %s", commit)
	}
	if b, err := l.Balance(bg, "a"); err != nil || b.HeldCents != 2 {
		t.Fatalf("org a's balance: %+v, %v; want only the first prepare's 2¢ held", b, err)
	}
	go run("b", "c3")
	if got := <-f.entered; got != "c3" {
		t.Fatalf("fetch of %s; want org b's c3", got)
	}
	cancel()
	for range 2 {
		<-done
	}
}

// expiring is a context whose deadline passes when expire is called.
type expiring struct {
	context.Context
	done chan struct{}
}

func newExpiring() expiring { return expiring{context.Background(), make(chan struct{})} }

func (e expiring) expire()               { close(e.done) }
func (e expiring) Done() <-chan struct{} { return e.done }
func (e expiring) Err() error {
	select {
	case <-e.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// A request waiting on another's prepare of the same tree does not take on
// that request's deadline: when the leader's time runs out before its
// push, the waiter prepares the tree itself, within its own time.
func TestWaiterOutlivesTheLeadersDeadline(t *testing.T) {
	bg := context.Background()
	l := creditedLedger(t, "o")
	f := heldForge{entered: make(chan string, 4)}
	s := New(f, l, nil, Config{PrepareCents: 2, PrepareTimeout: time.Minute, MaxPrepares: 4, MaxPreparesPerOrg: 2}, slog.New(slog.DiscardHandler), nil)
	key := daemonclient.Key{TenantKey: "t1", Repo: "r", Commit: "c1"}
	leaderCtx := newExpiring()
	waiterCtx, waiterCancel := context.WithCancel(bg)
	defer waiterCancel()
	leaderDone, waiterDone := leadAndFollow(leaderCtx, waiterCtx, s, key, f.entered)
	leaderCtx.expire()
	if err := <-leaderDone; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the leader ended with %v, want its deadline", err)
	}
	select {
	case <-f.entered:
	case err := <-waiterDone:
		t.Fatalf("the waiter ended with the leader's deadline: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter neither prepared nor ended")
	}
	waiterCancel()
	<-waiterDone
}

// leadAndFollow starts a request for key's tree on leaderCtx and, once its
// fetch has begun (entered), another on followerCtx, and returns when the
// second waits on the first's flight; each channel gets its request's end.
func leadAndFollow(leaderCtx, followerCtx context.Context, s *Service, key daemonclient.Key, entered <-chan string) (leaderDone, followerDone chan error) {
	leaderDone, followerDone = make(chan error, 1), make(chan error, 1)
	go func() {
		_, err := s.ensure(leaderCtx, Caller{Org: "o", TenantKey: key.TenantKey, Subject: "leader"}, key, daemonclient.PushMeta{})
		leaderDone <- err
	}()
	<-entered
	joined := make(chan struct{}, 1)
	follower := Caller{Org: "o", TenantKey: key.TenantKey, Subject: "follower", Progress: func(p Progress) {
		if p.Stage == StageWaiting {
			joined <- struct{}{}
		}
	}}
	go func() {
		_, err := s.ensure(followerCtx, follower, key, daemonclient.PushMeta{})
		followerDone <- err
	}()
	<-joined
	return leaderDone, followerDone
}

// creditedLedger is a ledger on a fresh database in which each of orgs
// holds 10¢.
func creditedLedger(t *testing.T, orgs ...string) *ledger.Ledger {
	t.Helper()
	l, err := ledger.Open(context.Background(), pgtest.NewDatabase(t), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	for _, org := range orgs {
		if err := l.Credit(context.Background(), org, 10, "test"); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

// timedOutForge fails each fetch, once released, with a deadline of the
// prepare's own (a stream past PrepareTimeout), its caller still there.
type timedOutForge struct {
	forge.Forge
	entered chan string
	release chan struct{}
}

func (f timedOutForge) Fetch(_ context.Context, _ forge.Credential, _, _, commit string, _ forge.Limits) (*forge.Tree, error) {
	f.entered <- commit
	<-f.release
	return nil, fmt.Errorf("stream: %w", context.DeadlineExceeded)
}

// A prepare that fails on a timeout of its own, its leader's request still
// there, fails its followers alike: they do not prepare again, each
// holding funds for the same failure.
func TestFollowerSharesThePreparesOwnTimeout(t *testing.T) {
	l := creditedLedger(t, "o")
	f := timedOutForge{entered: make(chan string, 4), release: make(chan struct{})}
	s := New(f, l, nil, Config{PrepareCents: 2, PrepareTimeout: time.Minute, MaxPrepares: 4, MaxPreparesPerOrg: 2}, slog.New(slog.DiscardHandler), nil)
	key := daemonclient.Key{TenantKey: "t1", Repo: "r", Commit: "c1"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	leaderDone, followerDone := leadAndFollow(ctx, ctx, s, key, f.entered)
	close(f.release)
	bothFail(t, leaderDone, followerDone, f.entered, "the prepare's own timeout")
}

// bothFail: the leader's prepare fails, and its follower fails with it
// rather than prepare again (entered: a fetch began) after what.
func bothFail(t *testing.T, leaderDone, followerDone <-chan error, entered <-chan string, what string) {
	t.Helper()
	if err := <-leaderDone; err == nil {
		t.Fatal("the leader's prepare succeeded")
	}
	select {
	case err := <-followerDone:
		if err == nil {
			t.Fatal("the follower's prepare succeeded")
		}
	case <-entered:
		t.Fatalf("the follower prepared again after %s", what)
	case <-time.After(30 * time.Second):
		t.Fatal("the follower neither ended nor prepared")
	}
}

// ttlLedger records the lifetime each hold asks for.
type ttlLedger struct {
	*ledger.Ledger
	ttl time.Duration
}

func (l *ttlLedger) Hold(ctx context.Context, h ledger.HoldRequest) (int64, error) {
	l.ttl = h.TTL
	return l.Ledger.Hold(ctx, h)
}

// A hold outlives the longest prepare: a POST /prepare's fetch runs under
// the request's time plus a push's, then the push its own PrepareTimeout
// (2×PrepareTimeout alone let a hold expire under a running push once the
// request timeout was over a minute).
func TestHoldOutlivesTheLongestPrepare(t *testing.T) {
	l := &ttlLedger{Ledger: creditedLedger(t, "o")}
	cfg := Config{PrepareCents: 2, PrepareTimeout: 10 * time.Minute, RequestTimeout: 5 * time.Minute}
	s := New(goneForge{}, l, nil, cfg, slog.New(slog.DiscardHandler), nil)
	c := Caller{Org: "o", TenantKey: "t1", Subject: "s"}
	if _, err := s.prepare(context.Background(), c, daemonclient.Key{TenantKey: "t1", Repo: "r", Commit: "c0ffee"}, daemonclient.PushMeta{}); err == nil {
		t.Fatal("a prepare whose fetch failed succeeded")
	}
	if longest := cfg.RequestTimeout + 2*cfg.PrepareTimeout; l.ttl <= longest || l.ttl != cfg.HoldTTL() {
		t.Fatalf("hold TTL %v; want HoldTTL, over the longest prepare's %v", l.ttl, longest)
	}
}
