// Package lspdirect speaks to a language server straight over stdio, with
// nothing of the service in between. The end-to-end tests compare the
// service's answers with it and the bench uses it as the baseline of every
// ratio. It is deliberately separate from the daemon's own client: a
// measuring stick must not share the code it measures.
package lspdirect

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/spawnthread"
)

// Server is one language server process.
type Server struct {
	cmd      *exec.Cmd
	in       io.WriteCloser
	root     string
	settings any // answers workspace/configuration

	wmu  sync.Mutex
	mu   sync.Mutex
	id   int
	wait map[int]chan reply
	done chan struct{}

	// diags holds the last textDocument/publishDiagnostics per URI,
	// published when it arrived (dmu guards both).
	dmu       sync.Mutex
	diags     map[string]json.RawMessage
	published map[string]time.Time

	// busy holds the work-done progress tokens begun and not ended;
	// lastProgress is when one last began or ended (pmu guards both).
	pmu          sync.Mutex
	busy         map[string]bool
	lastProgress time.Time
	// lastServer is when the server last sent a request or notification
	// of its own (progress, logs, diagnostics, configuration).
	lastServer time.Time
}

type reply struct {
	Result json.RawMessage
	Err    *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
}

// Start runs argv in root with env and initializes it.
func Start(ctx context.Context, root string, env []string, argv ...string) (*Server, error) {
	return StartWith(ctx, root, env, nil, argv...)
}

// StartWith is Start with the server's initializationOptions (the reviewed
// TypeScript entry's pinned tsserver path, for one).
func StartWith(ctx context.Context, root string, env []string, initOptions any, argv ...string) (*Server, error) {
	return start(ctx, root, env, initOptions, nil, argv)
}

// StartConfigured is Start with a reviewed entry's initialization options
// and settings (JSON, either may be empty): workspace/configuration is
// answered from settings, section by dotted section, as an editor does.
func StartConfigured(ctx context.Context, root string, env []string, initOptions, settings json.RawMessage, argv ...string) (*Server, error) {
	var init any
	if len(initOptions) > 0 {
		init = initOptions
	}
	var st any
	if len(settings) > 0 {
		if err := json.Unmarshal(settings, &st); err != nil {
			return nil, fmt.Errorf("settings: %w", err)
		}
	}
	return start(ctx, root, env, init, st, argv)
}

