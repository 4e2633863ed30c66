package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hanzoai/lsp/daemon/internal/jsonrpc"
	"github.com/hanzoai/lsp/daemon/internal/lsp"
)

// waitFor polls cond until it holds; the bound only keeps a broken test
// from hanging, it asserts nothing about time.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func startFake(t *testing.T, timeout time.Duration, flags ...string) *Server {
	t.Helper()
	return startFakeLogging(t, testLogger(t), timeout, flags...)
}

func startFakeLogging(t *testing.T, log *slog.Logger, timeout time.Duration, flags ...string) *Server {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	spec := Spec{
		ID: "fake", Language: "plaintext", Executable: exe, Args: flags,
		Env:            []string{fakeServerEnv + "=1"},
		Settings:       json.RawMessage(`{"fake":{"inner":{"answer":42}}}`),
		RequestTimeout: timeout,
	}
	srv, err := Start(context.Background(), Unjailed(testLogger(t)), spec, Workspace{Root: t.TempDir(), Home: t.TempDir()}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close(context.Background()) })
	return srv
}

func hoverLine(ctx context.Context, srv *Server, line uint32) (*lsp.Hover, error) {
	var h *lsp.Hover
	err := srv.Do(ctx, func(ctx context.Context, c *lsp.Client, _ uint64) error {
		var err error
		h, err = c.Hover(ctx, srv.URI("a.txt"), lsp.Position{Line: line})
		return err
	})
	return h, err
}

func current(srv *Server) *instance {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return srv.cur
}

func TestFakeNegotiation(t *testing.T) {
	t.Parallel()
	srv := startFake(t, 0)
	if _, err := hoverLine(context.Background(), srv, 1); err != nil {
		t.Fatal(err)
	}
	info := srv.Info()
	if info != (Info{ID: "fake", Name: "fake", Version: "1.2.3", Generation: 1}) {
		t.Fatalf("info = %+v", info)
	}
	// typeDefinition was registered dynamically; references is declared false.
	want := []string{lsp.ToolHover, lsp.ToolDefinition, lsp.ToolTypeDefinition, lsp.ToolDocumentSymbols, lsp.ToolDiagnostics}
	if got := srv.Tools(); !slices.Equal(got, want) {
		t.Fatalf("tools = %v, want %v", got, want)
	}
	fp := srv.CapabilityFingerprint()
	if len(fp) != 64 || fp != srv.CapabilityFingerprint() {
		t.Fatalf("fingerprint %q is not a stable SHA-256", fp)
	}
	c, _, err := srv.Client(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.References(context.Background(), srv.URI("a.txt"), lsp.Position{}, true); !errors.Is(err, lsp.ErrCapabilityUnavailable) {
		t.Fatalf("references on a server without it: %v", err)
	}
	// workspace/configuration is answered from Settings, null where absent.
	waitFor(t, "the configuration answer", func() bool {
		return slices.Contains(c.Logs(), lsp.LogMessage{Type: 3, Message: `configuration: [{"answer":42},null]`})
	})
}

func TestFakeEnvironment(t *testing.T) {
	t.Setenv("DAEMON_SECRET_FOR_TEST", "must-not-leak")
	srv := startFake(t, 0)
	h, err := hoverLine(context.Background(), srv, lineEnviron)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(h.Markdown, "\n")
	if lines[0] != "cwd="+srv.ws.Root {
		t.Errorf("working directory: %s, want the workspace root %s", lines[0], srv.ws.Root)
	}
	env := lines[1:]
	for _, want := range []string{
		"HOME=" + srv.ws.Home, "TMPDIR=" + filepath.Join(srv.ws.Home, "tmp"),
		"GOCACHE=" + filepath.Join(srv.ws.Home, ".cache", "go-build"), "GOMODCACHE=" + ModCache(srv.ws),
		"GOTOOLCHAIN=local", "GOFLAGS=", "GOENV=off", "GOPROXY=off", "CGO_ENABLED=0", "GOTELEMETRY=off",
		fakeServerEnv + "=1",
	} {
		if !slices.Contains(env, want) {
			t.Errorf("environment lacks %s", want)
		}
	}
	for _, kv := range env {
		if strings.Contains(kv, "must-not-leak") {
			t.Errorf("the daemon's environment leaked: %s", kv)
		}
		if p, ok := strings.CutPrefix(kv, "PATH="); ok {
			for _, d := range strings.Split(p, ":") {
				if d != filepath.Dir(srv.spec.Executable) && !slices.Contains(ToolchainDirs, d) {
					t.Errorf("PATH holds %s, which is neither the server's nor a toolchain directory", d)
				}
			}
		}
	}
}

func TestFakeCrashRestartsWithNewGeneration(t *testing.T) {
	t.Parallel()
	srv := startFake(t, 0, "-grandchild")
	first := current(srv)
	waitFor(t, "the grandchild to start", func() bool { return len(groupMembers(first.proc.Pid())) == 2 })
	_, err := hoverLine(context.Background(), srv, lineCrash)
	if !errors.Is(err, ErrExited) || !errors.Is(err, jsonrpc.ErrClosed) {
		t.Fatalf("hover on a crashing server: %v, want ErrExited wrapping jsonrpc.ErrClosed", err)
	}
	<-first.dead
	// The grandchild was orphaned by the crash, re-parented to us and reaped.
	assertGroupGone(t, first.proc.Pid())

	h, err := hoverLine(context.Background(), srv, 1)
	if err != nil {
		t.Fatalf("hover after the crash: %v", err)
	}
	if !strings.HasPrefix(h.Markdown, "fake hover from pid") {
		t.Fatalf("hover = %q", h.Markdown)
	}
	if g := srv.Info().Generation; g != 2 {
		t.Fatalf("generation after one restart = %d, want 2", g)
	}
	_, gen, err := srv.Client(context.Background())
	if err != nil || gen != 2 {
		t.Fatalf("Client: gen %d, err %v", gen, err)
	}
}

func TestFakeHangIsCancelled(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		timeout time.Duration // the spec's request timeout
		ctx     func() (context.Context, context.CancelFunc)
		want    error
	}{
		{
			name: "request timeout", timeout: 200 * time.Millisecond,
			ctx:  func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) },
			want: context.DeadlineExceeded,
		},
		{
			name: "caller deadline sooner", timeout: time.Hour,
			ctx: func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 200*time.Millisecond)
			},
			want: context.DeadlineExceeded,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := startFake(t, tt.timeout)
			ctx, cancel := tt.ctx()
			defer cancel()
			if _, err := hoverLine(ctx, srv, lineHang); !errors.Is(err, tt.want) {
				t.Fatalf("hover on a hung request: %v, want %v", err, tt.want)
			}
			c, gen, err := srv.Client(context.Background())
			if err != nil || gen != 1 {
				t.Fatalf("a hang must not restart the server: gen %d, err %v", gen, err)
			}
			waitFor(t, "the server to see $/cancelRequest", func() bool {
				return slices.ContainsFunc(c.Logs(), func(m lsp.LogMessage) bool { return strings.HasPrefix(m.Message, fakeCancelLog) })
			})
			if _, err := hoverLine(context.Background(), srv, 1); err != nil {
				t.Fatalf("the server stays usable after a cancelled request: %v", err)
			}
		})
	}
}

