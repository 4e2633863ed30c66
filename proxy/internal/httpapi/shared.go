package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/apierr"
	"github.com/hanzoai/lsp/proxy/internal/auth"
	"github.com/hanzoai/lsp/proxy/internal/forge"
	"github.com/hanzoai/lsp/proxy/internal/ledger"
	"github.com/hanzoai/lsp/proxy/internal/operation"
)

// The pieces every door shares — the REST routes and the MCP tools — so
// that an operation asked through either is checked, attributed, charged
// and rendered the same way.

// callerFrom selects the org from X-Org-Id (403), reads the forge
// credential from h (401) and takes a token from the org's rate bucket
// (429).
func (s *Server) callerFrom(h http.Header, p *auth.Principal, requestID string) (operation.Caller, error) {
	org, err := p.SelectOrg(h.Get("X-Org-Id"))
	if err != nil {
		return operation.Caller{}, apierr.New(http.StatusForbidden, apierr.Forbidden, "the principal is not a member of the selected org")
	}
	cred, err := s.forgeCredential(h, p)
	if err != nil {
		return operation.Caller{}, err
	}
	if err := s.rateLimit(org); err != nil {
		return operation.Caller{}, err
	}
	return operation.Caller{
		Subject:   p.Subject,
		Org:       org,
		TenantKey: auth.TenantKey(s.d.TenantKeySecret, org),
		Cred:      cred,
		RequestID: requestID,
	}, nil
}

// checkRequest is the one step both doors take between their own checks
// (401, and the body's 400) and the work: callerFrom (403, 401, 429), then
// the request's Idempotency-Key, when idem carries one, claimed for the
// caller. stored, when not nil, is a finished attempt's answer: the door
// answers with it and runs nothing.
func (s *Server) checkRequest(ctx context.Context, h http.Header, p *auth.Principal, requestID string, idem *idempotentRequest) (caller operation.Caller, stored *ledger.StoredAnswer, err error) {
	if caller, err = s.callerFrom(h, p, requestID); err != nil {
		return caller, nil, err
	}
	if idem == nil || idem.attempt != "" {
		return caller, nil, nil
	}
	stored, err = s.claimIdempotency(ctx, caller, idem)
	return caller, stored, err
}

// maxCandidates bounds the candidates an ambiguous_symbol error lists
// (the daemon's own bound; total_candidates says how many there were).
const maxCandidates = 20

// defaultRequestTimeout stands in for an unset Deps.RequestTimeout
// (LSP_REQUEST_TIMEOUT's default).
const defaultRequestTimeout = 60 * time.Second

// withRequestTimeout bounds one request's work (LSP_REQUEST_TIMEOUT): the
// forge, the gate, the fetch and the daemon's answer nest inside it. What
// must finish once started — a push, a capture or release, the ledger row,
// the Idempotency-Key's bookkeeping — runs detached to its own deadline
// (package operation, finishIdempotent), so this cancel never cuts it.
func (s *Server) withRequestTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.requestTimeout())
}

func (s *Server) requestTimeout() time.Duration {
	if s.d.RequestTimeout <= 0 {
		return defaultRequestTimeout
	}
	return s.d.RequestTimeout
}

// runOperation runs one checked operation request for caller and renders
// its answer. b is the decoded body (for the cursor); start is when the
// request arrived, for the metrics.
func (s *Server) runOperation(ctx context.Context, rt opRoute, b *body, req operation.Request, caller operation.Caller, start time.Time) (map[string]any, error) {
	// A cursor is verified after the caller is known: it is bound to the
	// tenant.
	if rt.list && b.Cursor != nil {
		cur, err := s.openCursor(*b.Cursor, caller.TenantKey, &req)
		if err != nil {
			return nil, err
		}
		req.Offset, req.Generation = cur.Offset, cur.Generation
	}
	release, err := s.inflight.take(caller.Org)
	if err != nil {
		return nil, err
	}
	defer release()
	ctx, cancel := s.withRequestTimeout(ctx)
	defer cancel()
	res, err := s.d.Ops.Do(ctx, caller, req)
	s.metrics.observeOp(rt.name, time.Since(start), res)
	if err != nil {
		return nil, &failure{err: err, res: res}
	}
	out := answerHead(res)
	rt.render(out, res.Answer)
	renderResolved(out, res.Answer)
	if rt.list {
		out["next_cursor"] = nil
		if n := res.Answer.NextOffset; n != nil {
			a := res.Answer
			out["next_cursor"] = s.sealCursor(caller.TenantKey, &req, res.Commit, a.GetPrepareId(), *n, a.GetEvidence().GetServer().GetGeneration())
		}
	}
	return out, nil
}

