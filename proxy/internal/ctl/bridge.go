package ctl

// `lspctl lsp` is a language server on stdio that answers from the
// service: an editor starts it as it would start gopls, and every request
// becomes one HTTP call with the user's identity (LSP_URL, LSP_TOKEN,
// LSP_FORGE_TOKEN, LSP_ORG), so the editor shares the warm workspaces,
// the gate and the ledger with the CLI and MCP doors.
//
// The service answers about one revision, not about the editor's
// buffers. The bridge prepares the revision during initialize, pins the
// resolved commit for the session, and advertises only the providers the
// revision's servers negotiated. Files under the root map to repository
// paths and back; positions pass through untouched (UTF-16 on both
// sides). When a buffer differs from the revision's file (the answer's
// evidence.document_sha256 against the buffer's SHA-256) the answer is
// still given, and the editor is told it is stale.

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
)

// JSON-RPC and LSP error codes the bridge answers with.
const (
	codeParseError       = -32700
	codeInvalidRequest   = -32600
	codeMethodNotFound   = -32601
	codeInvalidParams    = -32602
	codeNotInitialized   = -32002
	codeRequestFailed    = -32803
	codeRequestCancelled = -32800
)

type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (e *rpcError) Error() string { return e.Message }

// message is any JSON-RPC message, incoming or outgoing.
type message struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

// document is an open buffer: its text as the editor holds it.
type document struct {
	path    string // repository path
	version int
	text    string
	sha     string // hex SHA-256 of text
	warned  int    // the version a stale warning was last sent for; -1 none
}

type bridge struct {
	c         *client
	repo, rev string
	root      string // --root; empty: from initialize
	log       *slog.Logger
	out       *frameWriter

	mu       sync.Mutex
	docs     map[string]*document // by URI as the editor sent it
	tools    map[string]bool      // union of the languages' tools
	commit   string               // the pinned revision, after initialize
	inFlight map[string]context.CancelFunc
	pending  map[string]chan message // our requests to the editor, by id
	state    int                     // 0 new, 1 initialized, 2 shut down
	nextID   atomic.Int64
	bg       sync.WaitGroup // pushes of diagnostics
}

