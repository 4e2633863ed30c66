package ctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf16"
)

// providers maps a tool the service negotiated to the server capability
// the bridge then advertises. Diagnostics need none: they are pushed.
var providers = map[string]struct {
	name  string
	value any
}{
	"hover":             {"hoverProvider", true},
	"definition":        {"definitionProvider", true},
	"declaration":       {"declarationProvider", true},
	"references":        {"referencesProvider", true},
	"implementation":    {"implementationProvider", true},
	"type_definition":   {"typeDefinitionProvider", true},
	"document_symbols":  {"documentSymbolProvider", true},
	"workspace_symbols": {"workspaceSymbolProvider", true},
	"signature_help":    {"signatureHelpProvider", map[string]any{"triggerCharacters": []string{"(", ","}}},
	"completion":        {"completionProvider", map[string]any{"triggerCharacters": []string{"."}}},
	"call_hierarchy":    {"callHierarchyProvider", true},
	"type_hierarchy":    {"typeHierarchyProvider", true},
}

type initializeParams struct {
	RootURI          string          `json:"rootUri"`
	RootPath         string          `json:"rootPath"`
	WorkDoneToken    json.RawMessage `json:"workDoneToken"`
	WorkspaceFolders []struct {
		URI string `json:"uri"`
	} `json:"workspaceFolders"`
	Capabilities struct {
		Window struct {
			WorkDoneProgress bool `json:"workDoneProgress"`
		} `json:"window"`
		General struct {
			PositionEncodings []string `json:"positionEncodings"`
		} `json:"general"`
	} `json:"capabilities"`
}

// initialize finds the root, prepares the revision (with progress when
// the editor shows it) and advertises what its servers negotiated.
func (b *bridge) initialize(ctx context.Context, raw json.RawMessage) (any, *rpcError) {
	var p initializeParams
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, &rpcError{codeInvalidParams, "initialize: " + err.Error()}
	}
	if b.root == "" {
		for _, u := range append([]string{p.RootURI}, folderURIs(p)...) {
			if dir, ok := fileURIPath(u); ok {
				b.root = dir
				break
			}
		}
		if b.root == "" && p.RootPath != "" {
			b.root = filepath.Clean(p.RootPath)
		}
		if b.root == "" {
			return nil, &rpcError{codeInvalidParams, "initialize: no --root and no workspace folder from the editor"}
		}
	}
	if encs := p.Capabilities.General.PositionEncodings; len(encs) > 0 && !contains(encs, "utf-16") {
		// The service speaks UTF-16 only; every client must accept it.
		b.log.Warn("the editor does not list utf-16 among its position encodings; answering in utf-16 anyway")
	}

	progress := b.progressReporter(ctx, p)
	body := map[string]any{"repo": b.repo}
	if b.rev != "" {
		body["rev"] = b.rev
	}
	start := time.Now()
	var ansRaw []byte
	var err error
	if progress != nil {
		ansRaw, err = b.c.prepare(ctx, body, progress.report)
		progress.end(err)
	} else {
		ansRaw, err = b.c.post(ctx, "prepare", body)
	}
	if err != nil {
		b.log.Error("prepare", "err", err)
		return nil, &rpcError{codeRequestFailed, "prepare " + b.repo + ": " + err.Error()}
	}
	var a answer
	if err := json.Unmarshal(ansRaw, &a); err != nil {
		return nil, &rpcError{codeRequestFailed, "prepare: the answer does not have the contract's shape"}
	}
	caps := map[string]any{
		"positionEncoding": "utf-16",
		// Full sync: the bridge keeps each buffer only to compare it
		// with the revision, so the simplest exact form is the best.
		"textDocumentSync": map[string]any{"openClose": true, "change": 1, "save": map[string]any{"includeText": false}},
	}
	tools := map[string]bool{}
	for _, l := range a.Languages {
		for _, t := range a.Tools[l] {
			tools[t] = true
			if pr, ok := providers[t]; ok {
				caps[pr.name] = pr.value
			}
		}
	}
	b.mu.Lock()
	b.tools, b.commit, b.state = tools, a.Commit, 1
	b.mu.Unlock()
	b.log.Info("prepared", "commit", a.Commit, "languages", a.Languages, "charged", a.Prepared, "took", time.Since(start).Round(time.Millisecond), "root", b.root)
	for _, w := range a.Warnings {
		b.logMessage(msgWarning, w)
	}
	return map[string]any{
		"capabilities": caps,
		"serverInfo":   map[string]any{"name": "lspctl lsp", "version": b.repo + "@" + short(a.Commit)},
	}, nil
}