// runPrepare prepares a revision for caller and renders the answer: what
// its servers negotiated. progress, when not nil, hears the steps. focus
// (optional) is the file the caller asks about first
// (operation.Service.Prepare). Its deadline is an operation request's
// plus a push's (LSP_PREPARE_TIMEOUT): a prepare request is asked to wait
// for the push, which a question that prepares implicitly is not. Past it
// the push runs on detached and is charged, while the request answers 504
// with prepared: true.
func (s *Server) runPrepare(ctx context.Context, caller operation.Caller, repo string, rev forge.Rev, focus string, start time.Time) (map[string]any, *operation.Result, error) {
	release, err := s.inflight.take(caller.Org)
	if err != nil {
		return nil, nil, err
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, s.requestTimeout()+max(s.d.PrepareTimeout, 0))
	defer cancel()
	res, err := s.d.Ops.Prepare(ctx, caller, repo, rev, focus)
	s.metrics.observeOp("prepare", time.Since(start), res)
	if err != nil {
		return nil, res, &failure{err: err, res: res}
	}
	langs := []string{}
	tools := map[string][]string{}
	servers := []map[string]any{}
	for _, l := range res.Prepare.GetLanguages() {
		langs = append(langs, l.GetLanguage())
		tools[l.GetLanguage()] = nonNil(l.GetTools())
		servers = append(servers, map[string]any{
			"language":               l.GetLanguage(),
			"server":                 serverJSON(l.GetServer()),
			"capability_fingerprint": l.GetCapabilityFingerprint(),
			"warnings":               nonNil(l.GetWarnings()),
		})
	}
	return map[string]any{
		"repo":      res.Repo,
		"commit":    res.Commit,
		"prepared":  res.Prepared,
		"languages": langs,
		"tools":     tools,
		"servers":   servers,
		"warnings":  nonNil(res.Warnings),
	}, res, nil
}

// envelope is the contract's error answer for err: its status, body and
// the Retry-After to announce (zero: none).
func (s *Server) envelope(err error, requestID any) (int, errorBody, time.Duration) {
	var body errorBody
	var f *failure
	if errors.As(err, &f) && f.res != nil {
		if f.res.Repo != "" {
			body.Error.Repo = &f.res.Repo
		}
		if f.res.Commit != "" {
			body.Error.Commit = &f.res.Commit
			prepared := f.res.Prepared
			body.Error.Prepared = &prepared
		}
	}
	e := apierr.From(err)
	if e.Status >= 500 && e.Err != nil {
		s.d.Log.Error("request failed", "request_id", requestID, "code", e.Code, "err", e.Err)
	}
	body.Error.Code, body.Error.Message = e.Code, e.Message
	if f != nil && f.res != nil && e.Code == apierr.AmbiguousSymbol {
		// The candidates let the caller pick one by container path or
		// path without another round trip.
		cands := []map[string]any{}
		all := f.res.Answer.GetCandidates()
		// The daemon sends at most maxCandidates; the proxy does not take
		// its word for it.
		for _, c := range all[:min(len(all), maxCandidates)] {
			cands = append(cands, map[string]any{
				"name": c.GetName(), "kind": c.GetKind(), "path": c.GetPath(), "range": rangeJSON(c.GetRange()),
				"selection_range": rangeJSON(c.GetSelectionRange()), "container": nullable(c.GetContainer()),
			})
		}
		total := f.res.Answer.GetTotalCandidates()
		body.Error.Candidates, body.Error.TotalCandidates = cands, &total
	}
	status := e.Status
	retry := e.RetryAfter
	if retry <= 0 && (status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable) {
		// The contract promises Retry-After on every 429 and 503, also
		// when the layer that failed did not say how long to wait.
		retry = defaultRetryAfter
	}
	if status == 499 {
		status = http.StatusGatewayTimeout
	}
	return status, body, retry
}

// newRequestID makes a fresh request id.
func newRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
