// Package operation is the path of one operation request through the proxy
// (CONTRACT §4-§6), after identity and body have been checked:
//
//	forge resolve as the caller → ask the daemon → on "needs tree": gate
//	(hold) → fetch → push → capture/release → ask again → one usage row
//	(and, when this request prepared, the prepare row written at capture).
//
// It holds no HTTP and no SQL: the forge, the ledger and the daemons come in
// as small interfaces, so each rule of the money section is visible here in
// one place.
package operation

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"

	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hanzoai/lsp/proxy/internal/apierr"
	"github.com/hanzoai/lsp/proxy/internal/daemonclient"
	"github.com/hanzoai/lsp/proxy/internal/forge"
	"github.com/hanzoai/lsp/proxy/internal/ledger"
)

// Ledger is what the path needs of the ledger.
type Ledger interface {
	Hold(ctx context.Context, h ledger.HoldRequest) (int64, error)
	Capture(ctx context.Context, r ledger.Row) (bool, error)
	Release(ctx context.Context, prepareID string) error
	RecordUsage(ctx context.Context, r ledger.Row) error
	EndGrace(ctx context.Context, org, repo, commit string) error
}

// Daemons picks the shard of a workspace.
type Daemons interface {
	Pick(k daemonclient.Key) *daemonclient.Shard
	Shards() []*daemonclient.Shard
}

// Config holds the knobs of the path.
type Config struct {
	PrepareCents   int64
	PrepareGrace   time.Duration
	PrepareTimeout time.Duration
	// RequestTimeout is LSP_REQUEST_TIMEOUT: with PrepareTimeout it bounds
	// how long a prepare's fetch may run (HoldTTL).
	RequestTimeout time.Duration
	Limits         forge.Limits
	Owners         map[string]string // org → forge owner, when the operator maps it
	// MaxPrepares bounds the prepares this proxy runs at once (each holds
	// a tree in memory); over it a cold request is 503 capacity_exhausted
	// before any hold. Zero means unbounded.
	MaxPrepares int
	// MaxPreparesPerOrg bounds one org's share of them; over it a cold
	// request is 429 rate_limited before any hold. Zero means unbounded.
	MaxPreparesPerOrg int
}

// Service runs operation requests.
type Service struct {
	forge   forge.Forge
	ledger  Ledger
	daemons Daemons
	cfg     Config
	log     *slog.Logger
	flights flightGroup
	stages  stageTimer
	run     *prepareRuns // bound, in-flight tracking and outcomes (capacity.go)
}

// New builds a Service; reg, when not nil, receives its metrics.
func New(f forge.Forge, l Ledger, d Daemons, cfg Config, log *slog.Logger, reg prometheus.Registerer) *Service {
	return &Service{forge: f, ledger: l, daemons: d, cfg: cfg, log: log, stages: newStageTimer(reg), run: newPrepareRuns(cfg.MaxPrepares, cfg.MaxPreparesPerOrg, reg)}
}

// Caller is who asks, as the HTTP layer established it.
type Caller struct {
	Subject   string
	Org       string // the selected org: tenant and payer
	TenantKey string
	Cred      forge.Credential
	RequestID string
	// Progress, when not nil, hears the steps of a Prepare (progress.go).
	Progress func(Progress)
}

// Request is one operation.
type Request struct {
	Op                 daemonv1.Op
	OpName             string // the route's name, for the ledger row
	Repo               string
	Rev                forge.Rev
	Path               string
	Line, Character    uint32
	Query              string
	IncludeDeclaration bool
	Limit, Offset      uint32
	Generation         uint64
	// Symbol or Text address the position by name or by text on Line
	// (CONTRACT §4); the daemon resolves them in the same request.
	Symbol, Text string
	// ContextLines, when set, asks for the code around every location;
	// IncludeBody for each symbol's whole range.
	ContextLines *uint32
	IncludeBody  bool
	// StartLine, EndLine and Module bound a read.
	StartLine, EndLine uint32
	Module             string
	// Language limits workspace symbols to one language's server.
	Language string
	// WarmOnly answers 409 not_prepared instead of preparing a revision
	// the daemon does not hold (a read without prepare: true).
	WarmOnly bool
	// CursorCommit is the commit a cursor was issued for; a revision that
	// now resolves elsewhere expires the cursor.
	CursorCommit string
	// CursorPrepareID is the prepare that held the workspace when the
	// cursor was issued (empty in cursors older than it). A workspace
	// evicted and prepared again — here or on another shard — restarts
	// its servers' generations, so a generation alone can match a
	// different server's pages.
	CursorPrepareID string
}

