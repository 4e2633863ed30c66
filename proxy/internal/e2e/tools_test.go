package e2e

// Every tool of CONTRACT §4 through the proxy, on real multi-package Go and
// TypeScript projects (testdata/shapes-go, testdata/shapes-ts) served by
// the reference servers: gopls v0.21.1 and typescript-language-server 6.0.0
// with the pinned typescript 5.9.3. Positions and expected lines are found
// in the committed sources, so the assertions name real content: symbols,
// paths, lines and messages.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/devforge"
	"github.com/hanzoai/lsp/proxy/internal/devstack"
	"github.com/hanzoai/lsp/proxy/internal/lspdirect"
)

// typescript is the reviewed TypeScript install the stack serves with, ""
// when it is not installed (the TypeScript tests then skip; under CI,
// where make deps installs it, its absence fails the run).
var typescript string

func findTypeScript() (string, error) {
	for _, p := range []string{os.Getenv("LSP_TEST_TYPESCRIPT"), "../../../.bin/ts"} {
		if p == "" {
			continue
		}
		if ts, err := devstack.FindTypeScript(p, ""); err == nil {
			return ts.Dir, nil
		}
	}
	if os.Getenv("CI") != "" {
		return "", errors.New("the reviewed TypeScript server is not installed: make deps installs it into .bin/ts")
	}
	return "", nil
}

// project is a tenant whose repository holds a testdata project.
type project struct {
	*tenant
	files map[string]string
}

