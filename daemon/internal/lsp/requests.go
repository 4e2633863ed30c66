package lsp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hanzoai/lsp/daemon/internal/jsonrpc"
)

type textDocumentID struct {
	URI DocumentURI `json:"uri"`
}

type positionParams struct {
	TextDocument textDocumentID `json:"textDocument"`
	Position     Position       `json:"position"`
}

// maxPrepared bounds how many items of a prepare*Hierarchy answer are
// followed; servers answer one item for one position.
const maxPrepared = 8

// DidOpen opens a document at version 1. Opening an open document does
// nothing, so callers may call it before every request. When more than
// Limits.MaxOpenDocuments are open, the least recently used one is closed.
func (c *Client) DidOpen(ctx context.Context, uri DocumentURI, languageID, text string) error {
	key := canonicalURI(uri)
	c.docMu.Lock()
	defer c.docMu.Unlock()
	c.mu.Lock()
	c.useClock++
	if d, ok := c.docs[key]; ok {
		d.lastUse = c.useClock
		c.mu.Unlock()
		return nil
	}
	var victim DocumentURI
	if len(c.docs) >= c.lim.MaxOpenDocuments {
		var oldest uint64
		for u, d := range c.docs {
			if victim == "" || d.lastUse < oldest {
				victim, oldest = u, d.lastUse
			}
		}
		delete(c.docs, victim)
	}
	c.docs[key] = &document{version: 1, openSeq: c.pubSeq, lastUse: c.useClock}
	c.mu.Unlock()

	if victim != "" {
		if err := c.conn.Notify(ctx, "textDocument/didClose", map[string]any{"textDocument": textDocumentID{victim}}); err != nil {
			c.forgetDoc(key)
			return fmt.Errorf("didOpen: closing %s: %w", victim, err)
		}
	}
	err := c.conn.Notify(ctx, "textDocument/didOpen", map[string]any{
		"textDocument": map[string]any{"uri": key, "languageId": languageID, "version": 1, "text": text},
	})
	if err != nil {
		c.forgetDoc(key)
		return fmt.Errorf("didOpen: %w", err)
	}
	return nil
}

func (c *Client) forgetDoc(key DocumentURI) {
	c.mu.Lock()
	delete(c.docs, key)
	c.mu.Unlock()
}

// DidChange replaces the whole text of an open document and bumps its
// version.
func (c *Client) DidChange(ctx context.Context, uri DocumentURI, text string) error {
	key := canonicalURI(uri)
	c.docMu.Lock()
	defer c.docMu.Unlock()
	c.mu.Lock()
	d, ok := c.docs[key]
	if !ok {
		c.mu.Unlock()
		return fmt.Errorf("didChange: %s is not open", key)
	}
	d.version++
	d.openSeq = c.pubSeq
	version := d.version
	c.mu.Unlock()
	err := c.conn.Notify(ctx, "textDocument/didChange", map[string]any{
		"textDocument":   map[string]any{"uri": key, "version": version},
		"contentChanges": []map[string]string{{"text": text}},
	})
	if err != nil {
		return fmt.Errorf("didChange: %w", err)
	}
	return nil
}

// DidClose closes a document; closing a closed document does nothing.
func (c *Client) DidClose(ctx context.Context, uri DocumentURI) error {
	key := canonicalURI(uri)
	c.docMu.Lock()
	defer c.docMu.Unlock()
	c.mu.Lock()
	_, ok := c.docs[key]
	delete(c.docs, key)
	c.mu.Unlock()
	if !ok {
		return nil
	}
	if err := c.conn.Notify(ctx, "textDocument/didClose", map[string]any{"textDocument": textDocumentID{key}}); err != nil {
		return fmt.Errorf("didClose: %w", err)
	}
	return nil
}

// IsOpen reports whether the client holds uri open.
func (c *Client) IsOpen(uri DocumentURI) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.docs[canonicalURI(uri)]
	return ok
}

// contentModifiedRetries bounds how often a request the server answered
// ContentModified is sent again.
const contentModifiedRetries = 3

