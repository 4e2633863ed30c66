package query

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/hanzoai/lsp/daemon/internal/jsonrpc"
	"github.com/hanzoai/lsp/daemon/internal/lsp"
	"github.com/hanzoai/lsp/daemon/internal/pool"
	"github.com/hanzoai/lsp/daemon/internal/runtime"
	"github.com/hanzoai/lsp/daemon/internal/sanitize"
	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
)

// Addressing by name (CONTRACT §4): a position given as a symbol's name or
// container path, or as a text on a line. Resolution costs at most one
// server round trip (document or workspace symbols) inside the same
// request; a text anchor costs none.

// Bounds of a name address.
const (
	maxSymbolQuery = 256
	maxAnchorText  = 256
	maxCandidates  = 20
)

// symbolForms are the qualified spellings of s a query may name: its
// container path and name ("github.com/google/uuid.NewRandom"), its name
// alone (which some servers already qualify: "UUID.String"), and its
// container with its name's last segment. Method receivers as gopls
// spells them ("(*Client).Do") become "Client.Do".
func symbolForms(s lsp.Symbol) []string {
	name, container := normName(s.Name), normName(s.Container)
	forms := []string{name}
	if container != "" {
		forms = append(forms, container+"."+name)
		if i := strings.LastIndexByte(name, '.'); i >= 0 {
			forms = append(forms, container+"."+name[i+1:])
		}
	}
	return forms
}

// normName drops what servers put around names: receiver parentheses and
// pointers, quotes of module names, spaces.
func normName(s string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case '(', ')', '*', '"', '\'', '`', ' ':
			return -1
		}
		return r
	}, s)
}

// matchesSymbol reports whether query names s: one of its forms is the
// query, or ends with it at a '.' or '/' boundary ("uuid.NewRandom"
// names "github.com/google/uuid.NewRandom"; "Random" names nothing).
func matchesSymbol(s lsp.Symbol, query string) bool {
	for _, f := range symbolForms(s) {
		if f == query {
			return true
		}
		if strings.HasSuffix(f, query) {
			if b := f[len(f)-len(query)-1]; b == '.' || b == '/' {
				return true
			}
		}
	}
	return false
}

// unqualified is query without a package qualifier ("uuid.NewRandom" →
// "NewRandom", "pkg/sub.Type.Method" → "Type.Method"): document symbols
// carry no package, so a qualified query retries with this.
func unqualified(query string) string {
	q := query
	if i := strings.LastIndexByte(q, '/'); i >= 0 {
		q = q[i+1:]
	}
	if _, rest, ok := strings.Cut(q, "."); ok {
		return rest
	}
	return ""
}

// lastSegment is the name a workspace-symbol query asks the server for.
func lastSegment(query string) string {
	if i := strings.LastIndexAny(query, "./"); i >= 0 {
		return query[i+1:]
	}
	return query
}

// validSymbolQuery reports whether q is a name or container path: no
// spaces or control characters, segments not empty.
func validSymbolQuery(q string) bool {
	if q == "" || len(q) > maxSymbolQuery || !utf8.ValidString(q) {
		return false
	}
	for _, r := range q {
		if r <= ' ' || r == 0x7f {
			return false
		}
	}
	for _, seg := range strings.FieldsFunc(q, func(r rune) bool { return r == '.' || r == '/' }) {
		if seg == "" {
			return false
		}
	}
	return !strings.HasPrefix(q, ".") && !strings.HasSuffix(q, ".") && !strings.Contains(q, "..") &&
		!strings.HasPrefix(q, "/") && !strings.HasSuffix(q, "/") && !strings.Contains(q, "//")
}

// matchSymbols keeps the symbols query names, once each (servers list a
// symbol more than once under some queries).
func matchSymbols(syms []lsp.Symbol, query string) []lsp.Symbol {
	var out []lsp.Symbol
	seen := map[string]bool{}
	for _, s := range syms {
		if !matchesSymbol(s, query) {
			continue
		}
		k := string(s.URI) + "\x00" + posKey(s.SelectionRange.Start)
		if seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, s)
	}
	return out
}

func posKey(p lsp.Position) string {
	return strconv.FormatUint(uint64(p.Line), 10) + ":" + strconv.FormatUint(uint64(p.Character), 10)
}

// utf16Len is the length of s in UTF-16 code units.
func utf16Len(s string) uint32 {
	var n uint32
	for _, r := range s {
		n += runeUnits(r)
	}
	return n
}

// runeUnits is r's length in UTF-16 code units (an invalid byte reads as
// U+FFFD: one, as inRange counts).
func runeUnits(r rune) uint32 {
	if r >= 0x10000 {
		return 2
	}
	return 1
}

