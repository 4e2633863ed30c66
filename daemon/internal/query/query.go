// Package query answers one QueryRequest against a live workspace: it
// checks the path and position against the tree, picks the language
// server, refuses operations the server did not negotiate, calls it, and
// turns the result into the wire's shapes through the URI policy and the
// sanitiser, with evidence and a stable page.
package query

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hanzoai/lsp/daemon/internal/jsonrpc"
	"github.com/hanzoai/lsp/daemon/internal/lsp"
	"github.com/hanzoai/lsp/daemon/internal/pool"
	"github.com/hanzoai/lsp/daemon/internal/runtime"
	"github.com/hanzoai/lsp/daemon/internal/sanitize"
	"github.com/hanzoai/lsp/daemon/internal/uri"
	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
)

// Externals names the external roots for a workspace (GOROOT, the
// workspace's module cache, a pinned TypeScript library).
type Externals func(w *pool.Workspace) []uri.External

// Runner answers queries.
type Runner struct {
	Pool      *pool.Pool
	Externals Externals
	// MaxDocument bounds the size of a file opened in a server.
	MaxDocument int64
}

// externalsKey and anchorKey name the runner's values in pool.Workspace.Derived.
type (
	externalsKey struct{}
	anchorKey    struct{ spec string }
	scrubKey     struct{}
)

// scrubber replaces w's host paths in server text, computed once per
// workspace (once its dependency phase has ended: it names the external
// roots).
func (r *Runner) scrubber(w *pool.Workspace) *strings.Replacer {
	return w.DerivedFromDeps(scrubKey{}, func() any { return w.Scrubber(r.externals(w)) }).(*strings.Replacer)
}

// converter is the one way an answer's converter is made for w: its URI
// policy and its host-path scrubber together (a converter without the
// scrubber let an ambiguous name's candidates carry server text unscrubbed).
func (r *Runner) converter(w *pool.Workspace) *converter {
	return &converter{pol: uri.Policy{Root: w.Dir, Externals: r.externals(w)}, scrub: r.scrubber(w)}
}

// externals are w's external roots, computed once per workspace, once its
// dependency phase has ended: the npm index behind them is read and parsed
// only then.
func (r *Runner) externals(w *pool.Workspace) []uri.External {
	return w.DerivedFromDeps(externalsKey{}, func() any { return r.Externals(w) }).([]uri.External)
}

// toolFor maps each operation to the negotiated tool it needs.
var toolFor = map[daemonv1.Op]string{
	daemonv1.Op_OP_HOVER:             "hover",
	daemonv1.Op_OP_DEFINITION:        "definition",
	daemonv1.Op_OP_DECLARATION:       "declaration",
	daemonv1.Op_OP_TYPE_DEFINITION:   "type_definition",
	daemonv1.Op_OP_IMPLEMENTATION:    "implementation",
	daemonv1.Op_OP_REFERENCES:        "references",
	daemonv1.Op_OP_DOCUMENT_SYMBOLS:  "document_symbols",
	daemonv1.Op_OP_WORKSPACE_SYMBOLS: "workspace_symbols",
	daemonv1.Op_OP_DIAGNOSTICS:       "diagnostics",
	daemonv1.Op_OP_COMPLETION:        "completion",
	daemonv1.Op_OP_SIGNATURE_HELP:    "signature_help",
	daemonv1.Op_OP_INCOMING_CALLS:    "call_hierarchy",
	daemonv1.Op_OP_OUTGOING_CALLS:    "call_hierarchy",
	daemonv1.Op_OP_SUPERTYPES:        "type_hierarchy",
	daemonv1.Op_OP_SUBTYPES:          "type_hierarchy",
}

func fail(status daemonv1.Status, msg string) *daemonv1.QueryResponse {
	return &daemonv1.QueryResponse{Status: status, Message: msg}
}

// Run answers req on w. Transport-level failures of the language server
// become statuses; Run never returns a Go error.
func (r *Runner) Run(ctx context.Context, w *pool.Workspace, req *daemonv1.QueryRequest) *daemonv1.QueryResponse {
	resp := r.run(ctx, w, req)
	resp.PrepareId = w.PrepareID
	return resp
}

