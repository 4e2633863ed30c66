package forge

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/ratelimit"
)

// ErrBusy: the caller's org already runs as many forge downloads as it may
// (the API answers 429 rate_limited with Retry-After).
var ErrBusy = errors.New("too many forge downloads for this org")

// ErrCapacity: the proxy already runs as many forge downloads as it may
// (the API answers 503 capacity_exhausted with Retry-After).
var ErrCapacity = errors.New("too many forge downloads")

// GateWait is how long a download waits for a slot before it is refused.
const GateWait = 2 * time.Second

type orgKey struct{}

// WithOrg names the org a forge call is made for; the gate bounds its
// downloads. Calls without one share the key "".
func WithOrg(ctx context.Context, org string) context.Context {
	return context.WithValue(ctx, orgKey{}, org)
}

func orgOf(ctx context.Context) string {
	org, _ := ctx.Value(orgKey{}).(string)
	return org
}

// NewGate wraps f so that at most total of its downloads run at once in
// this process, and at most perOrg for one org (WithOrg). A download is
// every Fetch, and the proof a Resolve of a full sha makes when the sha is
// no ref tip (a resolve that lists refs only passes freely). A call waits
// up to GateWait for a slot, then fails with ErrBusy (its org's bound) or
// ErrCapacity (the process's). A bound <= 0 is no bound.
//
// Proofs run before the payment gate, for anyone who can read the
// repository, so they are bounded apart from the fetches an org has paid
// for: they take slots of their own, half of total and of perOrg (at least
// one each), and the history download a proof falls back to when the forge
// will not serve the commit by sha (every branch's and tag's history:
// gitForge.reachable) is allowed an org historyPerMinute times a minute,
// in bursts of up to a third of that (<= 0: no limit). Without that, free
// probes of made-up shas made the proxy download the whole history once
// each.
func NewGate(f Forge, total, perOrg, historyPerMinute int) Forge {
	part := func(n, d int) int {
		if n <= 0 {
			return 0
		}
		return max(1, n/d)
	}
	return &gate{
		next:      f,
		downloads: slots{total: total, perOrg: perOrg, per: map[string]int{}},
		proofs:    slots{total: part(total, 2), perOrg: part(perOrg, 2), per: map[string]int{}},
		history:   ratelimit.New(float64(historyPerMinute)/60, max(1, historyPerMinute/3)),
		wait:      GateWait,
		changed:   make(chan struct{}),
	}
}

type gate struct {
	next    Forge
	history *ratelimit.Limiter // per org; nil: no limit
	wait    time.Duration

	mu                sync.Mutex
	downloads, proofs slots
	changed           chan struct{} // closed and replaced whenever a slot frees
}

// slots counts the downloads of one kind running, in all and per org.
type slots struct {
	total, perOrg int // <= 0: no bound
	n             int
	per           map[string]int
}

// acquire takes one of s's slots for org, waiting up to g.wait.
func (g *gate) acquire(ctx context.Context, s *slots, org string) (func(), error) {
	timer := time.NewTimer(g.wait)
	defer timer.Stop()
	for {
		g.mu.Lock()
		orgFull := s.perOrg > 0 && s.per[org] >= s.perOrg
		full := s.total > 0 && s.n >= s.total
		if !orgFull && !full {
			s.n++
			s.per[org]++
			g.mu.Unlock()
			var once sync.Once
			return func() { once.Do(func() { g.release(s, org) }) }, nil
		}
		changed := g.changed
		g.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, lateError("fetch", ctx.Err())
		case <-timer.C:
			if orgFull {
				return nil, &BusyError{msg: "too many forge downloads for this org at once", RetryAfter: GateWait}
			}
			return nil, &opError{op: "fetch", msg: "too many forge downloads; retry later", kind: ErrCapacity}
		}
	}
}

func (g *gate) release(s *slots, org string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	s.n--
	if s.per[org]--; s.per[org] <= 0 {
		delete(s.per, org)
	}
	close(g.changed)
	g.changed = make(chan struct{})
}

// BusyError is ErrBusy with how long until the org may try again.
type BusyError struct {
	msg        string
	RetryAfter time.Duration
}

func (e *BusyError) Error() string        { return "fetch: " + e.msg }
func (e *BusyError) Reason() string       { return e.msg } // for the caller's answer
func (e *BusyError) Is(target error) bool { return target == ErrBusy }

type proofKey struct{}

// takeProofSlot takes, through a proof's context, one of the gate's proof
// slots for the org (a download that proves an older commit reachable,
// gitForge.reachable); outside a gate it takes nothing.
func takeProofSlot(ctx context.Context) (func(), error) {
	g, _ := ctx.Value(proofKey{}).(*gate)
	if g == nil {
		return func() {}, nil
	}
	return g.acquire(ctx, &g.proofs, orgOf(ctx))
}

// allowHistory is the gate's say, through a proof's context, on the history
// download the proof is about to fall back to: nil, or a *BusyError once
// the org has used its history proofs for now. Outside a gate: nil.
func allowHistory(ctx context.Context) error {
	g, _ := ctx.Value(proofKey{}).(*gate)
	if g == nil {
		return nil
	}
	if ok, wait := g.history.Allow(orgOf(ctx)); !ok {
		return &BusyError{msg: "too many proofs of older commits for this org", RetryAfter: wait}
	}
	return nil
}

// Resolve implements Forge. Listing refs passes freely; a proof that a
// full sha which is no ref tip is reachable asks the gate, through the
// context, once it knows it must download (takeProofSlot, allowHistory).
func (g *gate) Resolve(ctx context.Context, cred Credential, owner, repo string, rev Rev) (string, error) {
	return g.next.Resolve(context.WithValue(ctx, proofKey{}, g), cred, owner, repo, rev)
}

// Fetch implements Forge.
func (g *gate) Fetch(ctx context.Context, cred Credential, owner, repo, commit string, lim Limits) (*Tree, error) {
	release, err := g.acquire(ctx, &g.downloads, orgOf(ctx))
	if err != nil {
		return nil, err
	}
	defer release()
	return g.next.Fetch(ctx, cred, owner, repo, commit, lim)
}
