package lsp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hanzoai/lsp/daemon/internal/jsonrpc"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// peer is an in-process language server on the other end of a pipe, built
// on the same jsonrpc package: it answers initialize with the given
// capabilities and records every notification it receives.
type peer struct {
	conn *jsonrpc.Conn

	mu         sync.Mutex
	initParams json.RawMessage
	notes      []string
	// answer, when set, answers the requests it knows (ok true).
	answer func(req *jsonrpc.Request) (res any, err error, ok bool)
}

func connectPeer(t *testing.T, initResult string, opts Options) (*Client, *peer, error) {
	t.Helper()
	a, b := net.Pipe()
	p := &peer{}
	p.conn = jsonrpc.NewConn(b, jsonrpc.Options{Handler: func(_ context.Context, req *jsonrpc.Request) (any, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		switch {
		case req.Method == "initialize":
			p.initParams = req.Params
			return json.RawMessage(initResult), nil
		case req.Method == "shutdown":
			return nil, nil
		case p.answer != nil:
			if res, err, ok := p.answer(req); ok {
				return res, err
			}
		}
		switch {
		case req.IsNotification():
			var doc struct {
				TextDocument struct{ URI string } `json:"textDocument"`
			}
			_ = json.Unmarshal(req.Params, &doc)
			p.notes = append(p.notes, strings.TrimSpace(req.Method+" "+doc.TextDocument.URI))
			return nil, nil
		}
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: req.Method}
	}})
	t.Cleanup(func() { _ = p.conn.Close() })
	if opts.Root == "" {
		opts.Root = "/work/space"
	}
	c, err := Connect(context.Background(), a, opts)
	if err != nil {
		return nil, p, err
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, p, nil
}

func (p *peer) notifications() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.notes)
}

// sync makes one server→client round trip; the client handles messages in
// order, so everything the peer sent before has been handled after it.
func (p *peer) sync(t *testing.T) {
	t.Helper()
	if err := p.conn.Call(context.Background(), "workspace/workspaceFolders", nil, nil); err != nil {
		t.Fatal(err)
	}
}

const basicInit = `{"capabilities":{"hoverProvider":true,"definitionProvider":{"workDoneProgress":false},"referencesProvider":false},"serverInfo":{"name":"peer","version":"0.1"}}`