func (r *Runner) run(ctx context.Context, w *pool.Workspace, req *daemonv1.QueryRequest) *daemonv1.QueryResponse {
	// Checked here too (rpc.Server.Query checks it before the workspace),
	// for every caller of Run: the query goes as-is to every language
	// server asked, and into every answer's fingerprint (a read's too).
	if len(req.GetQuery()) > daemonv1.MaxQueryBytes {
		return fail(daemonv1.Status_STATUS_INVALID_REQUEST, fmt.Sprintf("query is longer than %d bytes", daemonv1.MaxQueryBytes))
	}
	if req.GetOp() == daemonv1.Op_OP_READ {
		return r.read(w, req)
	}
	tool, ok := toolFor[req.GetOp()]
	if !ok {
		return fail(daemonv1.Status_STATUS_INVALID_REQUEST, "unknown operation")
	}
	symbol, text := req.GetSymbol(), req.GetText()
	switch {
	case (symbol != "" || text != "") && !needsPosition(req.GetOp()):
		return fail(daemonv1.Status_STATUS_INVALID_REQUEST, "symbol and text address a position: this operation takes none")
	case symbol != "" && text != "":
		return fail(daemonv1.Status_STATUS_INVALID_REQUEST, "give symbol or text, not both")
	case symbol != "" && !validSymbolQuery(symbol):
		return fail(daemonv1.Status_STATUS_INVALID_REQUEST, "symbol must be a name or a container path such as Client.Do")
	case len(text) > maxAnchorText || !utf8.ValidString(text) || strings.ContainsAny(text, "\r\n"):
		return fail(daemonv1.Status_STATUS_INVALID_REQUEST, "text must be at most 256 bytes of one line")
	case req.ContextLines != nil && req.GetContextLines() > MaxContextLines:
		return fail(daemonv1.Status_STATUS_INVALID_REQUEST, "context_lines is at most 50")
	}
	if req.GetLanguage() != "" && req.GetOp() != daemonv1.Op_OP_WORKSPACE_SYMBOLS {
		return fail(daemonv1.Status_STATUS_INVALID_REQUEST, "language filters workspace symbols only")
	}
	if req.GetOp() == daemonv1.Op_OP_WORKSPACE_SYMBOLS {
		// The whole repository's symbols, from every language's server
		// (wsymbols.go).
		return r.searchSymbols(ctx, w, req)
	}
	rel := req.GetPath()
	pos := lsp.Position{Line: req.GetPosition().GetLine(), Character: req.GetPosition().GetCharacter()}
	var resolved *daemonv1.Location
	if symbol != "" && rel == "" {
		// A name without a path: every language's workspace symbols. Once
		// resolved, the request is a position in the symbol's file, which
		// its own language's server answers.
		res, st := r.resolveInWorkspace(ctx, w, r.converter(w), symbol)
		if st != nil {
			return st
		}
		rel, pos, resolved, symbol = res.rel, res.pos, res.loc, ""
	}
	doc, st := r.readDocument(w, rel)
	if st != nil {
		return st
	}
	spec, ok := r.Pool.SpecFor(rel)
	if !ok {
		return fail(daemonv1.Status_STATUS_UNSUPPORTED_LANGUAGE, "no language server serves this file type")
	}
	if text != "" {
		rg, ok := textPosition(doc.Text, pos.Line, text)
		if !ok {
			return fail(daemonv1.Status_STATUS_SYMBOL_NOT_FOUND, fmt.Sprintf("text does not occur on line %d", pos.Line))
		}
		pos = rg.Start
		resolved = &daemonv1.Location{Path: rel, Range: pbRange(rg)}
	}
	if symbol == "" && needsPosition(req.GetOp()) && !inRange(doc.Text, &daemonv1.Position{Line: pos.Line, Character: pos.Character}) {
		return fail(daemonv1.Status_STATUS_POSITION_OUT_OF_RANGE, "the position is past the end of the file")
	}

	srv, err := w.Server(ctx, spec)
	if err != nil {
		return serverFailure(ctx, err)
	}
	if !slices.Contains(srv.Tools(), tool) {
		return fail(daemonv1.Status_STATUS_CAPABILITY_UNAVAILABLE, fmt.Sprintf("%s does not offer %s", spec.ID, tool))
	}
	client, gen, err := srv.Client(ctx)
	if err != nil {
		return serverFailure(ctx, err)
	}
	if g := req.GetGeneration(); g != 0 && g != gen {
		return fail(daemonv1.Status_STATUS_CURSOR_EXPIRED, "the language server restarted since the cursor was issued")
	}

	c := r.converter(w)
	resp := &daemonv1.QueryResponse{Status: daemonv1.Status_STATUS_OK}
	// An instance no wait has seen loaded (restarted after a crash, or
	// started by this question) loads first, as a prepare waits for it.
	loaded := r.awaitLoad(ctx, w, spec, client, c.pol)
	if !client.IsOpen(lsp.DocumentURI(c.pol.FileURI(rel))) {
		if err := client.DidOpen(ctx, lsp.DocumentURI(c.pol.FileURI(rel)), spec.LanguageID(rel), string(doc.Text)); err != nil {
			return serverFailure(ctx, err)
		}
	}
	// A server still building its index (clangd's background index)
	// answers from what it has so far: an answer that comes from the
	// index waits for it a bounded while, as one waits for an editor's
	// indexing bar; past the bound the answer is partial (below). A
	// background index feeds only those: a hover, the file's symbols or
	// diagnostics answer at once, partial while it runs. Indexing that is
	// the project's load (rust-analyzer's) holds every answer.
	if _, ok := client.Indexing(); ok && (!client.IndexInBackground() || fromIndex[req.GetOp()]) {
		_ = client.WaitIndexed(ctx, IndexWait)
	}
	if symbol != "" {
		res, st := r.resolveSymbol(ctx, w, spec, srv, client, c, rel, symbol, symbolCacheFor(w, spec.ID, gen))
		if st != nil {
			return st
		}
		pos, resolved = res.pos, res.loc
	}
	resp.Resolved = resolved
	u := lsp.DocumentURI(c.pol.FileURI(rel))
	limit, offset := req.GetLimit(), req.GetOffset()
	err = func() error {
		switch req.GetOp() {
		case daemonv1.Op_OP_HOVER:
			h, err := client.Hover(ctx, u, pos)
			resp.Result = &daemonv1.QueryResponse_Hover{Hover: c.hover(h)}
			return err
		case daemonv1.Op_OP_DEFINITION, daemonv1.Op_OP_DECLARATION, daemonv1.Op_OP_TYPE_DEFINITION,
			daemonv1.Op_OP_IMPLEMENTATION, daemonv1.Op_OP_REFERENCES:
			var l lsp.List[lsp.Location]
			var err error
			switch req.GetOp() {
			case daemonv1.Op_OP_DEFINITION:
				l, err = client.Definition(ctx, u, pos)
			case daemonv1.Op_OP_DECLARATION:
				l, err = client.Declaration(ctx, u, pos)
			case daemonv1.Op_OP_TYPE_DEFINITION:
				l, err = client.TypeDefinition(ctx, u, pos)
			case daemonv1.Op_OP_IMPLEMENTATION:
				l, err = client.Implementation(ctx, u, pos)
			default:
				l, err = client.References(ctx, u, pos, req.GetIncludeDeclaration())
			}
			c.truncated(l.Truncated, l.Dropped)
			items, total, next := page(c.locations(l.Items), offset, limit)
			resp.Result = &daemonv1.QueryResponse_Locations{Locations: &daemonv1.Locations{Items: items}}
			resp.Total, resp.NextOffset = total, next
			return err
		case daemonv1.Op_OP_DOCUMENT_SYMBOLS:
			l, err := client.DocumentSymbols(ctx, u)
			c.truncated(l.Truncated, l.Dropped)
			items, total, next := page(c.symbols(l.Items, spec), offset, limit)
			resp.Result = &daemonv1.QueryResponse_Symbols{Symbols: &daemonv1.Symbols{Items: items}}
			resp.Total, resp.NextOffset = total, next
			return err
		case daemonv1.Op_OP_DIAGNOSTICS:
			d, err := client.Diagnostics(ctx, u)
			c.truncated(d.Truncated, d.Dropped)
			if err == nil && !d.Settled {
				c.warnings = append(c.warnings, "the server had not published diagnostics for this file yet")
				c.dropped++
			}
			items, total, next := page(c.diagnostics(d.Items), offset, limit)
			resp.Result = &daemonv1.QueryResponse_Diagnostics{Diagnostics: &daemonv1.Diagnostics{Items: items}}
			resp.Total, resp.NextOffset = total, next
			return err
		case daemonv1.Op_OP_COMPLETION:
			cp, err := client.Completion(ctx, u, pos)
			c.truncated(cp.Truncated, cp.Dropped)
			items, total, next := page(c.completions(cp.Items), offset, limit)
			resp.Result = &daemonv1.QueryResponse_Completions{Completions: &daemonv1.Completions{Items: items, Incomplete: cp.Incomplete || next != nil}}
			resp.Total, resp.NextOffset = total, next
			return err
		case daemonv1.Op_OP_SIGNATURE_HELP:
			h, err := client.SignatureHelp(ctx, u, pos)
			resp.Result = &daemonv1.QueryResponse_Signatures{Signatures: c.signatures(h)}
			return err
		case daemonv1.Op_OP_INCOMING_CALLS, daemonv1.Op_OP_OUTGOING_CALLS:
			var l lsp.List[lsp.CallHierarchyCall]
			var err error
			if req.GetOp() == daemonv1.Op_OP_INCOMING_CALLS {
				l, err = client.IncomingCalls(ctx, u, pos)
			} else {
				l, err = client.OutgoingCalls(ctx, u, pos)
			}
			c.truncated(l.Truncated, l.Dropped)
			items, total, next := page(c.calls(l.Items), offset, limit)
			resp.Result = &daemonv1.QueryResponse_Calls{Calls: &daemonv1.Calls{Items: items}}
			resp.Total, resp.NextOffset = total, next
			return err
		case daemonv1.Op_OP_SUPERTYPES, daemonv1.Op_OP_SUBTYPES:
			var l lsp.List[lsp.TypeHierarchyItem]
			var err error
			if req.GetOp() == daemonv1.Op_OP_SUPERTYPES {
				l, err = client.Supertypes(ctx, u, pos)
			} else {
				l, err = client.Subtypes(ctx, u, pos)
			}
			c.truncated(l.Truncated, l.Dropped)
			items, total, next := page(c.types(l.Items), offset, limit)
			resp.Result = &daemonv1.QueryResponse_Types{Types: &daemonv1.Types{Items: items}}
			resp.Total, resp.NextOffset = total, next
			return err
		}
		return nil
	}()
	var rpcErr *jsonrpc.Error
	if errors.As(err, &rpcErr) && ctx.Err() == nil {
		// The server is healthy and said it cannot answer here (gopls, for
		// one, errors on a hover inside some string literals): an empty
		// answer, marked partial, is the truth — not a 503.
		c.warnings = append(c.warnings, fmt.Sprintf("the language server could not answer this request (code %d)", rpcErr.Code))
		c.dropped++
		err = nil
	}
	if err != nil {
		return serverFailure(ctx, err)
	}
	// A server still building what its answers come from (clangd's
	// background index) answers from what it has so far: partial.
	if title, ok := client.Indexing(); ok {
		c.warnings = append(c.warnings, fmt.Sprintf("%s was still working on the project (%q) when it answered; results may be incomplete", spec.ID, sanitize.Line(c.clean(title), 128)))
		c.incomplete = true
	}
	c.warnings = append(c.warnings, unchecked(spec, client)...)
	if req.ContextLines != nil || req.GetIncludeBody() {
		cd := r.newCoder(w, req.GetContextLines())
		attachCode(cd, c, resp, req.GetIncludeBody(), req.GetOp() == daemonv1.Op_OP_INCOMING_CALLS)
		c.warnings = append(c.warnings, cd.warnings()...)
	}
	// A server that could not load the project answers without it: say
	// so, in its own words, on every answer of the workspace.
	c.load = w.LoadWarnings(spec, srv)
	if !loaded {
		c.load = append(c.load, notLoaded(spec))
	}
	// A file the server has no package for (excluded by its build tags)
	// qualifies the answers about it alone.
	c.load = append(c.load, w.FileWarnings(spec, client.FileProblems(u))...)
	c.load = append(c.load, w.CgoFileWarnings(spec, rel, doc.Text)...)
	c.empty = emptyAnswer(resp)
	resp.Evidence = evidence(srv.Info(), srv.CapabilityFingerprint(), gen, doc, req, c)
	return resp
}