func start(ctx context.Context, root string, env []string, initOptions, settings any, argv []string) (*Server, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = root, env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := spawnthread.Start(cmd); err != nil {
		return nil, err
	}
	s := &Server{cmd: cmd, in: in, root: root, settings: settings, wait: map[int]chan reply{}, done: make(chan struct{}), diags: map[string]json.RawMessage{}, published: map[string]time.Time{}, busy: map[string]bool{}}
	go s.read(bufio.NewReaderSize(out, 1<<16))
	// Every symbol kind, as the daemon's client declares them (and as an
	// editor does): a server told of the LSP 3.0 kinds only reports a
	// struct as a class and an enum member as an enum (clangd).
	symbolKinds := make([]int, 26)
	for i := range symbolKinds {
		symbolKinds[i] = i + 1
	}
	caps := map[string]any{
		"general": map[string]any{"positionEncodings": []string{"utf-16"}},
		"textDocument": map[string]any{
			"hover":              map[string]any{"contentFormat": []string{"markdown", "plaintext"}},
			"definition":         map[string]any{"linkSupport": false},
			"references":         map[string]any{},
			"documentSymbol":     map[string]any{"hierarchicalDocumentSymbolSupport": true, "symbolKind": map[string]any{"valueSet": symbolKinds}},
			"publishDiagnostics": map[string]any{"relatedInformation": false},
		},
		"workspace": map[string]any{"configuration": true, "symbol": map[string]any{"symbolKind": map[string]any{"valueSet": symbolKinds}}},
		// Progress, as the daemon's client has it: Idle waits on it.
		"window": map[string]any{"workDoneProgress": true},
	}
	var init json.RawMessage
	params := map[string]any{
		"processId": nil, "rootUri": s.URI(""), "capabilities": caps,
		"workspaceFolders": []map[string]any{{"uri": s.URI(""), "name": "root"}},
	}
	if initOptions != nil {
		params["initializationOptions"] = initOptions
	}
	if err := s.Call(ctx, "initialize", params, &init); err != nil {
		s.Close()
		return nil, fmt.Errorf("initialize: %w", err)
	}
	if err := s.notify("initialized", map[string]any{}); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Pid is the server process's id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// URI is the file URI of a root-relative path.
func (s *Server) URI(rel string) string {
	return (&url.URL{Scheme: "file", Path: filepath.Join(s.root, rel)}).String()
}

// Open sends didOpen for a root-relative file.
func (s *Server) Open(rel, languageID string) error {
	b, err := os.ReadFile(filepath.Join(s.root, rel))
	if err != nil {
		return err
	}
	return s.notify("textDocument/didOpen", map[string]any{
		"textDocument": map[string]any{"uri": s.URI(rel), "languageId": languageID, "version": 1, "text": string(b)},
	})
}

// WaitQuiet waits, at most until ctx ends, until the server has sent
// nothing of its own for quiet: its start-up work (a background scan of
// the workspace) is over, as the daemon's prepare waits for it.
func (s *Server) WaitQuiet(ctx context.Context, quiet time.Duration) {
	for {
		s.dmu.Lock()
		last := s.lastServer
		s.dmu.Unlock()
		if !last.IsZero() && time.Since(last) >= quiet {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-s.done:
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// CloseDoc sends didClose for a root-relative file.
func (s *Server) CloseDoc(rel string) error {
	return s.notify("textDocument/didClose", map[string]any{"textDocument": map[string]any{"uri": s.URI(rel)}})
}

// Call sends a request and decodes its result.
func (s *Server) Call(ctx context.Context, method string, params, result any) error {
	s.mu.Lock()
	s.id++
	id := s.id
	ch := make(chan reply, 1)
	s.wait[id] = ch
	s.mu.Unlock()
	if err := s.write(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params}); err != nil {
		return err
	}
	select {
	case r := <-ch:
		if r.Err != nil {
			return fmt.Errorf("%s: %d %s", method, r.Err.Code, r.Err.Message)
		}
		if result == nil {
			return nil
		}
		return json.Unmarshal(r.Result, result)
	case <-ctx.Done():
		return ctx.Err()
	case <-s.done:
		return errors.New("server exited")
	}
}

// Position is an LSP position.
type Position struct {
	Line      int `json:"line"`
	Character int `json:"character"`
}

// Hover returns the hover markdown at a position ("" for none).
func (s *Server) Hover(ctx context.Context, rel string, pos Position) (string, error) {
	var h *struct {
		Contents struct {
			Value string `json:"value"`
		} `json:"contents"`
	}
	err := s.Call(ctx, "textDocument/hover", map[string]any{"textDocument": map[string]any{"uri": s.URI(rel)}, "position": pos}, &h)
	if err != nil || h == nil {
		return "", err
	}
	return h.Contents.Value, nil
}

// Definition returns the raw definition result.
func (s *Server) Definition(ctx context.Context, rel string, pos Position) (json.RawMessage, error) {
	var r json.RawMessage
	err := s.Call(ctx, "textDocument/definition", map[string]any{"textDocument": map[string]any{"uri": s.URI(rel)}, "position": pos}, &r)
	return r, err
}

// Diagnostics is the last textDocument/publishDiagnostics for a
// root-relative file (nil when none arrived), and when it arrived (zero
// when none did).
func (s *Server) Diagnostics(rel string) (json.RawMessage, time.Time) {
	s.dmu.Lock()
	defer s.dmu.Unlock()
	u := s.URI(rel)
	return s.diags[u], s.published[u]
}

// Close shuts the server down and kills its process group.
func (s *Server) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2e9)
	_ = s.Call(ctx, "shutdown", nil, nil)
	cancel()
	_ = s.notify("exit", nil)
	_ = s.in.Close()
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	_ = s.cmd.Wait()
}

func (s *Server) notify(method string, params any) error {
	return s.write(map[string]any{"jsonrpc": "2.0", "method": method, "params": params})
}

func (s *Server) write(msg any) error {
	b, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if _, err := fmt.Fprintf(s.in, "Content-Length: %d\r\n\r\n", len(b)); err != nil {
		return err
	}
	_, err = s.in.Write(b)
	return err
}

// read dispatches replies and answers the server's own requests.
func (s *Server) read(r *bufio.Reader) {
	defer close(s.done)
	for {
		n := -1
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimSpace(line)
			if line == "" {
				break
			}
			if v, ok := strings.CutPrefix(line, "Content-Length:"); ok {
				n, _ = strconv.Atoi(strings.TrimSpace(v))
			}
		}
		if n < 0 || n > 256<<20 {
			return
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(r, body); err != nil {
			return
		}
		var m struct {
			ID     *json.RawMessage `json:"id"`
			Method string           `json:"method"`
			Params json.RawMessage  `json:"params"`
			reply
		}
		if json.Unmarshal(body, &m) != nil {
			continue
		}
		if m.Method != "" {
			s.dmu.Lock()
			s.lastServer = time.Now()
			s.dmu.Unlock()
		}
		switch {
		case m.Method == "textDocument/publishDiagnostics" && m.ID == nil:
			var p struct {
				URI         string          `json:"uri"`
				Diagnostics json.RawMessage `json:"diagnostics"`
			}
			if json.Unmarshal(m.Params, &p) == nil {
				s.dmu.Lock()
				s.diags[p.URI], s.published[p.URI] = p.Diagnostics, time.Now()
				s.dmu.Unlock()
			}
		case m.Method == "$/progress" && m.ID == nil:
			var p struct {
				Token json.RawMessage `json:"token"`
				Value struct {
					Kind string `json:"kind"`
				} `json:"value"`
			}
			if json.Unmarshal(m.Params, &p) == nil && (p.Value.Kind == "begin" || p.Value.Kind == "end") {
				s.pmu.Lock()
				if p.Value.Kind == "begin" {
					s.busy[string(p.Token)] = true
				} else {
					delete(s.busy, string(p.Token))
				}
				s.lastProgress = time.Now()
				s.pmu.Unlock()
			}
		case m.Method != "" && m.ID != nil:
			// A server request: configuration gets the settings' sections
			// (null without settings), the rest null.
			var result any
			if m.Method == "workspace/configuration" {
				var p struct {
					Items []struct{ Section string }
				}
				_ = json.Unmarshal(m.Params, &p)
				out := make([]any, len(p.Items))
				for i, it := range p.Items {
					out[i] = section(s.settings, it.Section)
				}
				result = out
			}
			_ = s.write(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": result})
		case m.Method == "" && m.ID != nil:
			id, _ := strconv.Atoi(string(*m.ID))
			s.mu.Lock()
			ch := s.wait[id]
			delete(s.wait, id)
			s.mu.Unlock()
			if ch != nil {
				ch <- m.reply
			}
		}
	}
}

// Idle waits until no work-done progress the server began is open and
// none began or ended for quiet (a server that loads its project, as
// rust-analyzer and clangd's background index do, reports it so), or ctx
// ends.
func (s *Server) Idle(ctx context.Context, quiet time.Duration) error {
	for {
		s.pmu.Lock()
		idle := len(s.busy) == 0 && time.Since(s.lastProgress) >= quiet
		s.pmu.Unlock()
		if idle {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.done:
			return errors.New("server exited")
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// section is the value at a dotted section of settings ("" the whole).
func section(settings any, name string) any {
	if name == "" {
		return settings
	}
	v := settings
	for _, key := range strings.Split(name, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		if v, ok = m[key]; !ok {
			return nil
		}
	}
	return v
}
