package httpapi

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
	"github.com/hanzoai/lsp/proxy/internal/apierr"
	"github.com/hanzoai/lsp/proxy/internal/forge"
	"github.com/hanzoai/lsp/proxy/internal/ledger"
	"github.com/hanzoai/lsp/proxy/internal/operation"
	"github.com/hanzoai/lsp/proxy/internal/ratelimit"
	"github.com/labstack/echo/v4"
)

// fakeOp stands for an operation handler behind the idempotency middleware, on a test route: its body
// says what it does, and it counts its runs (a run is what a retry must not repeat: a hold, a row).
type fakeOp struct {
	runs    atomic.Int32
	started chan struct{} // "block": closed when the run starts
	release chan struct{} // "block": the run ends when this is closed
}

const fakeRoute = "/v1/lsp/fake-op"

func (a *moneyAPI) withFakeOp(t *testing.T) *fakeOp {
	t.Helper()
	op := &fakeOp{started: make(chan struct{}), release: make(chan struct{})}
	handler := func(c echo.Context) error {
		var b struct {
			Mode string `json:"mode"`
		}
		if err := json.NewDecoder(c.Request().Body).Decode(&b); err != nil {
			return apierr.BadRequest("the body must be one JSON object")
		}
		// As the operation handlers do: the caller is checked (and the key
		// claimed) after the body.
		if _, err := a.s.caller(c); err != nil {
			return err
		}
		n := op.runs.Add(1)
		switch b.Mode {
		case "block":
			close(op.started)
			<-op.release
		case "refused-at-the-gate": // reached the daemon, wrote its row
			e := apierr.New(http.StatusPaymentRequired, apierr.InsufficientFunds, "no funds")
			return &failure{err: e, res: &operation.Result{Repo: "r", Commit: "c", Answer: &daemonv1.QueryResponse{}}}
		case "forge-said-no": // never reached the daemon
			return &failure{err: apierr.New(http.StatusNotFound, apierr.NotFound, "no such repository"), res: &operation.Result{Repo: "r"}}
		case "ledger-down": // reached the daemon; the row could not be written
			return &failure{err: ledgerUnavailable(context.Canceled), res: &operation.Result{Repo: "r", Commit: "c", Answer: &daemonv1.QueryResponse{}}}
		case "capacity-before-any-hold": // reached the daemon, then 503 before holding anything
			e := apierr.New(http.StatusServiceUnavailable, apierr.CapacityExhausted, "too many prepares")
			e.RetryAfter = 1e9
			return &failure{err: e, res: &operation.Result{Repo: "r", Commit: "c", Answer: &daemonv1.QueryResponse{}}}
		case "client-left-before-any-hold": // reached the daemon; the client went away (operation's 499)
			return &failure{err: apierr.New(statusClientClosed, apierr.Timeout, "the client closed the request"), res: &operation.Result{Repo: "r", Commit: "c", Answer: &daemonv1.QueryResponse{}}}
		case "timeout-before-any-hold":
			return &failure{err: apierr.New(http.StatusGatewayTimeout, apierr.Timeout, "timed out"), res: &operation.Result{Repo: "r", Commit: "c", Answer: &daemonv1.QueryResponse{}}}
		case "rate-limited-at-the-daemon":
			e := apierr.New(http.StatusTooManyRequests, apierr.RateLimited, "slow down")
			e.RetryAfter = 1e9
			return &failure{err: e, res: &operation.Result{Repo: "r", Commit: "c", Answer: &daemonv1.QueryResponse{}}}
		case "timeout-after-prepare":
			return &failure{err: apierr.New(http.StatusGatewayTimeout, apierr.Timeout, "timed out"), res: &operation.Result{Repo: "r", Commit: "c", Prepared: true, PrepareID: "p2"}}
		case "not-found-at-the-daemon": // a final 4xx the daemon answered
			return &failure{err: apierr.New(http.StatusUnprocessableEntity, apierr.PositionOutOfRange, "past the end"), res: &operation.Result{Repo: "r", Commit: "c", Answer: &daemonv1.QueryResponse{}}}
		case "slow": // outlasts the bookkeeping bound, as a cold prepare may
			time.Sleep(3 * idempotencyBookkeeping)
		case "escaped": // the most code an answer carries, every byte one JSON escapes
			return c.JSON(http.StatusOK, map[string]any{"run": n, "code": strings.Repeat("<", 256<<10)})
		case "huge":
			return c.JSON(http.StatusOK, map[string]any{"run": n, "pad": strings.Repeat("x", MaxIdempotentAnswer)})
		case "daemon-down-after-prepare":
			e := apierr.New(http.StatusServiceUnavailable, apierr.DaemonUnavailable, "the daemon is unavailable")
			e.RetryAfter = 3e9
			return &failure{err: e, res: &operation.Result{Repo: "r", Commit: "c", Prepared: true, PrepareID: "p"}}
		}
		return c.JSON(http.StatusOK, map[string]any{"run": n, "mode": b.Mode})
	}
	a.s.e.POST(fakeRoute, handler, a.s.authenticate, a.s.idempotency)
	return op
}