// lineText is line n of doc (without its line ending), false past the end.
func lineText(doc []byte, n uint32) (string, bool) {
	var cur uint32
	start := 0
	for i := 0; i < len(doc) && cur < n; i++ {
		if doc[i] == '\n' {
			cur++
			start = i + 1
		}
	}
	if cur < n {
		return "", false
	}
	return string(lineAt(doc, start)), true
}

// textPosition is the range of the first occurrence of text on line of
// doc, in UTF-16 code units: the LSP's own arithmetic, done here so that a
// caller counting bytes or code points never has to.
func textPosition(doc []byte, line uint32, text string) (lsp.Range, bool) {
	l, ok := lineText(doc, line)
	if !ok || text == "" {
		return lsp.Range{}, false
	}
	i := strings.Index(l, text)
	if i < 0 {
		return lsp.Range{}, false
	}
	start := utf16Len(l[:i])
	return lsp.Range{
		Start: lsp.Position{Line: line, Character: start},
		End:   lsp.Position{Line: line, Character: start + utf16Len(text)},
	}, true
}

// namePosition is where name occurs as a word at or after r.Start and
// within r in doc: a workspace symbol's range may be its whole
// declaration, and the position must be its name's. r.Start when the name
// does not occur there.
func namePosition(doc []byte, r lsp.Range, name string) lsp.Position {
	if name == "" {
		return r.Start
	}
	for ln := r.Start.Line; ln <= r.End.Line && ln < r.Start.Line+200; ln++ {
		l, ok := lineText(doc, ln)
		if !ok {
			break
		}
		from := 0
		if ln == r.Start.Line {
			from = byteOffset(l, r.Start.Character)
		}
		for off := from; off <= len(l); {
			i := strings.Index(l[off:], name)
			if i < 0 {
				break
			}
			at := off + i
			end := at + len(name)
			if (at == 0 || !identByte(l[at-1])) && (end == len(l) || !identByte(l[end])) {
				return lsp.Position{Line: ln, Character: utf16Len(l[:at])}
			}
			off = at + 1
		}
	}
	return r.Start
}

func identByte(b byte) bool {
	return b == '_' || b == '$' || b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= 0x80
}

// byteOffset is the byte offset in l of UTF-16 offset char (clamped).
func byteOffset(l string, char uint32) int {
	var units uint32
	for i, r := range l {
		if units >= char {
			return i
		}
		units += runeUnits(r)
	}
	return len(l)
}

// resolution is where a symbol address put the position.
type resolution struct {
	rel string
	doc *pool.Document
	pos lsp.Position
	loc *daemonv1.Location
}

// resolveSymbol finds the one symbol query names among the document
// symbols of rel (one round trip, none when cached). The position is the
// symbol's selection range start (its name).
func (r *Runner) resolveSymbol(ctx context.Context, w *pool.Workspace, spec *pool.Spec, srv *runtime.Server, client *lsp.Client, c *converter, rel, query string, cache symbolCacheView) (resolution, *daemonv1.QueryResponse) {
	l, ok := cache.get(rel)
	if !ok {
		var err error
		if l, err = client.DocumentSymbols(ctx, lsp.DocumentURI(c.pol.FileURI(rel))); err != nil {
			return resolution{}, listFailure(ctx, err)
		}
		cache.put(rel, l)
	}
	matches := matchSymbols(l.Items, query)
	if len(matches) == 0 {
		if q := unqualified(query); q != "" {
			matches = matchSymbols(l.Items, q)
		}
	}
	return r.pick(w, c, query, matches, rel, notReady(w, spec, srv, client))
}

// resolveInWorkspace finds the one symbol query names among the workspace
// symbols of every server running for w's languages, asked at once
// (askWorkspaceSymbols: one round trip each, side by side): in a
// repository of several languages the name may be in any of them. A
// server that cannot list symbols is left out while another answers.
func (r *Runner) resolveInWorkspace(ctx context.Context, w *pool.Workspace, c *converter, query string) (resolution, *daemonv1.QueryResponse) {
	specs := r.workspaceSpecs(w)
	if len(specs) == 0 {
		return resolution{}, fail(daemonv1.Status_STATUS_UNSUPPORTED_LANGUAGE, "no language server is configured")
	}
	var matches []lsp.Symbol
	var failure *daemonv1.QueryResponse
	var unready []string
	for _, s := range r.askWorkspaceSymbols(ctx, w, specs, c.pol, lastSegment(query)) {
		switch {
		case s.failed != nil:
			failure = cmp.Or(failure, s.failed)
		case s.rpcErr != nil:
			failure = cmp.Or(failure, listFailure(ctx, s.rpcErr))
		case s.offered:
			matches = append(matches, matchSymbols(s.list.Items, query)...)
			if !s.loaded {
				unready = append(unready, s.spec.ID+" was still loading the project")
			} else if why := notReady(w, s.spec, s.srv, s.client); why != "" {
				unready = append(unready, why)
			}
		}
	}
	if len(matches) == 0 && failure != nil {
		return resolution{}, failure
	}
	return r.pick(w, c, query, matches, "", strings.Join(unready, "; "))
}