// unchecked is the warning of an answer from a server that reports its
// diagnoses (gopls: lsp.DiagnosisReports) given before it has checked the
// whole project once. The answer itself is the server's whole answer (it
// type-checks what the question needs) and stays current, but the load
// problems listed beside it may lack what that check is still finding:
// a broken import in another package.
func unchecked(spec *pool.Spec, client *lsp.Client) []string {
	if !client.ReportsLoad() || client.Diagnosed() {
		return nil
	}
	return []string{spec.ID + " had not finished checking the whole project when it answered: the problems it finds elsewhere, if any, come with later answers"}
}

// fromIndex are the ops whose answers a background index feeds (clangd:
// what lies in other translation units).
var fromIndex = map[daemonv1.Op]bool{
	daemonv1.Op_OP_DEFINITION: true, daemonv1.Op_OP_DECLARATION: true, daemonv1.Op_OP_TYPE_DEFINITION: true,
	daemonv1.Op_OP_IMPLEMENTATION: true, daemonv1.Op_OP_REFERENCES: true, daemonv1.Op_OP_WORKSPACE_SYMBOLS: true,
	daemonv1.Op_OP_INCOMING_CALLS: true, daemonv1.Op_OP_OUTGOING_CALLS: true,
	daemonv1.Op_OP_SUPERTYPES: true, daemonv1.Op_OP_SUBTYPES: true,
}