func TestInitializeHandshake(t *testing.T) {
	c, p, err := connectPeer(t, basicInit, Options{
		Root: "/work/space", ClientVersion: "test", InitializationOptions: json.RawMessage(`{"opt":1}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	var params struct {
		ProcessID        *int                   `json:"processId"`
		RootURI          string                 `json:"rootUri"`
		WorkspaceFolders []struct{ URI string } `json:"workspaceFolders"`
		ClientInfo       struct{ Name, Version string }
		InitOptions      json.RawMessage `json:"initializationOptions"`
		Capabilities     struct {
			General struct {
				PositionEncodings []string `json:"positionEncodings"`
			} `json:"general"`
			Workspace struct {
				Configuration bool `json:"configuration"`
			} `json:"workspace"`
			Window struct {
				WorkDoneProgress bool `json:"workDoneProgress"`
			} `json:"window"`
			TextDocument map[string]map[string]any `json:"textDocument"`
		} `json:"capabilities"`
	}
	p.mu.Lock()
	raw := p.initParams
	p.mu.Unlock()
	if err := json.Unmarshal(raw, &params); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `"processId":null`) || params.ProcessID != nil {
		t.Errorf("processId must be null: %s", raw)
	}
	if params.RootURI != "file:///work/space" || len(params.WorkspaceFolders) != 1 || params.WorkspaceFolders[0].URI != "file:///work/space" {
		t.Errorf("root %q folders %+v", params.RootURI, params.WorkspaceFolders)
	}
	if params.ClientInfo.Name == "" || params.ClientInfo.Version != "test" || string(params.InitOptions) != `{"opt":1}` {
		t.Errorf("clientInfo %+v initializationOptions %s", params.ClientInfo, params.InitOptions)
	}
	caps := params.Capabilities
	if !slices.Equal(caps.General.PositionEncodings, []string{"utf-16"}) || !caps.Workspace.Configuration || !caps.Window.WorkDoneProgress {
		t.Errorf("general/workspace/window capabilities: %+v", caps)
	}
	for _, feature := range []string{"definition", "declaration", "typeDefinition", "implementation"} {
		if caps.TextDocument[feature]["linkSupport"] != true {
			t.Errorf("%s lacks linkSupport", feature)
		}
	}
	if caps.TextDocument["documentSymbol"]["hierarchicalDocumentSymbolSupport"] != true {
		t.Errorf("documentSymbol is not hierarchical")
	}
	for _, feature := range []string{"hover", "references", "diagnostic", "publishDiagnostics", "completion", "signatureHelp", "callHierarchy", "typeHierarchy"} {
		if _, ok := caps.TextDocument[feature]; !ok {
			t.Errorf("textDocument.%s not declared", feature)
		}
	}
	if got := c.Info(); got != (ServerInfo{Name: "peer", Version: "0.1"}) {
		t.Errorf("info %+v", got)
	}
	if got := c.Tools(); !slices.Equal(got, []string{ToolHover, ToolDefinition, ToolDiagnostics}) {
		t.Errorf("tools %v", got)
	}
	p.sync(t)
	if n := p.notifications(); len(n) == 0 || n[0] != "initialized" {
		t.Errorf("notifications %v, want initialized first", n)
	}
}

func TestInitializeRefusals(t *testing.T) {
	tests := []struct{ name, result string }{
		{name: "other position encoding", result: `{"capabilities":{"positionEncoding":"utf-8"}}`},
		{name: "no capabilities", result: `{"serverInfo":{"name":"x"}}`},
		{name: "null result", result: `null`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, err := connectPeer(t, tt.result, Options{}); err == nil {
				t.Fatal("Connect succeeded")
			}
		})
	}
}

// TestFolderSettings: more workspace folders are announced, and a request
// scoped to a folder (or a file in it) gets that folder's settings; the
// innermost folder wins, and anything else gets the root's.
func TestFolderSettings(t *testing.T) {
	c, p, err := connectPeer(t, basicInit, Options{
		Settings: json.RawMessage(`{"s":"root"}`),
		Folders: []Folder{
			{Dir: "/work/space/a", Settings: json.RawMessage(`{"s":"a"}`)},
			{Dir: "/work/space/a/b", Settings: json.RawMessage(`{"s":"b"}`)},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = c
	ctx := context.Background()
	var got json.RawMessage
	if err := p.conn.Call(ctx, "workspace/workspaceFolders", nil, &got); err != nil || string(got) != `[{"name":"space","uri":"file:///work/space"},{"name":"a","uri":"file:///work/space/a"},{"name":"b","uri":"file:///work/space/a/b"}]` {
		t.Errorf("workspaceFolders = %s, %v", got, err)
	}
	items := `{"items":[{"section":"s"},{"scopeUri":"file:///work/space/a","section":"s"},{"scopeUri":"file:///work/space/a/b/x.go","section":"s"},{"scopeUri":"file:///work/space/ab","section":"s"},{"scopeUri":"file:///elsewhere","section":"s"}]}`
	if err := p.conn.Call(ctx, "workspace/configuration", json.RawMessage(items), &got); err != nil || string(got) != `["root","a","b","root","root"]` {
		t.Errorf("configuration = %s, %v", got, err)
	}
	if _, _, err := connectPeer(t, basicInit, Options{Folders: []Folder{{Dir: "/elsewhere"}}}); err == nil {
		t.Error("a folder outside the root was accepted")
	}
}

func TestServerRequests(t *testing.T) {
	c, p, err := connectPeer(t, basicInit, Options{Settings: json.RawMessage(`{"a":{"b":1}}`)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tests := []struct {
		method, params, want string
		code                 int64
	}{
		{method: "workspace/configuration", params: `{"items":[{"section":"a.b"},{},{"section":"zz"},{"section":"a.b.c"}]}`, want: `[1,{"a":{"b":1}},null,null]`},
		{method: "workspace/workspaceFolders", want: `[{"name":"space","uri":"file:///work/space"}]`},
		{method: "window/workDoneProgress/create", params: `{"token":"t"}`, want: `null`},
		{method: "window/showMessageRequest", params: `{"type":1,"message":"pick","actions":[{"title":"a"}]}`, want: `null`},
		{method: "workspace/applyEdit", params: `{"edit":{}}`, code: jsonrpc.CodeMethodNotFound},
	}
	for _, tt := range tests {
		var params any
		if tt.params != "" {
			params = json.RawMessage(tt.params)
		}
		var got json.RawMessage
		err := p.conn.Call(ctx, tt.method, params, &got)
		if tt.code != 0 {
			var rpcErr *jsonrpc.Error
			if !errors.As(err, &rpcErr) || rpcErr.Code != tt.code {
				t.Errorf("%s: %v, want code %d", tt.method, err, tt.code)
			}
			continue
		}
		if err != nil || string(got) != tt.want {
			t.Errorf("%s = %s, %v; want %s", tt.method, got, err, tt.want)
		}
	}
	if logs := c.Logs(); len(logs) != 1 || logs[0].Message != "pick" {
		t.Errorf("showMessageRequest not logged: %+v", logs)
	}
}

func TestDynamicRegistration(t *testing.T) {
	c, p, err := connectPeer(t, basicInit, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	before := c.CapabilityFingerprint()
	if _, err := c.Declaration(ctx, "file:///a.go", Position{}); !errors.Is(err, ErrCapabilityUnavailable) {
		t.Fatalf("declaration before registration: %v", err)
	}
	reg := `{"registrations":[{"id":"1","method":"textDocument/declaration"},{"id":"2","method":"workspace/didChangeWatchedFiles"}]}`
	if err := p.conn.Call(ctx, "client/registerCapability", json.RawMessage(reg), nil); err != nil {
		t.Fatal(err)
	}
	if !c.Has(ToolDeclaration) {
		t.Fatalf("tools after registration: %v", c.Tools())
	}
	during := c.CapabilityFingerprint()
	if during == before {
		t.Fatal("fingerprint did not change with a registration")
	}
	if err := p.conn.Call(ctx, "client/unregisterCapability", json.RawMessage(`{"unregisterations":[{"id":"1","method":"textDocument/declaration"}]}`), nil); err != nil {
		t.Fatal(err)
	}
	if c.Has(ToolDeclaration) {
		t.Fatalf("declaration still a tool after unregistration")
	}
	if err := p.conn.Call(ctx, "client/unregisterCapability", json.RawMessage(`{"unregisterations":[{"id":"2"}]}`), nil); err != nil {
		t.Fatal(err)
	}
	if after := c.CapabilityFingerprint(); after != before {
		t.Fatal("fingerprint did not return after unregistration")
	}
	// An id over the bound is not kept (each was a map key for the
	// server's life, however long).
	long := `{"registrations":[{"id":"` + strings.Repeat("i", maxRegistrationID+1) + `","method":"textDocument/declaration"}]}`
	if err := p.conn.Call(ctx, "client/registerCapability", json.RawMessage(long), nil); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	n := len(c.registrations)
	c.mu.Unlock()
	if n != 0 || c.Has(ToolDeclaration) {
		t.Fatalf("a registration with a %d-byte id was kept", maxRegistrationID+1)
	}
}

func TestProgressAndLogs(t *testing.T) {
	c, p, err := connectPeer(t, basicInit, Options{Limits: Limits{MaxLogMessages: 3}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	notify := func(method, params string) {
		t.Helper()
		if err := p.conn.Notify(ctx, method, json.RawMessage(params)); err != nil {
			t.Fatal(err)
		}
	}
	notify("$/progress", `{"token":1,"value":{"kind":"begin","title":"Loading"}}`)
	notify("$/progress", `{"token":"x","value":{"kind":"begin"}}`)
	notify("$/progress", `{"token":1,"value":{"kind":"report","message":"half"}}`)
	notify("$/progress", `{"token":1,"value":{"kind":"end"}}`)
	p.sync(t)
	if !c.Busy() {
		t.Fatal("not busy with token x in flight")
	}
	idle := make(chan error, 1)
	go func() { idle <- c.WaitIdle(ctx) }()
	notify("$/progress", `{"token":"x","value":{"kind":"end"}}`)
	if err := <-idle; err != nil {
		t.Fatal(err)
	}
	if c.Busy() {
		t.Fatal("busy after every token ended")
	}
	for i := range 10 {
		notify("window/logMessage", fmt.Sprintf(`{"type":4,"message":"line %d"}`, i))
	}
	notify("window/logMessage", `{"type":"odd"}`)
	p.sync(t)
	var got []string
	for _, l := range c.Logs() {
		got = append(got, l.Message)
	}
	if !slices.Equal(got, []string{"line 7", "line 8", "line 9"}) {
		t.Fatalf("log ring = %v", got)
	}
}

func TestPublishedDiagnosticsBounds(t *testing.T) {
	c, p, err := connectPeer(t, basicInit, Options{Limits: Limits{MaxDiagnosticsPerURI: 2, MaxDiagnosticURIs: 2, DiagnosticsWait: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	diag := `{"range":{"start":{"line":0,"character":0},"end":{"line":0,"character":1}},"message":"m"}`
	for _, u := range []string{"file:///1.go", "file:///2.go", "file:///3.go"} {
		params := fmt.Sprintf(`{"uri":%q,"diagnostics":[%s,%s,%s]}`, u, diag, diag, diag)
		if err := p.conn.Notify(ctx, "textDocument/publishDiagnostics", json.RawMessage(params)); err != nil {
			t.Fatal(err)
		}
	}
	p.sync(t)
	d, err := c.Diagnostics(ctx, "file:///3.go")
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Items) != 2 || !d.Truncated || !d.Settled || d.Mode != DiagnosticsPublish {
		t.Fatalf("diagnostics of 3.go = %+v", d)
	}
	// 1.go was evicted to keep two documents: the wait is bounded, not settled.
	d, err = c.Diagnostics(ctx, "file:///1.go")
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Items) != 0 || d.Settled {
		t.Fatalf("diagnostics of the evicted 1.go = %+v", d)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.Diagnostics(cctx, "file:///1.go"); !errors.Is(err, context.Canceled) {
		t.Fatalf("diagnostics with a cancelled context: %v", err)
	}
}

// diagnosticsPeer is a client under lim whose peer publishes n
// diagnostics of msg to a document; kept checks the client's accounting
// against bound and returns the documents kept, least recently published
// first, and their bytes.
type diagnosticsPeer struct {
	c       *Client
	publish func(uri string, n int)
	kept    func() ([]string, int)
}

func newDiagnosticsPeer(t *testing.T, lim Limits, msg string) diagnosticsPeer {
	t.Helper()
	c, p, err := connectPeer(t, basicInit, Options{Limits: lim})
	if err != nil {
		t.Fatal(err)
	}
	bound := lim.MaxDiagnosticBytes
	publish := func(u string, n int) {
		t.Helper()
		diags := make([]string, n)
		for i := range diags {
			diags[i] = fmt.Sprintf(`{"range":{"start":{"line":%d,"character":0},"end":{"line":%d,"character":1}},"message":%q}`, i, i, msg)
		}
		params := fmt.Sprintf(`{"uri":%q,"diagnostics":[%s]}`, u, strings.Join(diags, ","))
		if err := p.conn.Notify(context.Background(), "textDocument/publishDiagnostics", json.RawMessage(params)); err != nil {
			t.Fatal(err)
		}
		p.sync(t)
	}
	kept := func() ([]string, int) {
		t.Helper()
		c.mu.Lock()
		defer c.mu.Unlock()
		var order []string
		sum := 0
		var seq uint64
		for e := c.oldestPub; e != nil; e = e.newer {
			if c.diags[e.key] != e || e.seq <= seq {
				t.Fatalf("publication order broken at %s", e.key)
			}
			seq = e.seq
			order = append(order, string(e.key))
			sum += publishedSize(e.key, e.diags)
		}
		if len(order) != len(c.diags) || sum != c.diagBytes {
			t.Fatalf("%d entries linked of %d; %d bytes counted, %d kept", len(order), len(c.diags), c.diagBytes, sum)
		}
		if sum > bound {
			t.Fatalf("%d bytes of diagnostics kept, over the bound of %d", sum, bound)
		}
		return order, sum
	}
	return diagnosticsPeer{c: c, publish: publish, kept: kept}
}

// TestPublishedDiagnosticsByteBound: the published diagnostics kept stay
// within MaxDiagnosticBytes, exactly accounted; the documents published
// to least recently are forgotten first, a document published again with
// a smaller list frees its bytes, and a list larger than its share (here
// the whole bound) is cut and says so.
func TestPublishedDiagnosticsByteBound(t *testing.T) {
	msg := strings.Repeat("m", 400)
	// What a document (of these URIs) and a diagnostic cost: three
	// documents of two diagnostics fit, four do not.
	doc, diag := publishedOverhead+len("file:///1.go"), diagnosticOverhead+len(msg)
	bound := 3*(doc+2*diag) + diag
	dp := newDiagnosticsPeer(t, Limits{MaxDiagnosticBytes: bound, MaxDocumentDiagnosticBytes: bound, DiagnosticsWait: 50 * time.Millisecond}, msg)
	c, publish, kept := dp.c, dp.publish, dp.kept
	ctx := context.Background()
	steps := []struct {
		uri  string
		n    int
		want []string
	}{
		{"file:///1.go", 2, []string{"file:///1.go"}},
		{"file:///2.go", 2, []string{"file:///1.go", "file:///2.go"}},
		{"file:///3.go", 2, []string{"file:///1.go", "file:///2.go", "file:///3.go"}},
		// 1.go is the least recently published.
		{"file:///4.go", 2, []string{"file:///2.go", "file:///3.go", "file:///4.go"}},
		// Published again, empty: its bytes make room for 5.go.
		{"file:///2.go", 0, []string{"file:///3.go", "file:///4.go", "file:///2.go"}},
		{"file:///5.go", 2, []string{"file:///3.go", "file:///4.go", "file:///2.go", "file:///5.go"}},
		// Room for four diagnostics takes two documents, 3.go and 4.go,
		// not 2.go: it was published to after them.
		{"file:///6.go", 4, []string{"file:///2.go", "file:///5.go", "file:///6.go"}},
		// Larger than the bound alone: everything else goes, and it is cut.
		{"file:///7.go", 20, []string{"file:///7.go"}},
	}
	for _, s := range steps {
		publish(s.uri, s.n)
		if got, _ := kept(); !slices.Equal(got, s.want) {
			t.Fatalf("after publishing %d diagnostics to %s, kept %q, want %q", s.n, s.uri, got, s.want)
		}
	}
	d, err := c.Diagnostics(ctx, "file:///7.go")
	if err != nil {
		t.Fatal(err)
	}
	if want := (bound - doc) / diag; len(d.Items) != want || !d.Truncated || !d.Settled {
		t.Fatalf("diagnostics of the oversized 7.go: %d items, truncated %v, settled %v; want %d, truncated", len(d.Items), d.Truncated, d.Settled, want)
	}
	// Published again small, it is whole again and frees what it held.
	_, before := kept()
	publish("file:///7.go", 1)
	if got, after := kept(); !slices.Equal(got, []string{"file:///7.go"}) || after != doc+diag || after >= before {
		t.Fatalf("7.go published again with one diagnostic: kept %q, %d bytes (%d before)", got, after, before)
	}
	if d, err = c.Diagnostics(ctx, "file:///7.go"); err != nil || len(d.Items) != 1 || d.Truncated {
		t.Fatalf("diagnostics of 7.go = %+v, %v", d, err)
	}
	// A document whose URI alone is over the bound is not kept, and
	// costs the others nothing.
	publish("file:///"+strings.Repeat("x", bound)+".go", 1)
	if got, _ := kept(); !slices.Equal(got, []string{"file:///7.go"}) {
		t.Fatalf("after a document larger than the bound, kept %q", got)
	}
}

// TestDocumentDiagnosticShare: one document's list is cut to its share
// of the bound (a quarter by default), so a file with a flood of problems
// leaves the other documents' diagnostics in place.
func TestDocumentDiagnosticShare(t *testing.T) {
	msg := strings.Repeat("m", 400)
	doc, diag := publishedOverhead+len("file:///1.go"), diagnosticOverhead+len(msg)
	// Eight documents of two diagnostics fit; a quarter holds two
	// documents' worth.
	bound := 8 * (doc + 2*diag)
	dp := newDiagnosticsPeer(t, Limits{MaxDiagnosticBytes: bound, DiagnosticsWait: 50 * time.Millisecond}, msg)
	others := []string{"file:///1.go", "file:///2.go", "file:///3.go", "file:///4.go", "file:///5.go"}
	for _, u := range others {
		dp.publish(u, 2)
	}
	dp.publish("file:///6.go", 100)
	got, _ := dp.kept()
	if want := append(slices.Clone(others), "file:///6.go"); !slices.Equal(got, want) {
		t.Fatalf("after a flood of diagnostics in 6.go, kept %q, want %q", got, want)
	}
	d, err := dp.c.Diagnostics(context.Background(), "file:///6.go")
	if err != nil {
		t.Fatal(err)
	}
	if want := (bound/4 - doc) / diag; len(d.Items) != want || !d.Truncated {
		t.Fatalf("diagnostics of the flooded 6.go: %d items, truncated %v; want %d, truncated", len(d.Items), d.Truncated, want)
	}
}

func TestDocuments(t *testing.T) {
	c, p, err := connectPeer(t, basicInit, Options{Limits: Limits{MaxOpenDocuments: 2}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	steps := []struct {
		op, uri string
	}{
		{"open", "file:///a"}, {"open", "file:///b"}, {"open", "file:///a"}, // a is now more recent than b
		{"open", "file:///c"}, // evicts b
		{"change", "file:///c"}, {"close", "file:///c"}, {"close", "file:///c"},
	}
	for _, s := range steps {
		var err error
		switch s.op {
		case "open":
			err = c.DidOpen(ctx, DocumentURI(s.uri), "go", "text")
		case "change":
			err = c.DidChange(ctx, DocumentURI(s.uri), "new text")
		case "close":
			err = c.DidClose(ctx, DocumentURI(s.uri))
		}
		if err != nil {
			t.Fatalf("%s %s: %v", s.op, s.uri, err)
		}
	}
	if err := c.DidChange(ctx, "file:///zzz", "x"); err == nil {
		t.Fatal("didChange of a closed document succeeded")
	}
	p.sync(t)
	want := []string{"initialized", "textDocument/didOpen file:///a", "textDocument/didOpen file:///b",
		"textDocument/didClose file:///b", "textDocument/didOpen file:///c", "textDocument/didChange file:///c",
		"textDocument/didClose file:///c"}
	if got := p.notifications(); !slices.Equal(got, want) {
		t.Fatalf("notifications\n got %q\nwant %q", got, want)
	}
	if !c.IsOpen("file:///a") || c.IsOpen("file:///b") || c.IsOpen("file:///c") {
		t.Fatal("open set is wrong")
	}
	if err := c.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestLoadProblems: a shown error is a load problem for any server; log
// lines, diagnostics and progress reports only when the language's signs
// say so, each message once, bounded. A progress report that is a problem
// is no work in flight.
func TestLoadProblems(t *testing.T) {
	signs := LoadSigns{
		Diagnostic: func(d Diagnostic) (string, bool) { return d.Message, d.Code == "Broken" },
		Log:        func(typ int, m string) (string, bool) { return "log: " + m, typ == 1 && strings.HasPrefix(m, "load") },
		Progress:   func(title, m string) (string, bool) { return m, title == "Error loading" },
	}
	c, p, err := connectPeer(t, basicInit, Options{LoadSigns: signs})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	notify := func(method, params string) {
		t.Helper()
		if err := p.conn.Notify(ctx, method, json.RawMessage(params)); err != nil {
			t.Fatal(err)
		}
	}
	notify("window/showMessage", `{"type":2,"message":"just a warning"}`)
	notify("window/showMessage", `{"type":1,"message":"Error loading workspace: boom"}`)
	notify("window/showMessage", `{"type":1,"message":"Error loading workspace: boom"}`)
	notify("window/logMessage", `{"type":1,"message":"request failed"}`)
	notify("window/logMessage", `{"type":1,"message":"load failed"}`)
	notify("window/logMessage", `{"type":3,"message":"load ok"}`)
	notify("textDocument/publishDiagnostics", `{"uri":"file:///w/a.go","diagnostics":[
		{"range":{"start":{"line":0,"character":0},"end":{"line":0,"character":1}},"code":"Broken","message":"could not import x"},
		{"range":{"start":{"line":1,"character":0},"end":{"line":1,"character":1}},"code":"Other","message":"a type error"}]}`)
	notify("$/progress", `{"token":7,"value":{"kind":"begin","title":"Error loading","message":"go list failed"}}`)
	p.sync(t)
	got, more := c.LoadProblems()
	want := []Problem{{Message: "Error loading workspace: boom"}, {Message: "log: load failed"}, {Message: "could not import x", URI: "file:///w/a.go"}, {Message: "go list failed"}}
	if !slices.Equal(got, want) || more != 0 {
		t.Fatalf("load problems %+v (+%d); want %+v", got, more, want)
	}
	if c.Busy() {
		t.Fatal("a progress report of a problem counts as work in flight")
	}
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.WaitQuiet(qctx, 20*time.Millisecond); err != nil {
		t.Fatalf("WaitQuiet: %v", err)
	}
	for i := range maxProblems + 3 {
		notify("window/showMessage", fmt.Sprintf(`{"type":1,"message":"error %d"}`, i))
	}
	p.sync(t)
	if got, more := c.LoadProblems(); len(got) != maxProblems || more != 7 {
		t.Fatalf("%d load problems kept, %d more; want %d and 7", len(got), more, maxProblems)
	}
}

// TestIndexing: a progress whose title the signs call indexing is reported
// while in flight and only then; other progress is not.
func TestIndexing(t *testing.T) {
	signs := LoadSigns{Indexing: func(title string) bool { return title == "indexing" }}
	c, p, err := connectPeer(t, basicInit, Options{LoadSigns: signs})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	notify := func(params string) {
		t.Helper()
		if err := p.conn.Notify(ctx, "$/progress", json.RawMessage(params)); err != nil {
			t.Fatal(err)
		}
	}
	notify(`{"token":"other","value":{"kind":"begin","title":"diagnosing"}}`)
	p.sync(t)
	if _, ok := c.Indexing(); ok {
		t.Fatal("another progress counted as indexing")
	}
	notify(`{"token":"backgroundIndexProgress","value":{"kind":"begin","title":"indexing","message":"0/47"}}`)
	p.sync(t)
	if title, ok := c.Indexing(); !ok || title != "indexing" {
		t.Fatalf("indexing in flight: %q, %v", title, ok)
	}
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	if err := c.WaitIndexed(wctx, time.Minute); err == nil {
		t.Fatal("WaitIndexed returned while indexing")
	}
	cancel()
	done := make(chan error, 1)
	go func() { done <- c.WaitIndexed(ctx, time.Minute) }()
	notify(`{"token":"backgroundIndexProgress","value":{"kind":"end"}}`)
	p.sync(t)
	if _, ok := c.Indexing(); ok {
		t.Fatal("indexing reported after its end")
	}
	if err := <-done; err != nil {
		t.Fatalf("WaitIndexed after the end: %v", err)
	}
}

// TestIndexLog: a server whose index ends only in its log
// (bash-language-server) counts as indexing, and as busy, from the start
// until the log line that says so; the same words shown, or another line
// logged, end nothing.
func TestIndexLog(t *testing.T) {
	signs := LoadSigns{IndexLog: &IndexLog{Title: "background analysis", Done: func(m string) bool { return strings.Contains(m, "Completed") }}}
	c, p, err := connectPeer(t, basicInit, Options{LoadSigns: signs})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if title, ok := c.Indexing(); !ok || title != "background analysis" || !c.Busy() {
		t.Fatalf("at the start: indexing %q, %v; busy %v", title, ok, c.Busy())
	}
	done := make(chan error, 1)
	go func() { done <- c.WaitIndexed(ctx, time.Minute) }()
	for _, m := range []struct{ method, params string }{
		{"window/logMessage", `{"type":3,"message":"00:00:00.001 INFO BackgroundAnalysis: Glob resolved with 3 files"}`},
		{"window/showMessage", `{"type":3,"message":"Completed"}`},
	} {
		if err := p.conn.Notify(ctx, m.method, json.RawMessage(m.params)); err != nil {
			t.Fatal(err)
		}
	}
	p.sync(t)
	if _, ok := c.Indexing(); !ok {
		t.Fatal("indexing ended by a line that does not end it")
	}
	// The server's own progress tokens are apart from the log's entry.
	if err := p.conn.Notify(ctx, "$/progress", json.RawMessage(`{"token":"log-index","value":{"kind":"end"}}`)); err != nil {
		t.Fatal(err)
	}
	if err := p.conn.Notify(ctx, "window/logMessage", json.RawMessage(`{"type":3,"message":"00:00:00.300 INFO BackgroundAnalysis: Completed after 0.3 seconds."}`)); err != nil {
		t.Fatal(err)
	}
	p.sync(t)
	if _, ok := c.Indexing(); ok || c.Busy() {
		t.Fatalf("still indexing (busy %v) after the line that ends it", c.Busy())
	}
	if err := <-done; err != nil {
		t.Fatalf("WaitIndexed after the end: %v", err)
	}
}

// TestBackgroundIndexIsNotTheLoad: with IndexInBackground (clangd), a
// load that has ended is quiet while the index is still being built; the
// same progress without it (rust-analyzer's loading) holds the wait,
// even one with no quiet at all (an entry's load_quiet_ms 0).
func TestBackgroundIndexIsNotTheLoad(t *testing.T) {
	for _, tc := range []struct {
		background bool
		quiet      time.Duration
	}{{true, 100 * time.Millisecond}, {false, 100 * time.Millisecond}, {true, 0}, {false, 0}} {
		background := tc.background
		signs := LoadSigns{Indexing: func(title string) bool { return title == "indexing" }, IndexInBackground: background}
		c, p, err := connectPeer(t, basicInit, Options{LoadSigns: signs})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if err := p.conn.Notify(ctx, "$/progress", json.RawMessage(`{"token":"backgroundIndexProgress","value":{"kind":"begin","title":"indexing","message":"0/47"}}`)); err != nil {
			t.Fatal(err)
		}
		p.sync(t)
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err = c.WaitQuiet(wctx, tc.quiet)
		cancel()
		if background && err != nil {
			t.Fatalf("a background index held the load's wait: %v", err)
		}
		if !background && err == nil {
			t.Fatal("the load's own progress did not hold its wait")
		}
		if c.IndexInBackground() != background {
			t.Fatalf("IndexInBackground = %v", c.IndexInBackground())
		}
	}
}

// TestBackgroundWorkIsNoWork: a progress LoadSigns.Background accepts
// (rust-analyzer's cache priming) neither holds the first-load wait nor
// makes the server busy, and its end restarts no quiet; the load's own
// progress beside it still holds the wait.
func TestBackgroundWorkIsNoWork(t *testing.T) {
	signs := LoadSigns{Background: func(title string) bool { return title == "Indexing" }}
	c, p, err := connectPeer(t, basicInit, Options{LoadSigns: signs})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	progress := func(token, kind, title string) {
		t.Helper()
		if err := p.conn.Notify(ctx, "$/progress", json.RawMessage(fmt.Sprintf(`{"token":%q,"value":{"kind":%q,"title":%q}}`, token, kind, title))); err != nil {
			t.Fatal(err)
		}
		p.sync(t)
	}
	wait := func(quiet time.Duration) error {
		wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		return c.WaitQuiet(wctx, quiet)
	}
	progress("load", "begin", "Fetching")
	progress("priming", "begin", "Indexing")
	if !c.Busy() || wait(0) == nil {
		t.Fatal("the load's progress did not hold the wait")
	}
	progress("load", "end", "")
	if c.Busy() {
		t.Fatal("cache priming made the server busy")
	}
	if err := wait(50 * time.Millisecond); err != nil {
		t.Fatalf("cache priming held the wait: %v", err)
	}
	// Its end is not the end of work: a quiet already passed stays passed.
	time.Sleep(100 * time.Millisecond)
	progress("priming", "end", "")
	start := time.Now()
	if err := wait(100 * time.Millisecond); err != nil || time.Since(start) > 50*time.Millisecond {
		t.Fatalf("the priming's end restarted the quiet: %v after %s", err, time.Since(start))
	}
}

// TestBackgroundBeginEndsTheLoad: with BackgroundAfterLoad
// (rust-analyzer, which primes its caches once its load is done), the
// Background work's begin ends the first-load wait however long its
// quiet, but only with no other work begun or ended since: a fetch that
// begins after it holds the wait until the next begin, even with the
// first priming still in flight. Without the sign only the quiet ends it.
func TestBackgroundBeginEndsTheLoad(t *testing.T) {
	ctx := context.Background()
	for _, afterLoad := range []bool{true, false} {
		signs := LoadSigns{Background: func(title string) bool { return title == "Indexing" }, BackgroundAfterLoad: afterLoad}
		c, p, err := connectPeer(t, basicInit, Options{LoadSigns: signs})
		if err != nil {
			t.Fatal(err)
		}
		progress := func(token, kind, title string) {
			t.Helper()
			if err := p.conn.Notify(ctx, "$/progress", json.RawMessage(fmt.Sprintf(`{"token":%q,"value":{"kind":%q,"title":%q}}`, token, kind, title))); err != nil {
				t.Fatal(err)
			}
			p.sync(t)
		}
		held := func() bool {
			t.Helper()
			wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			defer cancel()
			return c.WaitLoaded(wctx, time.Hour) != nil && c.WaitQuiet(wctx, time.Hour) != nil
		}
		progress("fetch", "begin", "Fetching")
		progress("fetch", "end", "")
		if !held() {
			t.Fatalf("afterLoad %v: the wait ended before the quiet or the priming", afterLoad)
		}
		progress("priming", "begin", "Indexing")
		if held() == afterLoad {
			t.Fatalf("afterLoad %v: the priming's begin: wait held %v", afterLoad, afterLoad)
		}
		if !afterLoad {
			continue
		}
		progress("refetch", "begin", "Fetching")
		if !held() {
			t.Fatal("a fetch after the priming began did not hold the wait")
		}
		progress("refetch", "end", "")
		if !held() {
			t.Fatal("the end of a fetch after the priming began ended the wait")
		}
		progress("priming2", "begin", "Indexing")
		if held() {
			t.Fatal("the next priming's begin did not end the wait")
		}
	}
}

// TestAnchorPublicationEndsTheLoad: with AnchorPublishes (clangd), the
// first-load wait ends once the anchor has been published for as open,
// however long its quiet, and not before, however short its quiet (the
// parse has no progress to hold it); a publication of another document,
// or one of the anchor from before its open, does not end it; without
// the sign only the quiet does.
func TestAnchorPublicationEndsTheLoad(t *testing.T) {
	ctx := context.Background()
	for _, publishes := range []bool{true, false} {
		c, p, err := connectPeer(t, basicInit, Options{LoadSigns: LoadSigns{AnchorPublishes: publishes}})
		if err != nil {
			t.Fatal(err)
		}
		publish := func(uri string) {
			t.Helper()
			if err := p.conn.Notify(ctx, "textDocument/publishDiagnostics", json.RawMessage(fmt.Sprintf(`{"uri":%q,"diagnostics":[]}`, uri))); err != nil {
				t.Fatal(err)
			}
			p.sync(t)
		}
		held := func() bool {
			t.Helper()
			wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			return c.WaitQuiet(wctx, time.Hour) != nil
		}
		const anchor = "file:///w/a.cc"
		publish(anchor) // before the open: not the anchor as open
		c.MarkAnchor(anchor)
		if err := c.DidOpen(ctx, anchor, "cpp", "int x;"); err != nil {
			t.Fatal(err)
		}
		publish("file:///w/b.cc")
		if !held() {
			t.Fatalf("publishes %v: the wait ended before the anchor's publication", publishes)
		}
		qctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		shortQuiet := c.WaitQuiet(qctx, time.Millisecond)
		cancel()
		if (shortQuiet != nil) != publishes {
			t.Fatalf("publishes %v: a wait with a quiet of 1 ms, the anchor unpublished: %v", publishes, shortQuiet)
		}
		publish(anchor)
		if held() == publishes {
			t.Fatalf("publishes %v: the anchor's publication: wait held %v", publishes, publishes)
		}
	}
}

// TestAnchorHoldBounded: an anchor whose publication never comes holds
// the wait for anchorHold after it was marked, not for the caller's bound.
func TestAnchorHoldBounded(t *testing.T) {
	defer func(d time.Duration) { anchorHold = d }(anchorHold)
	anchorHold = 300 * time.Millisecond
	ctx := context.Background()
	c, _, err := connectPeer(t, basicInit, Options{LoadSigns: LoadSigns{AnchorPublishes: true}})
	if err != nil {
		t.Fatal(err)
	}
	const anchor = "file:///w/a.c"
	c.MarkAnchor(anchor)
	if err := c.DidOpen(ctx, anchor, "c", "int x;"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.WaitQuiet(wctx, time.Millisecond); err != nil {
		t.Fatalf("the wait for an anchor never published ran to the caller's bound: %v", err)
	}
	if took := time.Since(start); took < 250*time.Millisecond {
		t.Fatalf("the wait ended after %v, before the anchor's hold", took)
	}
}

// TestDiagnosisReportsEndTheLoad: with diagnosis reports (gopls's
// verboseWorkDoneProgress), the first-load wait ends once a diagnosis of
// the whole workspace has run to its end, however long the quiet it was
// given. One that ends while another is in flight was cut short (gopls
// begins an open's report before it cancels the diagnosis the open made
// stale) and ends nothing; the one in flight then decides. A report of
// something else (a command's) never does, and for a server that never
// reports a diagnosis of the workspace the quiet decides. The reports
// are not work in flight. WaitLoaded needs the load's end alone.
func TestDiagnosisReportsEndTheLoad(t *testing.T) {
	signs := LoadSigns{Diagnosis: &DiagnosisReports{
		InitializationOptions: json.RawMessage(`{"verbose":true}`),
		Is:                    func(title string) bool { return strings.HasPrefix(title, "diag ") || strings.HasPrefix(title, "cmd ") },
		Workspace:             func(title string) bool { return strings.HasPrefix(title, "diag ") },
	}}
	if got := string(signs.InitializationOptions()); got != `{"verbose":true}` {
		t.Fatalf("initialization options %s", got)
	}
	c, p, err := connectPeer(t, basicInit, Options{LoadSigns: signs})
	if err != nil {
		t.Fatal(err)
	}
	if !c.ReportsLoad() {
		t.Fatal("ReportsLoad false with diagnosis reports")
	}
	ctx := context.Background()
	progress := func(p *peer, token int, kind, title string) {
		t.Helper()
		if err := p.conn.Notify(ctx, "$/progress", json.RawMessage(fmt.Sprintf(`{"token":%d,"value":{"kind":%q,"title":%q}}`, token, kind, title))); err != nil {
			t.Fatal(err)
		}
		p.sync(t)
	}
	// holds reports whether a wait with an hour's quiet is still waiting
	// after 200 ms.
	holds := func(wait func(context.Context, time.Duration) error) bool {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		err := wait(wctx, time.Hour)
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatal(err)
		}
		return err != nil
	}
	held := func(c *Client) bool { t.Helper(); return holds(c.WaitQuiet) }

	progress(p, 1, "begin", "loading")
	progress(p, 2, "begin", "diag initial")
	progress(p, 4, "begin", "cmd run")
	if !c.Busy() || !held(c) || !holds(c.WaitLoaded) {
		t.Fatal("the load in flight did not hold the waits")
	}
	progress(p, 1, "end", "")
	if c.Busy() || c.Diagnosed() || !held(c) {
		t.Fatalf("the initial diagnosis in flight: busy %v, diagnosed %v", c.Busy(), c.Diagnosed())
	}
	if holds(c.WaitLoaded) {
		t.Fatal("WaitLoaded held after the load's end")
	}
	progress(p, 3, "begin", "diag opened")
	progress(p, 2, "end", "")
	if c.Diagnosed() || !held(c) {
		t.Fatal("a diagnosis cut short by another ended the wait")
	}
	progress(p, 3, "end", "")
	if !c.Diagnosed() || held(c) {
		t.Fatal("the end of the diagnosis in flight did not end the wait (a command's report still in flight)")
	}
	progress(p, 5, "begin", "diag opened again")
	if !c.Diagnosed() {
		t.Fatal("a later diagnosis undid the checked workspace")
	}
	progress(p, 1, "begin", "loading again")
	if !held(c) {
		t.Fatal("the server's load in flight did not hold the wait after the diagnosis")
	}

	// No diagnosis of the workspace reported: only the quiet ends the
	// wait; WaitLoaded needs a load that ended.
	c2, p2, err := connectPeer(t, basicInit, Options{LoadSigns: signs})
	if err != nil {
		t.Fatal(err)
	}
	progress(p2, 1, "begin", "cmd run")
	progress(p2, 1, "end", "")
	if c2.Diagnosed() || !held(c2) || !holds(c2.WaitLoaded) {
		t.Fatal("without a diagnosis of the workspace the reports ended a wait")
	}
	if err := c2.WaitQuiet(ctx, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	c3, p3, err := connectPeer(t, basicInit, Options{})
	if err != nil || c3.ReportsLoad() {
		t.Fatalf("ReportsLoad without diagnosis reports: %v", err)
	}
	progress(p3, 1, "begin", "loading")
	progress(p3, 1, "end", "")
	if !holds(c3.WaitLoaded) {
		t.Fatal("WaitLoaded did not wait for the quiet of a server without diagnosis reports")
	}

	// A long initial diagnosis that keeps publishing (gopls on aws-sdk-go)
	// does not hold the wait past the quiet after the load's end; the
	// caller learns it was not diagnosed.
	c4, p4, err := connectPeer(t, basicInit, Options{LoadSigns: signs})
	if err != nil {
		t.Fatal(err)
	}
	progress(p4, 1, "begin", "loading")
	progress(p4, 2, "begin", "diag initial")
	progress(p4, 1, "end", "")
	stop := make(chan struct{})
	published := make(chan struct{})
	go func() {
		defer close(published)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			if err := p4.conn.Notify(ctx, "textDocument/publishDiagnostics", json.RawMessage(fmt.Sprintf(`{"uri":"file:///w/f%d.go","diagnostics":[]}`, i))); err != nil {
				return
			}
		}
	}()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = c4.WaitQuiet(wctx, 100*time.Millisecond)
	cancel()
	close(stop)
	<-published
	if err != nil {
		t.Fatalf("the diagnosis's publications held the wait: %v", err)
	}
	if c4.Diagnosed() {
		t.Fatal("Diagnosed before the initial diagnosis ended")
	}
}

// TestContentModifiedRetried: a server that answers ContentModified (its
// state changed under the request: rust-analyzer reloading a workspace)
// is asked again, as the LSP asks of clients, a bounded number of times.
func TestContentModifiedRetried(t *testing.T) {
	c, p, err := connectPeer(t, basicInit, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	fails := int32(2)
	p.mu.Lock()
	p.answer = func(req *jsonrpc.Request) (any, error, bool) {
		if req.Method != "textDocument/hover" {
			return nil, nil, false
		}
		if calls.Add(1) <= atomic.LoadInt32(&fails) {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeContentModified, Message: "content modified"}, true
		}
		return json.RawMessage(`{"contents":{"kind":"markdown","value":"func F()"}}`), nil, true
	}
	p.mu.Unlock()
	h, err := c.Hover(t.Context(), "file:///a.go", Position{})
	if err != nil || h == nil || !strings.Contains(h.Markdown, "func F") || calls.Load() != 3 {
		t.Fatalf("hover after two ContentModified: %+v, %v, %d calls", h, err, calls.Load())
	}
	calls.Store(0)
	atomic.StoreInt32(&fails, 100)
	_, err = c.Hover(t.Context(), "file:///a.go", Position{})
	var rpcErr *jsonrpc.Error
	if !errors.As(err, &rpcErr) || rpcErr.Code != jsonrpc.CodeContentModified || calls.Load() != 1+contentModifiedRetries {
		t.Fatalf("a server always modified: %v after %d calls, want ContentModified after %d", err, calls.Load(), 1+contentModifiedRetries)
	}
}

// TestUntrackedProgressEndEndsNothing: an end for a token that never began
// (or whose begin was over the bound) is no load's end: before, a server
// sending one ended WaitLoaded before its load had begun, and an empty
// answer could then be marked current.
func TestUntrackedProgressEndEndsNothing(t *testing.T) {
	signs := LoadSigns{Diagnosis: &DiagnosisReports{
		Is:        func(title string) bool { return strings.HasPrefix(title, "diag ") },
		Workspace: func(title string) bool { return strings.HasPrefix(title, "diag ") },
	}}
	c, p, err := connectPeer(t, basicInit, Options{LoadSigns: signs})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := p.conn.Notify(ctx, "$/progress", json.RawMessage(`{"token":"never-begun","value":{"kind":"end"}}`)); err != nil {
		t.Fatal(err)
	}
	p.sync(t)
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := c.WaitLoaded(wctx, time.Hour); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitLoaded after an end nothing began: %v; want it still waiting", err)
	}
}

// TestReopenedDocumentWaitsForANewPublication: a document closed to keep
// MaxOpenDocuments and opened again does not take its previous open's
// publication (versions start again at 1) as settled: only one after the
// new open settles it.
func TestReopenedDocumentWaitsForANewPublication(t *testing.T) {
	c, p, err := connectPeer(t, basicInit, Options{Limits: Limits{MaxOpenDocuments: 1, DiagnosticsWait: 300 * time.Millisecond, DiagnosticsQuiet: 20 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	open := func(uri string) {
		t.Helper()
		if err := c.DidOpen(ctx, DocumentURI(uri), "go", "package a\n"); err != nil {
			t.Fatal(err)
		}
	}
	publish := func(uri string) {
		t.Helper()
		if err := p.conn.Notify(ctx, "textDocument/publishDiagnostics", json.RawMessage(fmt.Sprintf(`{"uri":%q,"version":1,"diagnostics":[]}`, uri))); err != nil {
			t.Fatal(err)
		}
		p.sync(t)
	}
	open("file:///w/a.go")
	publish("file:///w/a.go")
	open("file:///w/b.go") // closes a.go
	open("file:///w/a.go")
	if d, err := c.Diagnostics(ctx, "file:///w/a.go"); err != nil || d.Settled {
		t.Fatalf("a.go reopened, nothing published since: %+v, %v; want not settled", d, err)
	}
	publish("file:///w/a.go")
	if d, err := c.Diagnostics(ctx, "file:///w/a.go"); err != nil || !d.Settled {
		t.Fatalf("a.go published after its reopen: %+v, %v; want settled", d, err)
	}
}
