package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/auth"
)

// tokenIsPrincipal verifies any token "sub.owner" as that principal.
type tokenIsPrincipal struct{}

func (tokenIsPrincipal) Verify(_ context.Context, raw string) (*auth.Principal, error) {
	sub, owner, ok := strings.Cut(raw, ".")
	if !ok {
		return nil, errors.New("bad token")
	}
	return &auth.Principal{Subject: sub, Owner: owner}, nil
}

const mcpInit = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"0"}}}`

// openMCP sends an initialize without a session id; it returns the status,
// the session id and Retry-After.
func openMCP(t *testing.T, url, token string) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/lsp/mcp", strings.NewReader(mcpInit))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Mcp-Session-Id"), resp.Header.Get("Retry-After")
}

func closeMCP(t *testing.T, url, token, id string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodDelete, url+"/v1/lsp/mcp", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Mcp-Session-Id", id)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("DELETE session: %d", resp.StatusCode)
	}
}

func mcpTestServer(t *testing.T, l MCPLimits) (*Server, string) {
	t.Helper()
	s := New(Deps{Verifier: tokenIsPrincipal{}, Log: slog.New(slog.DiscardHandler), MCP: l})
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() { srv.Close(); http.DefaultClient.CloseIdleConnections() })
	return s, srv.URL
}

func waitLive(t *testing.T, s *Server, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for s.mcpSessions.live() != want {
		if time.Now().After(deadline) {
			t.Fatalf("%d live sessions; want %d", s.mcpSessions.live(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestMCPSessionBounds: a principal holds at most PerPrincipal sessions
// (then 429 with Retry-After), the proxy at most Total (then 503 with
// Retry-After); a closed session frees its slot, and so does one that
// idles out.
func TestMCPSessionBounds(t *testing.T) {
	s, url := mcpTestServer(t, MCPLimits{PerPrincipal: 3, Total: 5, Rate: 1000, Burst: 1000, Idle: time.Hour})
	var ids []string
	for i := range 3 {
		st, id, _ := openMCP(t, url, "alice.acme")
		if st != http.StatusOK || id == "" {
			t.Fatalf("session %d: %d %q", i, st, id)
		}
		ids = append(ids, id)
	}
	st, _, retry := openMCP(t, url, "alice.acme")
	if st != http.StatusTooManyRequests || retry == "" {
		t.Fatalf("a fourth session of one principal: %d Retry-After %q; want 429 with Retry-After", st, retry)
	}
	// Another principal is not affected, until the proxy's total.
	for range 2 {
		if st, _, _ := openMCP(t, url, "bob.acme"); st != http.StatusOK {
			t.Fatalf("another principal: %d", st)
		}
	}
	st, _, retry = openMCP(t, url, "carol.acme")
	if st != http.StatusServiceUnavailable || retry == "" {
		t.Fatalf("past the total: %d Retry-After %q; want 503 with Retry-After", st, retry)
	}
	closeMCP(t, url, "alice.acme", ids[0])
	waitLive(t, s, 4)
	if st, _, _ := openMCP(t, url, "alice.acme"); st != http.StatusOK {
		t.Fatalf("after a DELETE the slot is free: %d", st)
	}
}

// TestMCPSessionIdleFreesSlot: an idle session is closed and its slot
// freed; goroutines return to their baseline.
func TestMCPSessionIdleFreesSlot(t *testing.T) {
	base := runtime.NumGoroutine()
	s, url := mcpTestServer(t, MCPLimits{PerPrincipal: 2, Total: 10, Rate: 1000, Burst: 1000, Idle: 200 * time.Millisecond})
	for range 2 {
		if st, _, _ := openMCP(t, url, "alice.acme"); st != http.StatusOK {
			t.Fatalf("open: %d", st)
		}
	}
	if st, _, _ := openMCP(t, url, "alice.acme"); st != http.StatusTooManyRequests {
		t.Fatalf("third: %d", st)
	}
	waitLive(t, s, 0)
	if st, _, _ := openMCP(t, url, "alice.acme"); st != http.StatusOK {
		t.Fatalf("after the idle timeout: %d", st)
	}
	waitLive(t, s, 0)
	http.DefaultClient.CloseIdleConnections()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base+8 { // the test server's own
		if time.Now().After(deadline) {
			t.Fatalf("goroutines %d, baseline %d", runtime.NumGoroutine(), base)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMCPSessionCreationRate: with the default limits, a flood of new
// sessions from one token gets its burst and then 429 with Retry-After;
// the reproduction opened 3,000 sessions in 2 s.
func TestMCPSessionCreationRate(t *testing.T) {
	s, url := mcpTestServer(t, MCPLimits{})
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	g0 := runtime.NumGoroutine()
	ok, limited := 0, 0
	start := time.Now()
	for range 300 {
		st, _, retry := openMCP(t, url, "mallory.acme")
		switch {
		case st == http.StatusOK:
			ok++
		case st == http.StatusTooManyRequests && retry != "":
			limited++
		default:
			t.Fatalf("unexpected answer %d (Retry-After %q)", st, retry)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	t.Logf("300 initializes in %v: %d sessions, %d refused (429); live %d, goroutines +%d, heap +%d KiB",
		time.Since(start).Round(time.Millisecond), ok, limited, s.mcpSessions.live(), runtime.NumGoroutine()-g0, (int64(m1.HeapAlloc)-int64(m0.HeapAlloc))/1024)
	if d := DefaultMCPLimits(); ok > d.Burst+int(time.Since(start).Seconds()*d.Rate)+1 {
		t.Fatalf("%d sessions opened; the creation rate allows %d + %v/s", ok, d.Burst, d.Rate)
	}
}

// TestMCPSessionOrgBound: both bounds hold at once. A principal holds at
// most PerPrincipal sessions, and an org at most PerOrg whoever opened
// them — many principals of one org (agents, a token per job) cannot hold
// more between them — each refused with 429 rate_limited and Retry-After;
// another org is not affected, and a closed session frees the org's slot.
func TestMCPSessionOrgBound(t *testing.T) {
	s, url := mcpTestServer(t, MCPLimits{PerPrincipal: 2, PerOrg: 3, Total: 100, Rate: 1000, Burst: 1000, Idle: time.Hour})
	refused := func(tok, why string) {
		t.Helper()
		st, _, retry := openMCP(t, url, tok)
		if st != http.StatusTooManyRequests || retry == "" {
			t.Fatalf("%s: %d Retry-After %q; want 429 with Retry-After", why, st, retry)
		}
	}
	var alice []string
	for i := range 2 {
		st, id, _ := openMCP(t, url, "alice.acme")
		if st != http.StatusOK || id == "" {
			t.Fatalf("alice's session %d: %d", i, st)
		}
		alice = append(alice, id)
	}
	refused("alice.acme", "past the principal's bound")
	if st, _, _ := openMCP(t, url, "bob.acme"); st != http.StatusOK {
		t.Fatalf("bob's first session: %d", st)
	}
	refused("bob.acme", "bob under his own bound, acme at its bound")
	refused("carol.acme", "a third principal of acme")
	for i := range 2 {
		if st, _, _ := openMCP(t, url, "dave.other"); st != http.StatusOK {
			t.Fatalf("another org's session %d: %d", i, st)
		}
	}
	closeMCP(t, url, "alice.acme", alice[0])
	waitLive(t, s, 4)
	if st, _, _ := openMCP(t, url, "carol.acme"); st != http.StatusOK {
		t.Fatalf("after a DELETE the org's slot is free: %d", st)
	}
	refused("bob.acme", "acme at its bound again")
}

// TestMCPSDKErrorsInTheEnvelope: what the MCP SDK refuses itself — an
// unknown session, an Accept without event streams —
// answers with the contract's error envelope and status, not the SDK's
// plain text; a good answer passes untouched.
func TestMCPSDKErrorsInTheEnvelope(t *testing.T) {
	_, url := mcpTestServer(t, MCPLimits{})
	status, id, _ := openMCP(t, url, "alice.acme")
	if status != http.StatusOK || id == "" {
		t.Fatalf("initialize: %d, session %q", status, id)
	}
	for _, tc := range []struct {
		name, session, accept, body string
		status                      int
		code                        string
	}{
		{"unknown session", "no-such-session", "application/json, text/event-stream", `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`, http.StatusNotFound, "not_found"},
		{"accept", id, "text/html", `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`, http.StatusBadRequest, "invalid_request"},
	} {
		req, _ := http.NewRequest(http.MethodPost, url+"/v1/lsp/mcp", strings.NewReader(tc.body))
		req.Header.Set("Authorization", "Bearer alice.acme")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", tc.accept)
		req.Header.Set("Mcp-Session-Id", tc.session)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var env errorBody
		derr := json.NewDecoder(resp.Body).Decode(&env)
		resp.Body.Close()
		if resp.StatusCode != tc.status || derr != nil || env.Error.Code != tc.code || env.Error.Message == "" ||
			!strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			t.Errorf("%s: %d %s %+v (%v); want %d with the envelope's %s", tc.name, resp.StatusCode, resp.Header.Get("Content-Type"), env, derr, tc.status, tc.code)
		}
	}
	closeMCP(t, url, "alice.acme", id)
}
