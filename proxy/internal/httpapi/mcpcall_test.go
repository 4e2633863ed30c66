package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
	"github.com/hanzoai/lsp/proxy/internal/daemonclient"
	"github.com/hanzoai/lsp/proxy/internal/daemontest"
	"github.com/hanzoai/lsp/proxy/internal/forge"
	"github.com/hanzoai/lsp/proxy/internal/operation"
	"google.golang.org/grpc"
)

// The MCP door with a real operation path behind it: the real ledger
// (Postgres), a fake forge and a fake daemon over gRPC, each of which
// shows what reached it.

const stackCommit = "0123456789abcdef0123456789abcdef01234567"

// stackForge resolves every revision to stackCommit and fetches a one-file
// tree. With hang set, Resolve waits for its caller's context to end.
type stackForge struct {
	resolves atomic.Int32
	hang     atomic.Bool
	gone     chan struct{} // closed at the end of the test: hung calls return
}

func (f *stackForge) Resolve(ctx context.Context, _ forge.Credential, _, _ string, _ forge.Rev) (string, error) {
	f.resolves.Add(1)
	if f.hang.Load() {
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-f.gone:
			return "", errors.New("test over")
		}
	}
	return stackCommit, nil
}

func (f *stackForge) Fetch(context.Context, forge.Credential, string, string, string, forge.Limits) (*forge.Tree, error) {
	data := []byte("package a\n")
	return &forge.Tree{Files: []forge.File{{Path: "a.go", Data: data, Size: int64(len(data))}}}, nil
}

// stackDaemon holds at most one workspace (under prepareID). A push takes
// pushDelay; a query blocks until its caller's context ends and reports it.
type stackDaemon struct {
	daemonv1.UnimplementedDaemonServer
	pushDelay atomic.Int64 // nanoseconds
	pushes    atomic.Int32

	mu        sync.Mutex
	prepareID string

	queried   chan struct{} // a query arrived
	cancelled chan error    // … and its context ended, with this
}

func (d *stackDaemon) Hello(context.Context, *daemonv1.HelloRequest) (*daemonv1.HelloResponse, error) {
	return &daemonv1.HelloResponse{ProtocolVersion: uint32(daemonv1.ProtocolVersion_PROTOCOL_VERSION_CURRENT)}, nil
}

var stackLanguages = []*daemonv1.LanguageTools{{Language: "go", Server: &daemonv1.ServerInfo{Id: "gopls", Version: "v0"}, Tools: []string{"hover"}}}

func (d *stackDaemon) Capabilities(context.Context, *daemonv1.CapabilitiesRequest) (*daemonv1.CapabilitiesResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.prepareID == "" {
		return &daemonv1.CapabilitiesResponse{}, nil
	}
	return &daemonv1.CapabilitiesResponse{Warm: true, PrepareId: d.prepareID, Languages: stackLanguages}, nil
}

func (d *stackDaemon) Prepare(stream grpc.ClientStreamingServer[daemonv1.PrepareRequest, daemonv1.PrepareResponse]) error {
	id, err := daemontest.ReceivePush(stream)
	if err != nil {
		return err
	}
	d.pushes.Add(1)
	time.Sleep(time.Duration(d.pushDelay.Load())) // the push runs on whatever the proxy's client does
	d.publish(id)
	return stream.SendAndClose(&daemonv1.PrepareResponse{Prepared: true, PrepareId: id, Languages: stackLanguages})
}

func (d *stackDaemon) Query(ctx context.Context, _ *daemonv1.QueryRequest) (*daemonv1.QueryResponse, error) {
	d.mu.Lock()
	id := d.prepareID
	d.mu.Unlock()
	if id == "" {
		return &daemonv1.QueryResponse{Status: daemonv1.Status_STATUS_NEEDS_TREE}, nil
	}
	d.queried <- struct{}{}
	<-ctx.Done()
	d.cancelled <- ctx.Err()
	return nil, ctx.Err()
}

func (d *stackDaemon) publish(id string) {
	d.mu.Lock()
	d.prepareID = id
	d.mu.Unlock()
}

type mcpStack struct {
	*moneyAPI
	url    string
	forge  *stackForge
	daemon *stackDaemon
}