// Result is what the HTTP layer renders. Repo, Commit and Prepared are set
// as soon as they are known, also when err is not nil, so an error answer
// can say that the caller was charged.
type Result struct {
	Repo      string
	Commit    string
	Prepared  bool
	PrepareID string
	Answer    *daemonv1.QueryResponse
	Prepare   *daemonv1.PrepareResponse // for /prepare
	Warnings  []string                  // from tree normalisation
	// reached: a query of this request reached the daemon — answered, or
	// taken and not answered before its deadline or the client went away
	// (daemonclient.ErrUnanswered). It gets its row (CONTRACT §5), whatever
	// came after.
	reached bool
}

// Owner maps an org to its forge owner.
func (s *Service) Owner(org string) string {
	if o, ok := s.cfg.Owners[org]; ok {
		return o
	}
	return org
}

// Resolve resolves rev as the caller: the forge's ACL decides.
func (s *Service) Resolve(ctx context.Context, c Caller, repo string, rev forge.Rev) (string, error) {
	defer s.stages.since("forge_resolve", time.Now())
	commit, err := s.forge.Resolve(forge.WithOrg(ctx, c.Org), c.Cred, s.Owner(c.Org), repo, rev)
	return commit, forgeError(err)
}

// Do runs one operation request and writes its one ledger row.
func (s *Service) Do(ctx context.Context, c Caller, req Request) (*Result, error) {
	ctx = daemonclient.WithRequestID(ctx, c.RequestID)
	res := &Result{Repo: req.Repo}
	commit, err := s.Resolve(ctx, c, req.Repo, req.Rev)
	if err != nil {
		return res, err
	}
	res.Commit = commit
	if req.CursorCommit != "" && req.CursorCommit != commit {
		return res, apierr.New(http.StatusConflict, apierr.CursorExpired, "the revision moved since the cursor was issued; start again")
	}
	key := daemonclient.Key{TenantKey: c.TenantKey, Repo: req.Repo, Commit: commit}
	shard := s.daemons.Pick(key)
	q := &daemonv1.QueryRequest{
		Workspace:          &daemonv1.WorkspaceKey{TenantKey: key.TenantKey, Repo: key.Repo, Commit: key.Commit},
		Op:                 req.Op,
		Path:               req.Path,
		Position:           &daemonv1.Position{Line: req.Line, Character: req.Character},
		Query:              req.Query,
		IncludeDeclaration: req.IncludeDeclaration,
		Limit:              req.Limit,
		Offset:             req.Offset,
		Generation:         req.Generation,
		Symbol:             req.Symbol,
		Text:               req.Text,
		ContextLines:       req.ContextLines,
		IncludeBody:        req.IncludeBody,
		StartLine:          req.StartLine,
		EndLine:            req.EndLine,
		Module:             req.Module,
		Language:           req.Language,
	}

	ans, qerr := s.query(ctx, shard, q, res)
	// A workspace is pushed at most twice per request (the first push may
	// be another request's, which this one only waited for), and this
	// request prepares at most once: its one row is then that prepare row,
	// and a second prepare would write another (CONTRACT §5). A daemon
	// that evicts a workspace again before its first query is overloaded,
	// and says so; the retry re-prepares free within the grace window.
	var perr error
	for attempt := 0; qerr == nil && ans.GetStatus() == daemonv1.Status_STATUS_NEEDS_TREE && attempt < 2 && !res.Prepared && !req.WarmOnly && req.CursorCommit == ""; attempt++ {
		var p *prepared
		if p, perr = s.ensure(ctx, c, key, daemonclient.PushMeta{Focus: req.Path, QueryFollows: true}); perr != nil {
			heldBy(res, perr)
			break
		}
		if p.byUs {
			res.Prepared, res.PrepareID = true, p.prepareID
		}
		res.Warnings = p.warnings
		// The push went to the key's shard as health saw it then.
		shard = s.daemons.Pick(key)
		ans, qerr = s.query(ctx, shard, q, res)
	}
	res.Answer = ans
	switch {
	case perr != nil:
		// Refused at the gate (402), or the fetch or push failed: the
		// request reached the daemon, so it still gets its row.
		qerr = perr
	case qerr == nil && ans.GetStatus() == daemonv1.Status_STATUS_NEEDS_TREE && req.CursorCommit != "":
		// A cursor never prepares (CONTRACT §4): its workspace is gone
		// (evicted, deleted, or on another shard now), so its pages are.
		qerr = apierr.New(http.StatusConflict, apierr.CursorExpired, "the cursor's workspace is gone; start again")
	case qerr == nil && ans.GetStatus() == daemonv1.Status_STATUS_NEEDS_TREE && req.WarmOnly:
		// Never a prepare on its own: the caller asked for a warm
		// revision only, and pays nothing.
		qerr = apierr.New(http.StatusConflict, apierr.NotPrepared, "this revision is not prepared: prepare it first, or ask with prepare: true")
	case qerr == nil && ans.GetStatus() == daemonv1.Status_STATUS_NEEDS_TREE:
		qerr = apierr.New(http.StatusServiceUnavailable, apierr.CapacityExhausted, "the daemon could not keep the workspace")
	}
	if qerr == nil {
		qerr = statusError(ans)
	}
	if qerr == nil && req.CursorPrepareID != "" && ans.GetPrepareId() != req.CursorPrepareID {
		qerr = apierr.New(http.StatusConflict, apierr.CursorExpired, "the cursor's workspace was prepared again since; start again")
	}
	if err := s.record(ctx, c, req, res, ans, qerr); err != nil {
		return res, err
	}
	return res, qerr
}

