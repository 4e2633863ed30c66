package operation

import (
	"context"
	"net/http"
	"path"
	"sync"
	"time"

	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"

	"github.com/hanzoai/lsp/proxy/internal/apierr"
	"github.com/hanzoai/lsp/proxy/internal/daemonclient"
	"github.com/hanzoai/lsp/proxy/internal/ledger"
)

// Writing a warm query's row ahead of its answer (HIP §5).
//
// A warm query's row is the same every time but for three things only the
// daemon's answer tells: the HTTP status, the workspace's prepare id and the
// server that answered. Written after the answer, its commit is serial with
// the language server and costs the request a ledger round trip. So once a
// workspace has answered through this proxy, the row of its next query is
// written while the daemon works, with the outcome the last answer suggests
// (200, that prepare id, that server). When the answer comes the row is
// already durable; the rare other outcome amends that row (by id) before the
// answer is sent, and a request whose one row turns out to be its prepare row,
// or that never reached the daemon, voids it. Either way, as before, nothing
// is answered before its one row says what was answered (CONTRACT §5).

// AheadLedger is what writing rows ahead needs of the ledger. A ledger that
// does not offer it (the bench's no-op ledger) gets its rows after the answer.
type AheadLedger interface {
	RecordQueryID(ctx context.Context, r ledger.Row) (int64, error)
	AmendQuery(ctx context.Context, id int64, r ledger.Row) error
	VoidQuery(ctx context.Context, id int64, org, requestID string) error
}

// expectKey names what a row's unknowns depend on: the workspace, and the
// file type (which picks the server).
type expectKey struct {
	daemonclient.Key
	ext string
}

// expected is what the last answer from a workspace said.
type expected struct {
	prepareID, language string
}

// maxExpectations bounds the memory of expectations; past it they are
// forgotten at once (the next query of each workspace writes after its
// answer, and is remembered again).
const maxExpectations = 4096

// expectations remembers, per workspace and file type, the last OK answer's
// prepare id and server.
type expectations struct {
	mu sync.Mutex
	m  map[expectKey]expected
}

func (e *expectations) get(k expectKey) (expected, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	x, ok := e.m[k]
	return x, ok
}

func (e *expectations) put(k expectKey, x expected) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.m == nil || len(e.m) >= maxExpectations {
		e.m = make(map[expectKey]expected)
	}
	e.m[k] = x
}

func newExpectKey(k daemonclient.Key, req Request) expectKey {
	return expectKey{Key: k, ext: path.Ext(req.Path)}
}

// rowAhead is a row being written while the daemon answers.
type rowAhead struct {
	row  ledger.Row
	done chan struct{}
	id   int64 // valid after done, when err is nil
	err  error
}

// writeAhead starts writing the request's row with the expected outcome, or
// returns nil when there is no expectation yet (or the ledger cannot amend).
func (s *Service) writeAhead(ctx context.Context, c Caller, req Request, commit string, ek expectKey) *rowAhead {
	al, ok := s.ledger.(AheadLedger)
	if !ok {
		return nil
	}
	x, ok := s.expect.get(ek)
	if !ok {
		return nil
	}
	a := &rowAhead{
		row: ledger.Row{
			PrepareID: x.prepareID, Org: c.Org, TenantKey: c.TenantKey, Subject: c.Subject,
			Repo: req.Repo, Commit: commit, Op: req.OpName, Language: x.language,
			RequestID: c.RequestID, HTTPStatus: http.StatusOK,
		},
		done: make(chan struct{}),
	}
	// The row must be written even when the client goes away.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	go func() {
		defer close(a.done)
		defer cancel()
		a.id, a.err = al.RecordQueryID(wctx, a.row)
	}()
	return a
}

// settleAhead makes the row written ahead say what is answered: it waits for
// the write, then leaves it, amends it or voids it. The error is the
// request's own (opErr) unless the ledger failed.
func (s *Service) settleAhead(ctx context.Context, a *rowAhead, c Caller, res *Result, ans *daemonv1.QueryResponse, opErr error) error {
	defer s.stages.since("ledger_row", time.Now())
	<-a.done
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	al := s.ledger.(AheadLedger)
	reached := ans != nil || opErr == nil
	if a.err != nil {
		if !reached {
			return opErr // no row was due
		}
		// Whether the row exists is not known: fail as a row that could
		// not be written does.
		return ledgerError(a.err)
	}
	switch {
	case !reached:
		// The daemon was never reached: no row (CONTRACT §5).
		if err := al.VoidQuery(ctx, a.id, c.Org, c.RequestID); err != nil {
			s.log.Warn("void a query row written ahead", "request_id", c.RequestID, "row", a.id, "err", err)
		}
		return opErr
	case res.Prepared:
		// This request prepared: its one row is the prepare row.
		if err := al.VoidQuery(ctx, a.id, c.Org, c.RequestID); err != nil {
			return ledgerError(err)
		}
		if err := s.ledger.SetStatus(ctx, res.PrepareID, apierr.Status(opErr)); err != nil {
			return ledgerError(err)
		}
		return opErr
	}
	actual := a.row
	actual.HTTPStatus = apierr.Status(opErr)
	actual.PrepareID = ans.GetPrepareId()
	actual.Language = language(ans)
	if actual != a.row {
		// Timed apart, so that how often the expectation misses shows.
		defer s.stages.since("ledger_amend", time.Now())
		if err := al.AmendQuery(ctx, a.id, actual); err != nil {
			return ledgerError(err)
		}
	}
	return opErr
}
