package query

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/hanzoai/lsp/daemon/internal/lsp"
	"github.com/hanzoai/lsp/daemon/internal/pool"
	"github.com/hanzoai/lsp/daemon/internal/uri"
)

// A question must not reach a server instance before it has loaded the
// project: a gopls restarted after a crash (runtime.Server, a new
// generation) or started by the question itself answers across packages
// with nothing until its load ends, and that nothing would pass for
// current. A prepare waits for the load (AwaitLoad); a question does the
// same for an instance no wait has seen loaded, within part of its time,
// and past that asks anyway and says the server had not loaded
// (notLoaded). Which instance has been seen loaded is kept per server of
// a workspace, so a warm question pays one atomic read.

// loadedKey names a server's loadRecord in pool.Workspace.Derived.
type loadedKey struct{ spec string }

// loadRecord holds the client of the one instance of a server whose
// first load a wait has seen end. A restart makes a new client, which
// is not it. seen is the instance questions waited for last, and since
// when.
type loadRecord struct {
	client atomic.Pointer[lsp.Client]
	seen   atomic.Pointer[seenClient]
}

type seenClient struct {
	client *lsp.Client
	since  time.Time
}

func loadRecordFor(w *pool.Workspace, spec *pool.Spec) *loadRecord {
	return w.Derived(loadedKey{spec.ID}, func() any { return new(loadRecord) }).(*loadRecord)
}

// markLoaded records that client's instance of spec's server has loaded.
func markLoaded(w *pool.Workspace, spec *pool.Spec, client *lsp.Client) {
	loadRecordFor(w, spec).client.Store(client)
}

// awaitLoad reports whether client's instance of spec's server (srv) has
// loaded the project, waiting for it as a prepare whose question follows
// waits (pool.Workspace.AwaitLoad, after an anchor for a server that
// loads around open documents) when no wait has seen it loaded yet. The
// wait takes at most loadShare of the request's time: false when the
// load had not ended by then, and the question is then asked anyway.
func (r *Runner) awaitLoad(ctx context.Context, w *pool.Workspace, spec *pool.Spec, client *lsp.Client, pol uri.Policy) bool {
	rec := loadRecordFor(w, spec)
	if rec.client.Load() == client {
		return true
	}
	if !client.ReportsLoad() {
		_ = r.anchorDocument(ctx, w, spec, client, pol)
	}
	seen := rec.seen.Load()
	if seen == nil || seen.client != client {
		seen = &seenClient{client: client, since: time.Now()}
		rec.seen.Store(seen)
	}
	lctx, cancel := loadShare(ctx)
	defer cancel()
	w.AwaitLoad(lctx, func(s *pool.Spec) bool { return s.ID == spec.ID }, true)
	// The pool's own bound (pool.LoadWait) is never shorter than lctx's,
	// so a wait that ended early on time ended lctx too.
	if lctx.Err() != nil && !settled(seen, client) {
		return false
	}
	rec.client.Store(client)
	return true
}

// settleAfter is how long questions wait for an instance's load before
// one that reports no work in flight counts as loaded: as long as a
// prepare would. A variable for tests.
var settleAfter = pool.LoadWait

// settled: questions have waited for client's instance settleAfter and it
// reports no work in flight. A server whose only load sign is quiet may
// never be quiet to questions — a steady flow of them (each open
// publishes), or shares of their time shorter than its quiet: without
// this, each of them would wait out its share and be called not loaded,
// however long ago it loaded.
func settled(seen *seenClient, client *lsp.Client) bool {
	return time.Since(seen.since) >= settleAfter && !client.Busy()
}

// loadShare is the part of a request's remaining time a question may
// spend waiting for its server's load: half, so that the question can
// still be asked and answered in the rest, and at most pool.LoadWait, a
// prepare's own bound.
func loadShare(ctx context.Context) (context.Context, context.CancelFunc) {
	d := pool.LoadWait
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl)/2)
	}
	return context.WithTimeout(ctx, d)
}

// notLoaded is the warning of an answer from a server that had not
// loaded the project when it answered: the answer is partial, and when
// empty unavailable (evidence), never current.
func notLoaded(spec *pool.Spec) string {
	return spec.ID + " had not finished loading the project when it answered (it had just started or restarted): the answer may lack what the project holds"
}