// Prepare makes sure the revision is prepared and reports what its servers
// negotiated. It writes one row like any operation request. focus, when
// set, is the file the caller asks about first: a prepare this request
// does waits for that file's server's first load only.
func (s *Service) Prepare(ctx context.Context, c Caller, repo string, rev forge.Rev, focus string) (*Result, error) {
	ctx = daemonclient.WithRequestID(ctx, c.RequestID)
	res := &Result{Repo: repo}
	c.report(Progress{Stage: StageResolving})
	commit, err := s.Resolve(ctx, c, repo, rev)
	if err != nil {
		return res, err
	}
	res.Commit = commit
	key := daemonclient.Key{TenantKey: c.TenantKey, Repo: repo, Commit: commit}
	shard := s.daemons.Pick(key)
	caps, err := shard.Capabilities(ctx, key)
	if err != nil {
		return res, daemonError(err) // the daemon was not reached: no row
	}
	res.reached = true // its row is written, whatever follows (a 402 too)
	var opErr error
	if !caps.GetWarm() {
		p, perr := s.ensure(ctx, c, key, daemonclient.PushMeta{Focus: focus})
		switch {
		case perr != nil:
			opErr = perr // refused at the gate, or the fetch or push failed
			heldBy(res, perr)
		default:
			res.Prepared, res.PrepareID, res.Warnings = p.byUs, p.prepareID, p.warnings
			c.report(Progress{Stage: StageIndexing})
			shard = s.daemons.Pick(key) // where the push went
			if caps, err = shard.Capabilities(ctx, key); err != nil {
				opErr = daemonError(err)
			} else if !caps.GetWarm() {
				opErr = apierr.New(http.StatusServiceUnavailable, apierr.CapacityExhausted, "the daemon could not keep the workspace")
			}
		}
	}
	res.Prepare = &daemonv1.PrepareResponse{Prepared: res.Prepared, PrepareId: caps.GetPrepareId(), Languages: caps.GetLanguages()}
	// What the push that wrote the tree found (the entries it dropped,
	// the dependency phase's refusals) and a server that could not load
	// the project are in every prepare answer for the revision, also
	// when it was already warm: a retry after a lost answer, or a prepare
	// another request or proxy did, says what the first would have.
	res.Warnings = withLoadWarnings(appendNew(res.Warnings, caps.GetWarnings()), caps.GetLanguages())
	if opErr == nil {
		c.report(Progress{Stage: StageReady})
	}
	ans := &daemonv1.QueryResponse{PrepareId: caps.GetPrepareId()}
	if rerr := s.record(ctx, c, Request{OpName: "prepare", Repo: repo}, res, ans, opErr); rerr != nil {
		return res, rerr
	}
	return res, opErr
}

// withLoadWarnings appends each language's load problems to warnings,
// once each.
func withLoadWarnings(warnings []string, langs []*daemonv1.LanguageTools) []string {
	more := make([][]string, len(langs))
	for i, l := range langs {
		more[i] = l.GetWarnings()
	}
	return appendNew(warnings, more...)
}

