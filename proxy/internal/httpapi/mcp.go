package httpapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/hanzoai/lsp/proxy/internal/apierr"
	"github.com/hanzoai/lsp/proxy/internal/auth"
	"github.com/hanzoai/lsp/proxy/internal/ledger"
	"github.com/hanzoai/lsp/proxy/internal/operation"
	"github.com/labstack/echo/v4"
	mcpauth "github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The MCP door (`/v1/lsp/mcp`): the Streamable HTTP transport of the
// official SDK, one tool per operation. Every tool call is the REST route's
// work with the same identity: the JWT of the HTTP request that carries the
// call, its X-Org-Id and X-Forge-Token, the same strict body checks, the
// same operation.Service call, gate and ledger row.
//
// Checks, in order, on every HTTP request to the endpoint: a browser
// Origin must be in LSP_MCP_ALLOWED_ORIGINS (403); the bearer token must
// verify (401 with a WWW-Authenticate naming the RFC 9728 metadata); the
// selected org must be the principal's (403). A session is bound to the
// principal and org that opened it: the SDK refuses its id on a request
// whose token names anyone else (403).
//
// A tool call goes through the same checked-request step as a REST
// request (checkRequest: 403, 401, 429, then its Idempotency-Key), and
// its work has the same bounds: the SDK runs a tool on the session's
// context, which outlives the POST that carried the call, so the call's
// context also ends when that POST does (the client went away), and
// runOperation/runPrepare give it LSP_REQUEST_TIMEOUT.

const (
	mcpPath         = "/v1/lsp/mcp"
	resourceMetaWK  = "/.well-known/oauth-protected-resource"
	mcpMaxBodyBytes = 256 << 10
)

type mcpCtxKey int

const (
	ctxMCPCall mcpCtxKey = iota
	ctxMCPBinding
	ctxMCPSlot
)

// mcpCall is what a tool handler needs of the HTTP request that carries
// its call; it reaches the handler in the TokenInfo the SDK hands over.
type mcpCall struct {
	principal *auth.Principal
	// ctx is the HTTP request's: it ends when the client goes away or the
	// answer has been sent.
	ctx context.Context
	// replayed: an answer in this request came from an Idempotency-Key's
	// stored answer (the Idempotent-Replayed header).
	replayed atomic.Bool
}

// mcpExtraCall is the TokenInfo.Extra entry holding the *mcpCall.
const mcpExtraCall = "lsp.call"

// callOf is the request's *mcpCall, nil when the SDK did not pass one.
func callOf(req *mcp.CallToolRequest) *mcpCall {
	if req.Extra == nil || req.Extra.TokenInfo == nil {
		return nil
	}
	c, _ := req.Extra.TokenInfo.Extra[mcpExtraCall].(*mcpCall)
	return c
}

// bind is ctx (the session's, on which the SDK runs a tool) ended also
// when the POST carrying the call ends.
func (c *mcpCall) bind(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(c.ctx, cancel)
	return ctx, func() { stop(); cancel() }
}

// mcpResponse marks the answer of a POST that carried a replayed call.
// The SDK writes the answer's header only once the call has returned.
type mcpResponse struct {
	http.ResponseWriter
	call  *mcpCall
	wrote bool
}

