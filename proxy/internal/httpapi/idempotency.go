package httpapi

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/apierr"
	"github.com/hanzoai/lsp/proxy/internal/ledger"
	"github.com/hanzoai/lsp/proxy/internal/operation"
	"github.com/labstack/echo/v4"
)

// Idempotency-Key (CONTRACT §5). A POST operation request that carries the header runs at most once
// per (payer org, key) for IdempotencyTTL: the key is bound to a hash of the route and the raw body
// (requestHash), the first attempt's answer is stored, and a retry gets that answer again, byte for
// byte, with Idempotent-Replayed: true — no second hold, no second ledger row. The same key with
// another route or body is 422 idempotency_key_reused; while the
// first attempt runs, 409 idempotency_in_progress.
//
// The key is claimed once the request has passed the checks before the forge (400, 401, 403, 429):
// a request they refuse answers as it would without a key and costs the ledger nothing.
//
// What is stored: only final answers. An attempt refused before the daemon (the forge's 404 or 502,
// an unreachable daemon or ledger) wrote nothing; a 402 held nothing; a 429 or a 5xx
// (503 capacity_exhausted, 504 timeout …) that held nothing is worth retrying: each of those gives
// the key back, so a retry runs afresh. Everything else — a success, a 4xx the daemon answered, a
// 5xx after this request held or charged a prepare — is stored.
//
// A replay re-checks forge access as the caller first (CONTRACT §3: the resolve cache is keyed by the
// credential and lives at most 30 s), so a credential revoked since the first attempt stops reading
// its stored answer within that bound; a refused re-check answers as any request would (404, 401,
// 502) and leaves the stored answer in place.
//
// Both doors take keys the same way: the REST routes (this middleware buffers the answer) and MCP
// tool calls (mcp.go), both claiming in checkRequest and finishing in finishIdempotent. An MCP key
// is the Idempotency-Key header of the HTTP POST that carries the tools/call; it is bound to the
// tool and its arguments (and a bound session's revision) instead of a route and body, and what is
// stored is the tool result: a replay is that result again under the retry's own JSON-RPC id (ids
// are the client's, per call), marked with _meta idempotent_replayed and the POST's
// Idempotent-Replayed header.
//
// Stored answers are bounded, each (MaxIdempotentAnswer) and per org (Deps.IdempotencyMaxBytes: an
// org at it gets 429 for a new key; a key it holds still replays). The key is refused up front (400) on a request
// whose answer could exceed it: a list page with a key takes at most IdempotentMaxLimit items. An
// answer that still comes out larger is sent but not stored: the key is given back when nothing was
// held, and otherwise stays in flight until its lease lapses (409 to retries meanwhile).

// idempotencyFullRetry is the Retry-After of a new key refused because its org's keys hold their
// bound: the oldest keys free their room as they expire, a day after first use.
const idempotencyFullRetry = time.Minute

// IdempotencyTTL is how long a key and its answer are kept.
const IdempotencyTTL = 24 * time.Hour

// defaultIdempotencyLease applies when Deps.IdempotencyLease is not set: longer than a hold lives
// with the default prepare timeout, so a retry never runs next to a dead attempt's live hold.
const defaultIdempotencyLease = 30 * time.Minute

// MaxIdempotentAnswer bounds a stored answer's body. An answer may carry 256 KiB of source (the
// daemon's bound on code per answer: /read, context lines), which JSON can grow sixfold (each `<`,
// `>`, `&` or control byte is written \u00XX): at 1 MiB such an answer was not kept, its key given
// back, and a retry ran again and wrote a second row. Per org, stored answers are bounded too.
const MaxIdempotentAnswer = 4 << 20

// IdempotentMaxLimit is the largest list page (limit) a request with an Idempotency-Key may ask for:
// pages of it stay well below MaxIdempotentAnswer with the daemon's per-item caps.
const IdempotentMaxLimit = 100

