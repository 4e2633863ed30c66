// Package stacks holds the end-to-end tests that each need a stack of their
// own configuration: two daemon shards behind mutual TLS, the gitea forge
// kind with its sudo and jwt credential modes, the per-org rate limit, the
// bound on concurrent prepares, and graceful shutdown. Every part is real:
// Postgres, the dev forge (git smart HTTP and its Gitea API over real git),
// lsp-daemon processes running the pinned gopls, and the proxy.
package stacks

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/devforge"
	"github.com/hanzoai/lsp/proxy/internal/devstack"
	"github.com/hanzoai/lsp/proxy/internal/ledger"
)

var (
	daemonBin string
	gopls     string
	tmp       string
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	var err error
	if tmp, err = os.MkdirTemp("", "lsp-stacks-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	// Postgres runs as its own user and must reach its data directory.
	if err := os.Chmod(tmp, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if gopls, err = findGopls(); err != nil {
		fmt.Fprintln(os.Stderr, "stacks:", err)
		return 1
	}
	daemonBin = filepath.Join(tmp, "lsp-daemon")
	build := exec.Command("go", "build", "-o", daemonBin, "github.com/hanzoai/lsp/daemon/cmd/lsp-daemon")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "stacks: build lsp-daemon:", err)
		return 1
	}
	return m.Run()
}

// findGopls prefers the Makefile's pinned build.
func findGopls() (string, error) {
	for _, p := range []string{os.Getenv("LSP_TEST_GOPLS"), "../../../../.bin/gopls"} {
		if p == "" {
			continue
		}
		if abs, err := filepath.Abs(p); err == nil {
			if _, err := os.Stat(abs); err == nil {
				return abs, nil
			}
		}
	}
	if p, err := exec.LookPath("gopls"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("gopls not found: run `make test`, which installs the pinned gopls")
}

// startStack starts a stack of its own for t, stopped when t ends.
func startStack(t *testing.T, o devstack.Options) *devstack.Stack {
	t.Helper()
	if o.Dir == "" {
		o.Dir = stackDir(t)
	}
	o.DaemonBin = daemonBin
	if o.Gopls == "" {
		o.Gopls = gopls
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := devstack.Start(ctx, o)
	if err != nil {
		t.Fatalf("start stack: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// stackDir is a fresh directory for a stack (the daemon's socket is
// {dir}/daemon/daemon.sock).
func stackDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp(tmp, "stack-")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// tenant is one org with the sample repository, a member and a forge token.
type tenant struct {
	s                 *devstack.Stack
	org, repo, commit string
	jwt, forgeToken   string
}

func newTenant(t *testing.T, s *devstack.Stack, org, repo string, cents int64) *tenant {
	t.Helper()
	return newTenantWith(t, s, org, repo, devstack.SampleRepo, cents)
}

// newTenantWith is newTenant with a repository of files.
func newTenantWith(t *testing.T, s *devstack.Stack, org, repo string, files map[string]string, cents int64) *tenant {
	t.Helper()
	commit, err := devforge.CreateRepo(s.ForgeRoot, org, repo, files, "sample")
	if err != nil {
		t.Fatal(err)
	}
	tn := &tenant{s: s, org: org, repo: repo, commit: commit, forgeToken: "forge-" + org}
	s.Forge.Grant(tn.forgeToken, org+"/*")
	if tn.jwt, err = s.Token("alice@"+org, org, nil, []string{"billing:" + org}); err != nil {
		t.Fatal(err)
	}
	if cents > 0 {
		if err := s.Ledger.Credit(context.Background(), org, cents, "e2e"); err != nil {
			t.Fatal(err)
		}
	}
	return tn
}

type answer struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

func (a answer) errorCode() string {
	e, _ := a.body["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

// do sends one request to the stack's proxy; hdr are header pairs.
func do(t *testing.T, s *devstack.Stack, method, route string, body any, hdr ...string) answer {
	t.Helper()
	return doAt(t, s.ProxyURL, method, route, body, hdr...)
}

// doAt sends one request to the proxy at base.
func doAt(t *testing.T, base, method, route string, body any, hdr ...string) answer {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, base+"/v1/lsp"+route, rd)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] != "" {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatalf("%s %s: %v", method, route, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, header: resp.Header, raw: string(raw)}
	if err := json.Unmarshal(raw, &a.body); err != nil {
		t.Fatalf("%s %s: answer is not JSON: %q", method, route, raw)
	}
	return a
}

// prepared prepares repo, fails the test unless it answers 200, and
// returns the answer and its languages, sorted.
func prepared(t *testing.T, s *devstack.Stack, repo string, hdr ...string) (answer, []string) {
	t.Helper()
	prep := do(t, s, http.MethodPost, "/prepare", map[string]any{"repo": repo}, hdr...)
	if prep.status != http.StatusOK {
		t.Fatalf("prepare: %d %s", prep.status, prep.raw)
	}
	var langs []string
	for _, l := range prep.body["languages"].([]any) {
		langs = append(langs, l.(string))
	}
	slices.Sort(langs)
	return prep, langs
}

// The hover position of greet.Hello in the sample's main.go.
func hoverBody(repo string) map[string]any {
	return map[string]any{"repo": repo, "path": "main.go", "line": 10, "character": 20}
}

func (tn *tenant) hover(t *testing.T, hdr ...string) answer {
	t.Helper()
	return do(t, tn.s, http.MethodPost, "/hover", hoverBody(tn.repo), append(tn.auth(), hdr...)...)
}

// auth are the tenant's member's headers: its JWT and its forge token.
func (tn *tenant) auth() []string {
	return []string{"Authorization", "Bearer " + tn.jwt, "X-Forge-Token", tn.forgeToken}
}

// reviewedServers renders the production server template into dir as
// make deps does, and skips the test unless each of need is installed.
func reviewedServers(t *testing.T, dir string, need ...string) string {
	t.Helper()
	file := filepath.Join(dir, "servers.json")
	sf, err := devstack.WriteServerFile("../../../../deploy/images/servers.json.in", file, devstack.RenderForTests(filepath.Dir(gopls)))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range need {
		if _, ok := sf.Server(id); !ok {
			t.Skipf("the %s server is not installed beside gopls (make deps installs every reviewed server)", id)
		}
	}
	return file
}

func rows(t *testing.T, s *devstack.Stack, org string) []ledger.LedgerRow {
	t.Helper()
	rs, err := s.Ledger.Rows(context.Background(), org, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func filter(rs []ledger.LedgerRow, model string) []ledger.LedgerRow {
	var out []ledger.LedgerRow
	for _, r := range rs {
		if r.Model == model {
			out = append(out, r)
		}
	}
	return out
}

func balance(t *testing.T, s *devstack.Stack, org string) ledger.Balance {
	t.Helper()
	b, err := s.Ledger.Balance(context.Background(), org)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// metric reads one sample of the proxy's /metrics: the line whose name and
// labels start with series (e.g. `lsp_proxy_daemon_up{shard="…"}`).
func metric(t *testing.T, s *devstack.Stack, series string) (float64, bool) {
	t.Helper()
	resp, err := http.Get(s.ProxyURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, series+" ") {
			v, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(line, series)), 64)
			return v, err == nil
		}
	}
	return 0, false
}

// eventually polls cond: tests assert states, never durations.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