// lspCmd runs `lspctl lsp --repo R [--rev REV] [--root DIR] [--log FILE]`
// on in/out until the editor sends exit or closes the stream.
func lspCmd(ctx context.Context, args []string, getenv func(string) string, in io.Reader, out, stderr io.Writer) error {
	fs := flag.NewFlagSet("lsp", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	repo := fs.String("repo", "", "the repository (inside the org)")
	rev := fs.String("rev", "", "a branch, tag, ref or full commit sha (default: the default branch)")
	root := fs.String("root", "", "the local checkout (default: the editor's workspace folder)")
	logFile := fs.String("log", "", "append the bridge's log to this file (default: stderr)")
	if err := fs.Parse(args); err != nil {
		return usageError(fmt.Sprintf("lsp: %v", err))
	}
	if fs.NArg() > 0 {
		return usageError(fmt.Sprintf("lsp: unexpected argument %q", fs.Arg(0)))
	}
	if *repo == "" {
		return usageError("lsp: --repo is required")
	}
	logw := stderr
	if *logFile != "" {
		f, err := os.OpenFile(*logFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			return usageError(fmt.Sprintf("lsp: --log: %v", err))
		}
		defer f.Close()
		logw = f
	}
	if *root != "" {
		abs, err := filepath.Abs(*root)
		if err != nil {
			return usageError(fmt.Sprintf("lsp: --root: %v", err))
		}
		*root = abs
	}
	c, err := newClient(getenv)
	if err != nil {
		return err
	}
	b := &bridge{
		c: c, repo: *repo, rev: *rev, root: *root,
		log:      slog.New(slog.NewTextHandler(logw, nil)).With("repo", *repo),
		out:      &frameWriter{w: out},
		docs:     map[string]*document{},
		inFlight: map[string]context.CancelFunc{},
		pending:  map[string]chan message{},
	}
	return b.serve(ctx, in)
}

// errExitWithoutShutdown ends the process with 1, as the protocol asks
// when exit comes without shutdown.
var errExitWithoutShutdown = &exitError{1, errors.New("lsp: exit without shutdown")}

// serve reads messages until exit or end of input. Requests run
// concurrently (a slow references call must not hold up a hover);
// notifications run in order on this goroutine, so buffer text is always
// the latest the editor sent before a later request.
func (b *bridge) serve(ctx context.Context, in io.Reader) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait(); b.bg.Wait() }()
	r := bufio.NewReaderSize(in, 64<<10)
	for {
		body, err := readFrame(r)
		if err == io.EOF {
			b.log.Info("the editor closed the stream")
			return nil
		}
		if err != nil {
			return fmt.Errorf("lsp: read: %w", err)
		}
		var m message
		if err := json.Unmarshal(body, &m); err != nil {
			b.reply(nil, nil, &rpcError{codeParseError, "not JSON-RPC: " + err.Error()})
			continue
		}
		switch {
		case m.Method == "" && len(m.ID) > 0: // an answer to our request
			b.mu.Lock()
			ch := b.pending[string(m.ID)]
			delete(b.pending, string(m.ID))
			b.mu.Unlock()
			if ch != nil {
				ch <- m
			}
		case m.Method == "exit":
			b.mu.Lock()
			clean := b.state == 2
			b.mu.Unlock()
			if !clean {
				return errExitWithoutShutdown
			}
			return nil
		case len(m.ID) == 0:
			b.notification(ctx, m)
		default:
			rctx, rcancel := context.WithCancel(ctx)
			b.mu.Lock()
			b.inFlight[string(m.ID)] = rcancel
			b.mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() {
					b.mu.Lock()
					delete(b.inFlight, string(m.ID))
					b.mu.Unlock()
					rcancel()
				}()
				res, rerr := b.request(rctx, m)
				if rerr == nil && rctx.Err() != nil && ctx.Err() == nil {
					rerr = &rpcError{codeRequestCancelled, "cancelled"}
				}
				b.reply(m.ID, res, rerr)
			}()
		}
	}
}

// reply answers a request; a nil result is JSON null.
func (b *bridge) reply(id json.RawMessage, result any, rerr *rpcError) {
	m := message{JSONRPC: "2.0", ID: id}
	if id == nil {
		m.ID = json.RawMessage("null")
	}
	if rerr != nil {
		m.Error = rerr
	} else {
		raw, err := json.Marshal(result)
		if err != nil {
			m.Error = &rpcError{codeRequestFailed, "encode the answer: " + err.Error()}
		} else {
			m.Result = raw
		}
	}
	b.send(m)
}

func (b *bridge) send(m message) {
	m.JSONRPC = "2.0"
	raw, err := json.Marshal(m)
	if err == nil {
		err = b.out.write(raw)
	}
	if err != nil {
		b.log.Error("write to the editor", "err", err)
	}
}

func (b *bridge) notify(method string, params any) {
	raw, err := json.Marshal(params)
	if err != nil {
		return
	}
	b.send(message{Method: method, Params: raw})
}

// call sends a request to the editor and waits for its answer.
func (b *bridge) call(ctx context.Context, method string, params any) (message, error) {
	id, _ := json.Marshal(fmt.Sprintf("lspctl-%d", b.nextID.Add(1)))
	raw, _ := json.Marshal(params)
	ch := make(chan message, 1)
	b.mu.Lock()
	b.pending[string(id)] = ch
	b.mu.Unlock()
	b.send(message{ID: id, Method: method, Params: raw})
	select {
	case m := <-ch:
		if m.Error != nil {
			return m, m.Error
		}
		return m, nil
	case <-ctx.Done():
		b.mu.Lock()
		delete(b.pending, string(id))
		b.mu.Unlock()
		return message{}, ctx.Err()
	}
}

// Message types of window/logMessage.
const (
	msgWarning = 2
	msgLog     = 4
)

func (b *bridge) logMessage(typ int, text string) {
	b.notify("window/logMessage", map[string]any{"type": typ, "message": "lspctl: " + text})
}