// idempotencyBookkeeping bounds storing an attempt's answer (or giving its key back) after the
// attempt; a variable so a test can make an attempt outlast it.
var idempotencyBookkeeping = 10 * time.Second

// replayedHeaders are the answer headers a replay repeats besides the body.
var replayedHeaders = []string{echo.HeaderContentType, "Retry-After"}

// idempotency is the middleware of the POST operation routes. It takes the key apart and buffers
// the answer; the key is claimed only once the request has passed the checks that come before the
// forge (400, 401, 403, 429: checkRequest, from Server.caller), so a request refused by them
// costs the ledger nothing and answers as it would without a key.
func (s *Server) idempotency(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		key, err := idempotencyKey(r.Header)
		if err != nil {
			return err
		}
		if key == "" {
			return next(c)
		}
		raw, err := io.ReadAll(io.LimitReader(r.Body, MaxBody+1))
		r.Body = io.NopCloser(bytes.NewReader(raw))
		if err != nil || len(raw) > MaxBody {
			return next(c) // the handler answers 400
		}
		var peek replayBody
		_ = json.Unmarshal(raw, &peek) // a body that does not parse is the handler's 400
		idem, err := newIdempotentRequest(key, r.Method, c.Path(), raw, peek)
		if err != nil {
			return err
		}
		c.Set(ctxIdempotency, idem)
		return s.runIdempotent(c, next, idem)
	}
}

// idempotencyKey is the request's Idempotency-Key: "" without one, 400 for a malformed one.
func idempotencyKey(h http.Header) (string, error) {
	keys := h.Values("Idempotency-Key")
	if len(keys) == 0 {
		return "", nil
	}
	if len(keys) > 1 || !validIdempotencyKey(keys[0]) {
		return "", apierr.BadRequest("Idempotency-Key must be one value of 1 to 255 visible ASCII characters")
	}
	return keys[0], nil
}

// newIdempotentRequest is a keyed request of either door: method and route name what the key is
// bound to besides raw, the body; peek is what a replay re-checks at the forge and the page size,
// which a key bounds (400 past IdempotentMaxLimit).
func newIdempotentRequest(key, method, route string, raw []byte, peek replayBody) (*idempotentRequest, error) {
	if peek.Limit != nil && *peek.Limit > IdempotentMaxLimit {
		return nil, apierr.BadRequest("with an Idempotency-Key, limit may be at most %d (stored answers are bounded)", IdempotentMaxLimit)
	}
	return &idempotentRequest{key: key, method: method, route: route, raw: raw, peek: peek}, nil
}

// idempotentRequest is a request's key on its way through the handler: claimed (attempt set) once
// the handler has checked the request, or answered from a stored answer (replayed).
type idempotentRequest struct {
	key           string
	method, route string // with raw, what the key is bound to (requestHash)
	raw           []byte
	peek          replayBody
	org           string
	attempt       string
	replayed      bool
}

// errReplayed ends a handler whose answer Server.caller wrote: a replay.
var errReplayed = errors.New("answered from the stored answer")

