package stacks

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/devstack"
	"github.com/hanzoai/lsp/proxy/internal/lspdirect"
)

// TestPolyglotRepository: one prepare of a repository in Go, Python, Bash,
// YAML and JSON starts each language's reviewed server (the production
// template rendered for make deps' install, daemon jailed), lists each
// languageId with the tools its server negotiated, and answers route by
// file extension.
func TestPolyglotRepository(t *testing.T) {
	dir := stackDir(t)
	file := reviewedServers(t, dir, "gopls", "basedpyright", "bash", "yaml", "json", "typescript")
	s := startStack(t, devstack.Options{Dir: dir, ServerFile: file})
	files := map[string]string{
		"go.mod":              "module example.com/poly\n\ngo 1.22\n",
		"main.go":             "package main\n\nimport \"fmt\"\n\nfunc Greet() string { return \"hi\" }\n\nfunc main() { fmt.Println(Greet()) }\n",
		"tool/util.py":        "def double(x: int) -> int:\n    return 2 * x\n\n\nprint(double(21))\n\n\ndef greeting(name: str) -> str:\n    return name\n",
		"scripts/run.sh":      "#!/bin/sh\nname=world\ngreet() {\n\techo \"hello $name\"\n}\ngreet\n",
		"config.yaml":         "service:\n  name: poly\n  ports:\n    - 80\n",
		"settings.json":       "{\n  \"name\": \"poly\",\n  \"enabled\": true\n}\n",
		"node_modules/x/x.py": "ignored = 1\n",
	}
	hdr := newTenantWith(t, s, "poly", "mixed", files, 10).auth()
	prep, langs := prepared(t, s, "mixed", hdr...)
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
	polyglotSymbols(t, s, hdr, file, files, tools)
	a := do(t, s, http.MethodPost, "/symbols", map[string]any{"repo": "mixed", "path": "config.yaml"}, hdr...)
	if a.status != http.StatusOK || !strings.Contains(a.raw, "ports") {
		t.Errorf("yaml symbols: %d %s", a.status, a.raw)
	}
	a = do(t, s, http.MethodPost, "/symbols", map[string]any{"repo": "mixed", "path": "settings.json"}, hdr...)
	if a.status != http.StatusOK || !strings.Contains(a.raw, "enabled") {
		t.Errorf("json symbols: %d %s", a.status, a.raw)
	}
}

