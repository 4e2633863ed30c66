package stacks

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/hanzoai/lsp/proxy/internal/devstack"
)

// TestPolyglotRepository: one prepare of a repository in Go, Python, Bash,
// YAML and JSON starts each language's reviewed server (the production
// template rendered for make deps' install, daemon jailed), lists each
// languageId with the tools its server negotiated, and answers route by
// file extension.
func TestPolyglotRepository(t *testing.T) {
	dir := stackDir(t)
	file := reviewedServers(t, dir, "gopls", "basedpyright", "bash", "yaml", "json")
	s := startStack(t, devstack.Options{Dir: dir, ServerFile: file})
	files := map[string]string{
		"go.mod":              "module example.com/poly\n\ngo 1.22\n",
		"main.go":             "package main\n\nimport \"fmt\"\n\nfunc Greet() string { return \"hi\" }\n\nfunc main() { fmt.Println(Greet()) }\n",
		"tool/util.py":        "def double(x: int) -> int:\n    return 2 * x\n\n\nprint(double(21))\n",
		"scripts/run.sh":      "#!/bin/sh\nname=world\ngreet() {\n\techo \"hello $name\"\n}\ngreet\n",
		"config.yaml":         "service:\n  name: poly\n  ports:\n    - 80\n",
		"settings.json":       "{\n  \"name\": \"poly\",\n  \"enabled\": true\n}\n",
		"node_modules/x/x.py": "ignored = 1\n",
	}
	hdr := newTenantWith(t, s, "poly", "mixed", files, 10).auth()
	prep := do(t, s, http.MethodPost, "/prepare", map[string]any{"repo": "mixed"}, hdr...)
	if prep.status != http.StatusOK {
		t.Fatalf("prepare: %d %s", prep.status, prep.raw)
	}
	var langs []string
	for _, l := range prep.body["languages"].([]any) {
		langs = append(langs, l.(string))
	}
	slices.Sort(langs)
	if want := []string{"go", "json", "python", "shellscript", "yaml"}; !slices.Equal(langs, want) {
		t.Fatalf("languages %v, want %v", langs, want)
	}
	tools := prep.body["tools"].(map[string]any)
	has := func(lang, tool string) bool {
		for _, x := range tools[lang].([]any) {
			if x == tool {
				return true
			}
		}
		return false
	}
	for _, c := range []struct {
		lang, tool string
		want       bool
	}{
		{"go", "type_hierarchy", true}, {"python", "declaration", true}, {"python", "type_hierarchy", false},
		{"shellscript", "references", true}, {"yaml", "document_symbols", true}, {"json", "definition", false},
	} {
		if has(c.lang, c.tool) != c.want {
			t.Errorf("%s: tool %s listed %v, want %v (%v)", c.lang, c.tool, !c.want, c.want, tools[c.lang])
		}
	}
	caps := do(t, s, http.MethodGet, "/capabilities?repo=mixed", nil, hdr...)
	if caps.status != http.StatusOK || len(caps.body["languages"].([]any)) != 5 {
		t.Fatalf("capabilities: %d %s", caps.status, caps.raw)
	}
	// Each file's hover comes from its own language's server.
	for _, h := range []struct {
		path       string
		line, char int
		want       string
	}{
		{"main.go", 6, 28, "func Greet"},
		{"tool/util.py", 4, 8, "def double"},
		{"scripts/run.sh", 3, 15, "name"},
	} {
		a := do(t, s, http.MethodPost, "/hover", map[string]any{"repo": "mixed", "path": h.path, "line": h.line, "character": h.char}, hdr...)
		hv, _ := a.body["hover"].(map[string]any)
		md, _ := hv["markdown"].(string)
		ev, _ := a.body["evidence"].(map[string]any)
		srv, _ := ev["server"].(map[string]any)
		if a.status != http.StatusOK || !strings.Contains(md, h.want) {
			t.Errorf("hover %s: %d %s", h.path, a.status, a.raw)
		}
		t.Logf("hover %s answered by %v", h.path, srv["id"])
	}
	// A name without a path is looked up in every language's workspace
	// symbols: a Python function and a Go function of the same tree, each
	// answered by its own server.
	for _, n := range []struct{ symbol, path, want, server string }{
		{"double", "tool/util.py", "def double", "basedpyright"},
		{"Greet", "main.go", "func Greet", "gopls"},
	} {
		a := do(t, s, http.MethodPost, "/hover", map[string]any{"repo": "mixed", "symbol": n.symbol}, hdr...)
		hv, _ := a.body["hover"].(map[string]any)
		md, _ := hv["markdown"].(string)
		res, _ := a.body["resolved"].(map[string]any)
		ev, _ := a.body["evidence"].(map[string]any)
		srv, _ := ev["server"].(map[string]any)
		if a.status != http.StatusOK || !strings.Contains(md, n.want) || res["path"] != n.path || srv["id"] != n.server {
			t.Errorf("hover by name %s: %d %s", n.symbol, a.status, a.raw)
		}
	}
	a := do(t, s, http.MethodPost, "/symbols", map[string]any{"repo": "mixed", "path": "config.yaml"}, hdr...)
	if a.status != http.StatusOK || !strings.Contains(a.raw, "ports") {
		t.Errorf("yaml symbols: %d %s", a.status, a.raw)
	}
	a = do(t, s, http.MethodPost, "/symbols", map[string]any{"repo": "mixed", "path": "settings.json"}, hdr...)
	if a.status != http.StatusOK || !strings.Contains(a.raw, "enabled") {
		t.Errorf("json symbols: %d %s", a.status, a.raw)
	}
}
