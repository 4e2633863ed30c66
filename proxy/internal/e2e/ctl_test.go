package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/ctl"
)

// lspctl runs ctl.Main as a person at a terminal would, with env set, and
// returns its exit code, stdout and stderr.
func lspctl(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	for _, k := range []string{"LSP_URL", "LSP_TOKEN", "LSP_FORGE_TOKEN", "LSP_ORG"} {
		t.Setenv(k, env[k])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	code := ctl.Main(ctx, args, &out, &errb)
	return code, out.String(), errb.String()
}

func (tn *tenant) env() map[string]string {
	return map[string]string{"LSP_URL": stack.ProxyURL, "LSP_TOKEN": tn.jwt, "LSP_FORGE_TOKEN": tn.forgeToken}
}

// TestCLI: lspctl's client commands get the real answers, print them for
// people (1-based positions, hover as text, symbols indented) or as the
// service's JSON, and end with the documented exit codes; the ledger rows
// land on the org the token (or LSP_ORG) selects.
func TestCLI(t *testing.T) {
	tn := newTenant(t, "cli", 10)
	env := tn.env()

	code, out, errs := lspctl(t, env, "hover", "--repo", tn.repo, "--path", "main.go", "--line", "10", "--character", "20")
	if code != 0 {
		t.Fatalf("hover: exit %d\n%s%s", code, out, errs)
	}
	if !strings.Contains(out, "func Hello(name string) string") && !strings.Contains(out, "func greet.Hello(name string) string") {
		t.Fatalf("hover output lacks Hello's signature:\n%s", out)
	}
	if strings.Contains(out, "```") {
		t.Fatalf("hover output still has markdown fences:\n%s", out)
	}
	if !strings.Contains(errs, "prepared cli@") && !strings.Contains(errs, "prepared hello@") {
		t.Fatalf("the first hover should say it prepared (stderr %q)", errs)
	}
	t.Logf("$ lspctl hover --repo hello --path main.go --line 10 --character 20\n%s%s", errs, out)

	// --at takes the 1-based position lspctl prints; the definition is
	// printed the same way.
	code, out, errs = lspctl(t, env, "locate", "--repo", tn.repo, "--at", "main.go:11:21")
	if code != 0 || strings.TrimSpace(out) != "greet/greet.go:18:6" {
		t.Fatalf("locate: exit %d %q %s; want greet/greet.go:18:6", code, out, errs)
	}
	t.Logf("$ lspctl locate --repo hello --at main.go:11:21\n%s", out)
	code, out, _ = lspctl(t, env, "locate", "--repo", tn.repo, "--at", "main.go:11:7")
	if code != 0 || !strings.HasPrefix(out, "fmt/print.go:") || !strings.Contains(out, "(std@go") {
		t.Fatalf("locate fmt.Println: exit %d %q; want an external std location", code, out)
	}

	code, out, errs = lspctl(t, env, "symbols", "--repo", tn.repo, "--path", "greet/greet.go")
	if code != 0 {
		t.Fatalf("symbols: exit %d %s", code, errs)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	var hello, greetMethod string
	for _, l := range lines {
		if strings.Contains(l, "function Hello") {
			hello = l
		}
		if strings.Contains(l, "Greet") && strings.HasPrefix(l, "  ") {
			greetMethod = l
		}
	}
	if !strings.HasPrefix(hello, "function Hello") || !strings.Contains(hello, "greet/greet.go:18:") {
		t.Fatalf("symbols: no top-level Hello at greet/greet.go:18 in\n%s", out)
	}
	if greetMethod == "" {
		t.Fatalf("symbols: no member indented under its container in\n%s", out)
	}
	t.Logf("$ lspctl symbols --repo hello --path greet/greet.go\n%s", out)

	// --json prints the service's own answer.
	code, out, _ = lspctl(t, env, "hover", "--json", "--repo", tn.repo, "--rev", tn.commit, "--at", "main.go:11:21")
	var a map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &a) != nil || a["commit"] != tn.commit || a["prepared"] != false {
		t.Fatalf("hover --json: exit %d %q", code, out)
	}
	if _, ok := a["hover"].(map[string]any)["markdown"]; !ok {
		t.Fatalf("hover --json lacks the markdown: %s", out)
	}

	// Exit codes.
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		code int
		errs string
	}{
		{"missing --repo", env, []string{"hover", "--at", "main.go:1:1"}, 2, "--repo is required"},
		{"flag of another command", env, []string{"hover", "--repo", tn.repo, "--at", "main.go:1:1", "--direction", "incoming"}, 2, "does not take --direction"},
		{"no token", map[string]string{"LSP_URL": stack.ProxyURL}, []string{"hover", "--repo", tn.repo, "--at", "main.go:1:1"}, 2, "LSP_TOKEN"},
		{"unknown repo", env, []string{"hover", "--repo", "nope", "--at", "main.go:1:1"}, 1, "404 not_found"},
		{"bad token", with2(env, "LSP_TOKEN", "not.a.jwt"), []string{"prepare", "--repo", tn.repo}, 1, "401 unauthenticated"},
		{"unreachable", with2(env, "LSP_URL", "http://127.0.0.1:1"), []string{"prepare", "--repo", tn.repo}, 3, "prepare"},
	} {
		code, out, errs := lspctl(t, tc.env, tc.args...)
		if code != tc.code || !strings.Contains(errs, tc.errs) {
			t.Errorf("%s: exit %d, stderr %q, stdout %q; want exit %d and %q", tc.name, code, errs, out, tc.code, tc.errs)
		}
	}

	// Rows: one prepare (−2¢) and a 0¢ query row per later call, all on
	// this org.
	rs := rows(t, "cli")
	if p, q := filter(rs, "prepare"), filter(rs, "query"); len(p) != 1 || p[0].AmountCents != -2 || len(q) != 4 {
		t.Fatalf("rows = %+v; want one −2¢ prepare and four query rows", rs)
	}
}

