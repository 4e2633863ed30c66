package httpapi

import (
	"net/http"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/hanzoai/lsp/proxy/internal/apierr"
)

// wrongMethodRoute names the routes answerWrongMethods adds, so that Routes
// (and the OpenAPI drift test) leaves them out.
const wrongMethodRoute = "lsp.wrong-method"

// answerWrongMethods makes a known path called with another method answer
// 405 with an Allow header instead of 404. Echo would say 405 itself, but
// the catch-all a group with middleware registers wins over it, so every
// path gets explicit handlers for the methods it does not take. They sit
// outside the group: saying which methods a public path takes needs no
// token.
func (s *Server) answerWrongMethods() {
	takes := map[string][]string{}
	for _, r := range s.e.Routes() {
		if r.Method != echo.RouteNotFound {
			takes[r.Path] = append(takes[r.Path], r.Method)
		}
	}
	for path, methods := range takes {
		slices.Sort(methods)
		allow := strings.Join(methods, ", ")
		h := func(c echo.Context) error {
			c.Response().Header().Set("Allow", allow)
			return apierr.New(http.StatusMethodNotAllowed, apierr.InvalidRequest, "%s takes %s", path, allow)
		}
		for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
			// HEAD where GET is taken is echo's to answer (404): it
			// has no automatic HEAD, and saying 405 would be wrong.
			if !slices.Contains(methods, m) && (m != http.MethodHead || !slices.Contains(methods, http.MethodGet)) {
				s.e.Add(m, path, h).Name = wrongMethodRoute
			}
		}
	}
}
