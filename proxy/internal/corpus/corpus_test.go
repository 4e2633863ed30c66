package corpus

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/devstack"
)

// The make test slice of the corpus: a few fixed positions per kind of
// repository, through the same Run as make corpus (dev stack, daemon
// jailed, ground truth beside it). Each repository kind names the tools it
// asserts; the others are measured and logged.
var slice = []struct {
	repo   string
	tools  []string
	fixed  []Fixed
	extern bool // the ground truth's definition must be outside the repository
}{
	{repo: "uuid", tools: []string{"hover", "definition"}, fixed: []Fixed{
		{Path: "version4.go", Needle: "return Must(NewRandom())", Ident: "Must"},
		{Path: "version4.go", Needle: "return Must(NewRandom()).String()", Ident: "String"},
		{Path: "util.go", Needle: "io.ReadFull(rander, b)", Ident: "ReadFull"},
	}},
	{repo: "anyhow", tools: []string{"hover", "definition"}, extern: true, fixed: []Fixed{
		// Box::new: in std's alloc crate, through the patched sysroot
		// (rust-std@1.96.0), jailed as directly.
		{Path: "src/error.rs", Needle: "let inner: Box<ErrorImpl<E>> = Box::new(ErrorImpl {", Ident: "new"},
	}},
	{repo: "click", tools: []string{"hover", "definition", "references"}, extern: true, fixed: []Fixed{
		// A method of the project, and sys.exit: typeshed's stub, bundled
		// with basedpyright (external basedpyright@1.40.1).
		{Path: "src/click/core.py", Needle: "with self.make_context(prog_name, args, **extra) as ctx:", Ident: "make_context"},
		{Path: "src/click/core.py", Needle: "sys.exit(e.exit_code)", Ident: "exit"},
		{Path: "src/click/termui.py", Needle: "echo(None, err=err)", Ident: "echo"},
	}},
	{repo: "vscode-languageserver-node", tools: []string{"definition"}, extern: true, fixed: []Fixed{
		// process.pid: declared in @types/node, a dependency.
		{Path: "client/src/node/main.ts", Needle: "params.processId = process.pid", Ident: "pid"},
	}},
}