func folderURIs(p initializeParams) []string {
	var out []string
	for _, f := range p.WorkspaceFolders {
		out = append(out, f.URI)
	}
	return out
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// workDone reports the prepare as $/progress begin, report, end.
type workDone struct {
	b     *bridge
	token json.RawMessage
	begun bool
}

// progressReporter returns the prepare's progress for the editor, or nil
// when it cannot show one. The initialize's own workDoneToken is used when
// the editor sent one; otherwise the bridge asks for a token
// (window/workDoneProgress/create) — strictly the protocol allows only a
// few messages before the initialize answer, but editors that advertise
// window.workDoneProgress without sending a token (Neovim 0.7) accept it,
// and the prepare is the one long wait a person should see.
func (b *bridge) progressReporter(ctx context.Context, p initializeParams) *workDone {
	if len(p.WorkDoneToken) > 0 && string(p.WorkDoneToken) != "null" {
		return &workDone{b: b, token: p.WorkDoneToken}
	}
	if !p.Capabilities.Window.WorkDoneProgress {
		return nil
	}
	token, _ := json.Marshal(fmt.Sprintf("lspctl-prepare-%d", time.Now().UnixNano()))
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := b.call(cctx, "window/workDoneProgress/create", map[string]any{"token": token}); err != nil {
		b.log.Info("the editor did not accept a progress token; no progress shown", "err", err)
		return nil
	}
	return &workDone{b: b, token: token}
}

func (w *workDone) report(ev progressEvent) {
	msg := ev.Stage
	if ev.Files > 0 {
		msg = fmt.Sprintf("%s (%d files, %s)", ev.Stage, ev.Files, humanBytes(ev.Bytes))
	}
	pct := stageStep[ev.Stage] * 20
	if !w.begun {
		w.begun = true
		w.b.notify("$/progress", map[string]any{"token": w.token, "value": map[string]any{
			"kind": "begin", "title": "Preparing " + w.b.repo, "message": msg, "percentage": pct, "cancellable": false}})
		return
	}
	w.b.notify("$/progress", map[string]any{"token": w.token, "value": map[string]any{"kind": "report", "message": msg, "percentage": pct}})
}

func (w *workDone) end(err error) {
	if !w.begun {
		w.report(progressEvent{Stage: "resolving"})
	}
	msg := "ready"
	if err != nil {
		msg = "failed: " + err.Error()
	}
	w.b.notify("$/progress", map[string]any{"token": w.token, "value": map[string]any{"kind": "end", "message": msg}})
}

// fileURIPath returns the local path of a file: URI.
func fileURIPath(u string) (string, bool) {
	pu, err := url.Parse(u)
	if err != nil || pu.Scheme != "file" || (pu.Host != "" && pu.Host != "localhost") || !filepath.IsAbs(pu.Path) {
		return "", false
	}
	return filepath.Clean(pu.Path), true
}

// repoPath maps an editor URI to the repository path under the root.
func (b *bridge) repoPath(uri string) (string, bool) {
	return repoPathUnder(b.root, uri)
}

func repoPathUnder(root, uri string) (string, bool) {
	p, ok := fileURIPath(uri)
	if !ok || root == "" {
		return "", false
	}
	rel, err := filepath.Rel(root, p)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", false
	}
	return filepath.ToSlash(rel), true
}

