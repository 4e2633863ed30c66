package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/devforge"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// headerTransport adds the caller's headers to every MCP request, as an
// agent's HTTP client configured with its token would.
type headerTransport struct {
	hdr  map[string]string
	base http.RoundTripper
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.hdr {
		r.Header.Set(k, v)
	}
	return h.base.RoundTrip(r)
}

type mcpConn struct {
	session  *mcp.ClientSession
	changed  chan struct{}
	progress chan *mcp.ProgressNotificationParams
}

// mcpConnect opens an MCP session with the SDK's own client.
func mcpConnect(t *testing.T, query string, hdr map[string]string) *mcpConn {
	t.Helper()
	c := &mcpConn{changed: make(chan struct{}, 8), progress: make(chan *mcp.ProgressNotificationParams, 64)}
	client := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "v0"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case c.changed <- struct{}{}:
			default:
			}
		},
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			select {
			case c.progress <- r.Params:
			default:
			}
		},
	})
	tr := &mcp.StreamableClientTransport{
		Endpoint:   stack.ProxyURL + "/v1/lsp/mcp" + query,
		HTTPClient: &http.Client{Transport: headerTransport{hdr: hdr, base: http.DefaultTransport}},
		MaxRetries: -1,
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := client.Connect(ctx, tr, nil)
	if err != nil {
		t.Fatalf("connect %s: %v", query, err)
	}
	t.Cleanup(func() { s.Close() })
	c.session = s
	return c
}

func (tn *tenant) mcpHeaders(extra ...string) map[string]string {
	h := map[string]string{"Authorization": "Bearer " + tn.jwt, "X-Forge-Token": tn.forgeToken}
	for i := 0; i+1 < len(extra); i += 2 {
		h[extra[i]] = extra[i+1]
	}
	return h
}

func (c *mcpConn) tools(t *testing.T) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := c.session.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	slices.Sort(names)
	return names
}

// call runs a tool and returns its structured answer and whether it was
// a tool error.
func (c *mcpConn) call(t *testing.T, name string, args map[string]any, meta ...any) (map[string]any, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := &mcp.CallToolParams{Name: name, Arguments: args}
	if len(meta) > 0 {
		p.SetProgressToken(meta[0])
	}
	res, err := c.session.CallTool(ctx, p)
	if err != nil {
		t.Fatalf("call %s: %v", name, err)
	}
	// The text content is a rendering for models (or the JSON, for the
	// tools without one); the answer is the structured content.
	raw, _ := json.Marshal(res.StructuredContent)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("call %s: structured content is not an object: %s", name, raw)
	}
	return out, res.IsError
}

