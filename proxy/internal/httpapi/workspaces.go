package httpapi

import (
	"io"
	"net/http"
	"net/url"

	"github.com/hanzoai/lsp/proxy/internal/apierr"
	"github.com/hanzoai/lsp/proxy/internal/forge"
	"github.com/hanzoai/lsp/proxy/internal/operation"
	"github.com/labstack/echo/v4"
)

// The workspace routes: the free probe and the tenant's own deletion. Both
// take repo and rev as query parameters (strictly: an unknown or repeated
// parameter, or a body, is 400), resolve the revision as the caller like
// every route (the forge's ACL decides, 404 otherwise), charge nothing and
// write no ledger row.

func (s *Server) registerWorkspaces(g *echo.Group) {
	g.GET("/capabilities", s.capabilities)
	g.DELETE("/workspaces", s.deleteWorkspace)
}

var workspaceParams = fieldSet("repo", "rev")

// workspaceQuery checks the query string and the absence of a body.
func workspaceQuery(c echo.Context) (string, forge.Rev, error) {
	r := c.Request()
	if r.ContentLength > 0 {
		return "", forge.Rev{}, apierr.BadRequest("this route takes no body")
	}
	if r.Body != nil {
		if n, _ := io.ReadFull(r.Body, make([]byte, 1)); n > 0 {
			return "", forge.Rev{}, apierr.BadRequest("this route takes no body")
		}
	}
	b, err := parseWorkspaceQuery(r.URL.RawQuery)
	if err != nil {
		return "", forge.Rev{}, err
	}
	return commonRequest(b)
}

// parseWorkspaceQuery reads repo and rev from a query string, strictly: an
// unknown or repeated parameter, or one that does not parse, is 400. The
// workspace routes and the MCP door's binding read it alike.
func parseWorkspaceQuery(raw string) (*body, error) {
	if len(raw) > MaxBody {
		return nil, apierr.BadRequest("the query string is too long")
	}
	q, err := url.ParseQuery(raw)
	if err != nil {
		return nil, apierr.BadRequest("the query string does not parse")
	}
	b := &body{}
	for name, vs := range q {
		if !workspaceParams[name] {
			return nil, apierr.BadRequest("unknown query parameter %q", truncate(name, 64))
		}
		if len(vs) != 1 {
			return nil, apierr.BadRequest("query parameter %q is repeated", name)
		}
		v := vs[0]
		switch name {
		case "repo":
			b.Repo = &v
		case "rev":
			b.Rev = &v
		}
	}
	return b, nil
}

// capabilities is GET /capabilities?repo=&rev=: per language, the server,
// its tools, and whether this revision is warm on its shard — what a call
// would cost before making it.
func (s *Server) capabilities(c echo.Context) error {
	repo, rev, err := workspaceQuery(c)
	if err != nil {
		return err
	}
	caller, err := s.caller(c)
	if err != nil {
		return err
	}
	// Bounded like any operation: the forge's proof of an older sha and
	// the daemon's answer nest inside it.
	ctx, cancel := s.withRequestTimeout(c.Request().Context())
	defer cancel()
	p, err := s.d.Ops.Capabilities(ctx, caller, repo, rev)
	if err != nil {
		return &failure{err: err, res: &operation.Result{Repo: p.Repo, Commit: p.Commit}}
	}
	langs := []map[string]any{}
	for _, l := range p.Languages {
		langs = append(langs, map[string]any{
			"language":               l.GetLanguage(),
			"server":                 serverJSON(l.GetServer()),
			"tools":                  nonNil(l.GetTools()),
			"capability_fingerprint": l.GetCapabilityFingerprint(),
			"warm":                   p.Warm,
			"warnings":               nonNil(l.GetWarnings()),
		})
	}
	return c.JSON(http.StatusOK, map[string]any{
		"repo":      p.Repo,
		"commit":    p.Commit,
		"warm":      p.Warm,
		"languages": langs,
	})
}

// deleteWorkspace is DELETE /workspaces?repo=&rev=: the tenant's workspace
// of that revision is deleted now; the next operation on it prepares again
// (free within the re-prepare grace).
func (s *Server) deleteWorkspace(c echo.Context) error {
	repo, rev, err := workspaceQuery(c)
	if err != nil {
		return err
	}
	caller, err := s.caller(c)
	if err != nil {
		return err
	}
	ctx, cancel := s.withRequestTimeout(c.Request().Context())
	defer cancel()
	d, err := s.d.Ops.DeleteWorkspace(ctx, caller, repo, rev)
	if err != nil {
		return &failure{err: err, res: &operation.Result{Repo: d.Repo, Commit: d.Commit}}
	}
	return c.JSON(http.StatusOK, map[string]any{"repo": d.Repo, "commit": d.Commit, "deleted": d.Deleted})
}