// workspaceSpecs are the servers of w's languages (pool.Workspace.Specs:
// also one the budget stopped, which is asked again), in the
// configuration's order; the first configured server when w has none.
func (r *Runner) workspaceSpecs(w *pool.Workspace) []*pool.Spec {
	out := w.Specs()
	if len(out) == 0 && len(r.Pool.Specs()) > 0 {
		out = append(out, &r.Pool.Specs()[0])
	}
	return out
}

// notReady says why a server's symbols may lack a name it would list
// with the project loaded: it was still indexing, or could not load the
// project. A miss is then no proof the name is absent.
func notReady(w *pool.Workspace, spec *pool.Spec, srv *runtime.Server, client *lsp.Client) string {
	if _, ok := client.Indexing(); ok {
		return spec.ID + " was still indexing the project"
	}
	if load := w.LoadWarnings(spec, srv); len(load) > 0 {
		return load[0]
	}
	return ""
}

// listFailure is the answer when a server could not list symbols.
func listFailure(ctx context.Context, err error) *daemonv1.QueryResponse {
	var rpcErr *jsonrpc.Error
	if errors.As(err, &rpcErr) && ctx.Err() == nil {
		return fail(daemonv1.Status_STATUS_SYMBOL_NOT_FOUND,
			fmt.Sprintf("the language server could not list symbols (code %d)", rpcErr.Code))
	}
	return serverFailure(ctx, err)
}

// pick is the one repository symbol among matches: 404 for none, 409 with
// the candidates for several. rel is the file the matches are the
// document symbols of, "" for workspace symbols (whose range is searched
// for the name, since servers give some as their whole declaration).
// notReady, when set, is why the servers' lists may be incomplete; a miss
// then says so.
func (r *Runner) pick(w *pool.Workspace, c *converter, query string, matches []lsp.Symbol, rel, notReady string) (resolution, *daemonv1.QueryResponse) {
	byDoc := rel != ""
	type cand struct {
		s    lsp.Symbol
		wire *daemonv1.Symbol
	}
	var in []cand
	for _, m := range matches {
		loc, err := c.pol.Map(string(m.URI))
		if err != nil || loc.External {
			continue // only the repository's own symbols are addressable
		}
		in = append(in, cand{m, &daemonv1.Symbol{
			Name: sanitize.Line(c.clean(m.Name), maxName), Kind: m.Kind.String(), Detail: sanitize.Line(c.clean(m.Detail), maxText),
			Path: loc.Path, Range: pbRange(m.Range), SelectionRange: pbRange(m.SelectionRange),
			Container: sanitize.Line(c.clean(m.Container), maxName), Language: r.fileLanguage(loc.Path),
		}})
	}
	sort.SliceStable(in, func(i, j int) bool {
		a, b := in[i].wire, in[j].wire
		if a.Path != b.Path {
			return a.Path < b.Path
		}
		return lessPos(a.SelectionRange.Start, b.SelectionRange.Start)
	})
	switch {
	case len(in) == 0:
		where := "the workspace"
		if byDoc {
			where = rel
		}
		msg := fmt.Sprintf("no symbol %s in %s", query, where)
		if notReady != "" {
			msg += " so far (" + sanitize.Line(notReady, 256) + "): the name may still exist"
		}
		return resolution{}, fail(daemonv1.Status_STATUS_SYMBOL_NOT_FOUND, msg)
	case len(in) > 1:
		resp := fail(daemonv1.Status_STATUS_AMBIGUOUS_SYMBOL,
			fmt.Sprintf("%s names %d symbols: give a container path (Type.Method), a path, or a position", query, len(in)))
		for _, x := range in[:min(len(in), maxCandidates)] {
			resp.Candidates = append(resp.Candidates, x.wire)
		}
		resp.TotalCandidates = uint32(len(in))
		return resolution{}, resp
	}
	s, wire := in[0].s, in[0].wire
	doc, st := r.readDocument(w, wire.Path)
	if st != nil {
		return resolution{}, st
	}
	sel := s.SelectionRange
	if !byDoc {
		name := lastSegment(normName(s.Name))
		start := namePosition(doc.Text, s.Range, name)
		sel = lsp.Range{Start: start, End: lsp.Position{Line: start.Line, Character: start.Character + utf16Len(name)}}
	}
	if !inRange(doc.Text, &daemonv1.Position{Line: sel.Start.Line, Character: sel.Start.Character}) {
		return resolution{}, fail(daemonv1.Status_STATUS_SYMBOL_NOT_FOUND, "the server placed the symbol outside its file")
	}
	return resolution{rel: wire.Path, doc: doc, pos: sel.Start, loc: &daemonv1.Location{Path: wire.Path, Range: pbRange(sel)}}, nil
}