// post sends body to route with the token, optional Idempotency-Key and X-Org-Id.
func (a *moneyAPI) post(t *testing.T, route, body, tok, key, org string) *httptest.ResponseRecorder {
	t.Helper()
	return a.postContext(t, context.Background(), route, body, tok, key, org)
}

// postContext is post with the request's context ctx.
func (a *moneyAPI) postContext(t *testing.T, ctx context.Context, route, body, tok, key, org string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, route, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Forge-Token", testForgeTok)
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if org != "" {
		req.Header.Set("X-Org-Id", org)
	}
	rec := httptest.NewRecorder()
	a.s.Handler().ServeHTTP(rec, req)
	return rec
}

// A retry gets the first answer byte for byte, marked replayed, and runs nothing.
func TestIdempotentReplay(t *testing.T) {
	a := newMoneyAPI(t)
	op := a.withFakeOp(t)
	const body = `{"mode":"ok"}`
	first := a.post(t, fakeRoute, body, a.member, "key-1", "")
	if first.Code != 200 || first.Header().Get("Idempotent-Replayed") != "" {
		t.Fatalf("first: %d %v %s", first.Code, first.Header(), first.Body)
	}
	for range 3 {
		again := a.post(t, fakeRoute, body, a.member, "key-1", "")
		if again.Code != 200 || again.Body.String() != first.Body.String() ||
			again.Header().Get("Idempotent-Replayed") != "true" ||
			again.Header().Get("Content-Type") != first.Header().Get("Content-Type") {
			t.Fatalf("retry: %d %v %q; first %q", again.Code, again.Header(), again.Body, first.Body)
		}
		if again.Header().Get("X-Request-Id") == first.Header().Get("X-Request-Id") {
			t.Fatal("a replay reuses the first request's id")
		}
	}
	if n := op.runs.Load(); n != 1 {
		t.Fatalf("the operation ran %d times", n)
	}
	// Without a key every request runs.
	a.post(t, fakeRoute, body, a.member, "", "")
	a.post(t, fakeRoute, body, a.member, "", "")
	if n := op.runs.Load(); n != 3 {
		t.Fatalf("the operation ran %d times", n)
	}
	// The key is the org's: the principal's other org runs it anew, once.
	other := a.post(t, fakeRoute, body, a.member, "key-1", testMemberOrg)
	if other.Code != 200 || other.Header().Get("Idempotent-Replayed") != "" || op.runs.Load() != 4 {
		t.Fatalf("same key, other org: %d %v, runs %d", other.Code, other.Header(), op.runs.Load())
	}
	if again := a.post(t, fakeRoute, body, a.member, "key-1", testMemberOrg); again.Header().Get("Idempotent-Replayed") != "true" ||
		again.Body.String() != other.Body.String() {
		t.Fatalf("retry in the other org: %v %s", again.Header(), again.Body)
	}
}

// cancelAfterClaim is the ledger of a client that goes away once its key's claim has committed,
// before the claim's reply is read: the claim commits, cancels the request, and then fails as pgx
// does when it reads a reply on a cancelled context.
type cancelAfterClaim struct {
	Money
	cancel context.CancelFunc
}

func (m cancelAfterClaim) ClaimIdempotencyKey(ctx context.Context, r ledger.IdempotencyRequest) (ledger.IdempotencyState, *ledger.StoredAnswer, error) {
	state, stored, err := m.Money.ClaimIdempotencyKey(ctx, r)
	m.cancel()
	if err == nil && ctx.Err() != nil {
		return "", nil, ctx.Err()
	}
	return state, stored, err
}

