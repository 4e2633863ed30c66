package lsp

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hanzoai/lsp/daemon/internal/jsonrpc"
)

// TestExpectedDiagnostics: fault injection of what
// typescript-language-server does under load — the document's first
// publication is empty and its suggestion (hint) comes well after the
// quiet window — while the server's own synchronous count says one
// suggestion exists. The answer waits for it; a document the server says
// is clean still answers at the quiet window, empty.
func TestExpectedDiagnostics(t *testing.T) {
	for _, tc := range []struct {
		name  string
		count int
	}{{"late suggestion", 1}, {"clean", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := net.Pipe()
			const init = `{"capabilities":{"executeCommandProvider":{"commands":["count.it"]}},"serverInfo":{"name":"peer","version":"0.1"}}`
			peer := jsonrpc.NewConn(b, jsonrpc.Options{Handler: func(_ context.Context, req *jsonrpc.Request) (any, error) {
				switch req.Method {
				case "initialize":
					return json.RawMessage(init), nil
				case "workspace/executeCommand":
					return json.RawMessage(fmt.Sprintf(`{"n":%d}`, tc.count)), nil
				}
				return nil, nil
			}})
			t.Cleanup(func() { _ = peer.Close() })
			exp := &ExpectedDiagnostics{
				Command:   "count.it",
				Arguments: func(u DocumentURI) []any { return []any{string(u)} },
				Count: func(raw json.RawMessage) (int, bool) {
					var r struct{ N int }
					return r.N, json.Unmarshal(raw, &r) == nil
				},
				Match: func(d Diagnostic) bool { return d.Severity == 4 },
			}
			c, err := Connect(context.Background(), a, Options{Root: "/work/space", LoadSigns: LoadSigns{Expected: exp},
				Limits: Limits{DiagnosticsQuiet: 100 * time.Millisecond, DiagnosticsWait: 5 * time.Second}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			ctx := context.Background()
			const u = "file:///work/space/a.ts"
			if err := c.DidOpen(ctx, u, "typescript", "let x = 1\n"); err != nil {
				t.Fatal(err)
			}
			if err := peer.Notify(ctx, "textDocument/publishDiagnostics", json.RawMessage(`{"uri":"`+u+`","diagnostics":[]}`)); err != nil {
				t.Fatal(err)
			}
			if tc.count > 0 {
				go func() {
					time.Sleep(600 * time.Millisecond)
					_ = peer.Notify(ctx, "textDocument/publishDiagnostics", json.RawMessage(`{"uri":"`+u+`","diagnostics":[{"range":{"start":{"line":0,"character":4},"end":{"line":0,"character":5}},"severity":4,"code":6133,"source":"typescript","message":"'x' is declared but its value is never read."}]}`))
				}()
			}
			start := time.Now()
			d, err := c.Diagnostics(ctx, u)
			if err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			if !d.Settled || len(d.Items) != tc.count {
				t.Fatalf("diagnostics = %+v after %v, want %d item(s), settled", d, took, tc.count)
			}
			if tc.count == 0 && took > time.Second {
				t.Fatalf("a clean document took %v", took)
			}
		})
	}
}

// TestFlushedDiagnostics: fault injection of what gopls does on a file
// its build constraints exclude from the default port — an empty
// publication at the open, the view made for the file's port publishing
// its finding later, no progress between — with the server's flush
// command (gopls.diagnose_files) publishing before it answers, and its
// own work-done progress ending as it does. The answer carries the late
// finding.
func TestFlushedDiagnostics(t *testing.T) {
	a, b := net.Pipe()
	const u = "file:///work/space/node_js.go"
	const init = `{"capabilities":{"executeCommandProvider":{"commands":["flush.it"]}},"serverInfo":{"name":"peer","version":"0.1"}}`
	var peer *jsonrpc.Conn
	peer = jsonrpc.NewConn(b, jsonrpc.Options{Handler: func(ctx context.Context, req *jsonrpc.Request) (any, error) {
		switch req.Method {
		case "initialize":
			return json.RawMessage(init), nil
		case "workspace/executeCommand":
			time.Sleep(600 * time.Millisecond)
			if err := peer.Notify(ctx, "textDocument/publishDiagnostics", json.RawMessage(`{"uri":"`+u+`","diagnostics":[{"range":{"start":{"line":11,"character":26},"end":{"line":11,"character":37}},"severity":3,"code":"unusedparams","source":"unusedparams","message":"unused parameter: name [js,wasm]"}]}`)); err != nil {
				return nil, err
			}
			// The command's progress: begun and ended as it answers.
			for _, kind := range []string{"begin", "end"} {
				if err := peer.Notify(ctx, "$/progress", json.RawMessage(`{"token":"flush","value":{"kind":"`+kind+`","title":"Diagnose files"}}`)); err != nil {
					return nil, err
				}
			}
			time.Sleep(300 * time.Millisecond)
			return nil, nil
		}
		return nil, nil
	}})
	t.Cleanup(func() { _ = peer.Close() })
	flush := &ExpectedDiagnostics{
		Command:   "flush.it",
		Arguments: func(u DocumentURI) []any { return []any{map[string]any{"Files": []string{string(u)}}} },
		Count:     func(raw json.RawMessage) (int, bool) { return 0, string(raw) == "null" },
		Match:     func(Diagnostic) bool { return false },
		Publishes: true,
	}
	c, err := Connect(context.Background(), a, Options{Root: "/work/space", LoadSigns: LoadSigns{Expected: flush},
		Limits: Limits{DiagnosticsQuiet: 200 * time.Millisecond, DiagnosticsWait: 20 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	if err := c.DidOpen(ctx, u, "go", "package uuid\n"); err != nil {
		t.Fatal(err)
	}
	if err := peer.Notify(ctx, "textDocument/publishDiagnostics", json.RawMessage(`{"uri":"`+u+`","diagnostics":[]}`)); err != nil {
		t.Fatal(err)
	}
	d, err := c.Diagnostics(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Settled || len(d.Items) != 1 {
		t.Fatalf("diagnostics = %+v, want the late finding, settled", d)
	}
	// Asked again, nothing new published: the same answer.
	if d, err = c.Diagnostics(ctx, u); err != nil || !d.Settled || len(d.Items) != 1 {
		t.Fatalf("again: %+v, %v", d, err)
	}
}

// TestAnchorCountsEndTheLoad: a server that counts the anchor's
// diagnostics of each kind (typescript-language-server through tsserver's
// synchronous requests) ends the first-load wait with the anchor's first
// publication that carries them all — not an earlier pass's, however
// quiet; a server that cannot count leaves the quiet to decide.
func TestAnchorCountsEndTheLoad(t *testing.T) {
	for _, offers := range []bool{true, false} {
		a, b := net.Pipe()
		commands := `[]`
		if offers {
			commands = `["count.it"]`
		}
		init := `{"capabilities":{"executeCommandProvider":{"commands":` + commands + `}},"serverInfo":{"name":"peer","version":"0.1"}}`
		peer := jsonrpc.NewConn(b, jsonrpc.Options{Handler: func(_ context.Context, req *jsonrpc.Request) (any, error) {
			switch req.Method {
			case "initialize":
				return json.RawMessage(init), nil
			case "workspace/executeCommand":
				return json.RawMessage(`{"n":1}`), nil // one of each kind
			}
			return nil, nil
		}})
		t.Cleanup(func() { _ = peer.Close() })
		kind := &ExpectedDiagnostics{
			Command:   "count.it",
			Arguments: func(u DocumentURI) []any { return []any{string(u)} },
			Count: func(raw json.RawMessage) (int, bool) {
				var r struct{ N int }
				return r.N, json.Unmarshal(raw, &r) == nil
			},
		}
		c, err := Connect(context.Background(), a, Options{Root: "/work/space", LoadSigns: LoadSigns{AnchorCounts: []*ExpectedDiagnostics{kind, kind}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		ctx := context.Background()
		held := func() bool {
			t.Helper()
			wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			return c.WaitQuiet(wctx, time.Hour) != nil
		}
		const u = "file:///work/space/a.ts"
		diag := func(line int) string {
			return fmt.Sprintf(`{"range":{"start":{"line":%d,"character":0},"end":{"line":%d,"character":1}},"severity":1,"message":"m%d"}`, line, line, line)
		}
		publish := func(items ...string) {
			t.Helper()
			list := "[" + strings.Join(items, ",") + "]"
			if err := peer.Notify(ctx, "textDocument/publishDiagnostics", json.RawMessage(`{"uri":"`+u+`","diagnostics":`+list+`}`)); err != nil {
				t.Fatal(err)
			}
		}
		c.MarkAnchor(u)
		if err := c.DidOpen(ctx, u, "typescript", "x\ny\n"); err != nil {
			t.Fatal(err)
		}
		c.CountAnchor(u)
		publish(diag(0)) // the first pass: one of the two
		if !held() {
			t.Fatalf("offers %v: the wait ended on a publication that lacks a kind", offers)
		}
		publish(diag(0), diag(1))
		if held() == offers {
			t.Fatalf("offers %v: the publication carrying every kind: wait held %v", offers, !offers)
		}
		if c.Diagnosed() != offers {
			t.Fatalf("offers %v: Diagnosed %v", offers, c.Diagnosed())
		}
	}
}