func (w *mcpResponse) WriteHeader(code int) {
	if !w.wrote {
		w.wrote = true
		if w.call.replayed.Load() {
			w.Header().Set("Idempotent-Replayed", "true")
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *mcpResponse) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController flush the SDK's event streams.
func (w *mcpResponse) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// sdkErrors rewrites the MCP SDK's own plain-text error answers (an
// unknown session, a bad Accept header, a batch, …) into the contract's
// error envelope (CONTRACT §4) with the request's id: the SDK writes them
// with http.Error. Every other answer passes through untouched.
type sdkErrors struct {
	http.ResponseWriter
	s      *Server
	reqID  string
	status int    // a plain-text error's status, held back; 0 otherwise
	msg    []byte // its text, bounded
	passed bool   // a header went through as it was
}

func (w *sdkErrors) WriteHeader(code int) {
	if !w.passed && w.status == 0 && code >= 400 && strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain") {
		w.status = code
		return
	}
	if w.status == 0 {
		w.passed = true
		w.ResponseWriter.WriteHeader(code)
	}
}

func (w *sdkErrors) Write(b []byte) (int, error) {
	if w.status != 0 {
		w.msg = append(w.msg, b[:min(len(b), max(0, 256-len(w.msg)))]...)
		return len(b), nil
	}
	w.passed = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController flush the SDK's event streams.
func (w *sdkErrors) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// finish writes the envelope of a held-back error.
func (w *sdkErrors) finish() {
	if w.status == 0 {
		return
	}
	code := apierr.InvalidRequest
	switch {
	case w.status == http.StatusUnauthorized:
		code = apierr.Unauthenticated
	case w.status == http.StatusForbidden:
		code = apierr.Forbidden
	case w.status == http.StatusNotFound:
		code = apierr.NotFound
	case w.status >= 500:
		code = apierr.Internal
	}
	// The SDK's own words, printable characters only.
	msg := strings.TrimSpace(strings.Map(func(r rune) rune {
		if r == utf8.RuneError || unicode.IsControl(r) {
			return -1
		}
		return r
	}, string(w.msg)))
	if msg == "" {
		msg = http.StatusText(w.status)
	}
	status, body, _ := w.s.envelope(apierr.New(w.status, code, "%s", msg), w.reqID)
	h := w.Header()
	h.Del("Content-Length")
	h.Set("Content-Type", "application/json")
	w.ResponseWriter.WriteHeader(status)
	_ = json.NewEncoder(w.ResponseWriter).Encode(body)
}

// mcpSlot memoises a new session's server within its HTTP request: the SDK
// asks for the server more than once per request.
type mcpSlot struct {
	once sync.Once
	srv  *mcp.Server
}

// mcpBinding is a session's revision (`?repo=&rev=`), resolved as the
// caller when the session opens: the session answers about that commit.
type mcpBinding struct {
	repo, commit string
	warm         bool
	tools        []string // the daemon tools its servers negotiated (when warm)
}

func (s *Server) registerMCP(e *echo.Echo) {
	h := mcp.NewStreamableHTTPHandler(s.mcpServer, &mcp.StreamableHTTPOptions{
		SessionTimeout:      s.mcpSessions.lim.Idle,
		MaxRequestBodyBytes: mcpMaxBodyBytes,
		Logger:              s.d.Log,
	})
	// The SDK puts the principal's session identity where it checks
	// session reuse; the token was verified just before (mcpGate).
	bearer := mcpauth.RequireBearerToken(func(ctx context.Context, _ string, r *http.Request) (*mcpauth.TokenInfo, error) {
		call, _ := r.Context().Value(ctxMCPCall).(*mcpCall)
		if call == nil {
			return nil, mcpauth.ErrInvalidToken
		}
		org, _ := call.principal.SelectOrg(r.Header.Get("X-Org-Id"))
		return &mcpauth.TokenInfo{UserID: sessionUser(call.principal, org), Extra: map[string]any{mcpExtraCall: call}}, nil
	}, &mcpauth.RequireBearerTokenOptions{AllowMissingExpiration: true})
	handler := s.mcpGate(bearer(h))
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
		e.Add(m, mcpPath, echo.WrapHandler(handler))
	}
	meta := echo.HandlerFunc(s.resourceMetadata)
	e.GET(resourceMetaWK, meta)
	e.GET(resourceMetaWK+mcpPath, meta)
}

// sessionUser is the identity a session is bound to: who (the verified
// subject in their home org) and for which org.
func sessionUser(p *auth.Principal, org string) string {
	h := sha256.Sum256([]byte(p.Owner + "\x00" + p.Subject + "\x00" + org))
	return hex.EncodeToString(h[:])
}

// mcpGate runs the endpoint's checks before the SDK sees the request.
func (s *Server) mcpGate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reqID := newRequestID()
		sdk := &sdkErrors{ResponseWriter: w, s: s, reqID: reqID}
		defer sdk.finish()
		w = sdk
		fail := func(err error) {
			status, body, retry := s.envelope(err, reqID)
			if status == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="`+s.baseURL(r)+resourceMetaWK+mcpPath+`"`)
			}
			if retry > 0 {
				w.Header().Set("Retry-After", strconv.Itoa(int((retry+time.Second-1)/time.Second)))
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_ = json.NewEncoder(w).Encode(body)
		}
		// A browser page may only drive the endpoint from an origin the
		// operator allowed; agents and CLIs send no Origin.
		if o := r.Header.Get("Origin"); o != "" && !slices.Contains(s.d.MCPAllowedOrigins, o) {
			fail(apierr.New(http.StatusForbidden, apierr.Forbidden, "this Origin may not use the MCP endpoint"))
			return
		}
		raw, err := auth.BearerToken(r.Header.Get("Authorization"))
		if err != nil {
			fail(apierr.Unauth("a bearer token is required"))
			return
		}
		p, err := s.d.Verifier.Verify(r.Context(), raw)
		if err != nil {
			fail(apierr.Unauth("the bearer token is not valid"))
			return
		}
		org, err := p.SelectOrg(r.Header.Get("X-Org-Id"))
		if err != nil {
			fail(apierr.New(http.StatusForbidden, apierr.Forbidden, "the principal is not a member of the selected org"))
			return
		}
		call := &mcpCall{principal: p, ctx: r.Context()}
		ctx := context.WithValue(r.Context(), ctxMCPCall, call)
		if r.Method == http.MethodPost {
			w = &mcpResponse{ResponseWriter: w, call: call}
		}
		// A new session bound to a revision: check the binding and learn
		// what the revision's servers negotiated, as the caller (the
		// forge's ACL decides; the probe is free).
		if r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") == "" {
			// A new session: a slot first (mcpsessions.go), before the
			// binding costs a forge round trip.
			release, err := s.mcpSessions.reserve(principalKey(p), org)
			if err != nil {
				fail(err)
				return
			}
			b, err := s.mcpBind(ctx, r, p, reqID)
			if err != nil {
				release()
				fail(err)
				return
			}
			slot := &mcpSlot{}
			ctx = context.WithValue(ctx, ctxMCPBinding, b)
			ctx = context.WithValue(ctx, ctxMCPSlot, slot)
			next.ServeHTTP(w, r.WithContext(ctx))
			s.holdUntilClosed(slot, release)
			return
		}
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// holdUntilClosed keeps a new session's slot until the session ends; a
// request that made no session (a failed initialize, which the SDK closes
// at once) gives it back now.
func (s *Server) holdUntilClosed(slot *mcpSlot, release func()) {
	var ss *mcp.ServerSession
	if slot.srv != nil {
		for x := range slot.srv.Sessions() {
			ss = x
			break
		}
	}
	if ss == nil {
		release()
		return
	}
	go func() {
		_ = ss.Wait()
		release()
	}()
}

// principalKey names a principal for the session bounds: who, in their
// home org, whatever org a session selects.
func principalKey(p *auth.Principal) string {
	h := sha256.Sum256([]byte(p.Owner + "\x00" + p.Subject))
	return hex.EncodeToString(h[:])
}

// mcpBind reads `?repo=&rev=`; no parameters is an unbound session.
func (s *Server) mcpBind(ctx context.Context, r *http.Request, p *auth.Principal, reqID string) (*mcpBinding, error) {
	q, err := parseWorkspaceQuery(r.URL.RawQuery)
	if err != nil {
		return nil, err
	}
	if q.Repo == nil {
		if q.Rev != nil {
			return nil, apierr.BadRequest("rev needs repo")
		}
		return nil, nil
	}
	name, parsed, err := commonRequest(q)
	if err != nil {
		return nil, err
	}
	caller, _, err := s.checkRequest(ctx, r.Header, p, reqID, nil) // no tool call: no key
	if err != nil {
		return nil, err
	}
	ctx, cancel := s.withRequestTimeout(ctx)
	defer cancel()
	probe, err := s.d.Ops.Capabilities(ctx, caller, name, parsed)
	if err != nil {
		return nil, err
	}
	b := &mcpBinding{repo: name, commit: probe.Commit, warm: probe.Warm}
	if probe.Warm {
		for _, l := range probe.Languages {
			b.tools = append(b.tools, l.GetTools()...)
		}
	}
	return b, nil
}

// resourceMetadata is the RFC 9728 protected-resource metadata: where an
// MCP client learns which authorization server issues tokens for this
// resource (LSP_JWT_ISSUER).
func (s *Server) resourceMetadata(c echo.Context) error {
	m := map[string]any{
		"resource":                 s.baseURL(c.Request()) + mcpPath,
		"bearer_methods_supported": []string{"header"},
		"resource_name":            "LSP service (MCP)",
	}
	if s.d.Issuer != "" {
		m["authorization_servers"] = []string{s.d.Issuer}
	}
	c.Response().Header().Set("Cache-Control", "max-age=300")
	return c.JSON(http.StatusOK, m)
}

// baseURL is LSP_PUBLIC_URL, else the scheme and host the client used
// (the proxy may sit behind a TLS-terminating load balancer that says so).
func (s *Server) baseURL(r *http.Request) string {
	if s.d.PublicURL != "" {
		return s.d.PublicURL
	}
	scheme := "http"
	if r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https") {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// mcpSession is one MCP session's server: its tools and, when bound, its
// revision.
type mcpSession struct {
	s       *Server
	srv     *mcp.Server
	binding *mcpBinding
	mu      sync.Mutex
	added   map[string]bool
}

// mcpServer is the server of a new session. The SDK also asks on a
// request of an existing session, only to learn the protocol versions
// served: that gets one shared server without tools.
func (s *Server) mcpServer(r *http.Request) *mcp.Server {
	slot, _ := r.Context().Value(ctxMCPSlot).(*mcpSlot)
	if slot == nil {
		s.mcpVersionsOnce.Do(func() {
			s.mcpVersions = mcp.NewServer(&mcp.Implementation{Name: "lsp-service", Version: "v1"}, nil)
		})
		return s.mcpVersions
	}
	slot.once.Do(func() { slot.srv = s.newMCPSession(r) })
	return slot.srv
}

// newMCPSession builds the server of one new session: every tool, or when
// bound to a revision, prepare and the tools its servers negotiated.
func (s *Server) newMCPSession(r *http.Request) *mcp.Server {
	b, _ := r.Context().Value(ctxMCPBinding).(*mcpBinding)
	ms := &mcpSession{s: s, binding: b, added: map[string]bool{}}
	instructions := "Semantic code intelligence (hover, definitions, references, symbols, diagnostics, completion, signatures, call and type hierarchies) over a repository revision on the forge, as the caller. Address code by name (symbol: NewRandom, Client.Do, uuid.NewRandom) or by text on a line (path, line, text) rather than counting characters; raw positions are LSP positions: 0-based line, UTF-16 character. Location answers carry the code around each location; read returns more lines of a file. The first call on a revision prepares it (charged once per revision per day); call prepare first to learn the tools the revision's language servers support."
	if b != nil {
		instructions += " This session is bound to " + b.repo + "@" + b.commit + ": tools take no repo or rev."
	}
	ms.srv = mcp.NewServer(&mcp.Implementation{Name: "lsp-service", Version: "v1"}, &mcp.ServerOptions{
		Instructions: instructions,
		Logger:       s.d.Log,
		// A bound session may start with prepare alone and gain tools.
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}},
	})
	ms.addTool("prepare")
	switch {
	case b == nil:
		for _, rt := range opRoutes {
			ms.addTool(rt.name)
		}
	case b.warm:
		ms.addNegotiated(b.tools)
	}
	return ms.srv
}

// addNegotiated adds the tools whose daemon tools a server negotiated;
// the SDK tells the session the list changed.
func (ms *mcpSession) addNegotiated(daemonTools []string) {
	for _, rt := range opRoutes {
		if toolNeeds[rt.name] == nil {
			ms.addTool(rt.name) // needs no server
			continue
		}
		for _, t := range daemonTools {
			if slices.Contains(toolNeeds[rt.name], t) {
				ms.addTool(rt.name)
				break
			}
		}
	}
}

func (ms *mcpSession) addTool(name string) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if ms.added[name] {
		return
	}
	ms.added[name] = true
	ms.srv.AddTool(toolSpec(name, ms.binding != nil), ms.handler(name))
}

// handler runs one tool call exactly as the REST route would: the same
// body checks, the same checked-request step (checkRequest, with the
// POST's Idempotency-Key), the same deadline.
func (ms *mcpSession) handler(name string) mcp.ToolHandler {
	s := ms.s
	rt, isOp := routeByName(name)
	allowed := prepareFields
	if isOp {
		allowed = rt.fields
	}
	if ms.binding != nil {
		allowed = without(allowed, "repo", "rev")
	}
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		start := time.Now()
		reqID := newRequestID()
		call := callOf(req)
		if call == nil {
			_, env, _ := s.envelope(apierr.Unauth("a bearer token is required"), reqID)
			return newMCPAnswer(env, renderErrorText(env)).result(true), nil
		}
		ctx, cancel := call.bind(ctx)
		defer cancel()
		var idem *idempotentRequest
		var stored *ledger.StoredAnswer
		out, err := func() (map[string]any, error) {
			args := []byte(req.Params.Arguments)
			if len(args) == 0 || string(args) == "null" {
				args = []byte("{}")
			}
			b, err := parseBody(args, allowed)
			if err != nil {
				return nil, err
			}
			if ms.binding != nil {
				b.Repo, b.Rev = &ms.binding.repo, &ms.binding.commit
			}
			// The body's 400s, then the work the checked caller runs.
			var run func(operation.Caller) (map[string]any, error)
			if !isOp {
				repo, rev, err := commonRequest(b)
				if err != nil {
					return nil, err
				}
				var focus string
				if b.Path != nil {
					if focus, err = checkPath(b.Path); err != nil {
						return nil, err
					}
				}
				run = func(caller operation.Caller) (map[string]any, error) {
					report, stop := mcpProgress(ctx, req)
					defer stop()
					caller.Progress = report
					out, res, err := s.runPrepare(ctx, caller, repo, rev, focus, start)
					if err == nil && ms.binding != nil && res.Commit == ms.binding.commit {
						var tools []string
						for _, l := range res.Prepare.GetLanguages() {
							tools = append(tools, l.GetTools()...)
						}
						ms.addNegotiated(tools)
					}
					return out, err
				}
			} else {
				if rt.fields["context_lines"] && b.ContextLines == nil {
					n := mcpDefaultContext(name)
					b.ContextLines = &n
				}
				opReq, err := rt.request(b)
				if err != nil {
					return nil, err
				}
				run = func(caller operation.Caller) (map[string]any, error) {
					return s.runOperation(ctx, rt, b, opReq, caller, start)
				}
			}
			if idem, err = ms.idempotency(req.Extra.Header, name, args, b); err != nil {
				return nil, err
			}
			caller, st, err := s.checkRequest(ctx, req.Extra.Header, call.principal, reqID, idem)
			if err != nil || st != nil {
				stored = st
				return nil, err
			}
			return run(caller)
		}()
		if stored != nil {
			call.replayed.Store(true)
			return s.mcpReplay(stored, reqID), nil
		}
		var a mcpAnswer
		status := http.StatusOK
		if err != nil {
			var env errorBody
			status, env, _ = s.envelope(err, reqID)
			a = newMCPAnswer(env, renderErrorText(env))
		} else {
			a = newMCPAnswer(out, renderText(name, out))
		}
		if idem != nil && idem.attempt != "" {
			body, _ := json.Marshal(a)
			s.finishIdempotent(ctx, idem, err, ledger.StoredAnswer{Status: status, Header: map[string]string{}, Body: body}, reqID)
		}
		return a.result(err != nil), nil
	}
}

// idempotency is a tool call's Idempotency-Key (the header of the POST
// carrying it; nil without one), bound to the tool, its arguments as sent
// and, in a bound session, the session's revision. b is the checked body:
// where a replay re-checks forge access, and the page size a key bounds.
func (ms *mcpSession) idempotency(h http.Header, name string, args []byte, b *body) (*idempotentRequest, error) {
	key, err := idempotencyKey(h)
	if err != nil || key == "" {
		return nil, err
	}
	raw := args
	if ms.binding != nil {
		raw = append([]byte(ms.binding.repo+"@"+ms.binding.commit+"\n"), args...)
	}
	return newIdempotentRequest(key, "MCP", "tools/call "+name, raw, replayBody{Repo: b.Repo, Rev: b.Rev, Limit: b.Limit})
}

// mcpAnswer is a tool call's answer: the text a model reads and the
// structured content. An Idempotency-Key stores it (as JSON; the stored
// status says whether it was an error) and a replay sends it again.
type mcpAnswer struct {
	Text       string          `json:"text"`
	Structured json.RawMessage `json:"structured"`
}

// newMCPAnswer carries v as structured content and, for the model to
// read, text: a compact rendering when there is one, else v's JSON.
func newMCPAnswer(v any, text string) mcpAnswer {
	raw, _ := json.Marshal(v)
	if text == "" {
		text = string(raw)
	}
	return mcpAnswer{Text: text, Structured: raw}
}

func (a mcpAnswer) result(isErr bool) *mcp.CallToolResult {
	return &mcp.CallToolResult{
		IsError:           isErr,
		Content:           []mcp.Content{&mcp.TextContent{Text: a.Text}},
		StructuredContent: a.Structured,
	}
}

// mcpReplay is a stored answer sent again, marked replayed.
func (s *Server) mcpReplay(stored *ledger.StoredAnswer, reqID string) *mcp.CallToolResult {
	var a mcpAnswer
	if err := json.Unmarshal(stored.Body, &a); err != nil {
		_, env, _ := s.envelope(fmt.Errorf("replay a stored MCP answer: %w", err), reqID)
		return newMCPAnswer(env, renderErrorText(env)).result(true)
	}
	r := a.result(stored.Status != http.StatusOK)
	r.Meta = mcp.Meta{"idempotent_replayed": true}
	return r
}

func routeByName(name string) (opRoute, bool) {
	for _, rt := range opRoutes {
		if rt.name == name {
			return rt, true
		}
	}
	return opRoute{}, false
}

func without(m map[string]bool, names ...string) map[string]bool {
	out := map[string]bool{}
	for k, v := range m {
		if !slices.Contains(names, k) {
			out[k] = v
		}
	}
	return out
}
