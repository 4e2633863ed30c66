package corpus

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/hanzoai/lsp/proxy/internal/devstack"
)

// TestCompareCapped: a references answer the daemon cut at its bound and
// marked partial, every item among the ground truth's, is counted as
// capped — neither agreement nor disagreement. Cut without saying so, or
// with an item the truth lacks, it is a disagreement.
func TestCompareCapped(t *testing.T) {
	want := Answer{Lines: []string{"a.go:1:1", "a.go:2:1", "b.go:3:1", "c.go:4:1"}}
	cut := []string{"a.go:1:1", "b.go:3:1"}
	for _, tc := range []struct {
		name                    string
		got                     Answer
		agree, capped, disagree int
	}{
		{"capped and said so", Answer{Lines: cut, State: "partial", Warnings: []string{capWarning}}, 0, 1, 0},
		{"cut silently", Answer{Lines: cut, State: "current"}, 0, 0, 1},
		{"partial for another reason", Answer{Lines: cut, State: "partial", Warnings: []string{"gopls could not load the project: x"}}, 0, 0, 1},
		{"an item the truth lacks", Answer{Lines: []string{"a.go:1:1", "z.go:9:9"}, State: "partial", Warnings: []string{capWarning}}, 0, 0, 1},
		{"the same", Answer{Lines: want.Lines, State: "current"}, 1, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := &truth{positions: []Position{{Path: "a.go"}}, pos: map[string][]Answer{}, file: map[string][]Answer{}}
			pos := map[string][]Answer{}
			for _, tool := range Tools[:3] {
				tr.pos[tool] = []Answer{{}}
				pos[tool] = []Answer{{}}
			}
			tr.pos["references"], pos["references"] = []Answer{want}, []Answer{tc.got}
			res := &Result{Tools: map[string]Stat{}}
			compare(res, tr, pos, map[string][]Answer{})
			st := res.Tools["references"]
			if st.Agree != tc.agree || st.Capped != tc.capped || len(res.Disagreements) != tc.disagree || len(res.Capped) != tc.capped {
				t.Fatalf("stat %+v, %d disagreement(s), %d capped listed; want agree %d capped %d disagree %d", st, len(res.Disagreements), len(res.Capped), tc.agree, tc.capped, tc.disagree)
			}
			if tc.capped > 0 && st.Pct() != 100 {
				t.Fatalf("pct %v: the one position is capped, so nothing is left to disagree", st.Pct())
			}
		})
	}
}

// gopls writes a hover's doc-link definitions from a map: the same
// server's two answers differ only there, and compare as equal.
func TestHoverDocLinksInAnyOrder(t *testing.T) {
	head := "```go\nfunc os.Open(name string) (*os.File, error)\n```\n\n---\n\nOpen opens the named file.\n\n"
	a := hoverLines(head+`\[O\_RDONLY]: std/os/file.go#81,2 \*PathError]: std/os/error.go#46,6`, "")
	b := hoverLines(head+`\*PathError]: std/os/error.go#46,6 \[O\_RDONLY]: std/os/file.go#81,2`, "")
	if !(Answer{Lines: a}).equal(Answer{Lines: b}) {
		t.Fatalf("the same links in another order differ:\n%q\n%q", a, b)
	}
	c := hoverLines(head+`\[O\_RDONLY]: std/os/file.go#82,2 \*PathError]: std/os/error.go#46,6`, "")
	if (Answer{Lines: a}).equal(Answer{Lines: c}) {
		t.Fatalf("links to other lines compare equal:\n%q\n%q", a, c)
	}
}

// tsserver prints a union's members in the order the checker created
// them, which differs between runs of the same server: the same union in
// another order compares equal, another union does not.
func TestHoverUnionsInAnyOrder(t *testing.T) {
	hover := func(u string) Answer {
		return Answer{Lines: hoverLines("\n```typescript\ntype MutatingArrayMethod = "+u+"\n```\nMethods that modify the array.", "")}
	}
	a := hover(`"push" | "pop" | "shift" | "unshift" | "splice" | "reverse" | "sort"`)
	if b := hover(`"pop" | "push" | "reverse" | "shift" | "sort" | "splice" | "unshift"`); !a.equal(b) {
		t.Fatalf("the same union in another order differs:\n%q\n%q", a.Lines, b.Lines)
	}
	if c := hover(`"pop" | "push" | "reverse" | "shift" | "sort" | "splice"`); a.equal(c) {
		t.Fatalf("a union with a member fewer compares equal:\n%q\n%q", a.Lines, c.Lines)
	}
}

