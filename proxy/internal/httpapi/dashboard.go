package httpapi

import (
	"embed"
	"net/http"

	"github.com/labstack/echo/v4"
)

// The usage dashboard: GET /v1/lsp/dashboard is a small page for the people
// who pay, with no build step and no external asset. The page itself holds
// no data and needs no token; its script reads the same billing endpoints
// any client reads (/balance, /usage, /ledger), with the bearer token the
// person gives it (the URL fragment #token=… — never sent to the server —
// or the form), so it can show exactly what the API shows and nothing
// else.

//go:embed dashboard/index.html dashboard/app.js dashboard/app.css
var dashboardFS embed.FS

// dashboardCSP allows the page only its own script, style and API.
const dashboardCSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

func (s *Server) registerDashboard(e *echo.Echo) {
	for _, f := range []struct{ path, file, ctype string }{
		{"/v1/lsp/dashboard", "dashboard/index.html", "text/html; charset=utf-8"},
		{"/v1/lsp/dashboard/app.js", "dashboard/app.js", "text/javascript; charset=utf-8"},
		{"/v1/lsp/dashboard/app.css", "dashboard/app.css", "text/css; charset=utf-8"},
	} {
		data, err := dashboardFS.ReadFile(f.file)
		if err != nil {
			panic(err) // embedded: present at build time
		}
		e.GET(f.path, func(c echo.Context) error {
			h := c.Response().Header()
			h.Set("Content-Security-Policy", dashboardCSP)
			h.Set("X-Content-Type-Options", "nosniff")
			h.Set("Referrer-Policy", "no-referrer")
			h.Set("Cache-Control", "no-cache")
			return c.Blob(http.StatusOK, f.ctype, data)
		})
	}
}
