package httpapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/hanzoai/lsp/proxy/internal/auth"
	"github.com/hanzoai/lsp/proxy/internal/forge"
	"github.com/labstack/echo/v4"
)

// FuzzWorkspaceQuery: the query strings of GET /capabilities, DELETE
// /workspaces (workspaceQuery) and of an MCP session (mcpBind) never panic
// them. What workspaceQuery accepts is a repo slug and a revision ParseRev
// takes, from one repo and at most one rev, without a body; mcpBind reads
// the query as strictly (the body aside), and binds to the same.
func FuzzWorkspaceQuery(f *testing.F) {
	for _, q := range []string{"", "repo=r", "repo=hello&rev=main", "repo=r&rev=" + strings.Repeat("a", 40), "rev=main",
		"repo=r&repo=s", "repo=..", "repo=%2e%2e", "repo=r&x=1", "repo=r;rev=v", "repo=r&rev=refs/heads/a..b", "repo=a%zz", "repo=r&rev="} {
		f.Add(q, "")
	}
	f.Add("repo=r", "{}")
	s := New(Deps{})
	// The principal is not a member of the org the request selects: a
	// binding whose query is accepted stops at 403, before any forge.
	p := &auth.Principal{Subject: "agent-1", Owner: testOwner}
	h := http.Header{"X-Org-Id": {foreignOrg}}
	f.Fuzz(func(t *testing.T, rawQuery, reqBody string) {
		req := httptest.NewRequest(http.MethodGet, "/v1/lsp/capabilities", strings.NewReader(reqBody))
		req.URL.RawQuery = rawQuery
		repo, rev, err := workspaceQuery(echo.New().NewContext(req, httptest.NewRecorder()))
		if err != nil {
			if errorStatus(err) != 400 {
				t.Fatalf("refused with %v", err)
			}
		} else {
			vals, perr := url.ParseQuery(rawQuery)
			if reqBody != "" || perr != nil || len(rawQuery) > MaxBody || len(vals["repo"]) != 1 || len(vals["rev"]) > 1 || len(vals) > 2 {
				t.Fatalf("accepted query %q with body %q", rawQuery, reqBody)
			}
			if _, err := checkRepo(&repo); err != nil || repo != vals.Get("repo") {
				t.Fatalf("accepted repo %q", repo)
			}
			if again, err := forge.ParseRev(rev.String()); err != nil || again != rev {
				t.Fatalf("accepted rev %q as %q, which does not parse back", vals.Get("rev"), rev.String())
			}
		}

		req = httptest.NewRequest(http.MethodPost, "/v1/lsp/mcp", nil)
		req.URL.RawQuery, req.Header = rawQuery, h
		b, berr := s.mcpBind(context.Background(), req, p, "req-1")
		q := req.URL.Query()
		switch {
		case berr == nil:
			if b != nil || q.Has("repo") || q.Has("rev") {
				t.Fatalf("%q: bound %+v without the caller's check", rawQuery, b)
			}
		case errorStatus(berr) == 403: // accepted, then refused for the org
			if err != nil && reqBody == "" {
				t.Fatalf("%q: mcpBind accepted what workspaceQuery refuses (%v)", rawQuery, err)
			}
			name, _, err := commonRequest(&body{Repo: ptr(q.Get("repo")), Rev: ptr(q.Get("rev"))})
			if err != nil || name != q.Get("repo") {
				t.Fatalf("%q: mcpBind accepted repo %q, rev %q", rawQuery, q.Get("repo"), q.Get("rev"))
			}
			for k := range q {
				if k != "repo" && k != "rev" {
					t.Fatalf("%q: mcpBind accepted parameter %q", rawQuery, k)
				}
			}
		case errorStatus(berr) != 400:
			t.Fatalf("%q: mcpBind refused with %v", rawQuery, berr)
		default:
			if err == nil {
				t.Fatalf("%q: workspaceQuery accepted what mcpBind refuses: %v", rawQuery, berr)
			}
		}
	})
}
