// Package httpapi is the proxy's public face: the echo routes under /v1/lsp
// (CONTRACT §4), their strict bodies, identity and org selection, and the
// rendering of answers and errors. The order of checks is the contract's:
// 401 → 400 → 403 → 429 → forge → daemon → gate → fetch → push → answer;
// everything from "forge" on lives in package operation.
package httpapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/apierr"
	"github.com/hanzoai/lsp/proxy/internal/auth"
	"github.com/hanzoai/lsp/proxy/internal/operation"
	"github.com/hanzoai/lsp/proxy/internal/ratelimit"
	"github.com/labstack/echo/v4"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Verifier checks bearer tokens.
type Verifier interface {
	Verify(ctx context.Context, raw string) (*auth.Principal, error)
}

// Pinger reports whether a dependency is reachable, for /readyz.
type Pinger interface {
	Ping(ctx context.Context) error
}

// Deps are the parts the API is built from.
type Deps struct {
	Verifier        Verifier
	Ops             *operation.Service
	TenantKeySecret []byte
	CursorSecret    []byte
	ForgeAuth       string // bearer | basic | sudo | jwt
	RequestTimeout  time.Duration
	// PrepareTimeout is a push's own deadline (LSP_PREPARE_TIMEOUT); a
	// prepare request waits that long for it (runPrepare).
	PrepareTimeout time.Duration
	Ready          []Pinger
	Registry       *prometheus.Registry
	Log            *slog.Logger
	// Money holds Idempotency-Key records and serves the dashboard routes.
	Money Money
	// LedgerSettle: GET /ledger lists rows once they are this old (LSP_LEDGER_SETTLE), so that paging
	// on the id never skips a usage row that committed late. Zero lists every committed row.
	LedgerSettle time.Duration
	// IdempotencyLease is how long an attempt may hold an Idempotency-Key without an answer
	// before a retry may take it over (its proxy died); at least a hold's lifetime.
	IdempotencyLease time.Duration
	// IdempotencyMaxBytes bounds the bytes of stored answers one org's keys hold (0: no bound):
	// past it a new key is 429 until some expire.
	IdempotencyMaxBytes int64
	// ForgeSudoToken is the proxy's admin token (ForgeAuth sudo).
	ForgeSudoToken string
	// ForgeJWTAudience is the aud a JWT must name to be forwarded to the
	// forge (ForgeAuth jwt).
	ForgeJWTAudience string
	// RateLimit is the per-org request limit; nil means none.
	RateLimit *ratelimit.Limiter
	// MaxInFlightPerOrg bounds one org's operation requests in flight
	// (inflight.go); 0 means none.
	MaxInFlightPerOrg int
	// Issuer is the authorization server MCP clients are pointed to
	// (LSP_JWT_ISSUER), in the protected-resource metadata.
	Issuer string
	// MCPAllowedOrigins are the browser origins allowed on /v1/lsp/mcp.
	MCPAllowedOrigins []string
	// PublicURL is scheme://host clients use; empty: the request's Host.
	PublicURL string
	// MCP bounds the MCP sessions (mcpsessions.go); zero fields take
	// DefaultMCPLimits.
	MCP MCPLimits
	// MetricsApart: /metrics is served on its own listener
	// (LSP_METRICS_LISTEN), not here.
	MetricsApart bool
}

// Server is the HTTP API.
type Server struct {
	d       Deps
	e       *echo.Echo
	metrics *metrics

	mcpSessions *mcpSessions
	inflight    *orgSlots // one org's operation requests in flight

	mcpVersionsOnce sync.Once
	mcpVersions     *mcp.Server // answers the SDK's protocol-version question (mcp.go)
}

// New builds the routes.
func New(d Deps) *Server {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	if d.Verifier != nil {
		d.Verifier = newTokenCache(d.Verifier) // tokencache.go
	}
	s := &Server{d: d, e: e, metrics: newMetrics(d.Registry), mcpSessions: newMCPSessions(d.MCP), inflight: newOrgSlots(d.MaxInFlightPerOrg)}
	e.HTTPErrorHandler = s.handleError
	e.Use(s.requestID, s.observe)

	e.GET("/healthz", func(c echo.Context) error { return c.JSON(http.StatusOK, map[string]string{"status": "ok"}) })
	e.GET("/readyz", s.readyz)
	if d.Registry != nil && !d.MetricsApart {
		e.GET("/metrics", echo.WrapHandler(promhttp.HandlerFor(d.Registry, promhttp.HandlerOpts{})))
	}
	e.GET("/v1/lsp/openapi.json", func(c echo.Context) error {
		return c.Blob(http.StatusOK, "application/json", OpenAPI)
	})

	s.registerDashboard(e) // a static page: its script reads the billing routes with the caller's token
	s.registerMCP(e)       // its own checks: 401 there names the OAuth metadata
	g := e.Group("/v1/lsp", s.authenticate)
	g.POST("/prepare", s.prepare, s.idempotency)
	for _, r := range opRoutes {
		g.POST(r.path, s.operation(r), s.idempotency)
	}
	s.registerBilling(g)
	s.registerWorkspaces(g)
	s.answerWrongMethods()
	return s
}

