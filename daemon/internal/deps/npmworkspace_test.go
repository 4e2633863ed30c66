package deps

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
	"github.com/hanzoai/lsp/daemon/internal/uri"
)

// TestInstallNPMWorkspaces: an npm workspace lockfile installs its
// registry packages, links each workspace package to its directory in the
// tree by a relative link, hoists a workspace's own nested packages where
// the top is free and warns where it is not, and refuses links to
// directories that are missing or reached through a link.
func TestInstallNPMWorkspaces(t *testing.T) {
	r := newRegistry(t)
	pkg := func(name, version string) map[string]any {
		return r.add(name, version, tgz(t, tarEntry{name: "package/package.json", body: `{"name":"` + name + `","version":"` + version + `"}`}))
	}
	lf := lock(map[string]any{
		"":                                   map[string]any{"name": "mono", "workspaces": []string{"packages/*"}},
		"node_modules/left-pad":              pkg("left-pad", "1.3.0"),
		"node_modules/foo":                   map[string]any{"resolved": "packages/foo", "link": true},
		"node_modules/@s/bar":                map[string]any{"resolved": "packages/bar", "link": true},
		"node_modules/missing":               map[string]any{"resolved": "packages/missing", "link": true},
		"node_modules/sneaky":                map[string]any{"resolved": "packages/sneaky", "link": true},
		"packages/foo":                       map[string]any{"name": "foo", "version": "0.0.1"},
		"packages/foo/node_modules/only-foo": pkg("only-foo", "1.0.0"),
		"packages/foo/node_modules/only-foo/node_modules/deep": pkg("deep", "1.0.0"),
		"packages/foo/node_modules/left-pad":                   pkg("left-pad", "1.0.0"),
		"packages/bar":                                         map[string]any{"name": "@s/bar", "version": "0.0.1"},
		"packages/missing":                                     map[string]any{"name": "missing"},
		"packages/sneaky":                                      map[string]any{"name": "sneaky"},
	})
	ws := repo(t, map[string]string{
		"package-lock.json":         lf,
		"package.json":              `{"name":"mono","workspaces":["packages/*"]}`,
		"packages/foo/package.json": `{"name":"foo"}`,
		"packages/foo/index.ts":     "export const foo = 1;\n",
		"packages/bar/package.json": `{"name":"@s/bar"}`,
		"elsewhere/sneaky/index.ts": "export {};\n",
	})
	if err := os.Symlink("../elsewhere/sneaky", filepath.Join(ws.Root, "packages/sneaky")); err != nil {
		t.Fatal(err)
	}
	w := fetcher(Config{NPMRegistry: r.url}).Fetch(context.Background(), ws)
	all := strings.Join(w, "\n")
	for _, want := range []string{
		`"packages/foo" needs left-pad@1.0.0, which another version holds at the top of node_modules; it was not installed`,
		`workspace package "missing": its directory is not in the repository; it was not linked`,
		`workspace package "sneaky": its directory is reached through a link; it was not linked`,
	} {
		if !strings.Contains(all, want) {
			t.Errorf("warnings %q: want %q", w, want)
		}
	}
	if len(w) != 3 {
		t.Errorf("warnings %q: want 3", w)
	}
	nm := runtime.NodeModules(ws)
	for link, want := range map[string]string{"foo": "../packages/foo", "@s/bar": "../../packages/bar"} {
		got, err := os.Readlink(filepath.Join(nm, link))
		if err != nil || got != want {
			t.Errorf("%s links to %q, %v; want %q", link, got, err, want)
		}
	}
	if b, err := os.ReadFile(filepath.Join(nm, "foo/index.ts")); err != nil || string(b) != "export const foo = 1;\n" {
		t.Errorf("through the link: %q, %v", b, err)
	}
	for p, want := range map[string]string{
		"left-pad/package.json":                   `"1.3.0"`,
		"only-foo/package.json":                   `"1.0.0"`,
		"only-foo/node_modules/deep/package.json": `"deep"`,
	} {
		if b, err := os.ReadFile(filepath.Join(nm, p)); err != nil || !strings.Contains(string(b), want) {
			t.Errorf("%s: %q, %v", p, b, err)
		}
	}
	for _, p := range []string{"missing", "sneaky"} {
		if _, err := os.Lstat(filepath.Join(nm, p)); err == nil {
			t.Errorf("%s was linked", p)
		}
	}
	if _, err := os.Lstat(filepath.Join(ws.Root, "packages/foo/node_modules")); err == nil {
		t.Error("packages were written into the tree")
	}
	for _, d := range []string{nm, filepath.Join(nm, "@s")} {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o555 {
			t.Errorf("%s: %v, %v: want read-only", d, fi.Mode(), err)
		}
	}
	mods := map[string]bool{}
	for _, e := range NPMExternals(ws) {
		mods[e.Module] = true
	}
	if !mods["only-foo@1.0.0"] || !mods["left-pad@1.3.0"] || mods["foo"] || len(mods) != 3 {
		t.Errorf("externals %v: the links are in the tree, not external", mods)
	}
}

// workspaceRepo is an npm workspace: the root imports its workspace
// package @ws/lib, which npm links from node_modules.
var workspaceRepo = map[string]string{
	"package.json":              `{"name":"mono","private":true,"workspaces":["packages/*"]}`,
	"package-lock.json":         `{"name":"mono","lockfileVersion":3,"requires":true,"packages":{"":{"name":"mono","workspaces":["packages/*"]},"node_modules/@ws/lib":{"resolved":"packages/lib","link":true},"packages/lib":{"name":"@ws/lib","version":"1.0.0"}}}`,
	"tsconfig.json":             `{"compilerOptions":{"module":"esnext","moduleResolution":"bundler","strict":true,"noEmit":true},"include":["src","packages"]}`,
	"packages/lib/package.json": `{"name":"@ws/lib","version":"1.0.0","types":"index.ts"}`,
	"packages/lib/index.ts":     "/** Adds. */\nexport function add(a: number, b: number): number {\n  return a + b;\n}\n",
	"src/main.ts":               "import { add } from \"@ws/lib\";\n\nexport const x = add(1, 2);\n",
}

// TestTypeScriptWorkspaceLink: the real TypeScript server resolves an
// import of a workspace package through the link the phase made into the
// package's directory in the tree: an in-repository answer.
func TestTypeScriptWorkspaceLink(t *testing.T) {
	node, dir := tsServer(t)
	ws := repo(t, workspaceRepo)
	reg, _ := url.Parse("https://npm.example/registry") // links only: no request
	if w := fetcher(Config{NPMRegistry: reg}).Fetch(context.Background(), ws); len(w) != 0 {
		t.Fatalf("warnings %q", w)
	}
	srv := startTS(t, node, dir, ws)
	ctx := context.Background()
	c, _, err := srv.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	u := srv.URI("src/main.ts")
	if err := c.DidOpen(ctx, u, "typescript", workspaceRepo["src/main.ts"]); err != nil {
		t.Fatal(err)
	}
	locs, err := c.Definition(ctx, u, position(t, workspaceRepo["src/main.ts"], "add(1, 2)"))
	if err != nil || len(locs.Items) == 0 {
		t.Fatalf("definition %+v, %v", locs, err)
	}
	pol := uri.Policy{Root: ws.Root, Externals: NPMExternals(ws)}
	for _, l := range locs.Items {
		if got, err := pol.Map(string(l.URI)); err != nil || got != (uri.Location{Path: "packages/lib/index.ts"}) {
			t.Fatalf("definition at %s maps to %+v, %v; want packages/lib/index.ts in the tree", l.URI, got, err)
		}
	}
}
