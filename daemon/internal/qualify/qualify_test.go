package qualify

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hanzoai/lsp/daemon/internal/config"
)

// find returns the first existing candidate, canonical; it skips the test
// when there is none, except under CI, where make deps installed it.
func find(t *testing.T, what string, candidates ...string) string {
	t.Helper()
	for _, c := range candidates {
		if c == "" {
			continue
		}
		abs, err := filepath.Abs(c)
		if err != nil {
			continue
		}
		if real, err := filepath.EvalSymlinks(abs); err == nil {
			return real
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is not installed; make deps installs it", what)
	}
	t.Skipf("%s is not installed (make deps installs it)", what)
	return ""
}

func goplsBin(t *testing.T) string {
	return find(t, "gopls", os.Getenv("LSP_TEST_GOPLS"), "../../../.bin/gopls", "/root/go/bin/gopls")
}

func tsDir(t *testing.T) string {
	return find(t, "the reviewed TypeScript server", os.Getenv("LSP_TEST_TYPESCRIPT"), "../../../.bin/ts")
}

func sha(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func goplsEntry(t *testing.T, exe string) map[string]any {
	return map[string]any{
		"protocol_version": config.ServerProtocol, "id": "gopls", "name": "gopls",
		"languages":  []any{map[string]any{"id": "go", "extensions": []any{".go"}}},
		"executable": exe, "arguments": []any{"serve"}, "executable_sha256": sha(t, exe),
		"env":                []any{"SECRET_LOOKING_VAR=do-not-print-me"},
		"request_timeout_ms": 60000, "reviewed_by": "qualify test", "reviewed_at": "2026-08-20T00:00:00Z",
	}
}

func tsEntry(t *testing.T, dir string) map[string]any {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed")
	}
	node, _ = filepath.EvalSymlinks(node)
	return map[string]any{
		"protocol_version": config.ServerProtocol, "id": "typescript", "name": "TypeScript Language Server",
		"languages": []any{
			map[string]any{"id": "typescript", "extensions": []any{".ts"}},
			map[string]any{"id": "typescriptreact", "extensions": []any{".tsx"}},
			map[string]any{"id": "javascript", "extensions": []any{".js"}},
			map[string]any{"id": "javascriptreact", "extensions": []any{".jsx"}},
		},
		"executable":        node,
		"arguments":         []any{filepath.Join(dir, "node_modules/typescript-language-server/lib/cli.mjs"), "--stdio"},
		"executable_sha256": sha(t, node),
		"initialization_options": map[string]any{
			"tsserver":                          map[string]any{"path": filepath.Join(dir, "node_modules/typescript/lib/tsserver.js"), "useSyntaxServer": "never"},
			"disableAutomaticTypingAcquisition": true,
		},
		"request_timeout_ms": 60000, "reviewed_by": "qualify test", "reviewed_at": "2026-08-20T00:00:00Z",
	}
}

// writeConfig writes a reviewed-server file and returns its canonical path.
func writeConfig(t *testing.T, servers ...map[string]any) string {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(map[string]any{"protocol_version": config.FileProtocol, "servers": servers})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "servers.json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// secrets are what status and qualify must never print for an entry.
func secrets(m map[string]any) []string {
	out := []string{m["executable"].(string), filepath.Dir(m["executable"].(string))}
	for _, a := range m["arguments"].([]any) {
		if s := a.(string); len(s) > 2 && s != "serve" && s != "--stdio" {
			out = append(out, s)
		}
	}
	if env, ok := m["env"].([]any); ok {
		for _, e := range env {
			out = append(out, e.(string), strings.SplitN(e.(string), "=", 2)[1])
		}
	}
	if io, ok := m["initialization_options"].(map[string]any); ok {
		out = append(out, io["tsserver"].(map[string]any)["path"].(string))
	}
	return out
}

func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	code = Main(ctx, args[0], args[1:], func(string) string { return "" }, &o, &e)
	return code, o.String(), e.String()
}

func TestStatusShowsMetadataOnly(t *testing.T) {
	// status neither hashes nor starts: a missing executable is fine.
	g := goplsEntry(t, "/bin/sh")
	g["executable"] = "/nonexistent/tools/gopls"
	cfg := writeConfig(t, g)
	for _, format := range [][]string{nil, {"--json"}} {
		code, out, errOut := run(t, append([]string{"status", "--config", cfg}, format...)...)
		if code != 0 {
			t.Fatalf("status %v: exit %d: %s", format, code, errOut)
		}
		for _, s := range secrets(g) {
			if strings.Contains(out, s) {
				t.Fatalf("status %v prints %q:\n%s", format, s, out)
			}
		}
		if !strings.Contains(out, "servers.json@sha256:") || !strings.Contains(out, "qualify test") {
			t.Fatalf("status %v lacks the source or the reviewer:\n%s", format, out)
		}
	}
	_, out, _ := run(t, "status", "--config", cfg, "--json")
	var st Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Servers) != 1 || st.Servers[0].ID != "gopls" || len(st.Servers[0].DescriptorFingerprint) != 64 ||
		st.Servers[0].Languages[0].ID != "go" {
		t.Fatalf("status = %+v", st)
	}
}

