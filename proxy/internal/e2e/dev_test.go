package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/ctl"
	"github.com/hanzoai/lsp/proxy/internal/devstack"
)

// syncWriter lets the test read what `lspctl dev` printed so far.
type syncWriter struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// gitRepo makes a git repository with files committed on main, in a
// directory named name under parent.
func gitRepo(t *testing.T, parent, name string, files map[string]string) string {
	t.Helper()
	dir := filepath.Join(parent, name)
	for p, c := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git(t, dir, "init", "-q", "-b", "main")
	git(t, dir, "add", "-A")
	git(t, dir, "commit", "-q", "-m", "init")
	return dir
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@localhost", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@localhost")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestDevServesLocalRepositories runs `lspctl dev --repo A --repo B` (what
// `make run REPOS="A B"` runs) on two local repositories in a 0700
// directory, as in root's home, and asks what the banner says to ask: each
// printed curl body and lspctl line answers a hover on the function it
// names. A branch whose name is valid hex is served as a branch.
func TestDevServesLocalRepositories(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a second stack")
	}
	home, err := os.MkdirTemp("", "lsp-dev-home-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	if err := os.Chmod(home, 0o700); err != nil {
		t.Fatal(err)
	}
	goRepo := gitRepo(t, home, "mathy", map[string]string{
		"go.mod":      "module example.com/mathy\n\ngo 1.22\n",
		"README.md":   "# mathy\n",
		"add.go":      "package mathy\n\n// Add returns the sum of a and b.\nfunc Add(a, b int) int { return a + b }\n",
		"add_test.go": "package mathy\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) { _ = Add(1, 2) }\n",
	})
	git(t, goRepo, "checkout", "-q", "-b", "cafe")
	if err := os.WriteFile(filepath.Join(goRepo, "sub.go"), []byte("package mathy\n\n// Sub returns a minus b.\nfunc Sub(a, b int) int { return a - b }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, goRepo, "add", "-A")
	git(t, goRepo, "commit", "-q", "-m", "sub")
	git(t, goRepo, "checkout", "-q", "main")
	tsRepo := gitRepo(t, home, "web-app", map[string]string{
		"package.json": `{"name":"web-app","version":"1.0.0"}` + "\n",
		"src/index.ts": "/** Greets someone by name. */\nexport function greet(name: string): string {\n  return `hi ${name}`;\n}\n",
	})
	notRepo := filepath.Join(home, "plain")
	if err := os.MkdirAll(notRepo, 0o755); err != nil {
		t.Fatal(err)
	}

	// The reviewed-server file make deps writes, here for this test's
	// gopls and TypeScript server.
	servers := filepath.Join(home, "servers.json")
	if err := devstack.WriteServerConfig(servers, devstack.Options{Gopls: gopls, TypeScript: typescript}); err != nil {
		t.Fatal(err)
	}
	base := []string{"dev", "--dir", filepath.Join(home, "state"), "--listen", "127.0.0.1:0",
		"--servers", servers, "--daemon-bin", daemonBin}

	// A folder that is not a repository is refused before anything starts.
	var out, errb bytes.Buffer
	if code := ctl.Main(context.Background(), append(base, "--repo", goRepo, "--repo", notRepo), &out, &errb); code != 2 || !strings.Contains(errb.String(), "not a git repository") {
		t.Fatalf("dev --repo <not a repository>: exit %d, stderr %q; want 2 and a clear error", code, errb.String())
	}

	ctx, cancel := context.WithCancel(context.Background())
	stdout, stderr := &syncWriter{}, &syncWriter{}
	done := make(chan int, 1)
	go func() { done <- ctl.Main(ctx, append(base, "--repo", goRepo, "--repo", tsRepo), stdout, stderr) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Error("lspctl dev did not stop")
		}
	})
	deadline := time.Now().Add(2 * time.Minute)
	for !strings.Contains(stdout.String(), "Ctrl-C stops everything") {
		select {
		case code := <-done:
			t.Fatalf("lspctl dev exited %d: %s %s", code, stdout.String(), stderr.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no banner: %s %s", stdout.String(), stderr.String())
		}
	}
	banner := stdout.String()
	t.Logf("banner:\n%s", banner)
	if !strings.Contains(banner, "Postgres in "+os.TempDir()) {
		t.Errorf("the banner does not name Postgres's directory under the temp dir")
	}
	exports := map[string]string{}
	for _, m := range regexp.MustCompile(`(LSP_[A-Z_]+)=(\S+)`).FindAllStringSubmatch(banner, -1) {
		exports[m[1]] = m[2]
	}
	if exports["LSP_URL"] == "" || exports["LSP_TOKEN"] == "" || exports["LSP_FORGE_TOKEN"] == "" {
		t.Fatalf("the banner exports %v", exports)
	}

	bodies := regexp.MustCompile(`-d '(\{"repo":"[^']*\})'`).FindAllStringSubmatch(banner, -1)
	lines := regexp.MustCompile(`(?m)^  lspctl hover (.*)$`).FindAllStringSubmatch(banner, -1)
	want := map[string]string{"hello": "Hello", "mathy": "func Add(a int, b int) int", "web-app": "greet(name: string): string"}
	if len(bodies) != len(want) || len(lines) != len(want) {
		t.Fatalf("the banner has %d curl bodies and %d lspctl lines, want %d each", len(bodies), len(lines), len(want))
	}
	post := func(body string) (int, map[string]any) {
		req, _ := http.NewRequest(http.MethodPost, exports["LSP_URL"]+"/v1/lsp/hover", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+exports["LSP_TOKEN"])
		req.Header.Set("X-Forge-Token", exports["LSP_FORGE_TOKEN"])
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var v map[string]any
		_ = json.Unmarshal(raw, &v)
		return resp.StatusCode, v
	}
	for _, b := range bodies {
		var req struct{ Repo string }
		_ = json.Unmarshal([]byte(b[1]), &req)
		code, v := post(b[1])
		if hover, _ := json.Marshal(v); code != 200 || !strings.Contains(string(hover), want[req.Repo]) {
			t.Errorf("printed curl for %s: %d %s; want 200 with %q", req.Repo, code, hover, want[req.Repo])
		}
	}
	for _, l := range lines {
		args := append([]string{"hover"}, strings.Fields(l[1])...)
		code, o, e := lspctl(t, exports, args...)
		repo := args[2]
		if code != 0 || !strings.Contains(o, strings.Fields(want[repo])[len(strings.Fields(want[repo]))-1]) {
			t.Errorf("printed lspctl %v: exit %d %q %q", args, code, o, e)
		}
	}
	// Every branch is served, a hex-named one by its name.
	code, v := post(`{"repo":"mathy","rev":"cafe","path":"sub.go","line":3,"character":5}`)
	if hover, _ := json.Marshal(v); code != 200 || !strings.Contains(string(hover), "func Sub(a int, b int) int") {
		t.Errorf("hover on branch cafe: %d %s", code, hover)
	}
}