// IndexWait bounds how long a query waits for a server's indexing to end
// before it asks anyway (lsp.Client.Indexing).
var IndexWait = 20 * time.Second

// emptyAnswer reports whether resp carries nothing.
func emptyAnswer(resp *daemonv1.QueryResponse) bool {
	switch r := resp.GetResult().(type) {
	case *daemonv1.QueryResponse_Hover:
		return !r.Hover.GetPresent()
	case *daemonv1.QueryResponse_Signatures:
		return len(r.Signatures.GetItems()) == 0
	case nil:
		return true
	}
	return resp.GetTotal() == 0
}

func (c *converter) truncated(t bool, dropped int) {
	if t {
		c.warnings = append(c.warnings, "the server's answer was cut at the daemon's bound")
		c.dropped++
	}
	c.dropped += dropped
	c.unexplained += dropped
}

// readDocument returns a tree file, or the status that refuses it.
func (r *Runner) readDocument(w *pool.Workspace, rel string) (*pool.Document, *daemonv1.QueryResponse) {
	if rel == "" {
		return nil, fail(daemonv1.Status_STATUS_INVALID_REQUEST, "path is required")
	}
	d, err := w.Document(rel, r.MaxDocument)
	switch {
	case errors.Is(err, pool.ErrDocumentTooLarge):
		return nil, fail(daemonv1.Status_STATUS_INVALID_REQUEST, err.Error())
	case err != nil:
		return nil, fail(daemonv1.Status_STATUS_NOT_FOUND, "no such file in this revision")
	}
	return d, nil
}