// TestRefusedConfigNamesTheField: a bad file is refused (exit 2) by both
// commands with the field in the message, and nothing starts.
func TestRefusedConfigNamesTheField(t *testing.T) {
	g := goplsEntry(t, "/bin/sh")
	g["request_timeout_ms"] = 5
	cfg := writeConfig(t, g)
	for _, cmd := range []string{"status", "qualify"} {
		code, out, errOut := run(t, cmd, "--config", cfg)
		if code != 2 || out != "" || !strings.Contains(errOut, "servers[0].request_timeout_ms") {
			t.Fatalf("%s: exit %d, stdout %q, stderr %q", cmd, code, out, errOut)
		}
	}
	if code, _, errOut := run(t, "qualify"); code != 2 || !strings.Contains(errOut, "--config is required") {
		t.Fatalf("qualify without --config: %d %q", code, errOut)
	}
	if code, _, _ := run(t, "status", "--config", cfg, "extra"); code != 2 {
		t.Fatalf("stray argument: exit %d", code)
	}
}

func TestQualifyWithoutStart(t *testing.T) {
	dir, _ := filepath.EvalSymlinks(t.TempDir())
	exe := filepath.Join(dir, "server")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	good := goplsEntry(t, exe)
	bad := goplsEntry(t, exe)
	bad["id"], bad["languages"] = "other", []any{map[string]any{"id": "x", "extensions": []any{".x"}}}
	bad["executable_sha256"] = strings.Repeat("0", 64)
	cfg := writeConfig(t, good, bad)

	code, out, errOut := run(t, "qualify", "--config", cfg, "--start=false", "--json")
	if code != 1 {
		t.Fatalf("exit %d; want 1 (one server fails): %s", code, errOut)
	}
	var r Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if r.Qualified || r.Started || len(r.Servers) != 2 {
		t.Fatalf("report = %+v", r)
	}
	g, b := r.Servers[0], r.Servers[1]
	if !g.Qualified || !g.Checks.Review || !g.Checks.ExecutableHash || g.Checks.Started != nil || g.Negotiated != nil {
		t.Fatalf("good server = %+v", g)
	}
	if b.Qualified || b.Checks.ExecutableHash || !strings.Contains(b.Error, "executable_sha256 mismatch") {
		t.Fatalf("bad server = %+v", b)
	}
	for _, s := range secrets(good) {
		if strings.Contains(out, s) {
			t.Fatalf("qualify prints %q:\n%s", s, out)
		}
	}
	// Text output says the same.
	code, text, _ := run(t, "qualify", "--config", cfg, "--start=false")
	if code != 1 || !strings.Contains(text, "other: NOT QUALIFIED") || !strings.Contains(text, "gopls: qualified") || strings.Contains(text, dir) {
		t.Fatalf("text report (exit %d):\n%s", code, text)
	}
}

var hex64 = regexp.MustCompile(`^[0-9a-f]{64}$`)

// TestQualifyStartsTheReferenceServers initializes real gopls and the real
// TypeScript server on their canaries and checks what they negotiated.
func TestQualifyStartsTheReferenceServers(t *testing.T) {
	g := goplsEntry(t, goplsBin(t))
	ts := tsEntry(t, tsDir(t))
	cfg := writeConfig(t, g, ts)
	code, out, errOut := run(t, "qualify", "--config", cfg, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errOut, out)
	}
	var r Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if !r.Qualified || !r.Started {
		t.Fatalf("report = %+v", r)
	}
	want := map[string]struct {
		tools   []string
		canary  string
		symbol  string
		name    string
		version string
	}{
		"gopls": {
			tools:  []string{"hover", "definition", "type_definition", "implementation", "references", "document_symbols", "workspace_symbols", "diagnostics", "signature_help", "call_hierarchy", "type_hierarchy", "completion"},
			canary: "go", symbol: "Canary", name: "gopls", version: "v0.21.1",
		},
		// typescript-language-server sends no serverInfo.
		"typescript": {
			tools:  []string{"hover", "definition", "type_definition", "implementation", "references", "document_symbols", "workspace_symbols", "diagnostics", "signature_help", "call_hierarchy", "completion"},
			canary: "typescript", symbol: "canary",
		},
	}
	for _, s := range r.Servers {
		w := want[s.ID]
		n := s.Negotiated
		if !s.Qualified || n == nil || s.Checks.Started == nil || !*s.Checks.Started || !*s.Checks.CanaryAnswered {
			t.Fatalf("%s = %+v", s.ID, s)
		}
		if !slices.Equal(n.Tools, w.tools) {
			t.Errorf("%s tools = %v; want %v", s.ID, n.Tools, w.tools)
		}
		if n.Generation != 1 || !hex64.MatchString(n.CapabilityFingerprint) || n.Canary != w.canary || !slices.Contains(n.CanarySymbols, w.symbol) {
			t.Errorf("%s negotiated = %+v", s.ID, n)
		}
		if n.ServerName != w.name || n.ServerVersion != w.version {
			t.Errorf("%s server = %q %q; want %q %q", s.ID, n.ServerName, n.ServerVersion, w.name, w.version)
		}
		if !slices.Contains(n.Capabilities, "hoverProvider") || slices.Contains(n.Capabilities, "declarationProvider") {
			t.Errorf("%s capabilities = %v", s.ID, n.Capabilities)
		}
	}
	for _, m := range []map[string]any{g, ts} {
		for _, s := range secrets(m) {
			if strings.Contains(out, s) {
				t.Fatalf("qualify prints %q", s)
			}
		}
	}
}