// Handler returns the http.Handler to serve.
func (s *Server) Handler() http.Handler { return s.e }

// Routes lists the method and path of every registered route. Echo's own
// not-found catch-alls, which a group with middleware adds, are not routes
// anyone can call and are left out.
func (s *Server) Routes() []string {
	var out []string
	for _, r := range s.e.Routes() {
		if r.Method == echo.RouteNotFound || r.Name == wrongMethodRoute {
			continue
		}
		out = append(out, r.Method+" "+r.Path)
	}
	return out
}

const (
	ctxCaller      = "lsp.caller"
	ctxPrincipal   = "lsp.principal"
	ctxRequestID   = "lsp.request_id"
	ctxIdempotency = "lsp.idempotency" // *idempotentRequest
)

// requestID takes a caller's X-Request-Id when it is sane, else makes one,
// and echoes it on the answer.
func (s *Server) requestID(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		id := c.Request().Header.Get("X-Request-Id")
		if !saneRequestID(id) {
			id = newRequestID()
		}
		c.Set(ctxRequestID, id)
		c.Response().Header().Set("X-Request-Id", id)
		return next(c)
	}
}

func saneRequestID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

// authenticate verifies the JWT (401) and the forge credential's presence.
// Org selection waits until the body has been checked, so that the order of
// checks is 401 → 400 → 403.
func (s *Server) authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if c.Path() == "/v1/lsp/openapi.json" {
			return next(c)
		}
		raw, err := auth.BearerToken(c.Request().Header.Get("Authorization"))
		if err != nil {
			return apierr.Unauth("a bearer token is required")
		}
		p, err := s.d.Verifier.Verify(c.Request().Context(), raw)
		if err != nil {
			return apierr.Unauth("the bearer token is not valid")
		}
		c.Set(ctxPrincipal, p)
		return next(c)
	}
}

// caller is the REST door's checkRequest, once the handler has checked the
// body: the org (403), the forge credential (401), the rate (429), then
// the Idempotency-Key. A replay's stored answer is written here and the
// handler ends with errReplayed.
func (s *Server) caller(c echo.Context) (operation.Caller, error) {
	p := c.Get(ctxPrincipal).(*auth.Principal)
	idem, _ := c.Get(ctxIdempotency).(*idempotentRequest)
	caller, stored, err := s.checkRequest(c.Request().Context(), c.Request().Header, p, c.Get(ctxRequestID).(string), idem)
	if err != nil || stored == nil {
		return caller, err
	}
	h := c.Response().Header()
	for k, v := range stored.Header {
		h.Set(k, v)
	}
	h.Set("Idempotent-Replayed", "true")
	c.Response().WriteHeader(stored.Status)
	if _, err := c.Response().Write(stored.Body); err != nil {
		return caller, err
	}
	return caller, errReplayed
}

func (s *Server) readyz(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
	defer cancel()
	for _, p := range s.d.Ready {
		if err := p.Ping(ctx); err != nil {
			s.d.Log.Warn("not ready", "err", err)
			return c.JSON(http.StatusServiceUnavailable, map[string]string{"status": "unavailable"})
		}
	}
	return c.JSON(http.StatusOK, map[string]string{"status": "ready"})
}

// defaultRetryAfter is the wait announced on a 429 or 503 whose cause did
// not name one.
const defaultRetryAfter = 2 * time.Second

// errorBody is the contract's error envelope.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code     string  `json:"code"`
	Message  string  `json:"message"`
	Repo     *string `json:"repo,omitempty"`
	Commit   *string `json:"commit,omitempty"`
	Prepared *bool   `json:"prepared,omitempty"`
	// Candidates are what an ambiguous_symbol could mean (at most 20 of
	// total_candidates).
	Candidates      []map[string]any `json:"candidates,omitempty"`
	TotalCandidates *uint32          `json:"total_candidates,omitempty"`
}

// failure carries what is known about a request when it failed.
type failure struct {
	err error
	res *operation.Result
}

func (f *failure) Error() string { return f.err.Error() }
func (f *failure) Unwrap() error { return f.err }

// handleError renders every error in the one envelope.
func (s *Server) handleError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		// echo's own: unknown route, method not allowed, body too large.
		code := apierr.InvalidRequest
		switch he.Code {
		case http.StatusNotFound:
			code = apierr.NotFound
		case http.StatusMethodNotAllowed:
			code = apierr.InvalidRequest
		}
		err = apierr.New(he.Code, code, "%s", http.StatusText(he.Code))
	}
	status, body, retry := s.envelope(err, c.Get(ctxRequestID))
	if retry > 0 {
		c.Response().Header().Set("Retry-After", strconv.Itoa(int((retry+time.Second-1)/time.Second)))
	}
	if err := c.JSON(status, body); err != nil {
		s.d.Log.Debug("write error answer", "err", err)
	}
}
