package operation

import (
	"sync"

	"github.com/hanzoai/lsp/proxy/internal/daemonclient"
)

// flight is one in-progress prepare that later requests join.
type flight struct {
	ready chan struct{}
	p     *prepared
	err   error
	// leaderGone: the leader's request had ended (its client left, its
	// deadline passed) when the prepare did; its error is the leader's,
	// not the tree's.
	leaderGone bool
}

// flightGroup deduplicates prepares of one workspace inside this proxy.
type flightGroup struct {
	mu sync.Mutex
	m  map[daemonclient.Key]*flight
}

// join returns the flight for k and whether the caller leads it.
func (g *flightGroup) join(k daemonclient.Key) (*flight, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if f, ok := g.m[k]; ok {
		return f, false
	}
	if g.m == nil {
		g.m = map[daemonclient.Key]*flight{}
	}
	f := &flight{ready: make(chan struct{})}
	g.m[k] = f
	return f, true
}

// done publishes the leader's outcome and lets the next request lead anew.
func (g *flightGroup) done(k daemonclient.Key, f *flight) {
	g.mu.Lock()
	delete(g.m, k)
	g.mu.Unlock()
	close(f.ready)
}