func TestFakeProtocolViolations(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		line uint32
		want error
	}{
		{name: "oversize frame", line: lineOversize, want: jsonrpc.ErrFrameTooLarge},
		{name: "invalid json", line: lineBadJSON, want: jsonrpc.ErrBadMessage},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := startFake(t, 0, "-grandchild")
			first := current(srv)
			_, err := hoverLine(context.Background(), srv, tt.line)
			if !errors.Is(err, tt.want) || !errors.Is(err, jsonrpc.ErrClosed) {
				t.Fatalf("hover: %v, want a closed connection caused by %v", err, tt.want)
			}
			// The process was alive but unusable: the runtime kills and reaps it.
			<-first.dead
			assertGroupGone(t, first.proc.Pid())
			if _, err := hoverLine(context.Background(), srv, 1); err != nil {
				t.Fatalf("hover after restart: %v", err)
			}
			if g := srv.Info().Generation; g != 2 {
				t.Fatalf("generation = %d, want 2", g)
			}
		})
	}
}

func TestFakeDiagnosticsPublishFallback(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		flags       []string
		timeout     time.Duration
		text        string
		wantItems   int
		wantSettled bool
	}{
		{name: "error file", text: "BAD things", wantItems: 1, wantSettled: true},
		{name: "clean file", text: "fine", wantItems: 0, wantSettled: true},
		{name: "unversioned error file", flags: []string{"-unversioned"}, text: "BAD", wantItems: 1, wantSettled: true},
		{name: "unversioned clean file", flags: []string{"-unversioned"}, text: "ok", wantItems: 0, wantSettled: true},
		// A server that never publishes gets a bounded, unsettled answer.
		{name: "never published", flags: []string{"-nopublish"}, timeout: 300 * time.Millisecond, text: "BAD", wantItems: 0, wantSettled: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := startFake(t, tt.timeout, tt.flags...)
			var res lsp.DiagnosticsResult
			err := srv.Do(context.Background(), func(ctx context.Context, c *lsp.Client, _ uint64) error {
				u := srv.URI("doc.txt")
				if err := c.DidOpen(ctx, u, "plaintext", tt.text); err != nil {
					return err
				}
				if err := c.DidOpen(ctx, u, "plaintext", tt.text); err != nil { // idempotent
					return err
				}
				var err error
				res, err = c.Diagnostics(ctx, u)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if res.Mode != lsp.DiagnosticsPublish || res.Settled != tt.wantSettled || len(res.Items) != tt.wantItems {
				t.Fatalf("diagnostics = %+v", res)
			}
			if tt.wantItems > 0 {
				d := res.Items[0]
				if d.Severity.String() != "error" || d.Code != "42" || d.Message != "BAD is bad" || d.Source != "fake" {
					t.Fatalf("diagnostic = %+v", d)
				}
			}
		})
	}
}

func TestCloseReapsTheProcessTree(t *testing.T) {
	t.Parallel()
	srv := startFake(t, 0, "-grandchild")
	pid := current(srv).proc.Pid()
	if _, err := hoverLine(context.Background(), srv, 1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the grandchild to start", func() bool { return len(groupMembers(pid)) == 2 })
	if err := srv.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	assertGroupGone(t, pid)
	if err := srv.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, _, err := srv.Client(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Client after Close: %v", err)
	}
}

func TestStartFailures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		spec Spec
	}{
		{name: "exits at once", spec: Spec{ID: "false", Executable: "/bin/false"}},
		{name: "relative executable", spec: Spec{ID: "rel", Executable: "bin/gopls"}},
		{name: "missing executable", spec: Spec{ID: "missing", Executable: "/nonexistent/server"}},
		{name: "initialization options not JSON", spec: Spec{ID: "badinit", Executable: "/bin/cat", InitializationOptions: json.RawMessage("{")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Start(context.Background(), Unjailed(nil), tt.spec, Workspace{Root: t.TempDir(), Home: t.TempDir()}, nil)
			if err == nil {
				t.Fatal("Start succeeded")
			}
		})
	}
}