// newMCPStack serves the API with the operation path over the fake forge
// and daemon; acme has 10¢ and prepares cost 2¢ with no grace, so every
// prepare of the revision is charged.
func newMCPStack(t *testing.T, requestTimeout, pushDelay time.Duration) *mcpStack {
	t.Helper()
	a := newMoneyAPI(t)
	f := &stackForge{gone: make(chan struct{})}
	d := &stackDaemon{queried: make(chan struct{}, 8), cancelled: make(chan error, 8)}
	d.pushDelay.Store(int64(pushDelay))
	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "d.sock"))
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	daemonv1.RegisterDaemonServer(g, d)
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)
	pool, err := daemonclient.New([]string{"unix://" + ln.Addr().String()}, daemonclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	ops := operation.New(f, a.l, pool, operation.Config{PrepareCents: 2, PrepareTimeout: 10 * time.Second}, slog.New(slog.DiscardHandler), nil)
	t.Cleanup(func() { _ = ops.Wait(context.Background()) }) // pushes end before the pool closes
	a.s.d.Ops = ops
	a.s.d.RequestTimeout = requestTimeout
	if err := a.l.Credit(context.Background(), testOwner, 10, "test"); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a.s.Handler())
	t.Cleanup(func() { srv.Close(); http.DefaultClient.CloseIdleConnections() })
	t.Cleanup(func() { close(f.gone) }) // first: a hung forge call lets its request end
	return &mcpStack{moneyAPI: a, url: srv.URL, forge: f, daemon: d}
}

// rpc posts one JSON-RPC message as tok with the forge credential, the
// session id and an Idempotency-Key when set.
func (m *mcpStack) rpc(ctx context.Context, tok, session, key, msg string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.url+mcpPath, strings.NewReader(msg))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("X-Forge-Token", testForgeTok)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	return http.DefaultClient.Do(req)
}

// open starts an unbound session as tok.
func (m *mcpStack) open(t *testing.T, tok string) string {
	t.Helper()
	resp, err := m.rpc(context.Background(), tok, "", "", mcpInit)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	id := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || id == "" {
		t.Fatalf("initialize: %d, session %q", resp.StatusCode, id)
	}
	resp, err = m.rpc(context.Background(), tok, id, "", `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return id
}

// toolAnswer is a tools/call's result as a client reads it.
type toolAnswer struct {
	IsError    bool            `json:"isError"`
	Structured json.RawMessage `json:"structuredContent"`
	Content    []struct {
		Text string `json:"text"`
	} `json:"content"`
	Meta map[string]any `json:"_meta"`

	replayedHeader string
}

// call sends tools/call name(args) with JSON-RPC id and reads its result.
func (m *mcpStack) call(t *testing.T, tok, session, key string, id int, name, args string) toolAnswer {
	t.Helper()
	msg := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":%s}}`, id, name, args)
	resp, err := m.rpc(context.Background(), tok, session, key, msg)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("tools/call %s: %d %s", name, resp.StatusCode, raw)
	}
	// The answer is one JSON object or server-sent events; the result is
	// the message with our id.
	msgs := [][]byte{raw}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		msgs = nil
		sc := bufio.NewScanner(bytes.NewReader(raw))
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				msgs = append(msgs, []byte(d))
			}
		}
	}
	for _, b := range msgs {
		var r struct {
			ID     *int        `json:"id"`
			Result *toolAnswer `json:"result"`
			Error  any         `json:"error"`
		}
		if json.Unmarshal(b, &r) != nil || r.ID == nil || *r.ID != id {
			continue
		}
		if r.Result == nil {
			t.Fatalf("tools/call %s: %s", name, b)
		}
		r.Result.replayedHeader = resp.Header.Get("Idempotent-Replayed")
		return *r.Result
	}
	t.Fatalf("tools/call %s: no result for id %d in %s", name, id, raw)
	return toolAnswer{}
}

func (a toolAnswer) errorCode(t *testing.T) string {
	t.Helper()
	if !a.IsError {
		return ""
	}
	var env errorBody
	if err := json.Unmarshal(a.Structured, &env); err != nil {
		t.Fatalf("error result is not the envelope: %s", a.Structured)
	}
	return env.Error.Code
}

func (m *mcpStack) balance(t *testing.T) (balance, held int64) {
	t.Helper()
	b, err := m.l.Balance(context.Background(), testOwner)
	if err != nil {
		t.Fatal(err)
	}
	return b.BalanceCents, b.HeldCents
}