// A direct server's hover names a header under an external root by its
// host path; the service by the root's module. They compare equal.
func TestHoverExternalRootNamed(t *testing.T) {
	rt := roots{ext: []devstack.ExternalRoot{{Dir: "/usr/lib/llvm-19/lib/clang/19/include", Module: "clang-headers@19.1.7"}}}
	truth := hoverLines(rt.externalNames("### `FuzzedDataProvider.h`\n\n---\n```\n/usr/lib/llvm-19/lib/clang/19/include/fuzzer/FuzzedDataProvider.h\n```"), "/ck")
	service := hoverLines("### `FuzzedDataProvider.h`\n\n---\n```\nclang-headers@19.1.7/fuzzer/FuzzedDataProvider.h\n```", "")
	if !(Answer{Lines: truth}).equal(Answer{Lines: service}) {
		t.Fatalf("the same header differs:\n%q\n%q", truth, service)
	}
}

// TypeScript's once-per-file errors land on the first node the checker
// visited: the same error elsewhere in the file compares equal, another
// error at the same place does not.
func TestFirstUseDiagnosticAnywhereInTheFile(t *testing.T) {
	var a, b lspRange
	a.Start.Line, a.End.Line, b.Start.Line, b.End.Line = 6, 56, 13, 13
	msg := "This JSX tag requires the module path 'react/jsx-runtime' to exist, but none could be found."
	if diagLine(a, "error", "2875", "typescript", msg) != diagLine(b, "error", "2875", "typescript", msg) {
		t.Fatal("the once-per-file error at another node differs")
	}
	if diagLine(a, "error", "2322", "typescript", "Type 'number' is not assignable to type 'string'.") == diagLine(b, "error", "2322", "typescript", "Type 'number' is not assignable to type 'string'.") {
		t.Fatal("an ordinary error at another place compares equal")
	}
}

// A clangd macro expansion laid out for paths of different lengths (the
// ground truth's checkout, the daemon's tree) compares equal once the
// path is repo-relative; a different token or path does not.
func TestExpansionLayout(t *testing.T) {
	head := "### macro `assert`\n\n---\n```cpp\n#define assert(expr) x\n\n// Expands to\n"
	truth := hoverLines(head+"__assert_fail(\"b\",\n              \"/ck/src/compile.c\", 187,\n              __PRETTY_FUNCTION__);\n```", "/ck")
	service := hoverLines(head+"__assert_fail(\n    \"b\",\n    \"src/compile.c\",\n    187, __PRETTY_FUNCTION__);\n```", "")
	if !slices.Equal(truth, service) {
		t.Fatalf("layouts differ:\n%q\n%q", truth, service)
	}
	for _, other := range []string{
		"__assert_fail(\n    \"b\",\n    \"src/other.c\",\n    187, __PRETTY_FUNCTION__);\n```",
		"__assert_fail(\n    \"b\",\n    \"$LSP_DAEMON_ROOT/trees/\"\n    \"t/tree/src/compile.c\",\n    187, __PRETTY_FUNCTION__);\n```",
		"__assert_fail(\n    \"b\",\n    \"src/compile.c\",\n    188, __PRETTY_FUNCTION__);\n```",
	} {
		if slices.Equal(truth, hoverLines(head+other, "")) {
			t.Errorf("equal to %q", other)
		}
	}
}