// request checks the tool, bounds the call and returns the raw result. A
// ContentModified answer (the server's state changed under the request:
// a workspace reload) is no answer about the document, which has not
// changed: the LSP asks clients to send the request again, and it is,
// after a short pause, a bounded number of times.
func (c *Client) request(ctx context.Context, tool, method string, params any) (json.RawMessage, error) {
	if tool != "" && !c.Has(tool) {
		return nil, fmt.Errorf("%w: %s", ErrCapabilityUnavailable, tool)
	}
	ctx, cancel := c.bound(ctx)
	defer cancel()
	for attempt := 0; ; attempt++ {
		var raw json.RawMessage
		err := c.conn.Call(ctx, method, params, &raw)
		var rpcErr *jsonrpc.Error
		if err == nil {
			return raw, nil
		}
		if attempt == contentModifiedRetries || !errors.As(err, &rpcErr) || rpcErr.Code != jsonrpc.CodeContentModified {
			return nil, err
		}
		select {
		case <-time.After(time.Duration(50<<attempt) * time.Millisecond):
		case <-ctx.Done():
			return nil, err
		}
	}
}

// Hover returns the hover at pos, or nil when the server has none.
func (c *Client) Hover(ctx context.Context, uri DocumentURI, pos Position) (*Hover, error) {
	raw, err := c.request(ctx, ToolHover, "textDocument/hover", positionParams{textDocumentID{canonicalURI(uri)}, pos})
	if err != nil {
		return nil, fmt.Errorf("hover: %w", err)
	}
	h, err := decodeHover(raw, c.lim)
	if err != nil {
		return nil, fmt.Errorf("hover: %w", err)
	}
	return h, nil
}

func (c *Client) locations(ctx context.Context, tool, method string, params any) (List[Location], error) {
	raw, err := c.request(ctx, tool, method, params)
	if err != nil {
		return List[Location]{}, fmt.Errorf("%s: %w", tool, err)
	}
	list, err := decodeLocations(raw, c.lim)
	if err != nil {
		return List[Location]{}, fmt.Errorf("%s: %w", tool, err)
	}
	return list, nil
}

// Definition returns where the symbol at pos is defined.
func (c *Client) Definition(ctx context.Context, uri DocumentURI, pos Position) (List[Location], error) {
	return c.locations(ctx, ToolDefinition, "textDocument/definition", positionParams{textDocumentID{canonicalURI(uri)}, pos})
}

// Declaration returns where the symbol at pos is declared.
func (c *Client) Declaration(ctx context.Context, uri DocumentURI, pos Position) (List[Location], error) {
	return c.locations(ctx, ToolDeclaration, "textDocument/declaration", positionParams{textDocumentID{canonicalURI(uri)}, pos})
}

// TypeDefinition returns where the type of the symbol at pos is defined.
func (c *Client) TypeDefinition(ctx context.Context, uri DocumentURI, pos Position) (List[Location], error) {
	return c.locations(ctx, ToolTypeDefinition, "textDocument/typeDefinition", positionParams{textDocumentID{canonicalURI(uri)}, pos})
}

// Implementation returns the implementations of the interface or method at
// pos (or the interfaces a type implements, as the server decides).
func (c *Client) Implementation(ctx context.Context, uri DocumentURI, pos Position) (List[Location], error) {
	return c.locations(ctx, ToolImplementation, "textDocument/implementation", positionParams{textDocumentID{canonicalURI(uri)}, pos})
}

// References returns the references to the symbol at pos.
func (c *Client) References(ctx context.Context, uri DocumentURI, pos Position, includeDeclaration bool) (List[Location], error) {
	return c.locations(ctx, ToolReferences, "textDocument/references", map[string]any{
		"textDocument": textDocumentID{canonicalURI(uri)},
		"position":     pos,
		"context":      map[string]bool{"includeDeclaration": includeDeclaration},
	})
}

// DocumentSymbols returns the symbols of a document, flattened.
func (c *Client) DocumentSymbols(ctx context.Context, uri DocumentURI) (List[Symbol], error) {
	key := canonicalURI(uri)
	raw, err := c.request(ctx, ToolDocumentSymbols, "textDocument/documentSymbol", map[string]any{"textDocument": textDocumentID{key}})
	if err != nil {
		return List[Symbol]{}, fmt.Errorf("document_symbols: %w", err)
	}
	list, err := decodeSymbols(raw, key, c.lim)
	if err != nil {
		return List[Symbol]{}, fmt.Errorf("document_symbols: %w", err)
	}
	return list, nil
}

// WorkspaceSymbols returns the workspace symbols matching query.
func (c *Client) WorkspaceSymbols(ctx context.Context, query string) (List[Symbol], error) {
	raw, err := c.request(ctx, ToolWorkspaceSymbols, "workspace/symbol", map[string]string{"query": query})
	if err != nil {
		return List[Symbol]{}, fmt.Errorf("workspace_symbols: %w", err)
	}
	list, err := decodeSymbols(raw, "", c.lim)
	if err != nil {
		return List[Symbol]{}, fmt.Errorf("workspace_symbols: %w", err)
	}
	return list, nil
}