func (b *bridge) notification(ctx context.Context, m message) {
	b.mu.Lock()
	state := b.state
	b.mu.Unlock()
	if state != 1 {
		return // before initialize or after shutdown, notifications are dropped
	}
	switch m.Method {
	case "$/cancelRequest":
		var p struct {
			ID json.RawMessage `json:"id"`
		}
		if json.Unmarshal(m.Params, &p) == nil {
			b.mu.Lock()
			if cancel := b.inFlight[string(p.ID)]; cancel != nil {
				cancel()
			}
			b.mu.Unlock()
		}
	case "textDocument/didOpen":
		var p struct {
			TextDocument struct {
				URI     string `json:"uri"`
				Version int    `json:"version"`
				Text    string `json:"text"`
			} `json:"textDocument"`
		}
		if json.Unmarshal(m.Params, &p) != nil {
			return
		}
		path, ok := b.repoPath(p.TextDocument.URI)
		if !ok {
			b.log.Info("a file outside the root is not the repository's", "uri", p.TextDocument.URI)
			return
		}
		b.mu.Lock()
		b.docs[p.TextDocument.URI] = &document{path: path, version: p.TextDocument.Version, text: p.TextDocument.Text, sha: sha256Hex(p.TextDocument.Text), warned: -1}
		b.mu.Unlock()
		b.publishDiagnostics(ctx, p.TextDocument.URI)
	case "textDocument/didChange":
		var p struct {
			TextDocument struct {
				URI     string `json:"uri"`
				Version int    `json:"version"`
			} `json:"textDocument"`
			ContentChanges []struct {
				Range *json.RawMessage `json:"range"`
				Text  string           `json:"text"`
			} `json:"contentChanges"`
		}
		if json.Unmarshal(m.Params, &p) != nil || len(p.ContentChanges) == 0 {
			return
		}
		// Full sync is advertised: the last change is the whole text.
		last := p.ContentChanges[len(p.ContentChanges)-1]
		if last.Range != nil {
			b.log.Warn("an incremental change though full sync was advertised; ignored", "uri", p.TextDocument.URI)
			return
		}
		b.mu.Lock()
		if d := b.docs[p.TextDocument.URI]; d != nil {
			d.version, d.text, d.sha = p.TextDocument.Version, last.Text, sha256Hex(last.Text)
		}
		b.mu.Unlock()
	case "textDocument/didSave":
		var p struct {
			TextDocument struct {
				URI string `json:"uri"`
			} `json:"textDocument"`
		}
		if json.Unmarshal(m.Params, &p) == nil {
			b.publishDiagnostics(ctx, p.TextDocument.URI)
		}
	case "textDocument/didClose":
		var p struct {
			TextDocument struct {
				URI string `json:"uri"`
			} `json:"textDocument"`
		}
		if json.Unmarshal(m.Params, &p) == nil {
			b.mu.Lock()
			delete(b.docs, p.TextDocument.URI)
			b.mu.Unlock()
		}
	}
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// request answers one request from the editor.
func (b *bridge) request(ctx context.Context, m message) (any, *rpcError) {
	b.mu.Lock()
	state := b.state
	b.mu.Unlock()
	switch {
	case m.Method == "initialize":
		if state != 0 {
			return nil, &rpcError{codeInvalidRequest, "initialize was already sent"}
		}
		return b.initialize(ctx, m.Params)
	case state == 0:
		return nil, &rpcError{codeNotInitialized, "initialize first"}
	case state == 2:
		return nil, &rpcError{codeInvalidRequest, "the server is shutting down"}
	case m.Method == "shutdown":
		b.mu.Lock()
		b.state = 2
		b.mu.Unlock()
		return nil, nil
	}
	h, ok := handlers[m.Method]
	if !ok {
		return nil, &rpcError{codeMethodNotFound, "lspctl lsp does not answer " + m.Method}
	}
	return h(b, ctx, m.Params)
}

// ServeLSP runs `lspctl lsp` with args on in and out: for tests that
// drive the bridge in process, speaking the protocol themselves.
func ServeLSP(ctx context.Context, args []string, getenv func(string) string, in io.Reader, out, stderr io.Writer) error {
	return lspCmd(ctx, args, getenv, in, out, stderr)
}