// polyglotSymbols: a workspace symbol query searches every language of
// the tree. Ground truth in the same run: each reviewed server run
// directly on the same files answers the query; the service's answer for
// each language (language: …) is that server's own list of the
// repository's symbols, and the answer without a language is all of
// them, each language's order kept, each symbol naming its language, one
// cursor paging the merged list.
func polyglotSymbols(t *testing.T, s *devstack.Stack, hdr []string, serverFile string, files map[string]string, tools map[string]any) {
	t.Helper()
	const query = "greet"
	sf, err := devstack.LoadServerFile(serverFile)
	if err != nil {
		t.Fatal(err)
	}
	checkout := t.TempDir()
	for rel, content := range files {
		p := filepath.Join(checkout, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	symbols := func(body map[string]any) answer {
		body["repo"], body["query"], body["limit"] = "mixed", query, 1000
		return do(t, s, http.MethodPost, "/symbols", body, hdr...)
	}
	key := func(m map[string]any) string { return fmt.Sprint(m["name"], " ", m["path"]) }
	var languages []string // those whose server offers workspace symbols
	for lang, ts := range tools {
		if slices.Contains(ts.([]any), any("workspace_symbols")) {
			languages = append(languages, lang)
		}
	}
	slices.Sort(languages)
	perLanguage := map[string][]string{}
	for _, lang := range languages {
		a := symbols(map[string]any{"language": lang})
		if a.status != http.StatusOK {
			t.Fatalf("symbols of %s: %d %s", lang, a.status, a.raw)
		}
		for _, x := range a.body["symbols"].([]any) {
			m := x.(map[string]any)
			if m["language"] != lang {
				t.Errorf("language %s answered a symbol of language %v: %v", lang, m["language"], m)
			}
			perLanguage[lang] = append(perLanguage[lang], key(m))
		}
	}
	for _, c := range []struct{ id, lang, anchor string }{
		{"gopls", "go", "main.go"}, {"basedpyright", "python", "tool/util.py"}, {"bash", "shellscript", "scripts/run.sh"},
	} {
		truth := directSymbols(t, sf, c.id, c.lang, checkout, c.anchor, query)
		got := slices.Sorted(slices.Values(perLanguage[c.lang]))
		if len(truth) == 0 || !slices.Equal(got, truth) {
			t.Errorf("symbols of %s through the service %v; %s run directly %v", c.lang, got, c.id, truth)
		}
	}
	all := symbols(map[string]any{})
	if all.status != http.StatusOK {
		t.Fatalf("symbols of every language: %d %s", all.status, all.raw)
	}
	byLanguage := map[string][]string{}
	var merged []string
	for _, x := range all.body["symbols"].([]any) {
		m := x.(map[string]any)
		lang, _ := m["language"].(string)
		byLanguage[lang] = append(byLanguage[lang], key(m))
		merged = append(merged, key(m))
	}
	for _, lang := range languages {
		if !slices.Equal(byLanguage[lang], perLanguage[lang]) {
			t.Errorf("the merged answer's %s symbols %v; the %s answer %v", lang, byLanguage[lang], lang, perLanguage[lang])
		}
	}
	for _, lang := range []string{"go", "python", "shellscript"} {
		if len(byLanguage[lang]) == 0 {
			t.Errorf("the merged answer has no %s symbol: %s", lang, all.raw)
		}
	}
	ev := all.body["evidence"].(map[string]any)
	srv := ev["server"].(map[string]any)
	if id, _ := srv["id"].(string); !strings.Contains(id, "gopls") || !strings.Contains(id, "basedpyright") || !strings.Contains(id, "bash") || ev["state"] != "current" {
		t.Errorf("merged evidence %v", ev)
	}
	t.Logf("%q in every language (%v): %v", query, srv["id"], merged)
	// One cursor pages the merged list.
	var paged []string
	body := map[string]any{"repo": "mixed", "query": query, "limit": 2}
	for range len(merged) {
		a := do(t, s, http.MethodPost, "/symbols", body, hdr...)
		if a.status != http.StatusOK {
			t.Fatalf("page: %d %s", a.status, a.raw)
		}
		for _, x := range a.body["symbols"].([]any) {
			paged = append(paged, key(x.(map[string]any)))
		}
		next, _ := a.body["next_cursor"].(string)
		if next == "" {
			break
		}
		body = map[string]any{"repo": "mixed", "query": query, "limit": 2, "cursor": next}
	}
	if !slices.Equal(paged, merged) {
		t.Errorf("pages %v; the whole answer %v", paged, merged)
	}
	if a := symbols(map[string]any{"language": "cobol"}); a.status != http.StatusBadRequest || a.errorCode() != "invalid_request" {
		t.Errorf("an unknown language: %d %s", a.status, a.raw)
	}
	// TypeScript is configured, but the tree has no TypeScript file.
	if a := symbols(map[string]any{"language": "typescript"}); a.status != http.StatusUnprocessableEntity || a.errorCode() != "unsupported_language" {
		t.Errorf("a language without files: %d %s", a.status, a.raw)
	}
}

// directSymbols is what the reviewed server id, run directly on checkout
// with its entry's command, settings and a fresh home, answers
// workspace/symbol with once anchor is open and it is quiet: the names
// and paths of the symbols in checkout, sorted.
func directSymbols(t *testing.T, sf *devstack.ServerFile, id, lang, checkout, anchor, query string) []string {
	t.Helper()
	e, ok := sf.Server(id)
	if !ok {
		t.Fatalf("no %s entry", id)
	}
	home := t.TempDir()
	env := append([]string{"HOME=" + home, "XDG_CACHE_HOME=" + filepath.Join(home, ".cache"), "TMPDIR=" + t.TempDir(),
		"LANG=C.UTF-8", "GOTOOLCHAIN=local", "GOPROXY=off",
		"PATH=" + filepath.Dir(e.Executable) + ":" + os.Getenv("PATH")}, e.Env...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := lspdirect.StartConfigured(ctx, checkout, env, e.InitializationOptions, e.Settings, append([]string{e.Executable}, e.Arguments...)...)
	if err != nil {
		t.Fatalf("%s directly: %v", id, err)
	}
	defer srv.Close()
	if err := srv.Open(anchor, lang); err != nil {
		t.Fatal(err)
	}
	srv.WaitQuiet(ctx, 2*time.Second)
	var syms []struct {
		Name     string `json:"name"`
		Location struct {
			URI string `json:"uri"`
		} `json:"location"`
	}
	if err := srv.Call(ctx, "workspace/symbol", map[string]string{"query": query}, &syms); err != nil {
		t.Fatalf("%s directly: workspace/symbol: %v", id, err)
	}
	var out []string
	for _, s := range syms {
		u, err := url.Parse(s.Location.URI)
		if err != nil {
			continue
		}
		rel, err := filepath.Rel(checkout, u.Path)
		if err != nil || strings.HasPrefix(rel, "..") {
			continue // outside the repository: the service lists only its own
		}
		out = append(out, s.Name+" "+filepath.ToSlash(rel))
	}
	slices.Sort(out)
	return out
}