// A client that goes away between its key's claim committing and the claim's reply does not leave
// the key in flight for its lease: the claim is detached from the request, so the attempt goes on
// and its answer is stored (or its key given back), and a retry with the same key and body runs or
// replays, never 409.
func TestIdempotencyClaimOutlivesItsClient(t *testing.T) {
	a := newMoneyAPI(t)
	a.withFakeOp(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a.s.d.Money = cancelAfterClaim{Money: a.l, cancel: cancel}
	const body = `{"mode":"ok"}`
	a.postContext(t, ctx, fakeRoute, body, a.member, "k", "")
	if again := a.post(t, fakeRoute, body, a.member, "k", ""); again.Code != 200 {
		t.Fatalf("retry after the client left during the claim: %d %s", again.Code, again.Body)
	}
}

// The same key with another body or route is 422; nothing runs.
func TestIdempotencyKeyReused(t *testing.T) {
	a := newMoneyAPI(t)
	op := a.withFakeOp(t)
	// A body the fake route and /hover both accept: a request is checked before its key is claimed.
	const hover = `{"repo":"r","path":"a.go","line":1,"character":2}`
	a.post(t, fakeRoute, `{"mode":"ok"}`, a.member, "k", "")
	a.post(t, fakeRoute, hover, a.member, "h", "")
	for _, tc := range []struct{ name, route, body, key string }{
		{"another body", fakeRoute, `{"mode":"ok" }`, "k"},
		{"another route, same body", "/v1/lsp/hover", hover, "h"},
	} {
		rec := a.post(t, tc.route, tc.body, a.member, tc.key, "")
		if rec.Code != 422 || errorOf(t, rec).Code != "idempotency_key_reused" {
			t.Fatalf("%s: %d %s", tc.name, rec.Code, rec.Body)
		}
	}
	if n := op.runs.Load(); n != 2 {
		t.Fatalf("the operation ran %d times; want once per key", n)
	}
}

// While the first attempt runs, a retry is 409 with Retry-After; afterwards it is the replay.
func TestIdempotencyInProgress(t *testing.T) {
	a := newMoneyAPI(t)
	op := a.withFakeOp(t)
	const body = `{"mode":"block"}`
	var wg sync.WaitGroup
	var first *httptest.ResponseRecorder
	wg.Go(func() { first = a.post(t, fakeRoute, body, a.member, "k", "") })
	<-op.started
	busy := a.post(t, fakeRoute, body, a.member, "k", "")
	if busy.Code != 409 || errorOf(t, busy).Code != "idempotency_in_progress" || busy.Header().Get("Retry-After") == "" {
		t.Fatalf("during the first: %d %v %s", busy.Code, busy.Header(), busy.Body)
	}
	if other := a.post(t, fakeRoute, `{"mode":"other"}`, a.member, "k", ""); other.Code != 422 {
		t.Fatalf("another body during the first: %d %s", other.Code, other.Body)
	}
	close(op.release)
	wg.Wait()
	if first.Code != 200 {
		t.Fatalf("first: %d %s", first.Code, first.Body)
	}
	after := a.post(t, fakeRoute, body, a.member, "k", "")
	if after.Code != 200 || after.Header().Get("Idempotent-Replayed") != "true" || after.Body.String() != first.Body.String() {
		t.Fatalf("after: %d %v %s", after.Code, after.Header(), after.Body)
	}
	if n := op.runs.Load(); n != 1 {
		t.Fatalf("the operation ran %d times", n)
	}
}

// An attempt that takes longer than the bookkeeping bound still has its answer stored: the bound is
// the bookkeeping's own, not the attempt's, so a slow cold request's retry is replayed, not 409.
func TestIdempotencySlowAttempt(t *testing.T) {
	defer func(d time.Duration) { idempotencyBookkeeping = d }(idempotencyBookkeeping)
	idempotencyBookkeeping = 500 * time.Millisecond
	a := newMoneyAPI(t)
	op := a.withFakeOp(t)
	const body = `{"mode":"slow"}`
	first := a.post(t, fakeRoute, body, a.member, "slow-1", "")
	if first.Code != 200 {
		t.Fatalf("first: %d %s", first.Code, first.Body)
	}
	again := a.post(t, fakeRoute, body, a.member, "slow-1", "")
	if again.Code != 200 || again.Header().Get("Idempotent-Replayed") != "true" || again.Body.String() != first.Body.String() {
		t.Fatalf("retry after a slow attempt: %d %v %s", again.Code, again.Header(), again.Body)
	}
	if n := op.runs.Load(); n != 1 {
		t.Fatalf("the operation ran %d times", n)
	}
}

// Which failures are final for their key: those of requests that reached the daemon (a row was
// written, a prepare maybe charged) are stored and replayed with their status and Retry-After; those
// that did nothing a retry could repeat give the key back.
func TestIdempotencyOfFailures(t *testing.T) {
	a := newMoneyAPI(t)
	op := a.withFakeOp(t)
	for _, tc := range []struct {
		mode   string
		status int
		stored bool
	}{
		// Held nothing: worth retrying afresh.
		{"refused-at-the-gate", 402, false},
		{"capacity-before-any-hold", 503, false},
		{"timeout-before-any-hold", 504, false},
		{"client-left-before-any-hold", 504, false}, // 499 inside; the wire says 504
		{"rate-limited-at-the-daemon", 429, false},
		{"forge-said-no", 404, false},
		{"ledger-down", 503, false},
		// Held or charged a prepare, or a final answer: kept.
		{"daemon-down-after-prepare", 503, true},
		{"timeout-after-prepare", 504, true},
		{"not-found-at-the-daemon", 422, true},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			body := `{"mode":"` + tc.mode + `"}`
			before := op.runs.Load()
			first := a.post(t, fakeRoute, body, a.member, "key-"+tc.mode, "")
			again := a.post(t, fakeRoute, body, a.member, "key-"+tc.mode, "")
			if first.Code != tc.status || again.Code != tc.status || again.Body.String() != first.Body.String() {
				t.Fatalf("first %d %s, again %d %s; want %d twice", first.Code, first.Body, again.Code, again.Body, tc.status)
			}
			if ra := first.Header().Get("Retry-After"); ra != again.Header().Get("Retry-After") {
				t.Fatalf("Retry-After %q then %q", ra, again.Header().Get("Retry-After"))
			}
			runs := op.runs.Load() - before
			replayed := again.Header().Get("Idempotent-Replayed") == "true"
			if tc.stored && (runs != 1 || !replayed) || !tc.stored && (runs != 2 || replayed) {
				t.Fatalf("runs %d, replayed %v; stored should be %v", runs, replayed, tc.stored)
			}
		})
	}
	// A body the handler refuses (400) is not stored either.
	for range 2 {
		if rec := a.post(t, fakeRoute, `not json`, a.member, "key-bad-body", ""); rec.Code != 400 || rec.Header().Get("Idempotent-Replayed") != "" {
			t.Fatalf("bad body: %d %v", rec.Code, rec.Header())
		}
	}
}