func needsPosition(op daemonv1.Op) bool {
	switch op {
	case daemonv1.Op_OP_DOCUMENT_SYMBOLS, daemonv1.Op_OP_WORKSPACE_SYMBOLS, daemonv1.Op_OP_DIAGNOSTICS:
		return false
	}
	return true
}

// inRange reports whether pos is inside doc: the line exists and the
// character is at most the line's length in UTF-16 code units.
func inRange(doc []byte, pos *daemonv1.Position) bool {
	line, char := pos.GetLine(), pos.GetCharacter()
	var cur uint32
	start := 0
	for i := 0; i < len(doc) && cur < line; i++ {
		if doc[i] == '\n' {
			cur++
			start = i + 1
		}
	}
	if cur < line {
		return false
	}
	var units uint32
	for _, r := range string(lineAt(doc, start)) {
		if r >= 0x10000 {
			units += 2
		} else {
			units++
		}
	}
	return char <= units
}

func lineAt(doc []byte, start int) []byte {
	end := start
	for end < len(doc) && doc[end] != '\n' {
		end++
	}
	l := doc[start:end]
	if len(l) > 0 && l[len(l)-1] == '\r' {
		l = l[:len(l)-1]
	}
	if !utf8.Valid(l) {
		return []byte(string([]rune(string(l))))
	}
	return l
}