// localURI maps a repository path from an answer to a file URI under the
// root. A path that would leave the root is refused.
func localURI(root, path string) (string, bool) {
	if path == "" || strings.HasPrefix(path, "/") || strings.Contains(path, "\x00") {
		return "", false
	}
	for _, seg := range strings.Split(path, "/") {
		if seg == ".." {
			return "", false
		}
	}
	u := url.URL{Scheme: "file", Path: filepath.Join(root, filepath.FromSlash(path))}
	return u.String(), true
}

// position is an LSP text document position request's common part.
type positionParams struct {
	TextDocument struct {
		URI string `json:"uri"`
	} `json:"textDocument"`
	Position struct {
		Line      int64 `json:"line"`
		Character int64 `json:"character"`
	} `json:"position"`
	Context struct {
		IncludeDeclaration bool `json:"includeDeclaration"`
	} `json:"context"`
}

type handler func(b *bridge, ctx context.Context, params json.RawMessage) (any, *rpcError)

var handlers = map[string]handler{
	"textDocument/hover":                (*bridge).hover,
	"textDocument/definition":           locateAs("definition"),
	"textDocument/declaration":          locateAs("declaration"),
	"textDocument/typeDefinition":       locateAs("type"),
	"textDocument/implementation":       locateAs("implementation"),
	"textDocument/references":           locateAs("reference"),
	"textDocument/documentSymbol":       (*bridge).documentSymbols,
	"workspace/symbol":                  (*bridge).workspaceSymbols,
	"textDocument/signatureHelp":        (*bridge).signature,
	"textDocument/completion":           (*bridge).completion,
	"textDocument/prepareCallHierarchy": prepareHierarchy("call_hierarchy"),
	"callHierarchy/incomingCalls":       hierarchyStep("calls", "incoming"),
	"callHierarchy/outgoingCalls":       hierarchyStep("calls", "outgoing"),
	"textDocument/prepareTypeHierarchy": prepareHierarchy("type_hierarchy"),
	"typeHierarchy/supertypes":          hierarchyStep("types", "supertypes"),
	"typeHierarchy/subtypes":            hierarchyStep("types", "subtypes"),
}

// ask posts a query about the pinned revision. A capability or language
// the service does not offer for this file is an empty answer (the
// editor asked a question with no answer), other service errors fail
// the request with the service's code and message.
func (b *bridge) ask(ctx context.Context, route string, body map[string]any) (*answer, *rpcError) {
	b.mu.Lock()
	body["repo"], body["rev"] = b.repo, b.commit
	b.mu.Unlock()
	raw, err := b.c.post(ctx, route, body)
	if err != nil {
		var se *serviceError
		if errors.As(err, &se) && (se.Code == "capability_unavailable" || se.Code == "unsupported_language") {
			b.log.Info("no answer", "route", route, "code", se.Code)
			return nil, nil
		}
		if ctx.Err() != nil {
			return nil, &rpcError{codeRequestCancelled, "cancelled"}
		}
		b.log.Warn("service error", "route", route, "err", err)
		return nil, &rpcError{codeRequestFailed, err.Error()}
	}
	var a answer
	if err := json.Unmarshal(raw, &a); err != nil {
		return nil, &rpcError{codeRequestFailed, route + ": the answer does not have the contract's shape"}
	}
	return &a, nil
}

// askAll follows next_cursor for list answers, up to a bound an editor
// can display.
func (b *bridge) askAll(ctx context.Context, route string, body map[string]any) (*answer, *rpcError) {
	const pages = 5
	body["limit"] = 1000
	first, rerr := b.ask(ctx, route, body)
	if first == nil || rerr != nil {
		return first, rerr
	}
	a := first
	for i := 1; i < pages && a.NextCursor != nil; i++ {
		body["cursor"] = *a.NextCursor
		next, rerr := b.ask(ctx, route, body)
		if next == nil || rerr != nil {
			break
		}
		first.Locations = append(first.Locations, next.Locations...)
		first.Symbols = append(first.Symbols, next.Symbols...)
		first.Diagnostics = append(first.Diagnostics, next.Diagnostics...)
		first.Completions = append(first.Completions, next.Completions...)
		first.Calls = append(first.Calls, next.Calls...)
		first.Types = append(first.Types, next.Types...)
		a = next
	}
	return first, nil
}