// Completion returns the completions at pos.
func (c *Client) Completion(ctx context.Context, uri DocumentURI, pos Position) (Completion, error) {
	raw, err := c.request(ctx, ToolCompletion, "textDocument/completion", map[string]any{
		"textDocument": textDocumentID{canonicalURI(uri)},
		"position":     pos,
		"context":      map[string]int{"triggerKind": 1},
	})
	if err != nil {
		return Completion{}, fmt.Errorf("completion: %w", err)
	}
	out, err := decodeCompletion(raw, c.lim)
	if err != nil {
		return Completion{}, fmt.Errorf("completion: %w", err)
	}
	return out, nil
}

// SignatureHelp returns the signature help at pos, or nil when there is
// none.
func (c *Client) SignatureHelp(ctx context.Context, uri DocumentURI, pos Position) (*SignatureHelp, error) {
	raw, err := c.request(ctx, ToolSignatureHelp, "textDocument/signatureHelp", positionParams{textDocumentID{canonicalURI(uri)}, pos})
	if err != nil {
		return nil, fmt.Errorf("signature_help: %w", err)
	}
	out, err := decodeSignatureHelp(raw, c.lim)
	if err != nil {
		return nil, fmt.Errorf("signature_help: %w", err)
	}
	return out, nil
}

// IncomingCalls returns the callers of the function at pos.
func (c *Client) IncomingCalls(ctx context.Context, uri DocumentURI, pos Position) (List[CallHierarchyCall], error) {
	return c.calls(ctx, uri, pos, "callHierarchy/incomingCalls", "from")
}

// OutgoingCalls returns the functions the function at pos calls.
func (c *Client) OutgoingCalls(ctx context.Context, uri DocumentURI, pos Position) (List[CallHierarchyCall], error) {
	return c.calls(ctx, uri, pos, "callHierarchy/outgoingCalls", "to")
}

func (c *Client) calls(ctx context.Context, uri DocumentURI, pos Position, method, field string) (List[CallHierarchyCall], error) {
	var out List[CallHierarchyCall]
	// One deadline for the prepare and the calls together.
	ctx, cancel := c.bound(ctx)
	defer cancel()
	raw, err := c.request(ctx, ToolCallHierarchy, "textDocument/prepareCallHierarchy", positionParams{textDocumentID{canonicalURI(uri)}, pos})
	if err != nil {
		return out, fmt.Errorf("call_hierarchy: %w", err)
	}
	items, truncated, dropped, err := decodeHierarchyItems(raw, maxPrepared, c.lim)
	if err != nil {
		return out, fmt.Errorf("call_hierarchy: prepare: %w", err)
	}
	out.Truncated, out.Dropped = truncated, dropped
	for _, it := range items {
		raw, err := c.request(ctx, "", method, map[string]json.RawMessage{"item": it.raw})
		if err != nil {
			return out, fmt.Errorf("call_hierarchy: %w", err)
		}
		if err := decodeCalls(raw, field, &out, c.lim); err != nil {
			return out, fmt.Errorf("call_hierarchy: %w", err)
		}
	}
	return out, nil
}

// Supertypes returns the supertypes of the type at pos.
func (c *Client) Supertypes(ctx context.Context, uri DocumentURI, pos Position) (List[TypeHierarchyItem], error) {
	return c.types(ctx, uri, pos, "typeHierarchy/supertypes")
}

// Subtypes returns the subtypes of the type at pos.
func (c *Client) Subtypes(ctx context.Context, uri DocumentURI, pos Position) (List[TypeHierarchyItem], error) {
	return c.types(ctx, uri, pos, "typeHierarchy/subtypes")
}

