//go:build linux

package jail

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hanzoai/lsp/daemon/internal/deps"
	"github.com/hanzoai/lsp/daemon/internal/deps/depstest"
	"github.com/hanzoai/lsp/daemon/internal/lsp"
	"github.com/hanzoai/lsp/daemon/internal/runtime"
	"github.com/hanzoai/lsp/daemon/internal/servertest"
	"github.com/hanzoai/lsp/daemon/internal/uri"
)

// The dependency phase's output, served by the real TypeScript server in
// a real jail: packages installed in the tree's node_modules, and npm
// workspace links (relative symbolic links from node_modules into the
// tree), resolve through the jail's read-only bind of the tree.

// tsForJail is node and the reviewed TypeScript server (servertest).
func tsForJail(t *testing.T) (node, ts string) { return servertest.TypeScript(t) }

// treeWorkspace writes files as a published tree (<c>/tree, read-only)
// with its home, in the store's layout, so that the phase installs into
// its node_modules.
func treeWorkspace(t *testing.T, files map[string]string) runtime.Workspace {
	t.Helper()
	l := newLayout(t)
	t.Cleanup(func() { _ = removeTree(l.root) })
	c := filepath.Join(l.root, "trees", "tenant", "repo", "c0")
	ws := runtime.Workspace{Root: filepath.Join(c, "tree"), Home: filepath.Join(l.root, "homes", "tenant", "repo")}
	writeWorkspace(t, ws, files)
	return ws
}

// fetchDeps runs the real dependency phase against registry.
func fetchDeps(t *testing.T, ws runtime.Workspace, registry string) {
	t.Helper()
	reg, _ := url.Parse(registry)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	f := deps.New(deps.Config{NPMRegistry: reg, MaxModules: deps.DefaultMaxModules, MaxBytes: deps.DefaultMaxBytes, MaxZip: deps.DefaultMaxZip}, log)
	w := f.Fetch(context.Background(), ws)
	// The phase's keep-alive connections end here, not after goleak looks.
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	if len(w) != 0 {
		t.Fatalf("dependency phase warnings %q", w)
	}
}

type needle struct {
	file, text string
	want       uri.Location
}

