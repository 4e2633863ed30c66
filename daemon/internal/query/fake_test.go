package query

import (
	"bufio"
	"encoding/json"
	"flag"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hanzoai/lsp/daemon/internal/jsonrpc"
)

// The fake language server is this test binary re-executed with
// LSP_QUERY_FAKE=1: a protocol-level server for fault injection only. It
// answers workspace/symbol with the names of -names that contain the
// query (case-insensitive), each a function on its own line of -file,
// in -names' order (twice with -dup), and misbehaves by -mode: "hang"
// never answers, "error" answers a JSON-RPC error, "noresult" a reply
// with neither result nor error. The query "crash"
// makes it exit. -nows negotiates no workspace symbols; with -nofile the
// test's tree has no file of its language. -diagnosis begins, once
// initialized, gopls's report of its initial diagnosis ("diagnosing
// initial workspace load"), and ends it when it is "ends"; "loads" begins
// it beside gopls's load ("Setting up workspace"), ends the load and
// leaves the diagnosis running. With -load the server loads for that
// long once initialized, reporting it as gopls reports its load ("Setting
// up workspace"), and until then answers workspace/symbol and
// textDocument/definition with nothing, as a server that has not loaded
// the project; with -starts (a file counting the starts) only a restart
// loads that long, the first start at once (still reporting its load).
// -hostpath names the workspace's host path as each symbol's container.
// Once loaded, a definition is line 1 of -file.
const fakeEnv = "LSP_QUERY_FAKE"

func TestMain(m *testing.M) {
	if os.Getenv(fakeEnv) == "1" {
		os.Exit(fakeMain(os.Args[1:]))
	}
	os.Exit(m.Run())
}

func fakeMain(args []string) int {
	fs := flag.NewFlagSet("fake", flag.ContinueOnError)
	names := fs.String("names", "", "comma-separated symbol names")
	file := fs.String("file", "", "the repo-relative file of the symbols")
	mode := fs.String("mode", "ok", "ok, hang, error or noresult")
	dup := fs.Bool("dup", false, "list every symbol twice")
	nows := fs.Bool("nows", false, "negotiate no workspace symbols")
	_ = fs.Bool("nofile", false, "fakeWorkspace: the tree has no file of this language")
	diagnosis := fs.String("diagnosis", "", `"runs", "ends" or "loads": report an initial diagnosis`)
	load := fs.Duration("load", 0, "how long the load takes once initialized")
	starts := fs.String("starts", "", "a file counting the starts: only a restart loads for -load")
	hostPath := fs.Bool("hostpath", false, "name the workspace's host path as each symbol's container")
	if fs.Parse(args) != nil {
		return 2
	}
	reportLoad := *load > 0
	if *starts != "" {
		f, err := os.OpenFile(*starts, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return 2
		}
		_, _ = f.WriteString("x")
		fi, err := f.Stat()
		_ = f.Close()
		if err != nil {
			return 2
		}
		if fi.Size() == 1 {
			*load = 0
		}
	}
	out := bufio.NewWriter(os.Stdout)
	var outMu sync.Mutex
	send := func(v any) {
		b, _ := json.Marshal(v)
		outMu.Lock()
		defer outMu.Unlock()
		_ = jsonrpc.WriteFrame(out, b)
		_ = out.Flush()
	}
	var loaded atomic.Bool
	loaded.Store(*load == 0)
	var root string
	r := bufio.NewReader(os.Stdin)
	for {
		body, err := jsonrpc.ReadFrame(r, 0)
		if err != nil {
			return 0
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				RootURI string `json:"rootUri"`
				Query   string `json:"query"`
			} `json:"params"`
		}
		if json.Unmarshal(body, &m) != nil {
			return 2
		}
		switch m.Method {
		case "initialize":
			root = m.Params.RootURI
			caps := map[string]any{"positionEncoding": "utf-16", "textDocumentSync": 1, "documentSymbolProvider": true, "definitionProvider": true}
			if !*nows {
				caps["workspaceSymbolProvider"] = true
			}
			send(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": map[string]any{
				"capabilities": caps, "serverInfo": map[string]any{"name": "fake", "version": "1.0"}}})
		case "workspace/symbol":
			switch {
			case m.Params.Query == "crash":
				return 3
			case *mode == "hang":
			case *mode == "error":
				send(map[string]any{"jsonrpc": "2.0", "id": m.ID, "error": map[string]any{"code": -32603, "message": "fake failure"}})
			case *mode == "noresult":
				send(map[string]any{"jsonrpc": "2.0", "id": m.ID})
			case !loaded.Load():
				send(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": []any{}})
			default:
				syms := []any{}
				for rep := 0; rep < 1 || *dup && rep < 2; rep++ {
					for i, n := range strings.Split(*names, ",") {
						if n == "" || !strings.Contains(strings.ToLower(n), strings.ToLower(m.Params.Query)) {
							continue
						}
						rg := map[string]any{"start": map[string]int{"line": i, "character": 0}, "end": map[string]int{"line": i, "character": len(n)}}
						sym := map[string]any{"name": n, "kind": 12, "location": map[string]any{"uri": root + "/" + *file, "range": rg}}
						if *hostPath {
							sym["containerName"] = strings.TrimPrefix(root, "file://") + "/" + *file
						}
						syms = append(syms, sym)
					}
				}
				send(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": syms})
			}
		case "textDocument/definition":
			locs := []any{}
			if loaded.Load() {
				rg := map[string]any{"start": map[string]int{"line": 1, "character": 0}, "end": map[string]int{"line": 1, "character": 6}}
				locs = append(locs, map[string]any{"uri": root + "/" + *file, "range": rg})
			}
			send(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": locs})
		case "initialized":
			progress := func(token int, v map[string]any) {
				send(map[string]any{"jsonrpc": "2.0", "method": "$/progress", "params": map[string]any{"token": token, "value": v}})
			}
			if reportLoad {
				progress(3, map[string]any{"kind": "begin", "title": "Setting up workspace"})
				time.AfterFunc(*load, func() {
					loaded.Store(true)
					progress(3, map[string]any{"kind": "end"})
				})
			}
			if *diagnosis != "" {
				progress(1, map[string]any{"kind": "begin", "title": "diagnosing initial workspace load"})
				switch *diagnosis {
				case "ends":
					progress(1, map[string]any{"kind": "end"})
				case "loads":
					progress(2, map[string]any{"kind": "begin", "title": "Setting up workspace"})
					progress(2, map[string]any{"kind": "end"})
				}
			}
		case "shutdown":
			send(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": nil})
		case "exit":
			return 0
		default:
			if len(m.ID) > 0 {
				send(map[string]any{"jsonrpc": "2.0", "id": m.ID, "error": map[string]any{"code": -32601, "message": "not implemented"}})
			}
		}
	}
}