func (c *Client) types(ctx context.Context, uri DocumentURI, pos Position, method string) (List[TypeHierarchyItem], error) {
	var out List[TypeHierarchyItem]
	ctx, cancel := c.bound(ctx)
	defer cancel()
	raw, err := c.request(ctx, ToolTypeHierarchy, "textDocument/prepareTypeHierarchy", positionParams{textDocumentID{canonicalURI(uri)}, pos})
	if err != nil {
		return out, fmt.Errorf("type_hierarchy: %w", err)
	}
	items, truncated, dropped, err := decodeHierarchyItems(raw, maxPrepared, c.lim)
	if err != nil {
		return out, fmt.Errorf("type_hierarchy: prepare: %w", err)
	}
	out.Truncated, out.Dropped = truncated, dropped
	for _, it := range items {
		raw, err := c.request(ctx, "", method, map[string]json.RawMessage{"item": it.raw})
		if err != nil {
			return out, fmt.Errorf("type_hierarchy: %w", err)
		}
		budget := c.lim.MaxItems - len(out.Items)
		if budget <= 0 {
			out.Truncated = out.Truncated || !isNull(raw)
			break
		}
		found, t, d, err := decodeHierarchyItems(raw, budget, c.lim)
		if err != nil {
			return out, fmt.Errorf("type_hierarchy: %w", err)
		}
		out.Truncated = out.Truncated || t
		out.Dropped += d
		for _, f := range found {
			out.Items = append(out.Items, f.typeItem())
		}
	}
	return out, nil
}

// Diagnostics returns the diagnostics of a document. With a negotiated
// diagnostic provider it pulls (textDocument/diagnostic). Otherwise, or if
// the pull is refused, it falls back to what the server published: it waits
// — at most Limits.DiagnosticsWait, the request timeout and ctx — until the
// server has published for the document as currently open (by version, or
// any publication after the open when the server sends no version) and
// then stayed quiet on it for Limits.DiagnosticsQuiet with no work-done
// progress in flight: servers publish in passes under one version (gopls's
// analyzers come a second after its type check), and the first pass is not
// the answer. A server that publishes an empty list for a clean file gets a
// settled, empty answer once it stays quiet. When the wait runs out
// the answer is what is known, with Settled false. Open the document first.
func (c *Client) Diagnostics(ctx context.Context, uri DocumentURI) (DiagnosticsResult, error) {
	key := canonicalURI(uri)
	if c.pullSupported() {
		raw, err := c.request(ctx, "", "textDocument/diagnostic", map[string]any{"textDocument": textDocumentID{key}})
		if err == nil {
			res, derr := decodePullReport(raw, c.lim)
			if derr == nil {
				c.mu.Lock()
				c.diagnosticProblemsLocked(key, res.Items)
				c.mu.Unlock()
				return res, nil
			}
			c.log.Warn("lsp: malformed pull diagnostics; using published", "err", derr)
		} else {
			var rpcErr *jsonrpc.Error
			if !errors.As(err, &rpcErr) {
				return DiagnosticsResult{}, fmt.Errorf("diagnostics: %w", err)
			}
			c.log.Debug("lsp: pull diagnostics refused; using published", "err", err)
		}
	}
	start := time.Now()
	n := c.expected(ctx, key)
	return c.awaitPublished(ctx, key, n, time.Since(start))
}

// flushed is the expected count of a server whose command publishes the
// document's diagnostics before it answers (ExpectedDiagnostics.Publishes):
// once it has answered, what it published is in, and the quiet window
// runs from the last publication alone.
const flushed = -2