// TestQualifyStartFailure: a pinned executable that is not a language
// server is qualified by hash but fails to start, and says so.
func TestQualifyStartFailure(t *testing.T) {
	dir, _ := filepath.EvalSymlinks(t.TempDir())
	exe := filepath.Join(dir, "not-a-server")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\necho hello\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	m := goplsEntry(t, exe)
	cf, err := config.LoadFile(writeConfig(t, m))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := Run(ctx, cf, Options{Start: true})
	if err != nil {
		t.Fatal(err)
	}
	s := r.Servers[0]
	if r.Qualified || s.Qualified || !s.Checks.ExecutableHash || s.Checks.Started == nil || *s.Checks.Started || s.Error == "" {
		t.Fatalf("report = %+v", s)
	}
	if strings.Contains(s.Error, dir) {
		t.Fatalf("error names a host path: %q", s.Error)
	}
}

func TestSpecLanguageIDs(t *testing.T) {
	s := config.Server{
		ID: "typescript",
		Languages: []config.Language{
			{ID: "typescript", Extensions: []string{".ts"}},
			{ID: "typescriptreact", Extensions: []string{".tsx"}},
			{ID: "javascript", Extensions: []string{".js"}},
			{ID: "javascriptreact", Extensions: []string{".jsx"}},
		},
		RequestTimeoutMS: 1500,
	}
	sp := Spec(s, "/bin/true")
	for path, want := range map[string]string{
		"src/a.ts": "typescript", "src/b.tsx": "typescriptreact", "c.js": "javascript", "d/e.jsx": "javascriptreact",
	} {
		if got := sp.LanguageID(path); got != want {
			t.Errorf("LanguageID(%q) = %q; want %q", path, got, want)
		}
	}
	if sp.Language != "typescript" || len(sp.Extensions) != 4 || sp.RequestTimeout != 1500*time.Millisecond || sp.Executable != "/bin/true" {
		t.Fatalf("spec = %+v", sp)
	}
	// load_quiet_ms: absent is the pool's default (0), 0 is none
	// (negative), a value is itself.
	for _, tc := range []struct {
		ms   *int
		want time.Duration
	}{{nil, 0}, {new(0), -1}, {new(700), 700 * time.Millisecond}} {
		s.LoadQuietMS = tc.ms
		if got := Spec(s, "/bin/true").LoadQuiet; got != tc.want {
			t.Errorf("load_quiet_ms %v: LoadQuiet %v, want %v", tc.ms, got, tc.want)
		}
	}
}

func TestTypeScriptExternals(t *testing.T) {
	dir := tsDir(t)
	cf, err := config.LoadFile(writeConfig(t, goplsEntry(t, "/bin/sh"), tsEntry(t, dir)))
	if err != nil {
		t.Fatal(err)
	}
	ex, err := TypeScriptExternals(cf)
	if err != nil {
		t.Fatal(err)
	}
	if len(ex) != 1 || ex[0].Module != "typescript@5.9.3" || ex[0].Dir != filepath.Join(dir, "node_modules/typescript") {
		t.Fatalf("externals = %+v", ex)
	}
}

func TestNPMPackageDir(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"/opt/lsp/basedpyright/node_modules/basedpyright/langserver.index.js", "/opt/lsp/basedpyright/node_modules/basedpyright"},
		{"/opt/lsp/x/node_modules/@scope/pkg/bin/cli.js", "/opt/lsp/x/node_modules/@scope/pkg"},
		{"/opt/lsp/x/node_modules/a/node_modules/b/cli.js", "/opt/lsp/x/node_modules/a/node_modules/b"},
		{"/opt/lsp/x/node_modules/pkg", ""},
		{"--stdio", ""},
		{"relative/node_modules/p/x.js", ""},
	} {
		got, ok := npmPackageDir(c.in)
		if got != c.want || ok != (c.want != "") {
			t.Errorf("%s: %q, %v; want %q", c.in, got, ok, c.want)
		}
	}
}