// The header itself, and the checks that come before it.
func TestIdempotencyKeyChecks(t *testing.T) {
	a := newMoneyAPI(t)
	op := a.withFakeOp(t)
	for _, tc := range []struct {
		name, key string
		keys      []string
		tok, org  string
		status    int
		code      string
	}{
		{name: "too long", key: strings.Repeat("k", 256), tok: a.member, status: 400, code: "invalid_request"},
		{name: "a space", key: "a b", tok: a.member, status: 400, code: "invalid_request"},
		{name: "non-ASCII", key: "clé", tok: a.member, status: 400, code: "invalid_request"},
		{name: "twice", keys: []string{"a", "b"}, tok: a.member, status: 400, code: "invalid_request"},
		{name: "no token", key: "k", status: 401, code: "unauthenticated"},
		{name: "foreign org", key: "k", tok: a.member, org: foreignOrg, status: 403, code: "forbidden"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodPost, "/v1/lsp/hover", strings.NewReader(validBodies["/hover"]))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Forge-Token", testForgeTok)
			if tc.tok != "" {
				req.Header.Set("Authorization", "Bearer "+tc.tok)
			}
			if tc.org != "" {
				req.Header.Set("X-Org-Id", tc.org)
			}
			if tc.key != "" {
				req.Header.Set("Idempotency-Key", tc.key)
			}
			for _, k := range tc.keys {
				req.Header.Add("Idempotency-Key", k)
			}
			rec := httptest.NewRecorder()
			a.s.Handler().ServeHTTP(rec, req)
			if rec.Code != tc.status || errorOf(t, rec).Code != tc.code {
				t.Fatalf("%d %s; want %d %s", rec.Code, rec.Body, tc.status, tc.code)
			}
		})
	}
	// The longest key is fine.
	if rec := a.post(t, fakeRoute, `{"mode":"ok"}`, a.member, strings.Repeat("k", 255), ""); rec.Code != 200 {
		t.Fatalf("a 255-byte key: %d %s", rec.Code, rec.Body)
	}
	if op.runs.Load() != 1 {
		t.Fatalf("runs %d", op.runs.Load())
	}
	var n int
	if err := a.l.Pool().QueryRow(context.Background(), `SELECT count(*) FROM idempotency_keys`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("%d idempotency records; refused requests must leave none", n)
	}
}