// positionBody reads a position request into the service's body, with
// the document's path.
func (b *bridge) positionBody(params json.RawMessage) (map[string]any, string, *rpcError) {
	var p positionParams
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, "", &rpcError{codeInvalidParams, err.Error()}
	}
	path, ok := b.repoPath(p.TextDocument.URI)
	if !ok {
		return nil, "", nil
	}
	body := map[string]any{"path": path, "line": p.Position.Line, "character": p.Position.Character}
	if p.Context.IncludeDeclaration {
		body["include_declaration"] = true
	}
	return body, p.TextDocument.URI, nil
}

// stale compares the answer's view of the document with the buffer; when
// they differ it warns once per buffer version and reports true.
func (b *bridge) stale(uri string, a *answer) bool {
	if a == nil || a.Evidence.DocumentSHA256 == nil {
		return false
	}
	b.mu.Lock()
	d := b.docs[uri]
	if d == nil || d.sha == *a.Evidence.DocumentSHA256 {
		b.mu.Unlock()
		return false
	}
	warn := d.warned != d.version
	d.warned = d.version
	path, commit := d.path, b.commit
	b.mu.Unlock()
	if warn {
		b.logMessage(msgWarning, fmt.Sprintf("%s differs from %s@%s: answers are about the revision and may be off (stale)", path, b.repo, short(commit)))
	}
	return true
}

func (b *bridge) hover(ctx context.Context, params json.RawMessage) (any, *rpcError) {
	body, uri, rerr := b.positionBody(params)
	if body == nil {
		return nil, rerr
	}
	a, rerr := b.ask(ctx, "hover", body)
	if a == nil || a.Hover == nil {
		return nil, rerr
	}
	md := a.Hover.Markdown
	if b.stale(uri, a) {
		md = "*stale: this buffer differs from the revision the answer is about*\n\n" + md
	}
	out := map[string]any{"contents": map[string]any{"kind": "markdown", "value": md}}
	if a.Hover.Range != nil {
		out["range"] = a.Hover.Range
	}
	return out, nil
}

func locateAs(relation string) handler {
	return func(b *bridge, ctx context.Context, params json.RawMessage) (any, *rpcError) {
		body, uri, rerr := b.positionBody(params)
		if body == nil {
			return nil, rerr
		}
		body["relation"] = relation
		if relation != "reference" {
			delete(body, "include_declaration")
		}
		a, rerr := b.askAll(ctx, "locate", body)
		if a == nil {
			return nil, rerr
		}
		b.stale(uri, a)
		locs := []map[string]any{}
		for _, l := range a.Locations {
			if l.External || l.Range == nil {
				// No local file holds std@… or module@… sources; a
				// virtual read-only document would need a content
				// route the service does not have.
				b.log.Info("dropped an external location", "path", l.Path, "module", deref(l.Module))
				b.logMessage(msgLog, fmt.Sprintf("dropped external location %s (%s)", l.Path, deref(l.Module)))
				continue
			}
			lu, ok := localURI(b.root, l.Path)
			if !ok {
				continue
			}
			locs = append(locs, map[string]any{"uri": lu, "range": l.Range})
		}
		return locs, nil
	}
}

