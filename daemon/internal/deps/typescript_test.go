package deps

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hanzoai/lsp/daemon/internal/deps/depstest"
	"github.com/hanzoai/lsp/daemon/internal/lsp"
	"github.com/hanzoai/lsp/daemon/internal/runtime"
	"github.com/hanzoai/lsp/daemon/internal/servertest"
	"github.com/hanzoai/lsp/daemon/internal/uri"
)

// tsServer is node and the reviewed TypeScript server (servertest).
func tsServer(t *testing.T) (node, dir string) { return servertest.TypeScript(t) }

const mainTS = `import { greet } from "greet";
import { shout } from "shout";

export const a = greet("x");
export const b = shout("y");
`

// TestTypeScriptResolvesInstalled: the real typescript-language-server,
// started as the daemon starts it, resolves the repository's imports into
// the packages the phase installed in the tree's node_modules, and the
// URI policy names those definitions external, by package, as the query
// path answers them.
func TestTypeScriptResolvesInstalled(t *testing.T) {
	node, dir := tsServer(t)
	r, lf := fixture(t)
	ws := repo(t, map[string]string{"package-lock.json": lf, "src/main.ts": mainTS})
	if w := fetcher(Config{NPMRegistry: r.url}).Fetch(context.Background(), ws); len(w) != 0 {
		t.Fatalf("warnings %q", w)
	}
	initOpts, _ := json.Marshal(map[string]any{
		"tsserver":                          map[string]any{"path": filepath.Join(dir, "node_modules/typescript/lib/tsserver.js"), "useSyntaxServer": "never"},
		"disableAutomaticTypingAcquisition": true,
	})
	spec := runtime.Spec{
		ID: "typescript", Language: "typescript", Extensions: []string{".ts"},
		Executable: node, Args: []string{filepath.Join(dir, "node_modules/typescript-language-server/lib/cli.mjs"), "--stdio"},
		InitializationOptions: initOpts,
		RequestTimeout:        2 * time.Minute, // the first request waits for the project load
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv, err := runtime.Start(context.Background(), runtime.Unjailed(log), spec, ws, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close(context.Background()) })
	ctx := context.Background()
	c, _, err := srv.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	u := srv.URI("src/main.ts")
	if err := c.DidOpen(ctx, u, "typescript", mainTS); err != nil {
		t.Fatal(err)
	}
	pol := uri.Policy{Root: ws.Root, Externals: NPMExternals(ws)}
	for _, tc := range []struct {
		needle string
		want   uri.Location
	}{
		{`greet("x")`, uri.Location{Path: "index.d.ts", External: true, Module: "greet@1.0.0"}},
		{`shout("y")`, uri.Location{Path: "index.d.ts", External: true, Module: "@types/shout@2.0.0"}},
	} {
		pos := position(t, mainTS, tc.needle)
		locs, err := c.Definition(ctx, u, pos)
		if err != nil {
			t.Fatalf("definition of %s: %v", tc.needle, err)
		}
		if len(locs.Items) == 0 {
			t.Fatalf("definition of %s: none (the import did not resolve)", tc.needle)
		}
		for _, l := range locs.Items {
			got, err := pol.Map(string(l.URI))
			if err != nil || got != tc.want {
				t.Fatalf("definition of %s at %s maps to %+v, %v; want %+v", tc.needle, l.URI, got, err, tc.want)
			}
		}
	}
	h, err := c.Hover(ctx, u, position(t, mainTS, `greet("x")`))
	if err != nil || h == nil || !strings.Contains(h.Markdown, "Greets someone by name.") {
		t.Fatalf("hover %+v, %v: want the package's documentation", h, err)
	}
}

// position is needle's start in text (ASCII, so bytes are UTF-16 units).
func position(t *testing.T, text, needle string) lsp.Position {
	t.Helper()
	i := strings.Index(text, needle)
	if i < 0 {
		t.Fatalf("%q not in the file", needle)
	}
	return lsp.Position{Line: uint32(strings.Count(text[:i], "\n")), Character: uint32(i - (strings.LastIndex(text[:i], "\n") + 1))}
}

