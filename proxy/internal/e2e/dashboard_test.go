package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/devforge"
	"github.com/hanzoai/lsp/proxy/internal/devstack"
)

// chromium runs Debian's headless Chromium on url with extra flags, as
// root, with no network but loopback and a fresh profile; it returns
// stdout.
func chromium(t *testing.T, url string, flags ...string) string {
	t.Helper()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium is not installed (make deps installs it)")
	}
	profile := t.TempDir()
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
		"--user-data-dir=" + profile, "--window-size=1280,1100", "--virtual-time-budget=15000"}, flags...)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append(args, url)...)
	cmd.Env = append(os.Environ(), "HOME="+profile)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium %v: %v\n%s", flags, err, stderr.String())
	}
	return string(out)
}

// artifactDir is where a test keeps what a person should look at
// (LSP_TEST_ARTIFACTS; make test sets .artifacts/ in the checkout).
func artifactDir(t *testing.T) string {
	dir := os.Getenv("LSP_TEST_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestDashboard loads GET /v1/lsp/dashboard in a real headless browser with
// a billing token in the fragment, after prepares and queries on two
// repositories, and checks every number the page shows against the ledger;
// the screenshot is kept as an artifact of the run.
func TestDashboard(t *testing.T) {
	tn := newTenant(t, "dash", 100)
	if _, err := devforge.CreateRepo(stack.ForgeRoot, tn.org, "other", devstack.SampleRepo, "sample"); err != nil {
		t.Fatal(err)
	}
	hover := func(repo string) {
		a := tn.post(t, "/hover", map[string]any{"repo": repo, "path": "main.go", "line": 10, "character": 20})
		if a.status != 200 {
			t.Fatalf("hover %s: %d %s", repo, a.status, a.raw)
		}
	}
	for range 3 {
		hover("hello")
	}
	for range 2 {
		hover("other")
	}

	ctx := context.Background()
	bal, err := stack.Ledger.Balance(ctx, tn.org)
	if err != nil {
		t.Fatal(err)
	}
	url := stack.ProxyURL + "/v1/lsp/dashboard#token=" + tn.jwt + "&days=7"
	dom := chromium(t, url, "--dump-dom")
	if !strings.Contains(dom, `data-ready="1"`) {
		status := regexp.MustCompile(`(?s)<p id="status"[^>]*>(.*?)</p>`).FindStringSubmatch(dom)
		t.Fatalf("the page did not finish loading: %v", status)
	}
	text := func(test string) string {
		m := regexp.MustCompile(`data-test="` + test + `"[^>]*>([^<]*)<`).FindStringSubmatch(dom)
		if m == nil {
			t.Fatalf("no %s on the page", test)
		}
		return m[1]
	}
	if got := text("balance"); !strings.HasPrefix(got, strconv.FormatInt(bal.BalanceCents, 10)+"¢") {
		t.Errorf("balance on the page %q, ledger %d¢", got, bal.BalanceCents)
	}
	if got, want := text("prepares"), "2"; got != want {
		t.Errorf("prepares on the page %q, want %s (one per repository)", got, want)
	}
	if got, want := text("queries"), "5"; got != want {
		t.Errorf("queries on the page %q, want %s (every request that reached the daemon)", got, want)
	}
	for repo, want := range map[string][2]string{"hello": {"1", "3"}, "other": {"1", "2"}} {
		m := regexp.MustCompile(`<tr data-repo="` + repo + `"><td>` + repo + `</td><td[^>]*>(\d+)</td><td[^>]*>(\d+)</td>`).FindStringSubmatch(dom)
		if m == nil || m[1] != want[0] || m[2] != want[1] {
			t.Errorf("row for %s: %v, want prepares %s queries %s", repo, m, want[0], want[1])
		}
	}
	if n := strings.Count(dom, "<tr data-id="); n != 3 { // the credit and two prepares
		t.Errorf("%d money rows on the page, want 3", n)
	}

	shot := filepath.Join(artifactDir(t), "dashboard.png")
	chromium(t, url, "--screenshot="+shot)
	if fi, err := os.Stat(shot); err != nil || fi.Size() < 10_000 {
		t.Fatalf("screenshot %s: %v", shot, err)
	}
	t.Logf("dashboard screenshot: %s", shot)
}