// expected is how many diagnostics of its kind the server says it has for
// key (LoadSigns.Expected), flushed when the command published them, -1
// when it cannot say. The question is bounded by the diagnostics wait.
func (c *Client) expected(ctx context.Context, key DocumentURI) int {
	e := c.opts.LoadSigns.Expected
	if e == nil || !c.offersCommand(e.Command) {
		return -1
	}
	wait := c.lim.DiagnosticsWait
	if c.opts.RequestTimeout > 0 {
		wait = min(wait, c.opts.RequestTimeout)
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	raw, err := c.request(ctx, "", "workspace/executeCommand", map[string]any{"command": e.Command, "arguments": e.Arguments(key)})
	if err != nil {
		c.log.Warn("lsp: the server did not say how many diagnostics to expect; the quiet window decides", "command", e.Command, "err", err)
		return -1
	}
	n, ok := e.Count(raw)
	if !ok || n < 0 {
		c.log.Warn("lsp: the server did not say how many diagnostics to expect; the quiet window decides", "command", e.Command, "err", "result not understood")
		return -1
	}
	if e.Publishes {
		return flushed
	}
	return n
}

// offersCommand reports whether the server's executeCommandProvider lists
// command.
func (c *Client) offersCommand(command string) bool {
	var caps struct {
		ExecuteCommandProvider struct {
			Commands []string `json:"commands"`
		} `json:"executeCommandProvider"`
	}
	if json.Unmarshal(c.caps.Raw, &caps) != nil {
		return false
	}
	return slices.Contains(caps.ExecuteCommandProvider.Commands, command)
}

// countMatching counts the items of the kind LoadSigns.Expected names.
func (c *Client) countMatching(items []Diagnostic) int {
	n := 0
	for _, d := range items {
		if c.opts.LoadSigns.Expected.Match(d) {
			n++
		}
	}
	return n
}

func (c *Client) pullSupported() bool {
	if c.caps.DiagnosticProvider.Enabled {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.registrations {
		if m == "textDocument/diagnostic" {
			return true
		}
	}
	return false
}

func decodePullReport(raw json.RawMessage, lim Limits) (DiagnosticsResult, error) {
	var w struct {
		Kind  string          `json:"kind"`
		Items json.RawMessage `json:"items"`
	}
	if isNull(raw) || json.Unmarshal(raw, &w) != nil {
		return DiagnosticsResult{}, errShape
	}
	// "unchanged" needs a previousResultId, which we never send. gopls
	// leaves kind empty on its full reports, so an empty kind with items
	// counts as full.
	if w.Kind != "full" && (w.Kind != "" || w.Items == nil) {
		return DiagnosticsResult{}, fmt.Errorf("%w: report kind %q", errShape, clipName(w.Kind))
	}
	list, err := decodeDiagnostics(w.Items, lim.MaxItems, lim)
	if err != nil {
		return DiagnosticsResult{}, err
	}
	return DiagnosticsResult{Items: list.Items, Truncated: list.Truncated, Dropped: list.Dropped, Mode: DiagnosticsPull, Settled: true}, nil
}

// publishedForLocked: p is a publication for doc as open — made after the
// open, and of its version or later when the server sends one. Versions
// start again at 1 on every open, so a document closed (the least recently
// used, past MaxOpenDocuments) and opened again would otherwise take the
// publication of its previous open as settled at once.
func publishedForLocked(p *published, doc *document) bool {
	return p.seq > doc.openSeq && (p.version == nil || *p.version >= doc.version)
}

func (c *Client) awaitPublished(ctx context.Context, key DocumentURI, expected int, spent time.Duration) (DiagnosticsResult, error) {
	wait := c.lim.DiagnosticsWait
	if c.opts.RequestTimeout > 0 {
		wait = min(wait, c.opts.RequestTimeout)
	}
	quiet := min(c.lim.DiagnosticsQuiet, wait/2)
	// Asking the server what to expect came out of the same wait; the
	// quiet window is always left.
	wctx, cancel := context.WithTimeout(ctx, max(wait-spent, quiet))
	defer cancel()
	for {
		c.mu.Lock()
		p := c.diags[key]
		doc := c.docs[key]
		// A publication for the document as open (by version, or any
		// after the open when the server sends no version) ...
		current := p != nil && (doc == nil || publishedForLocked(p, doc))
		// ... that is the server's last word: no progress in flight, and
		// quiet on the document since its last publication and since the
		// last progress ended. After a flush the publications count, not
		// the progress: the flush's own progress ends as it answers, and
		// would restart the window on every call.
		var rest time.Duration
		if current {
			since := p.at
			if expected != flushed && c.progressEnd.After(since) {
				since = c.progressEnd
			}
			rest = quiet - time.Since(since)
			if c.foregroundLocked() > 0 {
				rest = quiet
			}
		}
		// The server said how many of a kind it has: a publication that
		// lacks them is not its last word, however quiet.
		if current && expected > 0 && !p.diags.Truncated && c.countMatching(p.diags.Items) < expected {
			current = false
		}
		settled := current && rest <= 0
		ch := c.changed
		c.mu.Unlock()
		res := DiagnosticsResult{Mode: DiagnosticsPublish, Settled: settled}
		if p != nil {
			res.Items, res.Truncated, res.Dropped = slices.Clone(p.diags.Items), p.diags.Truncated, p.diags.Dropped
		}
		if settled {
			return res, nil
		}
		var tick <-chan time.Time
		var timer *time.Timer
		if current {
			timer = time.NewTimer(rest)
			tick = timer.C
		}
		stop := func() {
			if timer != nil {
				timer.Stop()
			}
		}
		select {
		case <-ch:
			stop()
		case <-tick:
		case <-wctx.Done():
			stop()
			if errors.Is(ctx.Err(), context.Canceled) {
				return DiagnosticsResult{}, fmt.Errorf("diagnostics: %w", ctx.Err())
			}
			return res, nil
		case <-c.conn.Done():
			stop()
			return DiagnosticsResult{}, fmt.Errorf("diagnostics: %w", c.conn.Err())
		}
	}
}