// appendNew is warnings followed by those of more it does not hold yet,
// once each, in a new slice (a single flight's followers share warnings).
func appendNew(warnings []string, more ...[]string) []string {
	out := slices.Clone(warnings)
	seen := make(map[string]bool, len(out))
	for _, w := range out {
		seen[w] = true
	}
	for _, m := range more {
		for _, w := range m {
			if !seen[w] {
				seen[w] = true
				out = append(out, w)
			}
		}
	}
	return out
}

func (s *Service) query(ctx context.Context, shard *daemonclient.Shard, q *daemonv1.QueryRequest, res *Result) (*daemonv1.QueryResponse, error) {
	start := time.Now()
	ans, err := shard.Query(ctx, q)
	took := time.Since(start)
	s.stages.observe("daemon_query", took)
	if err != nil {
		res.reached = res.reached || errors.Is(err, daemonclient.ErrUnanswered)
		return nil, daemonError(err)
	}
	res.reached = true
	if t := ans.GetTiming(); t != nil && t.GetHandlerNanos() > 0 {
		// The daemon's own split: what is left of the call is the gRPC
		// hop (both ends' marshalling, the socket, the wake-ups).
		handler, server := time.Duration(t.GetHandlerNanos()), time.Duration(t.GetServerNanos())
		s.stages.observe("grpc", took-handler)
		s.stages.observe("daemon", handler-server)
		s.stages.observe("server", server)
		// Inside the daemon's part: its reader goroutine handing the
		// server's reply to the waiting handler.
		s.stages.observe("daemon_wakeup", time.Duration(t.GetWakeupNanos()))
	}
	return ans, nil
}

// record writes the request's one usage row, once its outcome is known and
// before it is sent (CONTRACT §5): its status, the prepare id the answer
// named (this request's own when it prepared: its money row, the prepare
// row, was written at capture), and the server that answered. A row naming
// a hold that a crashed proxy left behind captures it first (the daemon
// reveals its prepare id with every answer). Rows are durable before the
// answer; none is ever changed.
func (s *Service) record(ctx context.Context, c Caller, req Request, res *Result, ans *daemonv1.QueryResponse, opErr error) error {
	status := apierr.Status(opErr)
	if !res.reached && opErr != nil && !res.Prepared {
		// The daemon was never reached: no row (CONTRACT §5).
		return nil
	}
	defer s.stages.since("ledger_row", time.Now())
	// The row must be written even when the client went away.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	prepareID := ans.GetPrepareId()
	if res.Prepared {
		prepareID = res.PrepareID
	}
	err := s.ledger.RecordUsage(ctx, ledger.Row{
		PrepareID: prepareID, Org: c.Org, TenantKey: c.TenantKey, Subject: c.Subject,
		Repo: res.Repo, Commit: res.Commit, Op: req.OpName, Language: language(ans),
		RequestID: c.RequestID, HTTPStatus: status, Prepared: res.Prepared,
	})
	if err != nil {
		return ledgerError(err)
	}
	return nil
}

// heldError is a leader's prepare that failed with its hold left live: the
// push broke and the daemon could not say whether it published under the
// prepare id (the next answer from the workspace captures it, or the hold
// expires), or it published and the capture failed (published). The
// request holds funds as surely as one that prepared (CONTRACT §5: a retry
// never takes a second hold), so its result names the prepare id, and says
// prepared when the tree was published under it (heldBy): its row then
// captures the hold, and its answer says it was charged. Only the leader
// sees it; followers get err.
type heldError struct {
	prepareID string
	published bool
	err       error
}

func (e *heldError) Error() string { return e.err.Error() }
func (e *heldError) Unwrap() error { return e.err }

// heldBy names in res the prepare id of a hold that perr left live.
func heldBy(res *Result, perr error) {
	if he := (*heldError)(nil); errors.As(perr, &he) {
		res.PrepareID = he.prepareID
		res.Prepared = he.published
	}
}

// prepared is the shared outcome of one single-flight prepare.
type prepared struct {
	prepareID string
	byUs      bool // true for the leader when its push wrote the tree
	warnings  []string
}

