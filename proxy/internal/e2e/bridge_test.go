package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/ctl"
	"github.com/hanzoai/lsp/proxy/internal/devstack"
)

// lspSession speaks the protocol to an in-process bridge.
type lspSession struct {
	t    *testing.T
	w    io.Writer
	r    *bufio.Reader
	id   int
	done chan error
}

func (s *lspSession) write(m map[string]any) {
	m["jsonrpc"] = "2.0"
	raw, _ := json.Marshal(m)
	fmt.Fprintf(s.w, "Content-Length: %d\r\n\r\n%s", len(raw), raw)
}

func (s *lspSession) read() map[string]any {
	s.t.Helper()
	n := -1
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			s.t.Fatalf("read: %v", err)
		}
		line = strings.TrimSpace(line)
		if line == "" {
			break
		}
		if v, ok := strings.CutPrefix(line, "Content-Length: "); ok {
			n, _ = strconv.Atoi(v)
		}
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(s.r, body); err != nil {
		s.t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		s.t.Fatal(err)
	}
	return m
}

// call sends a request and returns its result, answering the bridge's
// own requests and skipping notifications on the way.
func (s *lspSession) call(method string, params any) any {
	s.t.Helper()
	s.id++
	s.write(map[string]any{"id": s.id, "method": method, "params": params})
	for {
		m := s.read()
		if m["method"] != nil {
			if m["id"] != nil {
				s.write(map[string]any{"id": m["id"], "result": nil})
			}
			continue
		}
		if m["id"] != float64(s.id) {
			continue
		}
		if m["error"] != nil {
			s.t.Fatalf("%s: %v", method, m["error"])
		}
		return m["result"]
	}
}

// TestBridgeOperations: the requests the Neovim test does not make —
// references, symbols, signature help, completion, call and type
// hierarchy — map to the service and back, and shutdown/exit end the
// bridge cleanly.
func TestBridgeOperations(t *testing.T) {
	tn := newTenant(t, "bridge", 10)
	root := t.TempDir()
	for path, content := range devstack.SampleRepo {
		p := filepath.Join(root, filepath.FromSlash(path))
		_ = os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	uri := func(p string) string { return (&url.URL{Scheme: "file", Path: filepath.Join(root, p)}).String() }
	env := tn.env()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := &lspSession{t: t, w: inW, r: bufio.NewReader(outR), done: make(chan error, 1)}
	go func() {
		err := ctl.ServeLSP(ctx, []string{"--repo", tn.repo, "--root", root}, func(k string) string { return env[k] }, inR, outW, io.Discard)
		outW.Close()
		s.done <- err
	}()

	initRes := s.call("initialize", map[string]any{"rootUri": nil, "capabilities": map[string]any{}})
	caps := initRes.(map[string]any)["capabilities"].(map[string]any)
	if caps["referencesProvider"] != true || caps["callHierarchyProvider"] != true {
		t.Fatalf("capabilities: %v", caps)
	}
	s.write(map[string]any{"method": "initialized", "params": map[string]any{}})
	s.write(map[string]any{"method": "textDocument/didOpen", "params": map[string]any{"textDocument": map[string]any{
		"uri": uri("greet/greet.go"), "languageId": "go", "version": 1, "text": devstack.SampleRepo["greet/greet.go"]}}})

	pos := func(p string, line, char int) map[string]any {
		return map[string]any{"textDocument": map[string]any{"uri": uri(p)}, "position": map[string]any{"line": line, "character": char}}
	}
	// References of Hello (greet.go line 18, 1-based): its use in Greet
	// and in main.go.
	refs := s.call("textDocument/references", with(pos("greet/greet.go", 17, 6), "context", map[string]any{"includeDeclaration": false})).([]any)
	var sawMain bool
	for _, r := range refs {
		if r.(map[string]any)["uri"] == uri("main.go") {
			sawMain = true
		}
	}
	if !sawMain {
		t.Errorf("references of Hello lack main.go: %v", refs)
	}

	syms := s.call("textDocument/documentSymbol", map[string]any{"textDocument": map[string]any{"uri": uri("greet/greet.go")}}).([]any)
	var hello map[string]any
	for _, x := range syms {
		if x.(map[string]any)["name"] == "Hello" {
			hello = x.(map[string]any)
		}
	}
	if hello == nil || hello["kind"] != float64(12) || hello["location"].(map[string]any)["uri"] != uri("greet/greet.go") {
		t.Errorf("document symbols lack the function Hello: %v", syms)
	}
	ws := s.call("workspace/symbol", map[string]any{"query": "Greeter"}).([]any)
	if len(ws) == 0 {
		t.Errorf("workspace symbols: nothing for Greeter")
	}

	// Signature help at Sprintf's second argument (greet.go line 19).
	sig, _ := s.call("textDocument/signatureHelp", pos("greet/greet.go", 18, 35)).(map[string]any)
	if sig == nil || !strings.Contains(fmt.Sprint(sig["signatures"]), "Sprintf") {
		t.Errorf("signature help: %v", sig)
	}
	comp, _ := s.call("textDocument/completion", pos("main.go", 10, 20)).(map[string]any)
	if comp == nil || !strings.Contains(fmt.Sprint(comp["items"]), "Hello") {
		t.Errorf("completion after greet.: %v", comp)
	}

	// Call hierarchy of Hello: incoming from Greet and main.
	items := s.call("textDocument/prepareCallHierarchy", pos("greet/greet.go", 17, 6)).([]any)
	if len(items) != 1 || items[0].(map[string]any)["name"] != "Hello" {
		t.Fatalf("prepareCallHierarchy: %v", items)
	}
	in := s.call("callHierarchy/incomingCalls", map[string]any{"item": items[0]}).([]any)
	var callers []string
	for _, c := range in {
		callers = append(callers, c.(map[string]any)["from"].(map[string]any)["name"].(string))
	}
	if !strings.Contains(strings.Join(callers, " "), "main") || !strings.Contains(strings.Join(callers, " "), "Greet") {
		t.Errorf("incoming calls of Hello: %v", callers)
	}
	// Type hierarchy of English: Greeter is a supertype.
	titems := s.call("textDocument/prepareTypeHierarchy", pos("greet/greet.go", 11, 6)).([]any)
	if len(titems) != 1 {
		t.Fatalf("prepareTypeHierarchy: %v", titems)
	}
	sup := s.call("typeHierarchy/supertypes", map[string]any{"item": titems[0]}).([]any)
	if !strings.Contains(fmt.Sprint(sup), "Greeter") {
		t.Errorf("supertypes of English: %v", sup)
	}

	if res := s.call("shutdown", nil); res != nil {
		t.Errorf("shutdown: %v", res)
	}
	s.write(map[string]any{"method": "exit"})
	if err := <-s.done; err != nil {
		t.Fatalf("exit after shutdown: %v", err)
	}
}
