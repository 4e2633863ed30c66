// Package e2e runs the whole stack — Postgres, the dev forge over git smart
// HTTP, the daemon process with the pinned gopls, and the proxy — and checks
// the contract from the outside, through HTTP, the forge's counters and the
// ledger's rows. One stack serves every test of the binary; tests isolate
// themselves by org.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/auth"
	"github.com/hanzoai/lsp/proxy/internal/devforge"
	"github.com/hanzoai/lsp/proxy/internal/devstack"
	"github.com/hanzoai/lsp/proxy/internal/ledger"
	"github.com/hanzoai/lsp/proxy/internal/lspdirect"
)

var (
	stack     *devstack.Stack
	gopls     string
	daemonBin string // the lsp-daemon the stack runs, built by TestMain
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "lsp-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	// The stack lives below a 0700 directory, as a checkout in root's home
	// does: nothing in it may need other users to search its parents.
	if err := os.Chmod(dir, 0o700); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if gopls, err = findGopls(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	daemonBin = filepath.Join(dir, "lsp-daemon")
	build := exec.Command("go", "build", "-o", daemonBin, "github.com/hanzoai/lsp/daemon/cmd/lsp-daemon")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: build lsp-daemon:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if typescript, err = findTypeScript(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	// Some tests here hammer one org (the ledger outage test) to count
	// rows, or run its prepares at once (the money tests): the default
	// per-org rate limit and prepare share are off for this stack; their
	// own tests are in e2e/stacks (TestRateLimit,
	// TestMadeUpSHAOnTheFreeProbe) and operation (TestPrepareShareOfAnOrg).
	stack, err = devstack.Start(ctx, devstack.Options{Dir: filepath.Join(dir, "stack"), DaemonBin: daemonBin, Gopls: gopls, TypeScript: typescript, Log: log,
		ProxyEnv: map[string]string{"LSP_RATE_LIMIT": "0", "LSP_MAX_PREPARES_PER_ORG": "8"}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: start stack:", err)
		return 1
	}
	defer stack.Stop()
	code := m.Run()
	if code != 0 && stack.Daemon != nil {
		// The stack's directory goes with the run: keep what explains a
		// failure.
		if b, err := os.ReadFile(stack.Daemon.LogFile); err == nil {
			if len(b) > 8192 {
				b = b[len(b)-8192:]
			}
			fmt.Fprintf(os.Stderr, "e2e: the daemon's log ends with:\n%s\n", b)
		}
	}
	return code
}

// findGopls prefers the Makefile's pinned build.
func findGopls() (string, error) {
	for _, p := range []string{os.Getenv("LSP_TEST_GOPLS"), "../../../.bin/gopls"} {
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

// tenant is one org with a repository, a member and a forge token.
type tenant struct {
	org, repo, commit string
	jwt, forgeToken   string
}

// newTenant creates org's sample repository on the forge, a forge token
// that can read it, a member's JWT, and credits cents.
func newTenant(t *testing.T, org string, cents int64) *tenant {
	t.Helper()
	commit, err := devforge.CreateRepo(stack.ForgeRoot, org, "hello", devstack.SampleRepo, "sample")
	if err != nil {
		t.Fatal(err)
	}
	tn := &tenant{org: org, repo: "hello", commit: commit, forgeToken: "forge-" + org}
	stack.Forge.Grant(tn.forgeToken, org+"/*")
	if tn.jwt, err = stack.Token("alice@"+org, org, nil, []string{"billing:" + org}); err != nil {
		t.Fatal(err)
	}
	if cents > 0 {
		if err := stack.Ledger.Credit(context.Background(), org, cents, "e2e"); err != nil {
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

func (tn *tenant) post(t testing.TB, route string, body any, hdr ...string) answer {
	t.Helper()
	return post(t, route, tn.jwt, tn.forgeToken, body, hdr...)
}

func post(t testing.TB, route, jwt, forgeToken string, body any, hdr ...string) answer {
	t.Helper()
	var b []byte
	switch v := body.(type) {
	case string:
		b = []byte(v)
	default:
		b, _ = json.Marshal(v)
	}
	req, _ := http.NewRequest(http.MethodPost, stack.ProxyURL+"/v1/lsp"+route, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	if jwt != "" {
		req.Header.Set("Authorization", "Bearer "+jwt)
	}
	if forgeToken != "" {
		req.Header.Set("X-Forge-Token", forgeToken)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatalf("POST %s: %v", route, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, header: resp.Header, raw: string(raw)}
	if err := json.Unmarshal(raw, &a.body); err != nil {
		t.Fatalf("POST %s: answer is not JSON: %q", route, raw)
	}
	return a
}

func (a answer) errorCode() string {
	e, _ := a.body["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

func rows(t *testing.T, org string) []ledger.LedgerRow {
	t.Helper()
	rs, err := stack.Ledger.Rows(context.Background(), org, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func balance(t *testing.T, org string) ledger.Balance {
	t.Helper()
	b, err := stack.Ledger.Balance(context.Background(), org)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The hover position of greet.Hello in the sample's main.go.
var helloPos = map[string]any{"path": "main.go", "line": 10, "character": 20}

func with(m map[string]any, kv ...any) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i].(string)] = kv[i+1]
	}
	return out
}

var codeBlock = regexp.MustCompile("(?s)```go\n(.*?)\n```")

// TestHoverThroughTheWholePath: the first hover prepares and is charged 2¢
// once; the second is a 0¢ query row; the signature is gopls's own.
func TestHoverThroughTheWholePath(t *testing.T) {
	tn := newTenant(t, "acme", 10)

	first := tn.post(t, "/hover", with(helloPos, "repo", tn.repo))
	if first.status != http.StatusOK {
		t.Fatalf("first hover: %d %s", first.status, first.raw)
	}
	if first.body["prepared"] != true || first.body["commit"] != tn.commit {
		t.Fatalf("first hover: prepared=%v commit=%v; want true, %s", first.body["prepared"], first.body["commit"], tn.commit)
	}
	hover, _ := first.body["hover"].(map[string]any)
	md, _ := hover["markdown"].(string)
	got := codeBlock.FindStringSubmatch(md)
	if got == nil {
		t.Fatalf("hover markdown has no go code block: %q", md)
	}

	// The same position, asked of gopls directly.
	want := directHover(t, tn.commit, "main.go", 10, 20)
	if got[1] != want {
		t.Fatalf("hover signature through the service = %q; gopls directly = %q", got[1], want)
	}
	if !strings.Contains(got[1], "func greet.Hello(name string) string") && !strings.Contains(got[1], "func Hello(name string) string") {
		t.Fatalf("hover signature %q is not Hello's", got[1])
	}
	ev, _ := first.body["evidence"].(map[string]any)
	if ev["state"] != "current" || ev["document_sha256"] == nil {
		t.Fatalf("evidence = %v", ev)
	}
	if strings.Contains(first.raw, stack.DaemonRoot) || strings.Contains(md, "http") {
		t.Fatalf("answer leaks a host path or a link: %s", first.raw)
	}

	rs := rows(t, "acme")
	prepares := filter(rs, "prepare")
	if len(prepares) != 1 || prepares[0].AmountCents != -2 {
		t.Fatalf("after the first hover: prepare rows = %+v; want one of -2", prepares)
	}
	if b := balance(t, "acme"); b.BalanceCents != 8 || b.AvailableCents != 8 {
		t.Fatalf("balance after one prepare = %+v; want 8", b)
	}

	second := tn.post(t, "/hover", with(helloPos, "repo", tn.repo, "rev", tn.commit))
	if second.status != http.StatusOK || second.body["prepared"] != false {
		t.Fatalf("second hover: %d prepared=%v %s", second.status, second.body["prepared"], second.raw)
	}
	rs = rows(t, "acme")
	if n := len(filter(rs, "prepare")); n != 1 {
		t.Fatalf("prepare rows after the second hover = %d; want 1", n)
	}
	queries := filter(rs, "query")
	if len(queries) != 1 || queries[0].AmountCents != 0 || queries[0].HTTPStatus != 200 {
		t.Fatalf("query rows = %+v; want one 0¢ row with status 200", queries)
	}
	if queries[0].PrepareID == "" || queries[0].PrepareID != prepares[0].PrepareID {
		t.Fatalf("the query row does not name the workspace's prepare id")
	}

	// Definition of greet.Hello: greet/greet.go, where Hello is declared.
	loc := tn.post(t, "/locate", with(helloPos, "repo", tn.repo))
	if loc.status != http.StatusOK {
		t.Fatalf("locate: %d %s", loc.status, loc.raw)
	}
	locs, _ := loc.body["locations"].([]any)
	if len(locs) != 1 {
		t.Fatalf("locations = %v; want one", locs)
	}
	l0 := locs[0].(map[string]any)
	start := l0["range"].(map[string]any)["start"].(map[string]any)
	if l0["path"] != "greet/greet.go" || l0["external"] != false || start["line"] != float64(17) {
		t.Fatalf("definition = %v; want greet/greet.go line 17", l0)
	}

	// A definition inside the standard library comes back external.
	fmtLoc := tn.post(t, "/locate", map[string]any{"repo": tn.repo, "path": "main.go", "line": 10, "character": 6})
	if fmtLoc.status != http.StatusOK {
		t.Fatalf("locate fmt.Println: %d %s", fmtLoc.status, fmtLoc.raw)
	}
	fl := fmtLoc.body["locations"].([]any)[0].(map[string]any)
	if fl["external"] != true || !strings.HasPrefix(fl["module"].(string), "std@go") || fl["path"] != "fmt/print.go" {
		t.Fatalf("fmt.Println definition = %v; want external std fmt/print.go", fl)
	}
}

// directHover asks gopls itself, on a checkout of the same commit.
func directHover(t *testing.T, commit, path string, line, char int) string {
	t.Helper()
	dir := t.TempDir()
	for p, content := range devstack.SampleRepo {
		full := filepath.Join(dir, p)
		_ = os.MkdirAll(filepath.Dir(full), 0o755)
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	home := t.TempDir()
	env := []string{"PATH=/usr/local/go/bin:/usr/bin:/bin", "HOME=" + home, "GOFLAGS=-mod=mod", "GOPROXY=off", "GOTOOLCHAIN=local", "GOTELEMETRY=off", "GOCACHE=" + filepath.Join(home, "cache")}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := lspdirect.Start(ctx, dir, env, gopls, "serve")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if err := srv.Open(path, "go"); err != nil {
		t.Fatal(err)
	}
	md, err := srv.Hover(ctx, path, lspdirect.Position{Line: line, Character: char})
	if err != nil {
		t.Fatal(err)
	}
	m := codeBlock.FindStringSubmatch(md)
	if m == nil {
		t.Fatalf("direct gopls hover has no go code block: %q", md)
	}
	return m[1]
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

// TestWarmQueriesAtZeroBalance: only a prepare needs funds.
func TestWarmQueriesAtZeroBalance(t *testing.T) {
	tn := newTenant(t, "exact", 2)
	if a := tn.post(t, "/hover", with(helloPos, "repo", tn.repo)); a.status != http.StatusOK || a.body["prepared"] != true {
		t.Fatalf("prepare with exactly 2¢: %d %s", a.status, a.raw)
	}
	if b := balance(t, "exact"); b.BalanceCents != 0 {
		t.Fatalf("balance = %+v; want 0", b)
	}
	for i := 0; i < 3; i++ {
		if a := tn.post(t, "/hover", with(helloPos, "repo", tn.repo)); a.status != http.StatusOK || a.body["prepared"] != false {
			t.Fatalf("warm hover at zero balance: %d %s", a.status, a.raw)
		}
	}
	if n := len(filter(rows(t, "exact"), "query")); n != 3 {
		t.Fatalf("query rows = %d; want 3", n)
	}
}

// TestGateStopsTheRequest: 1¢ is not enough; nothing is fetched or pushed.
func TestGateStopsTheRequest(t *testing.T) {
	tn := newTenant(t, "poor", 1)
	a := tn.post(t, "/hover", with(helloPos, "repo", tn.repo))
	if a.status != http.StatusPaymentRequired || a.errorCode() != "insufficient_funds" {
		t.Fatalf("hover with 1¢: %d %s; want 402 insufficient_funds", a.status, a.raw)
	}
	if n := stack.Forge.PackDownloads("poor", "hello"); n != 0 {
		t.Fatalf("the forge served %d pack downloads after a refused gate; want 0", n)
	}
	key := auth.TenantKey([]byte("dev-tenant-key-secret"), "poor")
	if _, err := os.Stat(filepath.Join(stack.DaemonRoot, "trees", key)); !os.IsNotExist(err) {
		t.Fatalf("a tree reached the daemon after a refused gate (stat: %v)", err)
	}
	if b := balance(t, "poor"); b.BalanceCents != 1 || b.HeldCents != 0 {
		t.Fatalf("balance after refusal = %+v; want 1, nothing held", b)
	}
	rs := rows(t, "poor")
	if len(filter(rs, "prepare")) != 0 {
		t.Fatalf("a refused request wrote a prepare row: %+v", rs)
	}
	q := filter(rs, "query")
	if len(q) != 1 || q[0].HTTPStatus != 402 {
		t.Fatalf("the refused request's row = %+v; want one 0¢ query row with status 402", q)
	}
}

// TestForgeACLOnEveryRequest: a member whose forge token cannot read the
// repository gets the same 404 as for a repository that does not exist,
// even for the exact commit another member prepared.
func TestForgeACLOnEveryRequest(t *testing.T) {
	tn := newTenant(t, "umbrella", 10)
	if a := tn.post(t, "/hover", with(helloPos, "repo", tn.repo)); a.status != http.StatusOK {
		t.Fatalf("member with access: %d %s", a.status, a.raw)
	}
	downloads := stack.Forge.PackDownloads("umbrella", "hello")
	rowsBefore := len(rows(t, "umbrella"))
	bobJWT, err := stack.Token("bob@umbrella", "umbrella", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	stack.Forge.Grant("forge-bob", "somewhere-else/*")
	denied := post(t, "/hover", bobJWT, "forge-bob", with(helloPos, "repo", tn.repo, "rev", tn.commit))
	missing := post(t, "/hover", bobJWT, "forge-bob", with(helloPos, "repo", "no-such-repo", "rev", tn.commit))
	if denied.status != http.StatusNotFound || denied.errorCode() != "not_found" {
		t.Fatalf("member without forge access: %d %s; want 404", denied.status, denied.raw)
	}
	dm := denied.body["error"].(map[string]any)
	mm := missing.body["error"].(map[string]any)
	if missing.status != denied.status || dm["code"] != mm["code"] || dm["message"] != mm["message"] {
		t.Fatalf("denied (%s) and missing (%s) answers differ", denied.raw, missing.raw)
	}
	if _, leaked := dm["commit"]; leaked {
		t.Fatalf("the denied answer names the commit: %s", denied.raw)
	}
	if n := stack.Forge.PackDownloads("umbrella", "hello"); n != downloads {
		t.Fatalf("pack downloads went from %d to %d for a denied caller", downloads, n)
	}
	if n := len(rows(t, "umbrella")); n != rowsBefore {
		t.Fatalf("rows went from %d to %d; a denied request must not write one", rowsBefore, n)
	}
}

// TestIdentityAndBodyChecks: an org in the body is 400 with no side
// effect; X-Org-Id outside the principal's orgs is 403; no token is 401.
func TestIdentityAndBodyChecks(t *testing.T) {
	tn := newTenant(t, "strict", 10)
	before := stack.Forge.PackDownloads("strict", "hello")
	for _, tc := range []struct {
		name   string
		body   any
		jwt    string
		hdr    []string
		status int
		code   string
	}{
		{"org in body", with(helloPos, "repo", tn.repo, "org", "other"), tn.jwt, nil, 400, "invalid_request"},
		{"owner in body", with(helloPos, "repo", tn.repo, "owner", "other"), tn.jwt, nil, 400, "invalid_request"},
		{"forge url in body", with(helloPos, "repo", tn.repo, "forge_url", "http://evil"), tn.jwt, nil, 400, "invalid_request"},
		{"repo with a slash", with(helloPos, "repo", "other/hello"), tn.jwt, nil, 400, "invalid_request"},
		{"short sha", with(helloPos, "repo", tn.repo, "rev", tn.commit[:12]), tn.jwt, nil, 400, "invalid_request"},
		{"negative line", with(helloPos, "repo", tn.repo, "line", -1), tn.jwt, nil, 400, "invalid_request"},
		{"dotdot path", with(helloPos, "repo", tn.repo, "path", "../x.go"), tn.jwt, nil, 400, "invalid_request"},
		{"not json", "{", tn.jwt, nil, 400, "invalid_request"},
		{"foreign org header", with(helloPos, "repo", tn.repo), tn.jwt, []string{"X-Org-Id", "acme"}, 403, "forbidden"},
		{"no token", with(helloPos, "repo", tn.repo), "", nil, 401, "unauthenticated"},
		{"garbage token", with(helloPos, "repo", tn.repo), "not.a.jwt", nil, 401, "unauthenticated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := post(t, "/hover", tc.jwt, tn.forgeToken, tc.body, tc.hdr...)
			if a.status != tc.status || a.errorCode() != tc.code {
				t.Fatalf("%d %s; want %d %s", a.status, a.raw, tc.status, tc.code)
			}
		})
	}
	if n := stack.Forge.PackDownloads("strict", "hello"); n != before {
		t.Fatalf("refused requests caused %d pack downloads", n-before)
	}
	if rs := rows(t, "strict"); len(rs) != 1 { // the credit
		t.Fatalf("refused requests wrote rows: %+v", rs)
	}
}

// TestPrepareRoute: /prepare reports what the servers negotiated, charges
// once, and a refused prepare still leaves its 0¢ row.
// TestPrepareWarningsOnceWarm: the entries a tree dropped are named in
// every prepare answer for the revision, also when another request
// prepared it (a query here; a prepare whose answer was lost, or another
// proxy's, alike).
func TestPrepareWarningsOnceWarm(t *testing.T) {
	tn := newTenant(t, "linkwarn", 2)
	files := maps.Clone(devstack.SampleRepo)
	files["dangling"] = devforge.SymlinkPrefix + "nowhere"
	files["escape"] = devforge.SymlinkPrefix + "../../outside"
	if _, err := devforge.CreateRepo(stack.ForgeRoot, tn.org, "links", files, "links"); err != nil {
		t.Fatal(err)
	}
	if a := tn.post(t, "/hover", with(helloPos, "repo", "links")); a.status != http.StatusOK || a.body["prepared"] != true {
		t.Fatalf("the hover that prepares: %d %s", a.status, a.raw)
	}
	a := tn.post(t, "/prepare", map[string]any{"repo": "links"})
	if a.status != http.StatusOK || a.body["prepared"] != false {
		t.Fatalf("prepare of the warm revision: %d %s", a.status, a.raw)
	}
	ws, _ := a.body["warnings"].([]any)
	all := fmt.Sprint(ws...)
	for _, name := range []string{"dangling", "escape"} {
		if !strings.Contains(all, name) {
			t.Fatalf("the warm prepare's warnings %q do not name %q", ws, name)
		}
	}
}

func TestPrepareRoute(t *testing.T) {
	tn := newTenant(t, "prep", 2)
	a := tn.post(t, "/prepare", map[string]any{"repo": tn.repo})
	if a.status != http.StatusOK || a.body["prepared"] != true || a.body["commit"] != tn.commit {
		t.Fatalf("prepare: %d %s", a.status, a.raw)
	}
	tools, _ := a.body["tools"].(map[string]any)
	goTools, _ := tools["go"].([]any)
	has := map[string]bool{}
	for _, x := range goTools {
		has[x.(string)] = true
	}
	if !has["hover"] || !has["definition"] || !has["references"] || has["declaration"] {
		t.Fatalf("go tools = %v; want hover, definition, references and no declaration", goTools)
	}
	again := tn.post(t, "/prepare", map[string]any{"repo": tn.repo, "rev": "main"})
	if again.status != http.StatusOK || again.body["prepared"] != false {
		t.Fatalf("second prepare: %d %s", again.status, again.raw)
	}
	rs := rows(t, "prep")
	if p, q := filter(rs, "prepare"), filter(rs, "query"); len(p) != 1 || len(q) != 1 || p[0].HTTPStatus != 200 {
		t.Fatalf("rows = %+v; want one prepare row (status 200) and one query row", rs)
	}

	// Another revision with no funds left: 402, and the request's row.
	if _, err := devforge.Commit(stack.ForgeRoot, "prep", "hello", "next", map[string]string{"go.mod": "module x\n", "x.go": "package x\n"}, "next"); err != nil {
		t.Fatal(err)
	}
	poor := tn.post(t, "/prepare", map[string]any{"repo": tn.repo, "rev": "next"})
	if poor.status != http.StatusPaymentRequired || poor.errorCode() != "insufficient_funds" {
		t.Fatalf("prepare without funds: %d %s", poor.status, poor.raw)
	}
	if e := poor.body["error"].(map[string]any); e["prepared"] != false || e["commit"] == nil {
		t.Fatalf("the 402 envelope must name the commit and say prepared=false: %s", poor.raw)
	}
	if q := filter(rows(t, "prep"), "query"); len(q) != 2 || q[1].HTTPStatus != 402 {
		t.Fatalf("query rows = %+v; want the refused prepare's 402 row", q)
	}
}
