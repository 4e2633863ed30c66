package forge

import (
	"context"
	"errors"
	"sync"
	"time"
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
// every Fetch, and a Resolve of a full sha, which may have to fetch history
// to prove the commit reachable (a branch or tag resolve lists refs only
// and passes freely). A call waits up to GateWait for a slot, then fails
// with ErrBusy (its org's bound) or ErrCapacity (the process's). A bound
// <= 0 is no bound.
func NewGate(f Forge, total, perOrg int) Forge {
	return &gate{next: f, total: total, perOrg: perOrg, per: map[string]int{}, wait: GateWait, changed: make(chan struct{})}
}

type gate struct {
	next          Forge
	total, perOrg int
	wait          time.Duration

	mu      sync.Mutex
	n       int
	per     map[string]int
	changed chan struct{} // closed and replaced whenever a slot frees
}

// acquire takes a slot for org, waiting up to g.wait.
func (g *gate) acquire(ctx context.Context, org string) (func(), error) {
	timer := time.NewTimer(g.wait)
	defer timer.Stop()
	for {
		g.mu.Lock()
		orgFull := g.perOrg > 0 && g.per[org] >= g.perOrg
		full := g.total > 0 && g.n >= g.total
		if !orgFull && !full {
			g.n++
			g.per[org]++
			g.mu.Unlock()
			var once sync.Once
			return func() { once.Do(func() { g.release(org) }) }, nil
		}
		changed := g.changed
		g.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, &opError{op: "fetch", msg: "forge did not answer in time", kind: ErrUnavailable, cause: ctx.Err()}
		case <-timer.C:
			if orgFull {
				return nil, &opError{op: "fetch", msg: "too many forge downloads for this org; retry later", kind: ErrBusy}
			}
			return nil, &opError{op: "fetch", msg: "too many forge downloads; retry later", kind: ErrCapacity}
		}
	}
}

func (g *gate) release(org string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n--
	if g.per[org]--; g.per[org] <= 0 {
		delete(g.per, org)
	}
	close(g.changed)
	g.changed = make(chan struct{})
}

// Resolve implements Forge.
func (g *gate) Resolve(ctx context.Context, cred Credential, owner, repo string, rev Rev) (string, error) {
	if _, isSHA := rev.Commit(); !isSHA {
		return g.next.Resolve(ctx, cred, owner, repo, rev)
	}
	release, err := g.acquire(ctx, orgOf(ctx))
	if err != nil {
		return "", err
	}
	defer release()
	return g.next.Resolve(ctx, cred, owner, repo, rev)
}

// Fetch implements Forge.
func (g *gate) Fetch(ctx context.Context, cred Credential, owner, repo, commit string, lim Limits) (*Tree, error) {
	release, err := g.acquire(ctx, orgOf(ctx))
	if err != nil {
		return nil, err
	}
	defer release()
	return g.next.Fetch(ctx, cred, owner, repo, commit, lim)
}