func (b *bridge) documentSymbols(ctx context.Context, params json.RawMessage) (any, *rpcError) {
	var p struct {
		TextDocument struct {
			URI string `json:"uri"`
		} `json:"textDocument"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, &rpcError{codeInvalidParams, err.Error()}
	}
	path, ok := b.repoPath(p.TextDocument.URI)
	if !ok {
		return nil, nil
	}
	a, rerr := b.askAll(ctx, "symbols", map[string]any{"path": path})
	if a == nil {
		return nil, rerr
	}
	b.stale(p.TextDocument.URI, a)
	return b.symbolInformation(a), nil
}

func (b *bridge) workspaceSymbols(ctx context.Context, params json.RawMessage) (any, *rpcError) {
	var p struct {
		Query string `json:"query"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, &rpcError{codeInvalidParams, err.Error()}
	}
	if p.Query == "" {
		return []any{}, nil // the service wants a query; an empty one lists nothing useful
	}
	a, rerr := b.askAll(ctx, "symbols", map[string]any{"query": p.Query})
	if a == nil {
		return nil, rerr
	}
	return b.symbolInformation(a), nil
}

// symbolInformation is the flat LSP form; the service's symbols are
// flat with their container's name, which is what it carries.
func (b *bridge) symbolInformation(a *answer) []map[string]any {
	out := []map[string]any{}
	for _, s := range a.Symbols {
		lu, ok := localURI(b.root, s.Path)
		if !ok || s.Range == nil {
			continue
		}
		si := map[string]any{"name": s.Name, "kind": symbolKind(s.Kind), "location": map[string]any{"uri": lu, "range": s.Range}}
		if s.Container != nil {
			si["containerName"] = *s.Container
		}
		out = append(out, si)
	}
	return out
}

func (b *bridge) signature(ctx context.Context, params json.RawMessage) (any, *rpcError) {
	body, uri, rerr := b.positionBody(params)
	if body == nil {
		return nil, rerr
	}
	a, rerr := b.ask(ctx, "signature", body)
	if a == nil || len(a.Signatures) == 0 {
		return nil, rerr
	}
	b.stale(uri, a)
	sigs := []map[string]any{}
	for _, s := range a.Signatures {
		ps := []map[string]any{}
		for _, p := range s.Parameters {
			ps = append(ps, map[string]any{"label": p.Label})
		}
		sig := map[string]any{"label": s.Label, "parameters": ps}
		if s.Documentation != nil {
			sig["documentation"] = map[string]any{"kind": "markdown", "value": *s.Documentation}
		}
		sigs = append(sigs, sig)
	}
	out := map[string]any{"signatures": sigs}
	if a.ActiveSignature != nil {
		out["activeSignature"] = *a.ActiveSignature
	}
	if a.ActiveParameter != nil {
		out["activeParameter"] = *a.ActiveParameter
	}
	return out, nil
}

func (b *bridge) completion(ctx context.Context, params json.RawMessage) (any, *rpcError) {
	body, uri, rerr := b.positionBody(params)
	if body == nil {
		return nil, rerr
	}
	a, rerr := b.ask(ctx, "complete", body)
	if a == nil {
		return nil, rerr
	}
	b.stale(uri, a)
	items := []map[string]any{}
	for _, c := range a.Completions {
		it := map[string]any{"label": c.Label}
		if k := completionKind(deref(c.Kind)); k > 0 {
			it["kind"] = k
		}
		if c.Detail != nil {
			it["detail"] = *c.Detail
		}
		if c.InsertText != nil {
			it["insertText"] = *c.InsertText
		}
		items = append(items, it)
	}
	return map[string]any{"isIncomplete": a.Incomplete || a.NextCursor != nil, "items": items}, nil
}

// hierarchyData rides in a hierarchy item's data: the service answers
// calls and types for a position, so an item remembers one.
type hierarchyData struct {
	Path      string `json:"path"`
	Line      int64  `json:"line"`
	Character int64  `json:"character"`
}