// zustandRepo is zustand's snapshot (sources, tests, package.json,
// tsconfig.json, both lockfiles), its pnpm-lock.yaml pruned to the root's
// @types/react so that the test downloads two small real tarballs
// (@types/react and csstype) from the npm registry.
func zustandRepo(t *testing.T) map[string]string {
	t.Helper()
	files := corpusFiles(t, "pmndrs__zustand", func(n string) bool {
		return strings.HasPrefix(n, "src/") || strings.HasPrefix(n, "tests/") ||
			n == "package.json" || n == "tsconfig.json" || n == "pnpm-lock.yaml" || n == "pnpm-workspace.yaml" || n == "package-lock.json"
	})
	pruned, err := depstest.PrunePNPM(files["pnpm-lock.yaml"], "@types/react")
	if err != nil {
		t.Fatal(err)
	}
	files["pnpm-lock.yaml"] = pruned
	return files
}

// zustandNeedles: where to ask for definitions in zustand's tree, and
// where they must land.
var zustandNeedles = []struct {
	File, Needle string
	Want         uri.Location
}{
	// React's hook, declared by the installed @types/react.
	{"src/react.ts", "useDebugValue(slice)", uri.Location{Path: "index.d.ts", External: true, Module: "@types/react@19.2.18"}},
	// The tests import the package by its name; tsconfig paths map it
	// into the tree.
	{"tests/basic.test.tsx", "create } from 'zustand'", uri.Location{Path: "src/react.ts"}},
}

// TestTypeScriptZustand: on zustand's real snapshot, the phase reads its
// pnpm-lock.yaml (pnpm's packageManager wins over the package-lock.json
// beside it), installs from the real registry, and the real TypeScript
// server resolves a definition into a dependency as external
// "@types/react@19.2.18" and the repository's own import into its tree.
func TestTypeScriptZustand(t *testing.T) {
	node, dir := tsServer(t)
	ws := repo(t, zustandRepo(t))
	reg, _ := url.Parse("https://registry.npmjs.org")
	if w := fetcher(Config{NPMRegistry: reg}).Fetch(context.Background(), ws); len(w) != 0 {
		t.Fatalf("warnings %q", w)
	}
	mods := map[string]bool{}
	for _, e := range NPMExternals(ws) {
		mods[e.Module] = true
	}
	if len(mods) != 2 || !mods["@types/react@19.2.18"] || !mods["csstype@3.2.3"] {
		t.Fatalf("installed %v", mods)
	}
	srv := startTS(t, node, dir, ws)
	checkDefinitions(t, srv, ws, uri.Policy{Root: ws.Root, Externals: NPMExternals(ws)})
}

func startTS(t *testing.T, node, dir string, ws runtime.Workspace) *runtime.Server {
	t.Helper()
	initOpts, _ := json.Marshal(map[string]any{
		"tsserver":                          map[string]any{"path": filepath.Join(dir, "node_modules/typescript/lib/tsserver.js"), "useSyntaxServer": "never"},
		"disableAutomaticTypingAcquisition": true,
	})
	spec := runtime.Spec{
		ID: "typescript", Language: "typescript", Extensions: []string{".ts", ".tsx"},
		Executable: node, Args: []string{filepath.Join(dir, "node_modules/typescript-language-server/lib/cli.mjs"), "--stdio"},
		InitializationOptions: initOpts,
		RequestTimeout:        2 * time.Minute,
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv, err := runtime.Start(context.Background(), runtime.Unjailed(log), spec, ws, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close(context.Background()) })
	return srv
}

func checkDefinitions(t *testing.T, srv *runtime.Server, ws runtime.Workspace, pol uri.Policy) {
	t.Helper()
	ctx := context.Background()
	c, _, err := srv.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range zustandNeedles {
		b, err := os.ReadFile(filepath.Join(ws.Root, n.File))
		if err != nil {
			t.Fatal(err)
		}
		u := srv.URI(n.File)
		lang := "typescript"
		if strings.HasSuffix(n.File, ".tsx") {
			lang = "typescriptreact"
		}
		if err := c.DidOpen(ctx, u, lang, string(b)); err != nil {
			t.Fatal(err)
		}
		locs, err := c.Definition(ctx, u, position(t, string(b), n.Needle))
		if err != nil {
			t.Fatalf("%s: definition of %s: %v", n.File, n.Needle, err)
		}
		if len(locs.Items) == 0 {
			t.Fatalf("%s: definition of %s: none", n.File, n.Needle)
		}
		for _, l := range locs.Items {
			got, err := pol.Map(string(l.URI))
			if err != nil || got != n.Want {
				t.Fatalf("%s: definition of %s at %s maps to %+v, %v; want %+v", n.File, n.Needle, l.URI, got, err, n.Want)
			}
		}
	}
}