// Without a reachable ledger a keyed request is 503 ledger_unavailable and runs nothing; without a
// key it is not the middleware's business.
func TestIdempotencyWithoutLedger(t *testing.T) {
	a := newMoneyAPI(t)
	op := a.withFakeOp(t)
	a.l.Close()
	rec := a.post(t, fakeRoute, `{"mode":"ok"}`, a.member, "k", "")
	if rec.Code != 503 || errorOf(t, rec).Code != "ledger_unavailable" || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("keyed request with the ledger closed: %d %v %s", rec.Code, rec.Header(), rec.Body)
	}
	if rec := a.post(t, fakeRoute, `{"mode":"ok"}`, a.member, "", ""); rec.Code != 200 {
		t.Fatalf("request without a key: %d %s", rec.Code, rec.Body)
	}
	if op.runs.Load() != 1 {
		t.Fatalf("runs %d", op.runs.Load())
	}

	s := New(Deps{Verifier: a.s.d.Verifier, CursorSecret: []byte("x"), Log: a.s.d.Log}) // no Money at all
	s.e.POST(fakeRoute, func(c echo.Context) error {
		if _, err := s.caller(c); err != nil {
			return err
		}
		t.Fatal("ran")
		return nil
	}, s.authenticate, s.idempotency)
	req := httptest.NewRequest(http.MethodPost, fakeRoute, strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer "+a.member)
	req.Header.Set("X-Forge-Token", testForgeTok)
	req.Header.Set("Idempotency-Key", "k")
	rec = httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, req)
	if rec.Code != 503 {
		t.Fatalf("no ledger configured: %d %s", rec.Code, rec.Body)
	}
}

// Stored answers are bounded: a list page over IdempotentMaxLimit is refused up front with a key, and
// an answer that still comes out over the bound is sent but not kept (the key is given back).
func TestIdempotentAnswersAreBounded(t *testing.T) {
	a := newMoneyAPI(t)
	op := a.withFakeOp(t)
	rec := a.post(t, fakeRoute, `{"mode":"ok","limit":101}`, a.member, "key-big-page", "")
	if rec.Code != 400 || errorOf(t, rec).Code != "invalid_request" || op.runs.Load() != 0 {
		t.Fatalf("a page over the bound with a key: %d %s, runs %d", rec.Code, rec.Body, op.runs.Load())
	}
	if rec := a.post(t, fakeRoute, `{"mode":"ok","limit":100}`, a.member, "key-page", ""); rec.Code != 200 {
		t.Fatalf("a page at the bound: %d %s", rec.Code, rec.Body)
	}
	for i := range 2 {
		rec := a.post(t, fakeRoute, `{"mode":"huge"}`, a.member, "key-huge", "")
		if rec.Code != 200 || rec.Body.Len() <= MaxIdempotentAnswer || rec.Header().Get("Idempotent-Replayed") != "" {
			t.Fatalf("huge answer %d: %d, %d bytes, %v", i, rec.Code, rec.Body.Len(), rec.Header())
		}
	}
	if n := op.runs.Load(); n != 3 {
		t.Fatalf("runs %d; the huge answer must run again, not replay", n)
	}
	var n int
	if err := a.l.Pool().QueryRow(context.Background(), `SELECT count(*) FROM idempotency_keys WHERE length(body) > $1`, MaxIdempotentAnswer).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d stored answers over the bound", n)
	}
}

// revocableForge resolves every revision until the credential is revoked; then the repository is
// not found, as the forge answers a caller who lost access.
type revocableForge struct {
	revoked  atomic.Bool
	resolves atomic.Int32
}

func (f *revocableForge) Resolve(_ context.Context, _ forge.Credential, _, _ string, _ forge.Rev) (string, error) {
	f.resolves.Add(1)
	if f.revoked.Load() {
		return "", forge.ErrNotFound
	}
	return strings.Repeat("a", 40), nil
}