func errCode(m map[string]any) string {
	e, _ := m["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

var allTools = []string{"calls", "complete", "diagnostics", "hover", "locate", "prepare", "read", "signature", "symbols", "types"}

// TestMCP: an agent on the SDK's client gets the same answers, identity,
// gate and ledger rows as the REST routes.
func TestMCP(t *testing.T) {
	tn := newTenant(t, "mcp", 10)
	c := mcpConnect(t, "", tn.mcpHeaders())
	if got := c.tools(t); !slices.Equal(got, allTools) {
		t.Fatalf("unbound session tools = %v; want %v", got, allTools)
	}

	hover, isErr := c.call(t, "hover", with(helloPos, "repo", tn.repo))
	md, _ := hover["hover"].(map[string]any)["markdown"].(string)
	if isErr || hover["prepared"] != true || !strings.Contains(md, "func greet.Hello(name string) string") {
		t.Fatalf("hover: error=%v %v", isErr, hover)
	}
	t.Logf("tools/call hover → prepared=%v commit=%v markdown=%q", hover["prepared"], hover["commit"], md)
	loc, isErr := c.call(t, "locate", with(helloPos, "repo", tn.repo))
	if isErr || !strings.Contains(mustJSON(loc["locations"]), `"path":"greet/greet.go"`) {
		t.Fatalf("locate: error=%v %v", isErr, loc)
	}

	// Strict arguments, as strict as the REST body; a tool the server did
	// not negotiate is a tool error with the REST code.
	for _, tc := range []struct {
		name string
		tool string
		args map[string]any
		code string
	}{
		{"org in the arguments", "hover", with(helloPos, "repo", tn.repo, "org", "other"), "invalid_request"},
		{"negative line", "hover", with(helloPos, "repo", tn.repo, "line", -1), "invalid_request"},
		{"declaration from gopls", "locate", with(helloPos, "repo", tn.repo, "relation", "declaration"), "capability_unavailable"},
		{"unknown repository", "hover", with(helloPos, "repo", "nope"), "not_found"},
	} {
		out, isErr := c.call(t, tc.tool, tc.args)
		if !isErr || errCode(out) != tc.code {
			t.Errorf("%s: error=%v %v; want a tool error %s", tc.name, isErr, out, tc.code)
		}
	}

	// The rows: one −2¢ prepare, then a 0¢ query row per call that reached
	// the daemon (locate, and the refused declaration), all on this org.
	rs := rows(t, "mcp")
	p, q := filter(rs, "prepare"), filter(rs, "query")
	if len(p) != 1 || p[0].AmountCents != -2 || p[0].Subject != "alice@mcp" || len(q) != 2 {
		t.Fatalf("rows = %+v; want one −2¢ prepare by alice@mcp and two query rows", rs)
	}
	if q[1].HTTPStatus != 422 || q[1].Op != "locate" {
		t.Fatalf("the refused call's row = %+v; want status 422", q[1])
	}

	// The session belongs to its principal and org: another principal
	// presenting its id is refused, and so is the same principal for
	// another org.
	sid := c.session.ID()
	if sid == "" {
		t.Fatal("no session id")
	}
	other := newTenant(t, "mcp-other", 0)
	list := `{"jsonrpc":"2.0","id":9,"method":"tools/list","params":{}}`
	for _, tc := range []struct {
		name string
		hdr  map[string]string
	}{
		{"another principal", other.mcpHeaders("Mcp-Session-Id", sid)},
	} {
		if st, _, body := rawMCP(t, tc.hdr, list); st != http.StatusForbidden {
			t.Errorf("%s reusing the session: %d %s; want 403", tc.name, st, body)
		}
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// rawMCP posts one JSON-RPC message to the endpoint.
func rawMCP(t *testing.T, hdr map[string]string, msg string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, stack.ProxyURL+"/v1/lsp/mcp", strings.NewReader(msg))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// TestMCPPrepareFocus: the MCP prepare tool takes POST /prepare's
// optional path. On a revision with Go and TypeScript, a cold prepare
// about main.go waits for gopls alone and says it did not wait for the
// TypeScript server; a path out of the tree is the REST route's refusal,
// before anything is charged.
func TestMCPPrepareFocus(t *testing.T) {
	if typescript == "" {
		t.Skip("no TypeScript server: set LSP_TEST_TYPESCRIPT")
	}
	tn := newTenant(t, "mcp-focus", 4)
	commit, err := devforge.CreateRepo(stack.ForgeRoot, tn.org, "poly", map[string]string{
		"go.mod":   "module example.com/poly\n\ngo 1.22\n",
		"main.go":  "package main\n\nfunc main() {}\n",
		"index.ts": "export const answer: number = 42;\n",
	}, "poly")
	if err != nil {
		t.Fatal(err)
	}
	c := mcpConnect(t, "", tn.mcpHeaders())
	out, isErr := c.call(t, "prepare", map[string]any{"repo": "poly", "path": "../main.go"})
	if !isErr || errCode(out) != "invalid_request" {
		t.Fatalf("a path out of the tree: error=%v %v", isErr, out)
	}
	out, isErr = c.call(t, "prepare", map[string]any{"repo": "poly", "path": "main.go"})
	if isErr || out["prepared"] != true || out["commit"] != commit {
		t.Fatalf("prepare: error=%v %v", isErr, out)
	}
	const want = "typescript's first load was not awaited (this prepare waited for the server of main.go only)"
	if !strings.Contains(mustJSON(out["warnings"]), want) {
		t.Fatalf("prepare warnings %v lack %q", out["warnings"], want)
	}
	if p := filter(rows(t, tn.org), "prepare"); len(p) != 1 || p[0].AmountCents != -2 {
		t.Fatalf("prepare rows %+v; want one −2¢ row", p)
	}
}

// TestMCPSessionOrg: a principal in two orgs opens a session for one;
// the same token naming the other org cannot use it.
func TestMCPSessionOrg(t *testing.T) {
	home := newTenant(t, "mcp-home", 0)
	team := newTenant(t, "mcp-team", 10)
	tok, err := stack.Token("dave", home.org, []string{team.org}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := mcpConnect(t, "", map[string]string{"Authorization": "Bearer " + tok, "X-Forge-Token": team.forgeToken, "X-Org-Id": team.org})
	if out, isErr := c.call(t, "prepare", map[string]any{"repo": team.repo}); isErr || out["prepared"] != true {
		t.Fatalf("prepare as the team: %v", out)
	}
	if p := filter(rows(t, team.org), "prepare"); len(p) != 1 || p[0].Subject != "dave" {
		t.Fatalf("team rows = %+v; want dave's prepare", p)
	}
	if rs := rows(t, home.org); len(rs) != 0 {
		t.Fatalf("home rows = %+v; want none", rs)
	}
	msg := `{"jsonrpc":"2.0","id":9,"method":"tools/list","params":{}}`
	st, _, body := rawMCP(t, map[string]string{"Authorization": "Bearer " + tok, "X-Org-Id": home.org, "Mcp-Session-Id": c.session.ID()}, msg)
	if st != http.StatusForbidden {
		t.Fatalf("the session used for another org: %d %s; want 403", st, body)
	}
}

// TestMCPRefusals: 401 names the protected-resource metadata; a foreign
// browser Origin is refused.
func TestMCPRefusals(t *testing.T) {
	tn := newTenant(t, "mcp-refuse", 0)
	msg := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"0"}}}`
	st, hdr, body := rawMCP(t, nil, msg)
	wa := hdr.Get("WWW-Authenticate")
	if st != http.StatusUnauthorized || !strings.Contains(wa, `resource_metadata="`+stack.ProxyURL+`/.well-known/oauth-protected-resource/v1/lsp/mcp"`) {
		t.Fatalf("no token: %d %q %s", st, wa, body)
	}
	if !strings.Contains(body, `"unauthenticated"`) {
		t.Fatalf("no token: body %s; want the error envelope", body)
	}
	resp, err := http.Get(stack.ProxyURL + "/.well-known/oauth-protected-resource/v1/lsp/mcp")
	if err != nil {
		t.Fatal(err)
	}
	var meta map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&meta)
	resp.Body.Close()
	if meta["resource"] != stack.ProxyURL+"/v1/lsp/mcp" {
		t.Fatalf("metadata = %v", meta)
	}
	st, _, body = rawMCP(t, tn.mcpHeaders("Origin", "https://evil.example"), msg)
	if st != http.StatusForbidden || !strings.Contains(body, `"forbidden"`) {
		t.Fatalf("foreign Origin: %d %s; want 403", st, body)
	}
	st, _, body = rawMCP(t, tn.mcpHeaders("X-Org-Id", "acme"), msg)
	if st != http.StatusForbidden {
		t.Fatalf("foreign org: %d %s; want 403", st, body)
	}
}

// TestMCPBoundSession: a session bound to a cold revision lists prepare
// alone, gains the negotiated tools (with tools/list_changed) once it
// prepared, and its tools take no repo or rev.
func TestMCPBoundSession(t *testing.T) {
	tn := newTenant(t, "mcp-bound", 10)
	c := mcpConnect(t, "?repo="+tn.repo+"&rev=main", tn.mcpHeaders())
	if got := c.tools(t); !slices.Equal(got, []string{"prepare"}) {
		t.Fatalf("cold bound session tools = %v; want prepare alone", got)
	}
	out, isErr := c.call(t, "prepare", map[string]any{})
	if isErr || out["prepared"] != true || out["commit"] != tn.commit {
		t.Fatalf("prepare: %v", out)
	}
	select {
	case <-c.changed:
	case <-time.After(30 * time.Second):
		t.Fatal("no tools/list_changed after the prepare")
	}
	if got := c.tools(t); !slices.Equal(got, allTools) {
		t.Fatalf("tools after the prepare = %v; want %v (gopls negotiates them all)", got, allTools)
	}
	hover, isErr := c.call(t, "hover", helloPos)
	if isErr || hover["commit"] != tn.commit || hover["prepared"] != false {
		t.Fatalf("bound hover: %v", hover)
	}
	if out, isErr := c.call(t, "hover", with(helloPos, "repo", tn.repo)); !isErr || errCode(out) != "invalid_request" {
		t.Fatalf("bound hover with repo: %v; want invalid_request", out)
	}

	// A new session bound to the now warm revision lists its tools at once.
	warm := mcpConnect(t, "?repo="+tn.repo, tn.mcpHeaders())
	if got := warm.tools(t); !slices.Equal(got, allTools) {
		t.Fatalf("warm bound session tools = %v", got)
	}
	if st, _, body := rawMCPQuery(t, "?repo=nope", tn.mcpHeaders()); st != http.StatusNotFound {
		t.Fatalf("binding to an unknown repository: %d %s; want 404", st, body)
	}
}

func rawMCPQuery(t *testing.T, query string, hdr map[string]string) (int, http.Header, string) {
	t.Helper()
	msg := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"0"}}}`
	req, _ := http.NewRequest(http.MethodPost, stack.ProxyURL+"/v1/lsp/mcp"+query, strings.NewReader(msg))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}