func with2(m map[string]string, k, v string) map[string]string {
	out := map[string]string{}
	for a, b := range m {
		out[a] = b
	}
	out[k] = v
	return out
}

// TestCLIDevTokenAndOrg: dev-token signs with the stack's generated key;
// LSP_ORG selects one of the principal's orgs, which pays; a refused
// prepare exits 4.
func TestCLIDevTokenAndOrg(t *testing.T) {
	home := newTenant(t, "cli-home", 0)
	team := newTenant(t, "cli-team", 10)

	code, tok, errs := lspctl(t, nil, "dev-token", "--key", stack.KeyFile, "--owner", home.org, "--orgs", team.org, "--sub", "carol")
	if code != 0 {
		t.Fatalf("dev-token: exit %d %s", code, errs)
	}
	tok = strings.TrimSpace(tok)
	if code, _, errs := lspctl(t, nil, "dev-token", "--owner", home.org); code != 2 || !strings.Contains(errs, "--key") {
		t.Fatalf("dev-token without --key: exit %d %q; want 2", code, errs)
	}

	// The home org has no funds: a cold prepare is 402, exit 4.
	env := map[string]string{"LSP_URL": stack.ProxyURL, "LSP_TOKEN": tok, "LSP_FORGE_TOKEN": home.forgeToken}
	code, _, errs = lspctl(t, env, "prepare", "--repo", home.repo)
	if code != 4 || !strings.Contains(errs, "402 insufficient_funds") {
		t.Fatalf("prepare without funds: exit %d %q; want 4", code, errs)
	}

	// LSP_ORG selects the team, which pays.
	env = map[string]string{"LSP_URL": stack.ProxyURL, "LSP_TOKEN": tok, "LSP_FORGE_TOKEN": team.forgeToken, "LSP_ORG": team.org}
	code, out, errs := lspctl(t, env, "prepare", "--repo", team.repo)
	if code != 0 || !strings.Contains(out, "is ready") || !strings.Contains(out, "hover") {
		t.Fatalf("prepare as the team: exit %d %q %s", code, out, errs)
	}
	t.Logf("$ LSP_ORG=%s lspctl prepare --repo hello\n%s%s", team.org, errs, out)
	code, out, _ = lspctl(t, env, "diagnostics", "--repo", team.repo, "--path", "main.go")
	if code != 0 || out != "" {
		t.Fatalf("diagnostics of a clean file: exit %d %q", code, out)
	}
	p := filter(rows(t, team.org), "prepare")
	if len(p) != 1 || p[0].Subject != "carol" || p[0].AmountCents != -2 {
		t.Fatalf("team rows = %+v; want carol's −2¢ prepare", p)
	}
	if q := filter(rows(t, home.org), "query"); len(q) != 1 || q[0].HTTPStatus != 402 {
		t.Fatalf("home rows = %+v; want the refused prepare's 402 row", q)
	}
}
