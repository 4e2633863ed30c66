package runtime

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hanzoai/lsp/daemon/internal/jsonrpc"
)

// The fake language server is this test binary re-executed with
// LSP_FAKE_SERVER=1. It speaks just enough LSP to be driven by the real
// client and misbehaves on request, keyed by the hover line:
//
//	line 555  answer with its working directory and environment
//	line 666  exit(3) instead of answering (a crash)
//	line 777  never answer; report each $/cancelRequest in a logMessage
//	line 888  send a frame header announcing 64 MiB
//	line 999  send a frame whose body is not JSON
//
// Flags (its arguments): -grandchild starts a sleeping child in the same
// process group at start; -nopublish never publishes diagnostics;
// -unversioned publishes without a document version; -freezeonce, in the
// first instance of a workspace home, says nothing more once it has
// answered initialize but goes on reading (a hung server); -freeze does so
// in every instance (hung again after each restart); -chatty logs a
// line every 20 ms once initialized (a busy server reporting); -quiet does
// not report $/cancelRequest.
const (
	fakeServerEnv  = "LSP_FAKE_SERVER"
	fakeSleeperEnv = "LSP_FAKE_SLEEPER"

	lineEnviron   = 555
	lineCrash     = 666
	lineHang      = 777
	lineOversize  = 888
	lineBadJSON   = 999
	fakeCancelLog = "cancelled request "
)

type fakeServer struct {
	mu          sync.Mutex
	w           io.Writer
	flags       map[string]bool
	nextID      int
	openedTexts map[string]string
	freeze      bool // -freeze, or -freezeonce and this is the first instance
	frozen      bool
}

func fakeServerMain(args []string) int {
	f := &fakeServer{w: os.Stdout, flags: map[string]bool{}, openedTexts: map[string]string{}}
	for _, a := range args {
		f.flags[a] = true
	}
	f.freeze = f.flags["-freeze"]
	if f.flags["-freezeonce"] {
		marker := filepath.Join(os.Getenv("HOME"), "froze")
		if _, err := os.Stat(marker); err != nil {
			if err := os.WriteFile(marker, nil, 0o600); err != nil {
				return 2
			}
			f.freeze = true
		}
	}
	if f.flags["-grandchild"] {
		self, err := os.Executable()
		if err != nil {
			return 2
		}
		cmd := exec.Command(self)
		cmd.Env = []string{fakeSleeperEnv + "=1"}
		if err := cmd.Start(); err != nil {
			return 2
		}
		// Deliberately never waited for: it must be reaped by the runtime.
	}
	r := bufio.NewReader(os.Stdin)
	for {
		body, err := jsonrpc.ReadFrame(r, 0)
		if err != nil {
			return 0
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
			Result json.RawMessage `json:"result"`
		}
		if json.Unmarshal(body, &m) != nil {
			return 2
		}
		if code := f.handle(m.ID, m.Method, m.Params, m.Result); code >= 0 {
			return code
		}
	}
}

func (f *fakeServer) send(v any) {
	b, _ := json.Marshal(v)
	f.mu.Lock()
	defer f.mu.Unlock()
	_ = jsonrpc.WriteFrame(f.w, b)
}

func (f *fakeServer) raw(s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, _ = io.WriteString(f.w, s)
}

func (f *fakeServer) reply(id json.RawMessage, result any) {
	f.send(map[string]any{"jsonrpc": "2.0", "id": id, "result": result})
}

func (f *fakeServer) notify(method string, params any) {
	f.send(map[string]any{"jsonrpc": "2.0", "method": method, "params": params})
}

func (f *fakeServer) request(method string, params any) {
	f.nextID++
	f.send(map[string]any{"jsonrpc": "2.0", "id": fmt.Sprintf("fake-%d", f.nextID), "method": method, "params": params})
}

func (f *fakeServer) log(msg string) {
	f.notify("window/logMessage", map[string]any{"type": 3, "message": msg})
}

// handle returns an exit code, or -1 to go on.
func (f *fakeServer) handle(id json.RawMessage, method string, params, result json.RawMessage) int {
	var p struct {
		TextDocument struct {
			URI     string `json:"uri"`
			Text    string `json:"text"`
			Version int    `json:"version"`
		} `json:"textDocument"`
		Position struct {
			Line int `json:"line"`
		} `json:"position"`
		ID json.RawMessage `json:"id"`
	}
	_ = json.Unmarshal(params, &p)
	if f.frozen {
		return -1
	}
	switch method {
	case "":
		// A reply to one of our requests: report the configuration answer.
		if string(id) == `"fake-2"` {
			f.log("configuration: " + string(result))
		}
	case "initialize":
		f.reply(id, map[string]any{
			"capabilities": map[string]any{
				"positionEncoding":       "utf-16",
				"textDocumentSync":       1,
				"hoverProvider":          true,
				"definitionProvider":     map[string]any{"workDoneProgress": false},
				"referencesProvider":     false,
				"documentSymbolProvider": true,
			},
			"serverInfo": map[string]any{"name": "fake", "version": "1.2.3"},
		})
		f.frozen = f.freeze
	case "initialized":
		if f.flags["-chatty"] {
			go func() {
				for range time.Tick(20 * time.Millisecond) {
					f.notify("window/logMessage", map[string]any{"type": 4, "message": "still busy"})
				}
			}()
		}
		f.request("client/registerCapability", map[string]any{"registrations": []any{
			map[string]any{"id": "reg-1", "method": "textDocument/typeDefinition", "registerOptions": map[string]any{}},
		}})
		f.request("workspace/configuration", map[string]any{"items": []any{
			map[string]any{"section": "fake.inner"}, map[string]any{"section": "absent"},
		}})
	case "textDocument/didOpen":
		f.openedTexts[p.TextDocument.URI] = p.TextDocument.Text
		if f.flags["-nopublish"] {
			break
		}
		diags := []any{}
		if strings.Contains(p.TextDocument.Text, "BAD") {
			diags = append(diags, map[string]any{
				"range":    map[string]any{"start": map[string]int{"line": 0, "character": 0}, "end": map[string]int{"line": 0, "character": 3}},
				"severity": 1, "code": 42, "source": "fake", "message": "BAD is bad",
			})
		}
		params := map[string]any{"uri": p.TextDocument.URI, "diagnostics": diags}
		if !f.flags["-unversioned"] {
			params["version"] = p.TextDocument.Version
		}
		f.notify("textDocument/publishDiagnostics", params)
	case "textDocument/hover":
		switch p.Position.Line {
		case lineEnviron:
			wd, _ := os.Getwd()
			f.reply(id, map[string]any{"contents": "cwd=" + wd + "\n" + strings.Join(os.Environ(), "\n")})
		case lineCrash:
			return 3
		case lineHang:
		case lineOversize:
			f.raw(fmt.Sprintf("Content-Length: %d\r\n\r\n", 64<<20))
		case lineBadJSON:
			f.raw("Content-Length: 9\r\n\r\n{not json")
		default:
			f.reply(id, map[string]any{"contents": map[string]string{"kind": "markdown", "value": fmt.Sprintf("fake hover from pid %d", os.Getpid())}})
		}
	case "$/cancelRequest":
		if !f.flags["-quiet"] {
			f.log(fakeCancelLog + string(p.ID))
		}
	case "shutdown":
		f.reply(id, nil)
	case "exit":
		return 0
	default:
		if len(id) > 0 {
			f.send(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": -32601, "message": "not implemented"}})
		}
	}
	return -1
}

// fakeSleeperMain is the grandchild: it only waits to be killed.
func fakeSleeperMain() {
	time.Sleep(time.Hour)
}
