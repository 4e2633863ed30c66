package e2e

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/hanzoai/lsp/proxy/internal/devforge"
)

// TestLoadProblemThroughTheWholePath: a repository whose import cannot be
// resolved in the jail (GOPROXY=off, no mirror for it). The prepare answer
// — cold and warm —, the free probe and an answer all say so in gopls's
// own words, with no host path; the empty hover is unavailable, not
// current.
func TestLoadProblemThroughTheWholePath(t *testing.T) {
	const org, repo = "unready", "broken"
	commit, err := devforge.CreateRepo(stack.ForgeRoot, org, repo, map[string]string{
		"go.mod":  "module example.com/broken\n\ngo 1.22\n\nrequire github.com/missing/dep v1.2.3\n",
		"main.go": "package main\n\nimport \"github.com/missing/dep\"\n\nfunc main() { _ = dep.Name() }\n",
	}, "broken")
	if err != nil {
		t.Fatal(err)
	}
	tn := &tenant{org: org, repo: repo, commit: commit, forgeToken: "forge-" + org}
	stack.Forge.Grant(tn.forgeToken, org+"/*")
	if tn.jwt, err = stack.Token("alice@"+org, org, nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := stack.Ledger.Credit(context.Background(), org, 2, "e2e"); err != nil {
		t.Fatal(err)
	}
	const want = `gopls could not load the project: main.go: could not import github.com/missing/dep (no required module provides package "github.com/missing/dep")`
	hasWant := func(list any) bool {
		l, _ := list.([]any)
		for _, x := range l {
			if s, _ := x.(string); s == want {
				return true
			}
		}
		return false
	}
	noHostPath := func(raw string) {
		t.Helper()
		if strings.Contains(raw, stack.DaemonRoot) || strings.Contains(raw, "file://") {
			t.Fatalf("a host path in %s", raw)
		}
	}

	for i, prepared := range []bool{true, false} {
		a := tn.post(t, "/prepare", map[string]any{"repo": repo})
		if a.status != http.StatusOK || a.body["prepared"] != prepared {
			t.Fatalf("prepare %d: %d %s", i, a.status, a.raw)
		}
		servers, _ := a.body["servers"].([]any)
		if !hasWant(a.body["warnings"]) || len(servers) != 1 || !hasWant(servers[0].(map[string]any)["warnings"]) {
			t.Fatalf("prepare %d does not say gopls could not load the project: %s", i, a.raw)
		}
		noHostPath(a.raw)
	}

	probe := call(t, http.MethodGet, "/capabilities", url.Values{"repo": {repo}}.Encode(), tn.jwt, tn.forgeToken, "")
	langs, _ := probe.body["languages"].([]any)
	if probe.status != http.StatusOK || len(langs) != 1 || !hasWant(langs[0].(map[string]any)["warnings"]) {
		t.Fatalf("capabilities: %d %s", probe.status, probe.raw)
	}

	h := tn.post(t, "/hover", map[string]any{"repo": repo, "path": "main.go", "line": 4, "character": 25})
	ev, _ := h.body["evidence"].(map[string]any)
	if h.status != http.StatusOK || h.body["hover"] != nil || ev["state"] != "unavailable" || !hasWant(ev["warnings"]) {
		t.Fatalf("hover on the unresolved call: %d %s", h.status, h.raw)
	}
	noHostPath(h.raw)
}