// evidence binds the answer to what produced it.
func evidence(info runtime.Info, fingerprint string, gen uint64, doc *pool.Document, req *daemonv1.QueryRequest, c *converter) *daemonv1.Evidence {
	e := &daemonv1.Evidence{
		State:                 daemonv1.EvidenceState_EVIDENCE_STATE_CURRENT,
		Server:                &daemonv1.ServerInfo{Id: info.ID, Version: info.Version, Generation: gen},
		CapabilityFingerprint: fingerprint,
		QueryFingerprint:      queryFingerprint(req),
		Warnings:              c.warnings,
	}
	if doc != nil {
		e.DocumentSha256 = doc.SHA256
	}
	if c.dropped > 0 {
		e.State = daemonv1.EvidenceState_EVIDENCE_STATE_PARTIAL
	}
	if c.unexplained > 0 {
		e.Warnings = append(e.Warnings, fmt.Sprintf("%d result(s) outside the workspace or malformed were dropped", c.unexplained))
	}
	if c.incomplete {
		e.State = daemonv1.EvidenceState_EVIDENCE_STATE_PARTIAL
	}
	if len(c.load) > 0 {
		// An empty answer from a server that could not load the project,
		// or had not loaded it yet, is not "nothing to say": nothing could
		// be answered.
		e.Warnings = append(e.Warnings, c.load...)
		e.State = daemonv1.EvidenceState_EVIDENCE_STATE_PARTIAL
		if c.empty {
			e.State = daemonv1.EvidenceState_EVIDENCE_STATE_UNAVAILABLE
		}
	}
	return e
}

func queryFingerprint(req *daemonv1.QueryRequest) string {
	b, _ := json.Marshal([]any{req.GetOp().String(), req.GetPath(), req.GetPosition().GetLine(), req.GetPosition().GetCharacter(),
		req.GetQuery(), req.GetIncludeDeclaration(), req.GetLimit(), req.GetOffset(),
		req.GetSymbol(), req.GetText(), req.ContextLines, req.GetIncludeBody(), req.GetStartLine(), req.GetEndLine(), req.GetModule()})
	if l := req.GetLanguage(); l != "" {
		// Only when set, so that the fingerprints of requests without a
		// language stay what they were.
		b = append(b, l...)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// serverFailure maps a failed call to a status: the caller's deadline is a
// timeout, anything else means the server is not usable right now.
func serverFailure(ctx context.Context, err error) *daemonv1.QueryResponse {
	if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		return fail(daemonv1.Status_STATUS_TIMEOUT, "the language server did not answer in time")
	}
	if errors.Is(err, pool.ErrClosed) {
		return fail(daemonv1.Status_STATUS_NEEDS_TREE, "the workspace was deleted")
	}
	return fail(daemonv1.Status_STATUS_UNAVAILABLE, "the language server is unavailable")
}