func (f *revocableForge) Fetch(context.Context, forge.Credential, string, string, string, forge.Limits) (*forge.Tree, error) {
	return nil, forge.ErrNotFound
}

// A replay re-checks forge access as the caller (CONTRACT §3): a revoked credential no longer reads
// the stored answer, and the stored answer stays for when access comes back. The key is the org's,
// bound to route and body (CONTRACT §5), not to who presents it: a colleague, or the same client
// with a rotated forge token, gets the replay once the forge has been asked for them.
func TestIdempotentReplayRechecksTheForge(t *testing.T) {
	a := newMoneyAPI(t)
	f := &revocableForge{}
	a.s.d.Ops = operation.New(f, nil, nil, operation.Config{}, slog.New(slog.DiscardHandler), nil)
	op := a.withFakeOp(t)
	const body = `{"mode":"ok","repo":"hello"}`
	first := a.post(t, fakeRoute, body, a.member, "key-forge", "")
	if first.Code != 200 {
		t.Fatalf("first: %d %s", first.Code, first.Body)
	}
	again := a.post(t, fakeRoute, body, a.member, "key-forge", "")
	if again.Code != 200 || again.Header().Get("Idempotent-Replayed") != "true" || f.resolves.Load() != 1 {
		t.Fatalf("replay: %d %v, resolves %d", again.Code, again.Header(), f.resolves.Load())
	}
	f.revoked.Store(true)
	denied := a.post(t, fakeRoute, body, a.member, "key-forge", "")
	if denied.Code != 404 || errorOf(t, denied).Code != "not_found" || denied.Header().Get("Idempotent-Replayed") != "" {
		t.Fatalf("replay after revocation: %d %v %s", denied.Code, denied.Header(), denied.Body)
	}
	f.revoked.Store(false)
	back := a.post(t, fakeRoute, body, a.member, "key-forge", "")
	if back.Code != 200 || back.Body.String() != first.Body.String() || back.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay once access is back: %d %v %s", back.Code, back.Header(), back.Body)
	}
	resolves := f.resolves.Load()
	colleague := a.post(t, fakeRoute, body, a.colleague, "key-forge", "")
	if colleague.Code != 200 || colleague.Body.String() != first.Body.String() || colleague.Header().Get("Idempotent-Replayed") != "true" || f.resolves.Load() != resolves+1 {
		t.Fatalf("a colleague's retry: %d %v %s, resolves %d", colleague.Code, colleague.Header(), colleague.Body, f.resolves.Load()-resolves)
	}
	req := httptest.NewRequest(http.MethodPost, fakeRoute, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+a.member)
	req.Header.Set("X-Forge-Token", "a-rotated-forge-token")
	req.Header.Set("Idempotency-Key", "key-forge")
	rotated := httptest.NewRecorder()
	a.s.Handler().ServeHTTP(rotated, req)
	if rotated.Code != 200 || rotated.Body.String() != first.Body.String() || rotated.Header().Get("Idempotent-Replayed") != "true" || f.resolves.Load() != resolves+2 {
		t.Fatalf("a retry with a rotated forge token: %d %v %s", rotated.Code, rotated.Header(), rotated.Body)
	}
	if n := op.runs.Load(); n != 1 {
		t.Fatalf("the operation ran %d times", n)
	}
}

// A keyed request refused by the checks before the forge (400, 429) answers as it would without a
// key, and its key costs the ledger nothing: with the ledger closed, those refusals are still 400
// and 429, not 503 (CONTRACT §4's order: 401 → 400 → 403 → 429 → forge).
func TestIdempotencyKeyClaimedAfterTheChecks(t *testing.T) {
	a := newMoneyAPI(t)
	op := a.withFakeOp(t)
	a.s.d.RateLimit = ratelimit.New(1e-6, 1) // one request, then 429
	a.l.Close()
	if rec := a.post(t, fakeRoute, `{"mode":`, a.member, "k1", ""); rec.Code != 400 {
		t.Fatalf("keyed request with a bad body, ledger closed: %d %s", rec.Code, rec.Body)
	}
	if rec := a.post(t, fakeRoute, `{"mode":"ok"}`, a.member, "k2", ""); rec.Code != 503 || errorOf(t, rec).Code != "ledger_unavailable" {
		t.Fatalf("keyed request checked, ledger closed: %d %s", rec.Code, rec.Body)
	}
	if rec := a.post(t, fakeRoute, `{"mode":"ok"}`, a.member, "k3", ""); rec.Code != 429 || errorOf(t, rec).Code != "rate_limited" {
		t.Fatalf("keyed request over the rate, ledger closed: %d %s", rec.Code, rec.Body)
	}
	if n := op.runs.Load(); n != 0 {
		t.Fatalf("the operation ran %d times", n)
	}
}