// claimIdempotency claims idem's key for caller, whom checkRequest has checked. A retry of a finished attempt
// gets the stored answer, after forge access is checked again as the caller (CONTRACT §3): the
// door answers it and runs nothing. The same key with another request is 422, one still running
// 409, a new key of an org at its bound 429.
func (s *Server) claimIdempotency(ctx context.Context, caller operation.Caller, idem *idempotentRequest) (*ledger.StoredAnswer, error) {
	if s.d.Money == nil {
		return nil, ledgerUnavailable(errors.New("no ledger configured"))
	}
	attempt := randomHex(16)
	lease := s.d.IdempotencyLease
	if lease <= 0 {
		lease = defaultIdempotencyLease
	}
	hash := requestHash(idem.method, idem.route, idem.raw)
	// Detached, as the bookkeeping after the attempt: a cancel that lands
	// after the claim committed would leave the key in flight for its
	// lease (retries 409). A client that left is seen by the work next,
	// and its key is given back then.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), idempotencyBookkeeping)
	defer cancel()
	state, stored, err := s.d.Money.ClaimIdempotencyKey(cctx, ledger.IdempotencyRequest{
		Org: caller.Org, Key: idem.key, RequestHash: hash, Attempt: attempt, TTL: IdempotencyTTL, Lease: lease,
		MaxOrgBytes: s.d.IdempotencyMaxBytes,
	})
	if err != nil {
		return nil, moneyError(err)
	}
	switch state {
	case ledger.IdempotencyReplay:
		if err := s.recheckForge(ctx, caller, idem.peek); err != nil {
			return nil, err
		}
		idem.replayed = true
		return stored, nil
	case ledger.IdempotencyMismatch:
		return nil, apierr.New(http.StatusUnprocessableEntity, apierr.IdempotencyKeyReused,
			"this Idempotency-Key was used with another request")
	case ledger.IdempotencyInProgress:
		e := apierr.New(http.StatusConflict, apierr.IdempotencyInProgress,
			"a request with this Idempotency-Key is in progress")
		e.RetryAfter = time.Second
		return nil, e
	case ledger.IdempotencyFull:
		e := apierr.New(http.StatusTooManyRequests, apierr.RateLimited,
			"this org's Idempotency-Keys hold the most stored answers they may (LSP_IDEMPOTENCY_MAX_BYTES) until some expire (24 h after first use); retry later, or without a key")
		e.RetryAfter = idempotencyFullRetry
		return nil, e
	}
	idem.org, idem.attempt = caller.Org, attempt
	return nil, nil
}

// runIdempotent runs the request with its answer buffered. When the key was claimed, it stores the
// answer (or gives the key back) and only then sends it, so a retry that arrives after the answer
// always finds it; otherwise (refused before the claim, a replay, 409, 422) it sends the answer.
func (s *Server) runIdempotent(c echo.Context, next echo.HandlerFunc, idem *idempotentRequest) (err error) {
	resp := c.Response()
	orig := resp.Writer
	rec := &answerRecorder{header: orig.Header()}
	resp.Writer = rec
	done := false
	defer func() {
		resp.Writer = orig
		if !done {
			// A panic: nothing known about the attempt's effects; the lease frees the key.
			return
		}
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		orig.WriteHeader(rec.status)
		_, err = orig.Write(rec.body.Bytes())
	}()

	herr := next(c)
	if herr != nil && !idem.replayed {
		s.handleError(herr, c)
	}
	done = true
	if idem.attempt == "" {
		return nil
	}
	a := ledger.StoredAnswer{Status: rec.status, Header: map[string]string{}, Body: rec.body.Bytes()}
	for _, h := range replayedHeaders {
		if v := rec.header.Get(h); v != "" {
			a.Header[h] = v
		}
	}
	s.finishIdempotent(c.Request().Context(), idem, herr, a, c.Get(ctxRequestID))
	return nil
}

// finishIdempotent ends a claimed key's attempt, whichever door ran it: herr is how the attempt
// failed (nil: it succeeded), a its answer. A final answer is stored for replays; otherwise, or when
// the answer is over the stored bound and nothing was held, the key is given back so a retry runs
// afresh.
func (s *Server) finishIdempotent(ctx context.Context, idem *idempotentRequest, herr error, a ledger.StoredAnswer, requestID any) {
	org, key, attempt := idem.org, idem.key, idem.attempt
	// The bookkeeping must happen even when the client went away, and gets its own time: a cold
	// attempt may have taken longer than the bound itself.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), idempotencyBookkeeping)
	defer cancel()
	giveBack := func() {
		if err := s.d.Money.ReleaseIdempotencyKey(ctx, org, key, attempt); err != nil {
			s.d.Log.Warn("release idempotency key", "request_id", requestID, "err", err)
		}
	}
	if herr != nil && !final(herr) {
		giveBack()
		return
	}
	if a.Status == 0 {
		a.Status = http.StatusOK
	}
	if len(a.Body) > MaxIdempotentAnswer {
		s.d.Log.Warn("an answer is over the stored bound; not kept for replays", "request_id", requestID, "bytes", len(a.Body))
		if herr == nil || !held(herr) {
			giveBack()
		}
		return // else in flight until the lease lapses
	}
	if err := s.d.Money.StoreIdempotentAnswer(ctx, org, key, attempt, a); err != nil {
		// The caller still gets its answer. A retry meets the in-flight record until the lease
		// lapses (409), then runs again.
		s.d.Log.Warn("store idempotent answer", "request_id", requestID, "err", err)
	}
}