// testdataFiles reads testdata/name into a path → content map.
func testdataFiles(t *testing.T, name string) map[string]string {
	t.Helper()
	root := filepath.Join("testdata", name)
	files := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		files[filepath.ToSlash(rel)] = string(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// newProject puts files on the forge as org/repo and returns a member of
// org with enough credit for one prepare.
func newProject(t *testing.T, org, repo string, files map[string]string) *project {
	t.Helper()
	commit, err := devforge.CreateRepo(stack.ForgeRoot, org, repo, files, "testdata "+repo)
	if err != nil {
		t.Fatal(err)
	}
	tn := &tenant{org: org, repo: repo, commit: commit, forgeToken: "forge-" + org}
	stack.Forge.Grant(tn.forgeToken, org+"/*")
	if tn.jwt, err = stack.Token("dev@"+org, org, nil, []string{"billing:" + org}); err != nil {
		t.Fatal(err)
	}
	if err := stack.Ledger.Credit(context.Background(), org, 10, "e2e tools"); err != nil {
		t.Fatal(err)
	}
	return &project{tenant: tn, files: files}
}

// at is the position of the n-th occurrence (from 0) of needle in path,
// moved by shift characters (the sources are ASCII: bytes are UTF-16
// units).
func (p *project) at(t *testing.T, path, needle string, n, shift int) map[string]any {
	t.Helper()
	src, ok := p.files[path]
	if !ok {
		t.Fatalf("no %s in the project", path)
	}
	off := -1
	for i := 0; i <= n; i++ {
		j := strings.Index(src[off+1:], needle)
		if j < 0 {
			t.Fatalf("%s: occurrence %d of %q not found", path, n, needle)
		}
		off += 1 + j
	}
	off += shift
	line := strings.Count(src[:off], "\n")
	char := off - (strings.LastIndex(src[:off], "\n") + 1)
	return map[string]any{"repo": p.repo, "path": path, "line": line, "character": char}
}

// lineOf is the 0-based line of the first occurrence of needle in path.
func (p *project) lineOf(t *testing.T, path, needle string) int {
	t.Helper()
	i := strings.Index(p.files[path], needle)
	if i < 0 {
		t.Fatalf("%s: %q not found", path, needle)
	}
	return strings.Count(p.files[path][:i], "\n")
}

// ok posts and requires 200 with current evidence (prepare has none).
func (p *project) ok(t *testing.T, route string, body map[string]any) answer {
	t.Helper()
	a := p.post(t, route, body)
	if a.status != http.StatusOK {
		t.Fatalf("%s %v: %d %s", route, body, a.status, a.raw)
	}
	ev, _ := a.body["evidence"].(map[string]any)
	if route != "/prepare" && ev["state"] != "current" {
		t.Fatalf("%s %v: evidence %v; want current", route, body, ev)
	}
	if strings.Contains(a.raw, stack.DaemonRoot) || strings.Contains(a.raw, stack.ForgeRoot) ||
		(typescript != "" && strings.Contains(a.raw, typescript)) {
		t.Fatalf("%s: the answer leaks a host path: %s", route, a.raw)
	}
	return a
}

// refused posts and requires the error status and code.
func (p *project) refused(t *testing.T, route string, body map[string]any, status int, code string) {
	t.Helper()
	a := p.post(t, route, body)
	if a.status != status || a.errorCode() != code {
		t.Fatalf("%s %v: %d %s; want %d %s", route, body, a.status, a.raw, status, code)
	}
}

type loc struct {
	Path     string
	Line     int
	External bool
	Module   string
}

func (l loc) String() string { return fmt.Sprintf("%s:%d", l.Path, l.Line) }

func locations(t *testing.T, a answer, field string) []loc {
	t.Helper()
	items, ok := a.body[field].([]any)
	if !ok {
		t.Fatalf("no %s list in %s", field, a.raw)
	}
	var out []loc
	for _, it := range items {
		m := it.(map[string]any)
		l := loc{Path: str(m["path"]), Line: startLine(m["range"])}
		l.External, _ = m["external"].(bool)
		l.Module = str(m["module"])
		out = append(out, l)
	}
	return out
}

func startLine(r any) int {
	m, _ := r.(map[string]any)
	s, _ := m["start"].(map[string]any)
	f, _ := s["line"].(float64)
	return int(f)
}

func str(v any) string { s, _ := v.(string); return s }

// named are the list items' names (symbols, calls, types) with path and
// the line of their range (symbols) or selection range (calls and types,
// whose range may take in a doc comment).
func named(t *testing.T, a answer, field string) map[string]loc {
	t.Helper()
	items, ok := a.body[field].([]any)
	if !ok {
		t.Fatalf("no %s list in %s", field, a.raw)
	}
	out := map[string]loc{}
	for _, it := range items {
		m := it.(map[string]any)
		r := m["range"]
		if sel, ok := m["selection_range"]; ok {
			r = sel
		}
		out[str(m["name"])] = loc{Path: str(m["path"]), Line: startLine(r)}
	}
	return out
}

func labels(t *testing.T, a answer) []string {
	t.Helper()
	var out []string
	for _, it := range a.body["completions"].([]any) {
		out = append(out, str(it.(map[string]any)["label"]))
	}
	return out
}

func want(t *testing.T, what string, got, expected any) {
	t.Helper()
	g, _ := json.Marshal(got)
	e, _ := json.Marshal(expected)
	if string(g) != string(e) {
		t.Fatalf("%s = %s; want %s", what, g, e)
	}
}

// pageThrough follows next_cursor with limit 1 and returns every item.
func (p *project) pageThrough(t *testing.T, route string, body map[string]any, field string) []loc {
	t.Helper()
	var all []loc
	cursor := ""
	for i := 0; ; i++ {
		b := with(body, "limit", 1)
		if cursor != "" {
			b["cursor"] = cursor
		}
		a := p.ok(t, route, b)
		page := locations(t, a, field)
		if len(page) != 1 {
			t.Fatalf("page %d: %d items; want 1", i, len(page))
		}
		all = append(all, page...)
		next, _ := a.body["next_cursor"].(string)
		if next == "" {
			return all
		}
		if i > 50 {
			t.Fatal("pagination does not end")
		}
		cursor = next
	}
}

// checkPagination: limit=1 gives one item and a cursor, the cursor gives
// the next item, paging through gives exactly the unpaged list, and a
// tampered cursor or one used with other parameters is 400.
func (p *project) checkPagination(t *testing.T, body map[string]any) {
	t.Helper()
	whole := locations(t, p.ok(t, "/locate", body), "locations")
	if len(whole) < 3 {
		t.Fatalf("references = %v; want at least 3 to page through", whole)
	}
	first := p.ok(t, "/locate", with(body, "limit", 1))
	cursor, _ := first.body["next_cursor"].(string)
	if cursor == "" || len(locations(t, first, "locations")) != 1 {
		t.Fatalf("limit 1: %s; want one location and a next_cursor", first.raw)
	}
	second := p.ok(t, "/locate", with(body, "limit", 1, "cursor", cursor))
	want(t, "the page after the cursor", locations(t, second, "locations"), whole[1:2])
	want(t, "paging through with limit 1", p.pageThrough(t, "/locate", body, "locations"), whole)

	i := len(cursor) / 2
	flip := byte('A')
	if cursor[i] == 'A' {
		flip = 'B'
	}
	tampered := cursor[:i] + string(flip) + cursor[i+1:]
	p.refused(t, "/locate", with(body, "limit", 1, "cursor", tampered), http.StatusBadRequest, "invalid_request")
	p.refused(t, "/locate", with(body, "limit", 1, "cursor", cursor, "line", body["line"].(int)+1), http.StatusBadRequest, "invalid_request")
}

// TestGoTools: every tool gopls negotiates, end to end, on shapes-go.
func TestGoTools(t *testing.T) {
	t.Parallel()
	p := newProject(t, "toolsgo", "shapes", testdataFiles(t, "shapes-go"))

	prep := p.ok(t, "/prepare", map[string]any{"repo": p.repo})
	if prep.body["prepared"] != true {
		t.Fatalf("prepare: %s", prep.raw)
	}
	tools := prep.body["tools"].(map[string]any)["go"]
	want(t, "gopls tools", tools, []string{"hover", "definition", "type_definition", "implementation", "references",
		"document_symbols", "workspace_symbols", "diagnostics", "signature_help", "call_hierarchy", "type_hierarchy", "completion"})

	totalCall := p.at(t, "main.go", "Total(figures)", 0, 0)
	t.Run("hover", func(t *testing.T) {
		a := p.ok(t, "/hover", totalCall)
		md := str(a.body["hover"].(map[string]any)["markdown"])
		if !strings.Contains(md, "Total(ss []shapes.Shape) float64") || !strings.Contains(md, "Total sums the areas of ss.") {
			t.Fatalf("hover = %q", md)
		}
	})
	t.Run("definition", func(t *testing.T) {
		got := locations(t, p.ok(t, "/locate", totalCall), "locations")
		want(t, "definition of calc.Total", got, []loc{{Path: "calc/calc.go", Line: p.lineOf(t, "calc/calc.go", "func Total")}})
	})
	t.Run("type", func(t *testing.T) {
		got := locations(t, p.ok(t, "/locate", with(p.at(t, "calc/calc.go", "s.Area()", 0, 0), "relation", "type")), "locations")
		want(t, "type of s", got, []loc{{Path: "shapes/shape.go", Line: p.lineOf(t, "shapes/shape.go", "type Shape interface")}})
	})
	shapeDecl := p.at(t, "shapes/shape.go", "Shape interface", 0, 0)
	t.Run("implementation", func(t *testing.T) {
		got := locations(t, p.ok(t, "/locate", with(shapeDecl, "relation", "implementation")), "locations")
		want(t, "implementations of Shape", got, []loc{
			{Path: "shapes/circle.go", Line: p.lineOf(t, "shapes/circle.go", "type Circle struct")},
			{Path: "shapes/square.go", Line: p.lineOf(t, "shapes/square.go", "type Square struct")},
		})
	})
	t.Run("reference", func(t *testing.T) {
		refs := with(shapeDecl, "relation", "reference", "include_declaration", true)
		got := locations(t, p.ok(t, "/locate", refs), "locations")
		var paths []string
		for _, l := range got {
			paths = append(paths, l.Path)
		}
		want(t, "files referring to Shape", paths, []string{"calc/calc.go", "calc/calc.go", "main.go", "shapes/shape.go"})
		p.checkPagination(t, refs)
	})
	t.Run("declaration is not offered", func(t *testing.T) {
		p.refused(t, "/locate", with(totalCall, "relation", "declaration"), http.StatusUnprocessableEntity, "capability_unavailable")
	})
	t.Run("document symbols", func(t *testing.T) {
		got := named(t, p.ok(t, "/symbols", map[string]any{"repo": p.repo, "path": "calc/calc.go"}), "symbols")
		want(t, "symbols of calc.go", got, map[string]loc{
			"Total": {Path: "calc/calc.go", Line: p.lineOf(t, "calc/calc.go", "func Total")},
			"area":  {Path: "calc/calc.go", Line: p.lineOf(t, "calc/calc.go", "func area")},
		})
	})
	t.Run("workspace symbols", func(t *testing.T) {
		a := p.ok(t, "/symbols", map[string]any{"repo": p.repo, "query": "Square"})
		got := named(t, a, "symbols")
		if got["Square"] != (loc{Path: "shapes/square.go", Line: p.lineOf(t, "shapes/square.go", "type Square struct")}) {
			t.Fatalf("workspace symbols for Square = %v", got)
		}
	})
	t.Run("diagnostics", func(t *testing.T) {
		a := p.ok(t, "/diagnostics", map[string]any{"repo": p.repo, "path": "broken/broken.go"})
		ds := a.body["diagnostics"].([]any)
		if len(ds) != 1 {
			t.Fatalf("diagnostics of broken.go = %s; want one", a.raw)
		}
		d := ds[0].(map[string]any)
		if d["severity"] != "error" || !strings.Contains(str(d["message"]), `cannot use "seven"`) ||
			startLine(d["range"]) != p.lineOf(t, "broken/broken.go", `var n int = "seven"`) {
			t.Fatalf("diagnostic = %v", d)
		}
		start := time.Now()
		clean := p.ok(t, "/diagnostics", map[string]any{"repo": p.repo, "path": "calc/calc.go"})
		want(t, "diagnostics of the clean calc.go", clean.body["diagnostics"], []any{})
		t.Logf("clean-file diagnostics answered in %v", time.Since(start))
	})
	t.Run("complete", func(t *testing.T) {
		got := labels(t, p.ok(t, "/complete", p.at(t, "calc/calc.go", "s.Area()", 0, 2)))
		if !slices.Contains(got, "Area") {
			t.Fatalf("completions after s. = %v; want Area", got)
		}
	})
	t.Run("signature", func(t *testing.T) {
		a := p.ok(t, "/signature", p.at(t, "main.go", "Total(figures)", 0, len("Total(")))
		sigs := a.body["signatures"].([]any)
		if len(sigs) != 1 || !strings.Contains(str(sigs[0].(map[string]any)["label"]), "Total(ss []shapes.Shape) float64") ||
			a.body["active_parameter"] != float64(0) {
			t.Fatalf("signature = %s", a.raw)
		}
	})
	totalDecl := p.at(t, "calc/calc.go", "Total(ss", 0, 0)
	t.Run("calls", func(t *testing.T) {
		in := named(t, p.ok(t, "/calls", with(totalDecl, "direction", "incoming")), "calls")
		want(t, "callers of Total", in, map[string]loc{"report": {Path: "main.go", Line: p.lineOf(t, "main.go", "func report")}})
		out := named(t, p.ok(t, "/calls", with(totalDecl, "direction", "outgoing")), "calls")
		want(t, "callees of Total", out, map[string]loc{"area": {Path: "calc/calc.go", Line: p.lineOf(t, "calc/calc.go", "func area")}})
	})
	t.Run("types", func(t *testing.T) {
		sup := named(t, p.ok(t, "/types", with(p.at(t, "shapes/square.go", "Square struct", 0, 0), "direction", "supertypes")), "types")
		want(t, "supertypes of Square", sup, map[string]loc{"Shape": {Path: "shapes/shape.go", Line: p.lineOf(t, "shapes/shape.go", "type Shape interface")}})
		sub := named(t, p.ok(t, "/types", with(shapeDecl, "direction", "subtypes")), "types")
		want(t, "subtypes of Shape", sub, map[string]loc{
			"Circle": {Path: "shapes/circle.go", Line: p.lineOf(t, "shapes/circle.go", "type Circle struct")},
			"Square": {Path: "shapes/square.go", Line: p.lineOf(t, "shapes/square.go", "type Square struct")},
		})
	})
	t.Run("standard library is external", func(t *testing.T) {
		got := locations(t, p.ok(t, "/locate", p.at(t, "shapes/circle.go", "Pi *", 0, 0)), "locations")
		if len(got) != 1 || !got[0].External || !strings.HasPrefix(got[0].Module, "std@go") || got[0].Path != "math/const.go" {
			t.Fatalf("definition of math.Pi = %v; want external std math/const.go", got)
		}
	})
	if n := len(filter(rows(t, "toolsgo"), "prepare")); n != 1 {
		t.Fatalf("prepare rows = %d; want exactly one for all the tools", n)
	}
}

// hostileFiles are a committed node_modules/typescript whose tsserver.js
// records that it ran and crashes, and a tsserver plugin (named in
// tsconfig.json) that records that it loaded. markers is where they write.
func hostileFiles(markers string) map[string]string {
	q := func(name string) string { b, _ := json.Marshal(filepath.Join(markers, name)); return string(b) }
	return map[string]string{
		"node_modules/typescript/package.json": `{"name": "typescript", "version": "5.9.3", "main": "./lib/typescript.js"}` + "\n",
		"node_modules/typescript/lib/tsserver.js": "// Hostile: the repository's own tsserver.\n" +
			"require('fs').writeFileSync(" + q("tsserver-ran") + ", 'the repository tsserver ran\\n');\n" +
			"process.exit(7);\n",
		"node_modules/typescript/lib/typescript.js": "require('fs').writeFileSync(" + q("typescript-ran") + ", 'ran\\n');\n",
		"node_modules/evil-plugin/package.json":     `{"name": "evil-plugin", "version": "1.0.0", "main": "index.js"}` + "\n",
		"node_modules/evil-plugin/index.js": "// Hostile: a tsserver plugin from the repository.\n" +
			"require('fs').writeFileSync(" + q("plugin-ran") + ", 'the repository plugin loaded\\n');\n" +
			"module.exports = function init() { return { create(info) { return info.languageService; } }; };\n",
	}
}

// TestTypeScriptTools: the tools typescript-language-server declares, end
// to end on shapes-ts, with a hostile node_modules/typescript and tsserver
// plugin committed in the repository that must never run.
func TestTypeScriptTools(t *testing.T) {
	t.Parallel()
	if typescript == "" {
		t.Skip("the reviewed TypeScript server is not installed (make deps installs it)")
	}
	markers := t.TempDir()
	files := testdataFiles(t, "shapes-ts")
	for k, v := range hostileFiles(markers) {
		files[k] = v
	}
	p := newProject(t, "toolsts", "shapes", files)

	prep := p.ok(t, "/prepare", map[string]any{"repo": p.repo})
	tools := prep.body["tools"].(map[string]any)
	// Keyed by the languageIds of the repository's files (src/*.ts, the
	// .tsx badge, the .js legacy file; the committed node_modules is not
	// the repository's), one server behind them.
	want(t, "languages", prep.body["languages"], []string{"typescript", "typescriptreact", "javascript"})
	// Nine of the ten code-intel-lsp.v1 tools (no type hierarchy), plus
	// type definition and completion; no declaration.
	for _, l := range []string{"typescript", "typescriptreact", "javascript"} {
		want(t, l+" tools", tools[l], []string{"hover", "definition", "type_definition", "implementation",
			"references", "document_symbols", "workspace_symbols", "diagnostics", "signature_help", "call_hierarchy", "completion"})
	}

	// First, before any document is open: the daemon opens an anchor file
	// so that the server has a project to search.
	t.Run("workspace symbols", func(t *testing.T) {
		got := named(t, p.ok(t, "/symbols", map[string]any{"repo": p.repo, "query": "Square"}), "symbols")
		if got["Square"] != (loc{Path: "src/square.ts", Line: p.lineOf(t, "src/square.ts", "export class Square")}) {
			t.Fatalf("workspace symbols for Square = %v", got)
		}
	})
	totalCall := p.at(t, "src/main.ts", "total(figures)", 0, 0)
	t.Run("hover", func(t *testing.T) {
		md := str(p.ok(t, "/hover", totalCall).body["hover"].(map[string]any)["markdown"])
		if !strings.Contains(md, "total(shapes: Shape[]): number") || !strings.Contains(md, "Sums the areas of shapes.") {
			t.Fatalf("hover = %q", md)
		}
	})
	t.Run("definition", func(t *testing.T) {
		got := locations(t, p.ok(t, "/locate", totalCall), "locations")
		want(t, "definition of total", got, []loc{{Path: "src/calc.ts", Line: p.lineOf(t, "src/calc.ts", "export function total")}})
	})
	t.Run("pinned library is external", func(t *testing.T) {
		got := locations(t, p.ok(t, "/locate", p.at(t, "src/main.ts", "toFixed", 0, 0)), "locations")
		if len(got) == 0 {
			t.Fatal("no definition for toFixed")
		}
		for _, l := range got {
			if !l.External || l.Module != "typescript@5.9.3" || !strings.HasPrefix(l.Path, "lib/lib.") || !strings.HasSuffix(l.Path, ".d.ts") {
				t.Fatalf("definition of toFixed = %v; want external typescript@5.9.3 lib/lib.*.d.ts", got)
			}
		}
	})
	t.Run("type", func(t *testing.T) {
		got := locations(t, p.ok(t, "/locate", with(p.at(t, "src/calc.ts", "s.area()", 0, 0), "relation", "type")), "locations")
		want(t, "type of s", got, []loc{{Path: "src/shape.ts", Line: p.lineOf(t, "src/shape.ts", "export interface Shape")}})
	})
	shapeDecl := p.at(t, "src/shape.ts", "Shape {", 0, 0)
	t.Run("implementation", func(t *testing.T) {
		got := locations(t, p.ok(t, "/locate", with(shapeDecl, "relation", "implementation")), "locations")
		want(t, "implementations of Shape", got, []loc{
			{Path: "src/circle.ts", Line: p.lineOf(t, "src/circle.ts", "export class Circle")},
			{Path: "src/square.ts", Line: p.lineOf(t, "src/square.ts", "export class Square")},
		})
	})
	t.Run("reference", func(t *testing.T) {
		refs := with(shapeDecl, "relation", "reference", "include_declaration", true)
		got := locations(t, p.ok(t, "/locate", refs), "locations")
		files := map[string]int{}
		for _, l := range got {
			files[l.Path]++
		}
		want(t, "references to Shape per file", files, map[string]int{"src/calc.ts": 3, "src/circle.ts": 2, "src/shape.ts": 1, "src/square.ts": 2})
		p.checkPagination(t, refs)
	})
	t.Run("not negotiated", func(t *testing.T) {
		p.refused(t, "/locate", with(totalCall, "relation", "declaration"), http.StatusUnprocessableEntity, "capability_unavailable")
		p.refused(t, "/types", with(shapeDecl, "direction", "subtypes"), http.StatusUnprocessableEntity, "capability_unavailable")
		p.refused(t, "/types", with(shapeDecl, "direction", "supertypes"), http.StatusUnprocessableEntity, "capability_unavailable")
	})
	t.Run("document symbols", func(t *testing.T) {
		got := named(t, p.ok(t, "/symbols", map[string]any{"repo": p.repo, "path": "src/calc.ts"}), "symbols")
		if got["total"].Path != "src/calc.ts" || got["total"].Line != p.lineOf(t, "src/calc.ts", "export function total") ||
			got["areaOf"].Line != p.lineOf(t, "src/calc.ts", "function areaOf") {
			t.Fatalf("symbols of calc.ts = %v", got)
		}
	})
	t.Run("diagnostics", func(t *testing.T) {
		a := p.ok(t, "/diagnostics", map[string]any{"repo": p.repo, "path": "src/broken.ts"})
		ds := a.body["diagnostics"].([]any)
		if len(ds) != 1 {
			t.Fatalf("diagnostics of broken.ts = %s; want one", a.raw)
		}
		d := ds[0].(map[string]any)
		if d["severity"] != "error" || str(d["message"]) != "Type 'string' is not assignable to type 'number'." ||
			startLine(d["range"]) != p.lineOf(t, "src/broken.ts", "export const seven") {
			t.Fatalf("diagnostic = %v", d)
		}
		start := time.Now()
		clean := p.ok(t, "/diagnostics", map[string]any{"repo": p.repo, "path": "src/calc.ts"})
		want(t, "diagnostics of the clean calc.ts", clean.body["diagnostics"], []any{})
		t.Logf("clean-file diagnostics answered in %v", time.Since(start))
	})
	// .tsx and .js files are served too, each opened with its extension's
	// languageId: the untyped legacy.js has no error only when opened as
	// javascript (opened as typescript, strict mode reports "Parameter 'x'
	// implicitly has an 'any' type" and "Cannot find name 'module'").
	t.Run("language per extension", func(t *testing.T) {
		for path, symbol := range map[string]string{"src/badge.tsx": "Badge", "src/legacy.js": "double"} {
			a := p.ok(t, "/diagnostics", map[string]any{"repo": p.repo, "path": path})
			for _, d := range a.body["diagnostics"].([]any) {
				if d.(map[string]any)["severity"] == "error" {
					t.Fatalf("%s has errors, so it was not opened by its extension's language: %s", path, a.raw)
				}
			}
			got := named(t, p.ok(t, "/symbols", map[string]any{"repo": p.repo, "path": path}), "symbols")
			if _, ok := got[symbol]; !ok {
				t.Fatalf("symbols of %s = %v; want %s", path, got, symbol)
			}
		}
	})
	t.Run("complete", func(t *testing.T) {
		got := labels(t, p.ok(t, "/complete", p.at(t, "src/calc.ts", "s.area()", 0, 2)))
		if !slices.Contains(got, "area") {
			t.Fatalf("completions after s. = %v; want area", got)
		}
	})
	t.Run("signature", func(t *testing.T) {
		a := p.ok(t, "/signature", p.at(t, "src/main.ts", "total(figures)", 0, len("total(")))
		sigs := a.body["signatures"].([]any)
		if len(sigs) != 1 || str(sigs[0].(map[string]any)["label"]) != "total(shapes: Shape[]): number" || a.body["active_parameter"] != float64(0) {
			t.Fatalf("signature = %s", a.raw)
		}
	})
	t.Run("calls", func(t *testing.T) {
		totalDecl := p.at(t, "src/calc.ts", "total(shapes", 0, 0)
		in := named(t, p.ok(t, "/calls", with(totalDecl, "direction", "incoming")), "calls")
		want(t, "callers of total", in, map[string]loc{"report": {Path: "src/main.ts", Line: p.lineOf(t, "src/main.ts", "export function report")}})
		out := named(t, p.ok(t, "/calls", with(totalDecl, "direction", "outgoing")), "calls")
		want(t, "callees of total", out, map[string]loc{"areaOf": {Path: "src/calc.ts", Line: p.lineOf(t, "src/calc.ts", "function areaOf")}})
	})

	// Neither the repository's TypeScript nor its plugin ever ran. (Under
	// a jail the markers might not be writable, but the hostile tsserver.js
	// also exits at once: every tool above answering is the same proof.)
	for _, m := range []string{"tsserver-ran", "typescript-ran", "plugin-ran"} {
		if _, err := os.Stat(filepath.Join(markers, m)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the repository's own code ran: %s exists (%v)", m, err)
		}
	}
	// The control: the same server without the pinned tsserver.path takes
	// the repository's node_modules/typescript, so the hostile module above
	// is a real test.
	t.Run("control: unpinned runs the repository's tsserver", func(t *testing.T) {
		controlUnpinned(t, files, filepath.Join(markers, "tsserver-ran"))
	})
}

// controlUnpinned runs typescript-language-server directly on a checkout,
// without initialization options, and waits for the hostile tsserver.js to
// leave its marker.
func controlUnpinned(t *testing.T, files map[string]string, marker string) {
	ts, err := devstack.FindTypeScript(typescript, "")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for p, content := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// TMPDIR: typescript-language-server makes its cancellation-pipe
	// directory there.
	env := []string{"PATH=" + filepath.Dir(ts.Node) + ":/usr/bin:/bin", "HOME=" + t.TempDir(), "TMPDIR=" + t.TempDir()}
	srv, err := lspdirect.Start(ctx, dir, env, ts.Node, ts.CLI, "--stdio")
	if err == nil {
		defer srv.Close()
	}
	for {
		if _, err := os.Stat(marker); err == nil {
			return
		}
		select {
		case <-ctx.Done():
			out, _ := exec.Command("ls", "-la", filepath.Dir(marker)).CombinedOutput()
			t.Fatalf("the unpinned server never ran the repository's tsserver.js (start: %v; markers: %s)", err, out)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