// Once an org's keys hold their bound of stored answers, a new key is 429 with Retry-After (and
// runs nothing), while a retry of a key it holds is still the replay and a request without a key
// still runs.
func TestIdempotencyOrgBoundAnswers429(t *testing.T) {
	a := newMoneyAPI(t)
	op := a.withFakeOp(t)
	a.s.d.IdempotencyMaxBytes = 10 // one answer fills it
	first := a.post(t, fakeRoute, `{"mode":"ok"}`, a.member, "k1", "")
	if first.Code != 200 {
		t.Fatalf("first: %d %s", first.Code, first.Body)
	}
	rec := a.post(t, fakeRoute, `{"mode":"ok"}`, a.member, "k2", "")
	if rec.Code != 429 || errorOf(t, rec).Code != "rate_limited" || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("a new key past the bound: %d %v %s", rec.Code, rec.Header(), rec.Body)
	}
	if again := a.post(t, fakeRoute, `{"mode":"ok"}`, a.member, "k1", ""); again.Header().Get("Idempotent-Replayed") != "true" || again.Body.String() != first.Body.String() {
		t.Fatalf("a retry of a key the org holds: %d %v %s", again.Code, again.Header(), again.Body)
	}
	if rec := a.post(t, fakeRoute, `{"mode":"ok"}`, a.member, "", ""); rec.Code != 200 {
		t.Fatalf("without a key: %d %s", rec.Code, rec.Body)
	}
	if n := op.runs.Load(); n != 2 {
		t.Fatalf("the operation ran %d times; want the first and the keyless one", n)
	}
}

// An answer with the most code the daemon sends (256 KiB), every byte of it escaped by JSON (six
// bytes each), is kept: a retry is its replay and runs nothing.
func TestIdempotencyKeepsTheLargestCodeAnswer(t *testing.T) {
	a := newMoneyAPI(t)
	op := a.withFakeOp(t)
	first := a.post(t, fakeRoute, `{"mode":"escaped"}`, a.member, "k", "")
	if first.Code != 200 || first.Body.Len() < 6*256<<10 {
		t.Fatalf("first: %d, %d bytes", first.Code, first.Body.Len())
	}
	again := a.post(t, fakeRoute, `{"mode":"escaped"}`, a.member, "k", "")
	if again.Header().Get("Idempotent-Replayed") != "true" || again.Body.String() != first.Body.String() {
		t.Fatalf("retry: %d %v, %d bytes", again.Code, again.Header(), again.Body.Len())
	}
	if n := op.runs.Load(); n != 1 {
		t.Fatalf("the operation ran %d times", n)
	}
}

// FuzzIdempotencyKey: a header is taken only as one value of 1 to 255
// visible ASCII bytes, which is the key as sent; anything else is 400, and
// no header is no key.
func FuzzIdempotencyKey(f *testing.F) {
	for _, k := range []string{"k-1", "0190f7c2-5f1e-4b7a-9c1d-3e2f4a5b6c7d", "", " k", "k\x7f", "é", strings.Repeat("x", 256)} {
		f.Add(k, "other", uint8(1))
	}
	f.Add("k-1", "k-1", uint8(2))
	f.Add("", "", uint8(0))
	f.Fuzz(func(t *testing.T, first, second string, n uint8) {
		h := http.Header{}
		for _, v := range []string{first, second}[:n%3] {
			h.Add("Idempotency-Key", v)
		}
		key, err := idempotencyKey(h)
		visible := len(first) >= 1 && len(first) <= 255 && !strings.ContainsFunc(first, func(r rune) bool { return r < 0x21 || r > 0x7e })
		switch {
		case n%3 == 0:
			if key != "" || err != nil {
				t.Fatalf("no header: %q, %v", key, err)
			}
		case n%3 == 1 && visible:
			if key != first || err != nil {
				t.Fatalf("%q: %q, %v", first, key, err)
			}
		default:
			if key != "" || err == nil || errorStatus(err) != 400 {
				t.Fatalf("%q, %q: took %q, %v", first, second, key, err)
			}
		}
	})
}