// final reports whether a failed operation's answer is final for its key, i.e. kept for replays. It
// is not when the request never reached the daemon (no row, nothing held; a ledger that could not be
// reached wrote nothing), when it was refused at the gate (402: nothing held), and when it is a 429
// or a 5xx and this request held nothing: a retry may well succeed and must run afresh.
func final(err error) bool {
	e := apierr.From(err)
	if e.Code == apierr.LedgerUnavailable || e.Status == http.StatusPaymentRequired {
		return false
	}
	var f *failure
	if !errors.As(err, &f) || f.res == nil {
		return false
	}
	reached := f.res.Answer != nil || f.res.Prepare != nil || held(err)
	if !reached {
		return false
	}
	if e.Status == http.StatusTooManyRequests || e.Status == statusClientClosed || e.Status >= 500 {
		return held(err)
	}
	return true
}

// statusClientClosed is the status of a request whose client went away
// (operation's 499): like a 5xx, not the request's own final answer.
const statusClientClosed = 499

// held reports whether the failed request held or charged a prepare of its own.
func held(err error) bool {
	var f *failure
	if !errors.As(err, &f) || f.res == nil {
		return false
	}
	return f.res.Prepared || f.res.PrepareID != ""
}

// replayBody is what a replay needs of the (already hashed) body: where to re-check forge access,
// and the list page size that bounds the answer.
type replayBody struct {
	Repo  *string `json:"repo"`
	Rev   *string `json:"rev"`
	Limit *int64  `json:"limit"`
}

// recheckForge resolves the replayed request's revision as the caller, as every request does
// (CONTRACT §3), before a stored answer is sent again. The forge's resolve cache, keyed by the
// credential, bounds how stale that check can be (30 s by default).
func (s *Server) recheckForge(ctx context.Context, caller operation.Caller, b replayBody) error {
	if s.d.Ops == nil {
		return nil
	}
	bb := &body{Repo: b.Repo, Rev: b.Rev}
	repo, rev, err := commonRequest(bb)
	if err != nil {
		return err
	}
	ctx, cancel := s.withRequestTimeout(ctx)
	defer cancel()
	_, err = s.d.Ops.Resolve(ctx, caller, repo, rev)
	return err
}

// answerRecorder buffers an answer. Headers go to the real writer's map, which is sent when the
// buffered status and body are.
type answerRecorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (a *answerRecorder) Header() http.Header { return a.header }

func (a *answerRecorder) WriteHeader(code int) {
	if a.status == 0 {
		a.status = code
	}
}

// Flush does nothing: the answer leaves only once it is stored. (Streamed answers are not offered
// to requests that carry a key.)
func (a *answerRecorder) Flush() {}

func (a *answerRecorder) Write(b []byte) (int, error) {
	if a.status == 0 {
		a.status = http.StatusOK
	}
	return a.body.Write(b)
}

// requestHash binds a key to one route and one body, byte for byte (CONTRACT §5), not to the
// caller: the key is the payer org's, and a replay is only sent after the forge has been asked again
// as whoever presents it (recheckForge, CONTRACT §3). A client whose forge token was rotated between
// its attempt and its retry gets the replay, not 422 — which would leave it to retry without the key
// and pay twice.
func requestHash(method, route string, body []byte) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s %s\n", method, route)
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

func validIdempotencyKey(k string) bool {
	if k == "" || len(k) > 255 {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
