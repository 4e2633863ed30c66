package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/apierr"
	"github.com/hanzoai/lsp/proxy/internal/operation"
	"github.com/labstack/echo/v4"
)

func errorStatus(err error) int { return apierr.From(err).Status }

func withRetry(e *apierr.Error, d time.Duration) *apierr.Error {
	e.RetryAfter = d
	return e
}

// TestErrorEnvelope renders errors through the Server's error handler, as
// every failed request is.
func TestErrorEnvelope(t *testing.T) {
	a := newTestAPI(t)
	const secretPath = "/srv/lsp/trees/0123abcd/secret-repo/main.go"
	charged := &operation.Result{Repo: "r", Commit: cursorCommit, Prepared: true}
	resolved := &operation.Result{Repo: "r", Commit: cursorCommit}
	cases := []struct {
		name     string
		err      error
		status   int
		code     string
		message  string // exact; "" to skip
		retry    string // Retry-After; "" means absent
		repo     string
		commit   string
		prepared *bool
	}{
		{"429 with its wait", withRetry(apierr.New(429, apierr.RateLimited, "slow down"), 1500*time.Millisecond), 429, "rate_limited", "slow down", "2", "", "", nil},
		{"429 without a wait", apierr.New(429, apierr.RateLimited, "slow down"), 429, "rate_limited", "", "2", "", "", nil},
		{"503 daemon with its wait", withRetry(apierr.New(503, apierr.DaemonUnavailable, "the daemon is unavailable"), 5*time.Second), 503, "daemon_unavailable", "", "5", "", "", nil},
		{"503 capacity without a wait", apierr.New(503, apierr.CapacityExhausted, "the daemon could not keep the workspace"), 503, "capacity_exhausted", "", "2", "", "", nil},
		{"503 ledger wrapped", fmt.Errorf("gate: %w", withRetry(apierr.Wrap(errors.New("dial tcp 10.0.0.1:5432: refused"), 503, apierr.LedgerUnavailable, "the ledger is unavailable"), time.Second)), 503, "ledger_unavailable", "the ledger is unavailable", "1", "", "", nil},
		{"400 carries no Retry-After", apierr.BadRequest("bad"), 400, "invalid_request", "bad", "", "", "", nil},
		{"422 after a charged prepare", &failure{err: apierr.New(422, apierr.PositionOutOfRange, "the position is past the end of the file"), res: charged}, 422, "position_out_of_range", "", "", "r", cursorCommit, ptr(true)},
		{"404 after resolve, not charged", &failure{err: apierr.New(404, apierr.NotFound, "no such file"), res: resolved}, 404, "not_found", "", "", "r", cursorCommit, ptr(false)},
		{"503 after a charged prepare", &failure{err: apierr.New(503, apierr.DaemonUnavailable, "the daemon is unavailable"), res: charged}, 503, "daemon_unavailable", "", "2", "r", cursorCommit, ptr(true)},
		{"failure before resolve", &failure{err: apierr.New(502, apierr.ForgeUnavailable, "the forge is unavailable"), res: &operation.Result{Repo: "r"}}, 502, "forge_unavailable", "", "", "r", "", nil},
		{"failure without result", &failure{err: apierr.New(402, apierr.InsufficientFunds, "insufficient funds")}, 402, "insufficient_funds", "", "", "", "", nil},
		{"internal error text stays inside", errors.New("open " + secretPath + ": permission denied"), 500, "internal", "internal error", "", "", "", nil},
		{"internal error after a charge", &failure{err: fmt.Errorf("push %s: %w", secretPath, errors.New("broken pipe")), res: charged}, 500, "internal", "internal error", "", "r", cursorCommit, ptr(true)},
		{"wrapped internal apierr", apierr.Wrap(errors.New("panic in "+secretPath), 500, apierr.Internal, "internal error"), 500, "internal", "internal error", "", "", "", nil},
		{"deadline", fmt.Errorf("query %s: %w", secretPath, context.DeadlineExceeded), 504, "timeout", "the request ran out of time", "", "", "", nil},
		{"client went away", fmt.Errorf("query: %w", context.Canceled), 504, "timeout", "", "", "", "", nil},
		{"echo not found", echo.ErrNotFound, 404, "not_found", "Not Found", "", "", "", nil},
		{"echo method not allowed", echo.ErrMethodNotAllowed, 405, "invalid_request", "Method Not Allowed", "", "", "", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			ctx := a.s.e.NewContext(httptest.NewRequest(http.MethodPost, "/v1/lsp/hover", nil), rec)
			ctx.Set(ctxRequestID, "req-1")
			a.s.handleError(c.err, ctx)
			if rec.Code != c.status {
				t.Fatalf("status %d, want %d", rec.Code, c.status)
			}
			if got := rec.Header().Get("Retry-After"); got != c.retry {
				t.Fatalf("Retry-After %q, want %q", got, c.retry)
			}
			e := errorOf(t, rec)
			if e.Code != c.code {
				t.Fatalf("code %q, want %q", e.Code, c.code)
			}
			if c.message != "" && e.Message != c.message {
				t.Fatalf("message %q, want %q", e.Message, c.message)
			}
			if strings.Contains(rec.Body.String(), secretPath) || strings.Contains(rec.Body.String(), "10.0.0.1") {
				t.Fatalf("the answer leaks the cause: %s", rec.Body)
			}
			var raw struct {
				Error map[string]json.RawMessage `json:"error"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &raw); err != nil {
				t.Fatal(err)
			}
			checkField(t, raw.Error, "repo", c.repo != "", fmt.Sprintf("%q", c.repo))
			checkField(t, raw.Error, "commit", c.commit != "", fmt.Sprintf("%q", c.commit))
			if c.prepared != nil {
				checkField(t, raw.Error, "prepared", true, fmt.Sprint(*c.prepared))
			} else {
				checkField(t, raw.Error, "prepared", false, "")
			}
		})
	}
}

func checkField(t *testing.T, m map[string]json.RawMessage, name string, present bool, want string) {
	t.Helper()
	got, ok := m[name]
	switch {
	case ok != present:
		t.Fatalf("field %q present=%v, want %v", name, ok, present)
	case present && string(got) != want:
		t.Fatalf("field %q = %s, want %s", name, got, want)
	}
}

// TestErrorAfterCommit: nothing is written over an answer already sent.
func TestErrorAfterCommit(t *testing.T) {
	a := newTestAPI(t)
	rec := httptest.NewRecorder()
	ctx := a.s.e.NewContext(httptest.NewRequest(http.MethodGet, "/", nil), rec)
	if err := ctx.String(http.StatusOK, "done"); err != nil {
		t.Fatal(err)
	}
	a.s.handleError(apierr.New(503, apierr.DaemonUnavailable, "x"), ctx)
	if rec.Code != 200 || rec.Body.String() != "done" || rec.Header().Get("Retry-After") != "" {
		t.Fatalf("a committed answer was changed: %d %q", rec.Code, rec.Body)
	}
}

// TestWrongMethod goes through the router: a known path with another
// method is 405 in the envelope with an Allow header, before any token is
// looked at; an unknown path stays 404.
func TestWrongMethod(t *testing.T) {
	a := newTestAPI(t)
	for _, tc := range []struct {
		method, path, allow string
	}{
		{http.MethodGet, "/v1/lsp/hover", "POST"},
		{http.MethodDelete, "/v1/lsp/prepare", "POST"},
		{http.MethodPost, "/healthz", "GET"},
	} {
		rec := a.do(t, tc.method, tc.path, "", nil)
		e := errorOf(t, rec)
		if rec.Code != http.StatusMethodNotAllowed || e.Code != apierr.InvalidRequest || rec.Header().Get("Allow") != tc.allow {
			t.Errorf("%s %s: status %d code %q Allow %q", tc.method, tc.path, rec.Code, e.Code, rec.Header().Get("Allow"))
		}
	}
	rec := a.do(t, http.MethodGet, "/v1/lsp/no-such-tool", "", a.headers(a.token, "", true))
	if e := errorOf(t, rec); rec.Code != http.StatusNotFound || e.Code != apierr.NotFound {
		t.Errorf("unknown path: status %d code %q", rec.Code, e.Code)
	}
}