// TestRedraw: a disagreement whose service answer a redraw of the
// ground truth gives, or whose truth a redraw of the service gives, is
// settled as agreement and counted as a rerun; one no redraw reconciles,
// or a position a redraw did not ask, stays a disagreement.
func TestRedraw(t *testing.T) {
	p1 := Position{Path: "src/builtin.c", Line: 496, Character: 38, Ident: "jv_copy"}
	p2 := Position{Path: "src/builtin.c", Line: 500, Character: 3, Ident: "jv_free"}
	p3 := Position{Path: "src/jv.c", Line: 7, Character: 1, Ident: "jv"}
	p4 := Position{Path: "src/jv.c", Line: 9, Character: 1, Ident: "jv_kind"}
	refs := []string{"a.c:1:1", "b.c:2:2"}
	first := &truth{positions: []Position{p1, p2, p3, p4}, chosen: []string{"src/builtin.c", "src/jv.c"}}
	res := &Result{
		Repo:         "jq",
		Tools:        map[string]Stat{"hover": {Agree: 39, Total: 42}, "references": {Agree: 41, Total: 42}, "symbols": {Agree: 8, Total: 9}},
		EmptyCurrent: 1,
		Disagreements: []Disagreement{
			{Tool: "hover", Position: &p1, Path: p1.Path, Truth: Answer{Lines: []string{"function jv_copy", "Memory management"}}, Service: Answer{Lines: []string{"function jv_copy"}, State: "partial"}},
			{Tool: "references", Position: &p2, Path: p2.Path, Truth: Answer{Lines: refs}, Service: Answer{Lines: refs[:1], State: "partial"}},
			{Tool: "hover", Position: &p3, Path: p3.Path, Truth: Answer{Lines: []string{"x"}}, Service: Answer{State: "current"}},
			{Tool: "hover", Position: &p4, Path: p4.Path, Truth: Answer{Lines: []string{"enum jv_kind"}}, Service: Answer{Lines: []string{"enum"}, State: "partial"}},
			{Tool: "symbols", Path: "src/jv.c", Truth: Answer{Lines: []string{"jv_copy", "jv_free"}}, Service: Answer{State: "current"}},
		},
	}
	// The ground truth redrawn: p1's bare hover, no symbols in jv.c, p4's
	// hover "enum jv_kind (other)"; p3 is not among its positions.
	truthAgain := func() (*truth, error) {
		return &truth{
			positions: []Position{p1, p2, p4},
			chosen:    []string{"src/builtin.c", "src/jv.c"},
			pos: map[string][]Answer{
				"hover":      {{Lines: []string{"function jv_copy"}}, {}, {Lines: []string{"enum jv_kind (other)"}}},
				"references": {{}, {Lines: refs}, {}},
			},
			file: map[string][]Answer{"symbols": {{Lines: []string{"x"}}, {}}},
		}, nil
	}
	// The service redrawn, on the first truth's positions: p2's references
	// whole, p4's hover as the truth's redraw gave it.
	serviceAgain := func() (pos, file map[string][]Answer, err error) {
		return map[string][]Answer{
			"hover":      {{}, {}, {}, {Lines: []string{"enum jv_kind (other)"}}},
			"references": {{}, {Lines: refs}, {}, {}},
		}, map[string][]Answer{}, nil
	}
	redraw(context.Background(), res, Lang{Reruns: 1}, truthAgain, serviceAgain, first, t.Logf)
	var left []string
	for _, d := range res.Disagreements {
		left = append(left, d.Tool+" "+d.Path)
	}
	if want := []string{"hover src/jv.c"}; !slices.Equal(left, want) || res.Disagreements[0].Position.Ident != "jv" {
		t.Fatalf("left %q, want only p3's hover", left)
	}
	if h := res.Tools["hover"]; h.Agree != 41 || h.Rerun != 2 {
		t.Fatalf("hover %+v, want agree 41 with 2 reruns (p1 by the truth's redraw, p4 by the service's)", h)
	}
	if s := res.Tools["symbols"]; s.Agree != 9 || s.Rerun != 1 || s.Pct() != 100 {
		t.Fatalf("symbols %+v: the truth's redraw had no symbols either", s)
	}
	if r := res.Tools["references"]; r.Agree != 42 || r.Rerun != 1 {
		t.Fatalf("references %+v: the service's redraw gave the truth's", r)
	}
	if res.EmptyCurrent != 0 || len(res.Reruns) != 4 {
		t.Fatalf("empty current %d, %d rerun(s) listed; want 0 and 4", res.EmptyCurrent, len(res.Reruns))
	}
}

// TestRemoveGlobs: the redraws' index removal takes what the globs match
// beneath a base that is itself a glob, and nothing else.
func TestRemoveGlobs(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"homes/t1/jq/clangd/a/.cache/clangd/index", "homes/t1/jq/clangd/a/keep", "homes/t2/fmt/clangd/b/.cache/clangd"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := removeGlobs(filepath.Join(root, "homes", "*", "jq"), []string{"clangd/*/.cache/clangd"}); err != nil {
		t.Fatal(err)
	}
	for d, want := range map[string]bool{"homes/t1/jq/clangd/a/.cache/clangd": false, "homes/t1/jq/clangd/a/keep": true, "homes/t2/fmt/clangd/b/.cache/clangd": true} {
		if _, err := os.Stat(filepath.Join(root, d)); (err == nil) != want {
			t.Errorf("%s: exists %v, want %v", d, err == nil, want)
		}
	}
}