// prepareHierarchy answers prepareCallHierarchy/prepareTypeHierarchy.
// The service has no prepare step of its own: the item is the word at the
// asked position, and its data carries that position for the next step.
func prepareHierarchy(tool string) handler {
	return func(b *bridge, ctx context.Context, params json.RawMessage) (any, *rpcError) {
		body, uri, rerr := b.positionBody(params)
		if body == nil {
			return nil, rerr
		}
		b.mu.Lock()
		ok := b.tools[tool]
		b.mu.Unlock()
		if !ok {
			return nil, nil
		}
		line, char := body["line"].(int64), body["character"].(int64)
		name, start, end := wordAt(b.text(uri, body["path"].(string)), line, char)
		if name == "" {
			return nil, nil
		}
		r := map[string]any{"start": map[string]any{"line": line, "character": start}, "end": map[string]any{"line": line, "character": end}}
		kind := 12 // function
		if tool == "type_hierarchy" {
			kind = 11 // interface; the editor shows the name, the kind is a hint
		}
		return []map[string]any{{
			"name": name, "kind": kind, "uri": uri, "range": r, "selectionRange": r,
			"data": hierarchyData{Path: body["path"].(string), Line: line, Character: char},
		}}, nil
	}
}

// hierarchyStep answers incomingCalls/outgoingCalls/supertypes/subtypes
// from the item's data.
func hierarchyStep(route, direction string) handler {
	return func(b *bridge, ctx context.Context, params json.RawMessage) (any, *rpcError) {
		var p struct {
			Item struct {
				URI            string          `json:"uri"`
				SelectionRange *rng            `json:"selectionRange"`
				Data           json.RawMessage `json:"data"`
			} `json:"item"`
		}
		if err := json.Unmarshal(params, &p); err != nil {
			return nil, &rpcError{codeInvalidParams, err.Error()}
		}
		var d hierarchyData
		if json.Unmarshal(p.Item.Data, &d) != nil || d.Path == "" {
			// An item the editor built itself: its selection start.
			path, ok := b.repoPath(p.Item.URI)
			if !ok || p.Item.SelectionRange == nil {
				return nil, nil
			}
			d = hierarchyData{Path: path, Line: int64(p.Item.SelectionRange.Start.Line), Character: int64(p.Item.SelectionRange.Start.Character)}
		}
		a, rerr := b.askAll(ctx, route, map[string]any{"path": d.Path, "line": d.Line, "character": d.Character, "direction": direction})
		if a == nil {
			return nil, rerr
		}
		out := []map[string]any{}
		items := a.Calls
		if route == "types" {
			items = a.Types
		}
		for _, it := range items {
			lu, ok := localURI(b.root, it.Path)
			if !ok || it.Range == nil {
				continue
			}
			sel := it.SelectionRange
			if sel == nil {
				sel = it.Range
			}
			item := map[string]any{
				"name": it.Name, "kind": symbolKind(it.Kind), "uri": lu, "range": it.Range, "selectionRange": sel,
				"data": hierarchyData{Path: it.Path, Line: int64(sel.Start.Line), Character: int64(sel.Start.Character)},
			}
			switch direction {
			case "incoming":
				out = append(out, map[string]any{"from": item, "fromRanges": nonNilRanges(it.FromRanges)})
			case "outgoing":
				out = append(out, map[string]any{"to": item, "fromRanges": nonNilRanges(it.FromRanges)})
			default:
				out = append(out, item)
			}
		}
		return out, nil
	}
}

func nonNilRanges(rs []*rng) []*rng {
	out := []*rng{}
	for _, r := range rs {
		if r != nil {
			out = append(out, r)
		}
	}
	return out
}

// text is the buffer's text, or the local file's when it is not open.
func (b *bridge) text(uri, path string) string {
	b.mu.Lock()
	d := b.docs[uri]
	b.mu.Unlock()
	if d != nil {
		return d.text
	}
	lu, ok := localURI(b.root, path)
	if !ok {
		return ""
	}
	fp, _ := fileURIPath(lu)
	text, err := readSmallFile(fp)
	if err != nil {
		return ""
	}
	return text
}