// tsServer starts the reviewed TypeScript server (servertest) on ws with
// sp, as the daemon's entry starts it, and returns it with its client.
func tsServer(t *testing.T, sp runtime.Spawner, ws runtime.Workspace) (*runtime.Server, *lsp.Client) {
	t.Helper()
	node, ts := tsForJail(t)
	initOpts, _ := json.Marshal(map[string]any{
		"tsserver":                          map[string]any{"path": filepath.Join(ts, "node_modules/typescript/lib/tsserver.js"), "useSyntaxServer": "never"},
		"disableAutomaticTypingAcquisition": true,
	})
	srv := start(t, sp, runtime.Spec{
		ID: "typescript", Language: "typescript", Extensions: []string{".ts", ".tsx"},
		Executable: node, Args: []string{filepath.Join(ts, "node_modules/typescript-language-server/lib/cli.mjs"), "--stdio"},
		InitializationOptions: initOpts,
	}, ws)
	cl, _, err := srv.Client(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return srv, cl
}

// jailedDefinitions starts the real TypeScript server in a real jail on
// ws and checks where each needle's definition lands.
func jailedDefinitions(t *testing.T, ws runtime.Workspace, needles []needle) {
	t.Helper()
	srv, cl := tsServer(t, newSpawner(t, Options{}), ws)
	ctx := context.Background()
	pol := uri.Policy{Root: ws.Root, Externals: deps.NPMExternals(ws)}
	for _, n := range needles {
		b, err := os.ReadFile(filepath.Join(ws.Root, n.file))
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		u := srv.URI(n.file)
		lang := "typescript"
		if strings.HasSuffix(n.file, ".tsx") {
			lang = "typescriptreact"
		}
		if err := cl.DidOpen(ctx, u, lang, text); err != nil {
			t.Fatal(err)
		}
		i := strings.Index(text, n.text)
		if i < 0 {
			t.Fatalf("%q not in %s", n.text, n.file)
		}
		pos := lsp.Position{Line: uint32(strings.Count(text[:i], "\n")), Character: uint32(i - (strings.LastIndex(text[:i], "\n") + 1))}
		locs, err := cl.Definition(ctx, u, pos)
		if err != nil {
			t.Fatalf("%s: definition of %s: %v", n.file, n.text, err)
		}
		if len(locs.Items) == 0 {
			t.Fatalf("%s: definition of %s: none (the jail does not show it)", n.file, n.text)
		}
		for _, l := range locs.Items {
			if got, err := pol.Map(string(l.URI)); err != nil || got != n.want {
				t.Fatalf("%s: definition of %s at %s maps to %+v, %v; want %+v", n.file, n.text, l.URI, got, err, n.want)
			}
		}
	}
}

// TestJailedWorkspaceLink: an npm workspace package, linked by the phase
// from node_modules into the tree, resolves in the jail to its files in
// the tree.
func TestJailedWorkspaceLink(t *testing.T) {
	t.Parallel()
	ws := treeWorkspace(t, map[string]string{
		"package.json":              `{"name":"mono","private":true,"workspaces":["packages/*"]}`,
		"package-lock.json":         `{"name":"mono","lockfileVersion":3,"packages":{"":{"name":"mono","workspaces":["packages/*"]},"node_modules/@ws/lib":{"resolved":"packages/lib","link":true},"packages/lib":{"name":"@ws/lib","version":"1.0.0"}}}`,
		"tsconfig.json":             `{"compilerOptions":{"module":"esnext","moduleResolution":"bundler","strict":true,"noEmit":true},"include":["src","packages"]}`,
		"packages/lib/package.json": `{"name":"@ws/lib","version":"1.0.0","types":"index.ts"}`,
		"packages/lib/index.ts":     "/** Adds. */\nexport function add(a: number, b: number): number {\n  return a + b;\n}\n",
		"src/main.ts":               "import { add } from \"@ws/lib\";\n\nexport const x = add(1, 2);\n",
	})
	fetchDeps(t, ws, "https://npm.example/registry") // links only: no request
	if got, err := os.Readlink(filepath.Join(runtime.NodeModules(ws), "@ws", "lib")); err != nil || got != "../../packages/lib" {
		t.Fatalf("link %q, %v", got, err)
	}
	jailedDefinitions(t, ws, []needle{{"src/main.ts", "add(1, 2)", uri.Location{Path: "packages/lib/index.ts"}}})
}

// TestJailedTypeScriptZustand: zustand's real snapshot, its pnpm-lock.yaml
// (pruned to @types/react) installed from the real registry by the phase:
// in the jail, a definition into React's types is external
// "@types/react@19.2.18" and the tests' import of zustand lands in the
// tree.
func TestJailedTypeScriptZustand(t *testing.T) {
	t.Parallel()
	tsForJail(t)
	files, err := depstest.CorpusFiles("pmndrs__zustand", func(n string) bool {
		return strings.HasPrefix(n, "src/") || strings.HasPrefix(n, "tests/") ||
			n == "package.json" || n == "tsconfig.json" || n == "pnpm-lock.yaml" || n == "pnpm-workspace.yaml" || n == "package-lock.json"
	})
	if errors.Is(err, os.ErrNotExist) {
		t.Skip("the corpus is not beside the clone")
	}
	if err != nil {
		t.Fatal(err)
	}
	if files["pnpm-lock.yaml"], err = depstest.PrunePNPM(files["pnpm-lock.yaml"], "@types/react"); err != nil {
		t.Fatal(err)
	}
	ws := treeWorkspace(t, files)
	fetchDeps(t, ws, "https://registry.npmjs.org")
	jailedDefinitions(t, ws, []needle{
		{"src/react.ts", "useDebugValue(slice)", uri.Location{Path: "index.d.ts", External: true, Module: "@types/react@19.2.18"}},
		{"tests/basic.test.tsx", "create } from 'zustand'", uri.Location{Path: "src/react.ts"}},
	})
}

// TestJailedTsconfigNamesNodeModules: a tsconfig that names its packages
// by path — "extends" a base in ./node_modules, typeRoots
// ./node_modules/@types, as many repositories' do — answers jailed as the
// same TypeScript server answers unjailed on an ordinary checkout where
// `npm ci` ran (ground truth, same run): mocha's describe is defined in
// @types/mocha, and the strictest base's strict mode reports the implicit
// any. With the packages beside the tree instead of in it, neither path
// resolved (TS2593: "Cannot find name 'describe'", and no TS7006).
func TestJailedTsconfigNamesNodeModules(t *testing.T) {
	t.Parallel()
	tsForJail(t)
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skip("npm is not installed")
	}
	files := map[string]string{
		"package.json": `{"name":"app","version":"1.0.0","private":true,"devDependencies":{"@tsconfig/strictest":"2.0.8","@types/mocha":"10.0.10"}}`,
		"package-lock.json": `{"name":"app","version":"1.0.0","lockfileVersion":3,"requires":true,"packages":{` +
			`"":{"name":"app","version":"1.0.0","devDependencies":{"@tsconfig/strictest":"2.0.8","@types/mocha":"10.0.10"}},` +
			`"node_modules/@tsconfig/strictest":{"version":"2.0.8","resolved":"https://registry.npmjs.org/@tsconfig/strictest/-/strictest-2.0.8.tgz","integrity":"sha512-XnQ7vNz5HRN0r88GYf1J9JJjqtZPiHt2woGJOo2dYqyHGGcd6OLGqSlBB6p1j9mpzja6Oe5BoPqWmeDx6X9rLw==","dev":true,"license":"MIT"},` +
			`"node_modules/@types/mocha":{"version":"10.0.10","resolved":"https://registry.npmjs.org/@types/mocha/-/mocha-10.0.10.tgz","integrity":"sha512-xPyYSz1cMPnJQhl0CLMH68j3gprKZaTjG3s5Vi+fDgx+uhG9NOXwbVt52eFS8ECyXhyKcjDLCBEqBExKuiZb7Q==","dev":true,"license":"MIT"}}}`,
		"tsconfig.json":    `{"extends":"./node_modules/@tsconfig/strictest/tsconfig.json","compilerOptions":{"typeRoots":["./node_modules/@types"],"types":["mocha"],"noEmit":true},"include":["test"]}`,
		"test/add.test.ts": "describe(\"add\", () => {\n  it(\"adds\", () => {});\n});\n\nexport function twice(x) {\n  return x + x;\n}\n",
	}
	ws := treeWorkspace(t, files)
	fetchDeps(t, ws, "https://registry.npmjs.org")

	// The ordinary checkout: the same files, `npm ci` as a developer runs it.
	checkout := runtime.Workspace{Root: filepath.Join(t.TempDir(), "app"), Home: t.TempDir()}
	for name, body := range files {
		p := filepath.Join(checkout.Root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--cache", filepath.Join(checkout.Home, "npm-cache"))
	cmd.Dir = checkout.Root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci: %v\n%s", err, out)
	}

	answers := func(sp runtime.Spawner, ws runtime.Workspace) (def string, diags []string) {
		srv, cl := tsServer(t, sp, ws)
		ctx := context.Background()
		u := srv.URI("test/add.test.ts")
		if err := cl.DidOpen(ctx, u, "typescript", files["test/add.test.ts"]); err != nil {
			t.Fatal(err)
		}
		locs, err := cl.Definition(ctx, u, lsp.Position{Line: 0, Character: 2})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range locs.Items {
			p, err := url.PathUnescape(strings.TrimPrefix(string(l.URI), "file://"+ws.Root+"/"))
			if err != nil {
				t.Fatal(err)
			}
			def += fmt.Sprintf("%s:%d ", p, l.Range.Start.Line)
		}
		d, err := cl.Diagnostics(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range d.Items {
			diags = append(diags, fmt.Sprintf("%d:%d TS%s %s", x.Range.Start.Line, x.Range.Start.Character, x.Code, x.Message))
		}
		slices.Sort(diags)
		return def, diags
	}
	gotDef, gotDiags := answers(newSpawner(t, Options{}), ws)
	wantDef, wantDiags := answers(runtime.Unjailed(testLogger(t)), checkout)
	if gotDef != wantDef || !slices.Equal(gotDiags, wantDiags) {
		t.Fatalf("jailed: definition %q, diagnostics %q\non a checkout: definition %q, diagnostics %q", gotDef, gotDiags, wantDef, wantDiags)
	}
	if !strings.HasPrefix(wantDef, "node_modules/@types/mocha/") || len(wantDiags) != 1 || !strings.Contains(wantDiags[0], "TS7006") {
		t.Fatalf("the checkout's own answers are not what the test is about: definition %q, diagnostics %q", wantDef, wantDiags)
	}
}