func TestSlice(t *testing.T) {
	gopls := findFile(os.Getenv("LSP_TEST_GOPLS"), "../../../.bin/gopls")
	if gopls == "" {
		t.Skip("no gopls: set LSP_TEST_GOPLS (make test installs the pinned one)")
	}
	shared, err := sharedCorpus()
	if err != nil {
		t.Fatal(err)
	}
	// Postgres runs as its own user: its directory must be searchable,
	// which t.TempDir's is not.
	tmp, err := os.MkdirTemp("", "lsp-corpus-test-")
	if err != nil {
		t.Fatal(err)
	}
	defer removeTree(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	daemon := filepath.Join(tmp, "lsp-daemon")
	build := exec.Command("go", "build", "-o", daemon, "github.com/hanzoai/lsp/daemon/cmd/lsp-daemon")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build lsp-daemon: %v\n%s", err, out)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	// The servers make deps installed beside gopls, from production's
	// template (those not installed are left out).
	sf := testServerFile(t, filepath.Dir(gopls), tmp)
	o := Options{Dir: filepath.Join(tmp, "run"), CacheDir: filepath.Join(cache, "lsp-corpus"), CorpusDir: shared,
		DaemonBin: daemon, Servers: sf.Path, Fixed: map[string][]Fixed{}, ColdWait: 45 * time.Second,
		Log: func(f string, a ...any) { t.Logf(f, a...) }}
	sv := servers{file: sf}
	for _, s := range slice {
		r, ok := Lookup(s.repo)
		if !ok {
			t.Fatalf("%s: not in the corpus", s.repo)
		}
		if !sv.has(r.Language) {
			t.Logf("%s: no %s server installed beside %s (make deps): skipped", s.repo, r.Language, gopls)
			continue
		}
		o.Repos = append(o.Repos, r)
		o.Fixed[s.repo] = s.fixed
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	results, err := Run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	PrintTable(&table, results)
	t.Logf("\n%s", table.String())
	for _, res := range results {
		var want []string
		var extern bool
		for _, s := range slice {
			if s.repo == res.Repo {
				want, extern = s.tools, s.extern
			}
		}
		if res.Err != "" {
			t.Errorf("%s: %s", res.Repo, res.Err)
			continue
		}
		if res.Positions != len(o.Fixed[res.Repo]) {
			t.Errorf("%s: %d positions asked, want %d", res.Repo, res.Positions, len(o.Fixed[res.Repo]))
		}
		// The prepare's split: its POST /prepare is a part of it.
		if res.PrepareCall <= 0 || res.PrepareCall > res.Prepare {
			t.Errorf("%s: the prepare call took %.3fs of a prepare of %.3fs", res.Repo, res.PrepareCall, res.Prepare)
		}
		if extern && res.Externals.Total == 0 {
			t.Errorf("%s: the ground truth's definition is not outside the repository: the fixed position no longer tests a dependency", res.Repo)
		}
		for _, d := range res.Disagreements {
			for _, tool := range want {
				if d.Tool == tool {
					t.Errorf("%s %s at %s:%d:%d (%s):\n  ground truth: %s\n  service:      %s", res.Repo, tool, d.Path,
						d.Position.Line, d.Position.Character, d.Position.Ident, show(d.Truth), show(d.Service))
				}
			}
		}
	}
}

func show(a Answer) string {
	s := strings.Join(a.Lines, " | ")
	if s == "" {
		s = "(empty)"
	}
	if a.Err != "" {
		s += " error: " + a.Err
	}
	if a.State != "" {
		s += fmt.Sprintf(" [state %s, warnings %q]", a.State, a.Warnings)
	}
	return s
}

func findFile(paths ...string) string {
	for _, p := range paths {
		if p == "" {
			continue
		}
		if abs, err := filepath.Abs(p); err == nil {
			if _, err := os.Stat(abs); err == nil {
				return abs
			}
		}
	}
	return ""
}

// sharedCorpus is ../shared/corpus beside the checkout (CI lays shared/
// beside its clone).
func sharedCorpus() (string, error) {
	p, err := filepath.Abs("../../../../shared/corpus")
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("the corpus snapshots are not beside the checkout: %w", err)
	}
	return p, nil
}

func TestCandidates(t *testing.T) {
	src := "package x\n\n// Foo( in a comment\nfunc f() {\n\ts := \"Bar(\"\n\tfmt.Println(s, héllo.World)\n}\n"
	var got []string
	for _, p := range candidates("x.go", []byte(src)) {
		got = append(got, fmt.Sprintf("%s@%d:%d", p.Ident, p.Line, p.Character))
	}
	// Println is a selector and a call; World's column counts é as one
	// UTF-16 unit; nothing in the comment or the string; f is declared.
	want := "Println@5:6 World@5:23"
	if strings.Join(got, " ") != want {
		t.Fatalf("candidates = %q; want %q", strings.Join(got, " "), want)
	}
}

func TestNormalize(t *testing.T) {
	rt := roots{checkout: "/c", modcache: "/m", goroot: "/g"}
	rg := lspRange{}
	for _, tc := range []struct{ uri, want string }{
		{"file:///c/a/b.go", "a/b.go 0:0-0:0"},
		{"file:///m/github.com/!burnt!sushi/toml@v1.2.0/x.go", "ext github.com/BurntSushi/toml@v1.2.0 x.go 0:0-0:0"},
		{"file:///g/src/fmt/print.go", "ext std fmt/print.go 0:0-0:0"},
		{"file:///elsewhere/x.go", "outside /elsewhere/x.go 0:0-0:0"},
	} {
		if got := rt.truthLocation(tc.uri, rg); got != tc.want {
			t.Errorf("truthLocation(%s) = %q; want %q", tc.uri, got, tc.want)
		}
	}
	if got := (serviceLocation{Path: "src/fmt/print.go", External: true, Module: "std@go1.26"}).key(); got != "ext std fmt/print.go 0:0-0:0" {
		t.Errorf("service std location = %q", got)
	}
	// A doc link into GOROOT (pkcs11's const_generate.go, outside every
	// package): a file:// URL from the direct server, std@goX/… from the
	// service.
	truthMD := "has mode \\[O\\_RDONLY].\n\n\\[O\\_RDONLY]: file:///usr/local/go/src/os/file.go#81,2 \\*PathError]: file:///usr/local/go/src/os/error.go#46,6"
	serviceMD := "has mode \\[O\\_RDONLY].\n\n\\[O\\_RDONLY]: std@go1.26.8/os/file.go#81,2 \\*PathError]: std@go1.26.8/os/error.go#46,6"
	if a, b := hoverLines(truthMD, "/ck", "/usr/local/go"), hoverLines(serviceMD, ""); !slices.Equal(a, b) || !strings.Contains(a[0], "std/os/file.go") {
		t.Errorf("a GOROOT doc link: truth %q, service %q", a, b)
	}
	md := "```go\nfunc F()\n```\n\n[`x.F` on pkg.go.dev](https://pkg.go.dev/x#F)"
	if a, b := hoverLines(md, ""), hoverLines(sanitizeMarkdown(md), ""); len(a) != 1 || a[0] != b[0] || strings.Contains(a[0], "https") {
		t.Errorf("hover sanitising is not idempotent or keeps a link: %q vs %q", a, b)
	}
}

// TestPackagePaths: a diagnostic naming a file in an npm package says the
// same on both sides once the package is named as the package, not by
// where either side installed it.
func TestPackagePaths(t *testing.T) {
	for in, want := range map[string]string{
		"'node_modules/memoizee/index.js' implicitly has an 'any' type": "'memoizee/index.js' implicitly has an 'any' type",
		"'memoizee@0.4.15/index.js' implicitly has an 'any' type":       "'memoizee/index.js' implicitly has an 'any' type",
		"'node_modules/a/node_modules/@types/node/fs.d.ts'":             "'@types/node/fs.d.ts'",
		"'@types/node@20.11.0/fs.d.ts'":                                 "'@types/node/fs.d.ts'",
		"Try `npm i --save-dev @types/memoizee` if it exists":           "Try `npm i --save-dev @types/memoizee` if it exists",
		"declare module 'lodash/union';":                                "declare module 'lodash/union';",
	} {
		if got := packagePaths(in); got != want {
			t.Errorf("packagePaths(%q) = %q, want %q", in, got, want)
		}
	}
}

// testServerFile renders deploy/images/servers.json.in into dir for
// devstack.RenderForTests's install (bin unless make test names one).
func testServerFile(t *testing.T, bin, dir string) *devstack.ServerFile {
	t.Helper()
	sf, err := devstack.WriteServerFile("../../../deploy/images/servers.json.in", filepath.Join(dir, "servers.json"),
		devstack.RenderForTests(bin))
	if err != nil {
		t.Fatal(err)
	}
	return sf
}