func (m *mcpStack) prepareRows(t *testing.T) int {
	t.Helper()
	var n int
	if err := m.l.Pool().QueryRow(context.Background(), `SELECT count(*) FROM ledger_rows WHERE model = 'prepare'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestMCPIdempotentToolCall: an MCP tools/call retried with the same
// Idempotency-Key (on the POST that carries it) runs once — one hold, one
// charge — and the retry, under its own JSON-RPC id, gets the first
// answer, marked replayed; even when the workspace was evicted in between,
// so that running again would prepare and charge again. The same key with
// other arguments is 422.
func TestMCPIdempotentToolCall(t *testing.T) {
	m := newMCPStack(t, 5*time.Second, 0)
	session := m.open(t, m.member)
	const args = `{"repo":"hello"}`
	first := m.call(t, m.member, session, "prep-1", 2, "prepare", args)
	if first.IsError || !strings.Contains(string(first.Structured), `"prepared":true`) || first.replayedHeader != "" || first.Meta != nil {
		t.Fatalf("first: %+v %s", first, first.Structured)
	}
	if bal, held := m.balance(t); bal != 8 || held != 0 {
		t.Fatalf("after the first call: balance %d, held %d; want 8, 0", bal, held)
	}
	m.daemon.publish("") // evicted: a second run would push and charge again

	again := m.call(t, m.member, session, "prep-1", 3, "prepare", args)
	if bal, _ := m.balance(t); bal != 8 || m.prepareRows(t) != 1 || m.daemon.pushes.Load() != 1 {
		t.Fatalf("after the retry: balance %d, %d prepare rows, %d pushes; want 8, one and one", bal, m.prepareRows(t), m.daemon.pushes.Load())
	}
	if again.IsError || string(again.Structured) != string(first.Structured) || again.Content[0].Text != first.Content[0].Text {
		t.Fatalf("retry: %s %q; first %s %q", again.Structured, again.Content[0].Text, first.Structured, first.Content[0].Text)
	}
	if again.Meta["idempotent_replayed"] != true || again.replayedHeader != "true" {
		t.Fatalf("retry not marked replayed: _meta %v, Idempotent-Replayed %q", again.Meta, again.replayedHeader)
	}
	// A replay re-checks forge access (CONTRACT §3): the forge was asked.
	if n := m.forge.resolves.Load(); n != 2 {
		t.Fatalf("%d forge resolves; want the call's and the replay's", n)
	}

	// The key is bound to the tool and its arguments.
	if code := m.call(t, m.member, session, "prep-1", 4, "prepare", `{"repo":"hello","rev":"main"}`).errorCode(t); code != "idempotency_key_reused" {
		t.Fatalf("same key, other arguments: %q", code)
	}
	// A malformed key is refused before anything runs.
	if code := m.call(t, m.member, session, "a b", 5, "prepare", args).errorCode(t); code != "invalid_request" {
		t.Fatalf("malformed key: %q", code)
	}
	if n := m.daemon.pushes.Load(); n != 1 {
		t.Fatalf("%d pushes; want one", n)
	}
}

// TestMCPToolCallEndsWithItsPOST: the SDK runs a tool on the session's
// context; a client that gives up on the POST carrying the call (with the
// request deadline far off) stops the call's work — the daemon's query is
// cancelled. What must finish once started is not cut: a prepare whose
// POST is cancelled during its push is still captured, once, and leaves
// no hold.
func TestMCPToolCallEndsWithItsPOST(t *testing.T) {
	m := newMCPStack(t, time.Minute, 0)
	m.daemon.publish("p0") // warm
	session := m.open(t, m.member)
	// send posts msg and cancels the POST once started says so.
	send := func(msg string, started func()) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			if resp, err := m.rpc(ctx, m.member, session, "", msg); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
		started()
		cancel()
		<-done
	}

	send(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"hover","arguments":{"repo":"hello","path":"a.go","line":0,"character":0}}}`, func() {
		select {
		case <-m.daemon.queried:
		case <-time.After(10 * time.Second):
			t.Fatal("the query never reached the daemon")
		}
	})
	select {
	case err := <-m.daemon.cancelled:
		t.Logf("the daemon's query ended: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("the client went away but the tool call's query ran on")
	}
	// It reached the daemon: its row says how it ended (CONTRACT §5).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var n int
		if err := m.l.Pool().QueryRow(context.Background(), `SELECT count(*) FROM usage_rows WHERE op = 'hover' AND http_status = 499`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d usage rows for the query whose client went away at the daemon; want one, status 499", n)
		}
	}

	m.daemon.publish("") // cold: the next prepare pushes
	m.daemon.pushDelay.Store(int64(500 * time.Millisecond))
	send(`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"prepare","arguments":{"repo":"hello"}}}`, func() {
		deadline := time.Now().Add(10 * time.Second)
		for m.daemon.pushes.Load() == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the push never reached the daemon")
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		bal, held := m.balance(t)
		if bal == 8 && held == 0 && m.prepareRows(t) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a push whose client went away: balance %d, held %d, %d prepare rows; want 8, 0 and one", bal, held, m.prepareRows(t))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPrepareBoundedByRequestTimeout: a prepare gets the deadline of any
// operation request, through either door, and so do the free probe and a
// workspace's deletion: a forge that never answers ends in 504 timeout.
func TestPrepareBoundedByRequestTimeout(t *testing.T) {
	m := newMCPStack(t, 300*time.Millisecond, 0)
	session := m.open(t, m.member)
	m.forge.hang.Store(true)

	within := func(what string, f func()) {
		t.Helper()
		done := make(chan struct{})
		go func() { defer close(done); f() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: still running 10 s into a 300 ms request timeout", what)
		}
	}
	var rec *httptest.ResponseRecorder
	within("POST /prepare", func() { rec = m.post(t, "/v1/lsp/prepare", `{"repo":"hello"}`, m.member, "", "") })
	if rec.Code != http.StatusGatewayTimeout || errorOf(t, rec).Code != "timeout" {
		t.Fatalf("POST /prepare: %d %s; want 504 timeout", rec.Code, rec.Body)
	}
	var res toolAnswer
	within("MCP prepare", func() { res = m.call(t, m.member, session, "", 2, "prepare", `{"repo":"hello"}`) })
	if code := res.errorCode(t); code != "timeout" {
		t.Fatalf("MCP prepare: %s; want timeout", res.Structured)
	}
	within("GET /capabilities", func() { rec = m.get(t, "/v1/lsp/capabilities?repo=hello", m.member, "", "X-Forge-Token", testForgeTok) })
	if rec.Code != http.StatusGatewayTimeout || errorOf(t, rec).Code != "timeout" {
		t.Fatalf("GET /capabilities: %d %s; want 504 timeout", rec.Code, rec.Body)
	}
	within("DELETE /workspaces", func() {
		req := httptest.NewRequest(http.MethodDelete, "/v1/lsp/workspaces?repo=hello", nil)
		req.Header.Set("Authorization", "Bearer "+m.member)
		req.Header.Set("X-Forge-Token", testForgeTok)
		rec = httptest.NewRecorder()
		m.s.Handler().ServeHTTP(rec, req)
	})
	if rec.Code != http.StatusGatewayTimeout || errorOf(t, rec).Code != "timeout" {
		t.Fatalf("DELETE /workspaces: %d %s; want 504 timeout", rec.Code, rec.Body)
	}
}

// TestPrepareOutlastingTheRequestTimeoutIsCharged: the request deadline
// does not cut what must finish once started. A push that outlasts it
// runs on and is captured: the answer is 504 with prepared: true, the org
// paid once, and no hold is left live.
func TestPrepareOutlastingTheRequestTimeoutIsCharged(t *testing.T) {
	m := newMCPStack(t, 300*time.Millisecond, time.Second)
	session := m.open(t, m.member)
	res := m.call(t, m.member, session, "", 2, "prepare", `{"repo":"hello"}`)
	var env errorBody
	_ = json.Unmarshal(res.Structured, &env)
	if !res.IsError || env.Error.Code != "timeout" || env.Error.Prepared == nil || !*env.Error.Prepared {
		t.Fatalf("prepare past the request timeout: %s; want timeout with prepared: true", res.Structured)
	}
	if bal, held := m.balance(t); bal != 8 || held != 0 || m.prepareRows(t) != 1 {
		t.Fatalf("balance %d, held %d, %d prepare rows; want 8, 0 and one", bal, held, m.prepareRows(t))
	}
}

// TestPrepareWaitsForItsPush: a prepare request's deadline adds the push's
// own (LSP_PREPARE_TIMEOUT) to the request timeout: a push longer than the
// request timeout but inside its own is waited for and answered, not 504.
func TestPrepareWaitsForItsPush(t *testing.T) {
	m := newMCPStack(t, 300*time.Millisecond, time.Second)
	m.s.d.PrepareTimeout = 10 * time.Second
	session := m.open(t, m.member)
	res := m.call(t, m.member, session, "", 2, "prepare", `{"repo":"hello"}`)
	if res.IsError {
		t.Fatalf("a prepare whose push outlasts the request timeout but not its own: %s", res.Structured)
	}
	if bal, held := m.balance(t); bal != 8 || held != 0 || m.prepareRows(t) != 1 {
		t.Fatalf("balance %d, held %d, %d prepare rows; want 8, 0 and one", bal, held, m.prepareRows(t))
	}
}