// wordAt returns the identifier around a UTF-16 position of text, and
// its UTF-16 start and end columns.
func wordAt(text string, line, char int64) (string, int64, int64) {
	lines := strings.Split(text, "\n")
	if line < 0 || line >= int64(len(lines)) {
		return "", 0, 0
	}
	units := utf16.Encode([]rune(lines[line]))
	if char < 0 || char > int64(len(units)) {
		return "", 0, 0
	}
	isWord := func(u uint16) bool {
		return u == '_' || (u >= '0' && u <= '9') || (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || u >= 0x80
	}
	s, e := char, char
	for s > 0 && isWord(units[s-1]) {
		s--
	}
	for e < int64(len(units)) && isWord(units[e]) {
		e++
	}
	if s == e {
		return "", 0, 0
	}
	return string(utf16.Decode(units[s:e])), s, e
}

var symbolKinds = map[string]int{"file": 1, "module": 2, "namespace": 3, "package": 4, "class": 5, "method": 6,
	"property": 7, "field": 8, "constructor": 9, "enum": 10, "interface": 11, "function": 12, "variable": 13,
	"constant": 14, "string": 15, "number": 16, "boolean": 17, "array": 18, "object": 19, "key": 20, "null": 21,
	"enum_member": 22, "struct": 23, "event": 24, "operator": 25, "type_parameter": 26}

var completionKinds = map[string]int{"text": 1, "method": 2, "function": 3, "constructor": 4, "field": 5,
	"variable": 6, "class": 7, "interface": 8, "module": 9, "property": 10, "unit": 11, "value": 12, "enum": 13,
	"keyword": 14, "snippet": 15, "color": 16, "file": 17, "reference": 18, "folder": 19, "enum_member": 20,
	"constant": 21, "struct": 22, "event": 23, "operator": 24, "type_parameter": 25}

// symbolKind is the LSP number of a service kind name; an unknown name
// (a newer server's kind) shows as a variable rather than failing.
func symbolKind(name string) int {
	if k, ok := symbolKinds[name]; ok {
		return k
	}
	return 13
}

func completionKind(name string) int { return completionKinds[name] }

// publishDiagnostics pushes the revision's diagnostics for a document.
func (b *bridge) publishDiagnostics(ctx context.Context, uri string) {
	b.mu.Lock()
	d := b.docs[uri]
	ok := d != nil && b.tools["diagnostics"]
	var path string
	var version int
	if ok {
		path, version = d.path, d.version
	}
	b.mu.Unlock()
	if !ok {
		return
	}
	// Diagnostics run off the reading goroutine: they may take a while
	// and must not hold up the editor's next request.
	b.bg.Add(1)
	go func() {
		defer b.bg.Done()
		cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		a, rerr := b.askAll(cctx, "diagnostics", map[string]any{"path": path})
		if a == nil {
			if rerr != nil {
				b.log.Warn("diagnostics", "path", path, "err", rerr.Message)
			}
			return
		}
		b.stale(uri, a)
		ds := []map[string]any{}
		for _, dg := range a.Diagnostics {
			if dg.Range == nil {
				continue
			}
			m := map[string]any{"range": dg.Range, "message": dg.Message}
			if s := map[string]int{"error": 1, "warning": 2, "information": 3, "hint": 4}[deref(dg.Severity)]; s > 0 {
				m["severity"] = s
			}
			if dg.Code != nil {
				m["code"] = *dg.Code
			}
			if dg.Source != nil {
				m["source"] = *dg.Source
			}
			ds = append(ds, m)
		}
		b.notify("textDocument/publishDiagnostics", map[string]any{"uri": uri, "version": version, "diagnostics": ds})
	}()
}

// rng is an LSP range, as the service sends it.
// readSmallFile reads a local source file for the word under a cursor;
// anything larger than an editor buffer is not read.
func readSmallFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, maxFrame+1))
	if err != nil {
		return "", err
	}
	if len(raw) > maxFrame {
		return "", fmt.Errorf("%s: over %d bytes", path, maxFrame)
	}
	return string(raw), nil
}