// ensure gets the workspace onto its shard. Inside one proxy only the
// leader of a (tenant, repo, commit) group holds funds, fetches and pushes;
// followers wait and share its outcome (and are not charged). Across proxy
// replicas the daemon's own single-flight makes the later push a no-op,
// whose hold is released. The leader's meta is the push's: the file its
// request asks about first, and whether its question follows at once (an
// operation that prepares on its way; not POST /prepare, whose answer is
// the load's). The prepare adds the tree's warnings.
func (s *Service) ensure(ctx context.Context, c Caller, key daemonclient.Key, meta daemonclient.PushMeta) (*prepared, error) {
	for {
		f, leader := s.flights.join(key)
		if !leader {
			c.report(Progress{Stage: StageWaiting})
		}
		if leader {
			// Tracked, so that a graceful shutdown waits for it (Wait).
			s.run.inflight.Add(1)
			go func() {
				defer s.run.inflight.Done()
				f.p, f.err = s.boundedPrepare(ctx, c, key, meta)
				f.leaderGone = ctx.Err() != nil
				s.flights.done(key, f)
			}()
		}
		if leader {
			// The leader waits for its own flight even when its client
			// has gone: a push that started is charged to this request,
			// and the request must end with that one row — the prepare
			// row — not a query row beside it. The wait is bounded: the
			// fetch ends with the client's context, the push with
			// PrepareTimeout.
			<-f.ready
		} else {
			select {
			case <-f.ready:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if he := (*heldError)(nil); f.err != nil && !leader && f.leaderGone && ctx.Err() == nil && !errors.As(f.err, &he) {
			// The leader's client went away, or its time ran out, before
			// the push: neither is ours. Try again, possibly as the new
			// leader. (A prepare's own timeouts — the push's, the hold's —
			// fail every follower alike: trying again would hold funds
			// again for the same failure; so does a push that started and
			// left its hold live, heldError.)
			continue
		}
		if he := (*heldError)(nil); f.err != nil && !leader && errors.As(f.err, &he) {
			return nil, he.err // the leader's hold, not this request's
		}
		if f.err != nil {
			return nil, f.err
		}
		p := *f.p
		p.byUs = p.byUs && leader
		return &p, nil
	}
}

// PushStarted bounds how long after its hold a prepare's push can still
// begin: the fetch runs under its request's deadline, a POST /prepare's
// being RequestTimeout plus PrepareTimeout. A hold older than this and
// PrepareTimeout more has no push in flight (the settler's horizon).
func (c Config) PushStarted() time.Duration { return c.RequestTimeout + c.PrepareTimeout }

// HoldTTL is a hold's lifetime: past the latest a push can begin, plus the
// push's own PrepareTimeout and a margin, so that it never expires under a
// running push (2×PrepareTimeout alone was shorter than a POST /prepare's
// fetch and push with a request timeout over a minute).
func (c Config) HoldTTL() time.Duration { return c.PushStarted() + c.PrepareTimeout + time.Minute }

// prepare is the leader's work: gate, fetch, push, capture or release.
func (s *Service) prepare(ctx context.Context, c Caller, key daemonclient.Key, meta daemonclient.PushMeta) (*prepared, error) {
	prepareID := newPrepareID()
	hold := ledger.HoldRequest{
		PrepareID: prepareID, Org: c.Org, TenantKey: c.TenantKey, Subject: c.Subject,
		Repo: key.Repo, Commit: key.Commit, RequestID: c.RequestID,
		Price: s.cfg.PrepareCents, Grace: s.cfg.PrepareGrace,
		TTL: s.cfg.HoldTTL(),
	}
	// Detached: a cancel that lands after the hold committed but before
	// its reply is read would leave a hold nobody releases (it expires,
	// 2×PrepareTimeout later, keeping the org's funds meanwhile). A client
	// that left is seen by the fetch next, which releases it.
	hctx, hcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	_, err := s.ledger.Hold(hctx, hold)
	hcancel()
	if err != nil {
		return nil, ledgerError(err)
	}
	released := false
	release := func() {
		if released {
			return
		}
		released = true
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := s.ledger.Release(rctx, prepareID); err != nil {
			// The hold expires on its own; availability is restored then.
			s.log.Warn("release hold", "prepare_id", prepareID, "err", err)
		}
	}

	c.report(Progress{Stage: StageFetching})
	// A streamed tree: the fetch has the forge's objects; the files' bytes
	// are read from them while they are pushed (no whole tree in memory,
	// and the daemon writes the tree while the proxy still reads it).
	lim := s.cfg.Limits
	lim.Stream = true
	tree, err := s.forge.Fetch(forge.WithOrg(ctx, c.Org), c.Cred, s.Owner(c.Org), key.Repo, key.Commit, lim)
	if err != nil {
		release()
		return nil, forgeError(err)
	}
	defer tree.Close()
	files := make([]daemonclient.File, len(tree.Files))
	var size int64
	for i, f := range tree.Files {
		files[i] = daemonclient.File{Path: f.Path, Size: f.Size, Executable: f.Executable}
		size += f.Size
	}
	c.report(Progress{Stage: StageFetching, Files: len(files), Bytes: size})
	c.report(Progress{Stage: StagePushing, Files: len(files), Bytes: size})

	// From here on the prepare runs detached from the client, to its own
	// deadline, and is charged when it completes.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.PrepareTimeout)
	defer cancel()
	shard := s.daemons.Pick(key)
	meta.TreeWarnings = tree.Warnings
	resp, err := shard.PushStream(pctx, key, prepareID, files, meta, tree.Stream)
	if err != nil {
		// The daemon may have written the tree and lost the reply, or may
		// still be writing it: a push whose stream broke keeps running on
		// the daemon (its dependency phase too). Ask until the key is no
		// longer in flight: if it then holds our prepare id, capture; if it
		// holds another or none, release. A hold is never released while
		// the daemon may still publish under its id (CONTRACT §5). If the
		// daemon cannot be asked, or the write outlives our deadline, leave
		// the hold: the next answer from that workspace reveals the id and
		// captures it (RecordQuery), or it expires.
		if caps, ok := s.settledCapabilities(pctx, shard, key); ok {
			if caps.GetWarm() && caps.GetPrepareId() == prepareID {
				if _, err := s.capture(pctx, c, key, prepareID, caps.GetLanguages()); err != nil {
					return nil, &heldError{prepareID: prepareID, published: true, err: err}
				}
				return &prepared{prepareID: prepareID, byUs: true, warnings: tree.Warnings}, nil
			}
			release()
		}
		perr := pushError(err)
		if se := (*daemonclient.SourceError)(nil); errors.As(err, &se) {
			// Reading the fetched tree failed; the daemon, which never got
			// the trailer, published nothing.
			perr = forgeError(se.Err)
		}
		if !released {
			// The hold stays live: this request has held funds, so its
			// Idempotency-Key must not be given back for a retry that
			// would hold them again (heldError).
			return nil, &heldError{prepareID: prepareID, err: perr}
		}
		return nil, perr
	}
	if !resp.GetPrepared() || resp.GetPrepareId() != prepareID {
		release()
		return &prepared{prepareID: resp.GetPrepareId(), warnings: tree.Warnings}, nil
	}
	if _, err := s.capture(pctx, c, key, prepareID, resp.GetLanguages()); err != nil {
		// Published under our id: charged whatever happens (the request's
		// own row captures the hold, or the next answer from the workspace,
		// or the settler), so the answer says so.
		return nil, &heldError{prepareID: prepareID, published: true, err: err}
	}
	return &prepared{prepareID: prepareID, byUs: true, warnings: append(tree.Warnings, resp.GetWarnings()...)}, nil
}

// inFlightPoll is how often settledCapabilities asks again while a write
// of the key is in flight.
var inFlightPoll = 200 * time.Millisecond

// settledCapabilities asks the key's shard for its capabilities until no
// write of the key is in flight, and reports false when the daemon could not
// be asked or ctx ended first.
func (s *Service) settledCapabilities(ctx context.Context, shard *daemonclient.Shard, key daemonclient.Key) (*daemonv1.CapabilitiesResponse, bool) {
	for {
		caps, err := shard.Capabilities(ctx, key)
		if err != nil {
			return nil, false
		}
		if !caps.GetInFlight() {
			return caps, true
		}
		t := time.NewTimer(inFlightPoll)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, false
		}
	}
}

func (s *Service) capture(ctx context.Context, c Caller, key daemonclient.Key, prepareID string, langs []*daemonv1.LanguageTools) (bool, error) {
	lang := ""
	if len(langs) > 0 {
		lang = langs[0].GetLanguage()
	}
	ok, err := s.ledger.Capture(ctx, ledger.Row{
		PrepareID: prepareID, Org: c.Org, TenantKey: c.TenantKey, Subject: c.Subject,
		Repo: key.Repo, Commit: key.Commit, Op: "prepare", Language: lang, RequestID: c.RequestID,
	})
	if err != nil {
		return false, ledgerError(err)
	}
	return ok, nil
}

func language(ans *daemonv1.QueryResponse) string {
	if id := ans.GetEvidence().GetServer().GetId(); id != "" {
		return id
	}
	return ""
}

func newPrepareID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40 // UUID v4
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return fmt.Sprintf("%s-%s-%s-%s-%s", h[:8], h[8:12], h[12:16], h[16:20], h[20:])
}