// fileLanguage is the languageId of a repository file as the
// configuration serves it, "" for a file no server serves.
func (r *Runner) fileLanguage(rel string) string {
	if s, ok := r.Pool.SpecFor(rel); ok {
		return s.LanguageID(rel)
	}
	return ""
}

// maxCachedSymbolFiles bounds the document symbols a symbol cache keeps.
const maxCachedSymbolFiles = 256

// symbolCache keeps one server generation's document symbols of a
// workspace's files for name lookups: a tree never changes under its
// commit, and document symbols are the file's syntax, so asking again
// would give the same list. There is one per server of a workspace; a new
// generation (a restarted server) empties it, so earlier generations'
// lists never pile up.
type symbolCache struct {
	mu    sync.Mutex
	gen   uint64
	files map[string]lsp.List[lsp.Symbol]
}

type symbolCacheKey struct{ spec string }

// symbolCacheView is a symbol cache as one server generation sees it.
type symbolCacheView struct {
	*symbolCache
	gen uint64
}

func symbolCacheFor(w *pool.Workspace, spec string, gen uint64) symbolCacheView {
	sc := w.Derived(symbolCacheKey{spec}, func() any { return &symbolCache{files: map[string]lsp.List[lsp.Symbol]{}} }).(*symbolCache)
	return symbolCacheView{sc, gen}
}

func (v symbolCacheView) get(rel string) (lsp.List[lsp.Symbol], bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.gen != v.symbolCache.gen {
		return lsp.List[lsp.Symbol]{}, false
	}
	l, ok := v.files[rel]
	return l, ok
}

// put keeps a complete, non-empty list (an empty one may be a server
// still loading). Elements the decoder dropped would be dropped again. A
// list of a newer generation than the cache's replaces the cache; one of
// an older generation is not kept.
func (v symbolCacheView) put(rel string, l lsp.List[lsp.Symbol]) {
	if l.Truncated || len(l.Items) == 0 {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	switch {
	case v.gen > v.symbolCache.gen:
		v.symbolCache.gen, v.files = v.gen, map[string]lsp.List[lsp.Symbol]{}
	case v.gen < v.symbolCache.gen:
		return
	}
	if len(v.files) < maxCachedSymbolFiles {
		v.files[rel] = l
	}
}

// attachCode gives every location of resp its code (cd's context lines
// around its range); symbols get their whole range with includeBody, else
// their name's lines; an incoming call's code runs from the caller's range
// to its last call site (its from_ranges are in the caller's file).
func attachCode(cd *coder, c *converter, resp *daemonv1.QueryResponse, includeBody, incoming bool) {
	lines := func(r *daemonv1.Range) (uint32, uint32) { return r.GetStart().GetLine(), r.GetEnd().GetLine() }
	switch res := resp.GetResult().(type) {
	case *daemonv1.QueryResponse_Locations:
		for _, l := range res.Locations.GetItems() {
			a, b := lines(l.Range)
			l.Code = cd.code(l.Module, l.Path, a, b)
		}
	case *daemonv1.QueryResponse_Symbols:
		for _, s := range res.Symbols.GetItems() {
			rg := s.SelectionRange
			if includeBody || rg == nil {
				rg = s.Range
			}
			a, b := lines(rg)
			s.Code = cd.code("", s.Path, a, b)
		}
	case *daemonv1.QueryResponse_Calls:
		for _, x := range res.Calls.GetItems() {
			a, b := lines(x.Range)
			if incoming {
				for _, f := range x.GetFromRanges() {
					fa, fb := lines(f)
					a, b = min(a, fa), max(b, fb)
				}
			}
			x.Code = cd.code(c.ext[x], x.Path, a, b)
		}
	case *daemonv1.QueryResponse_Types:
		for _, x := range res.Types.GetItems() {
			a, b := lines(x.Range)
			x.Code = cd.code(c.ext[x], x.Path, a, b)
		}
	}
}
