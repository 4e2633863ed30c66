//go:build linux

package jail

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hanzoai/lsp/daemon/internal/lsp"
	"github.com/hanzoai/lsp/daemon/internal/runtime"
)

// TestBwrapArgsNodeModules: the npm packages are the tree's node_modules,
// shown by the tree's read-only bind: nothing else is bound for them, and
// a node_modules beside the tree (an older daemon's layout) is not shown.
func TestBwrapArgsNodeModules(t *testing.T) {
	s := &Spawner{opts: Options{Launcher: "/usr/local/bin/lsp-daemon"}.withDefaults(), libs: systemLibs()}
	base := t.TempDir()
	ws := runtime.Workspace{Root: filepath.Join(base, "c", "tree"), Home: filepath.Join(base, "home")}
	for _, d := range []string{runtime.NodeModules(ws), filepath.Join(base, "c", "node_modules")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	spec := runtime.Spec{Executable: "/bin/true"}
	js := jailSpec{exe: spec.Executable}
	for _, staged := range []bool{false, true} {
		args, sources := s.bwrapArgs(spec, ws, js, staged)
		var ops, dsts []string
		for i := 0; i < len(args); i++ {
			switch args[i] {
			case "--ro-bind", "--bind":
				ops, dsts = append(ops, args[i]), append(dsts, args[i+2])
				i += 2
			}
		}
		n := len(dsts)
		if !slices.Equal(dsts[n-3:], []string{initPath, ws.Root, ws.Home}) || ops[n-2] != "--ro-bind" {
			t.Fatalf("staged=%v: the init, the tree (read-only) and the home must come last, got %v %v", staged, ops, dsts)
		}
		if slices.ContainsFunc(dsts, func(d string) bool { return strings.HasSuffix(d, "node_modules") }) {
			t.Fatalf("staged=%v: a node_modules is bound: %v", staged, dsts)
		}
		if staged && !slices.Equal(sources[len(sources)-2:], []string{ws.Root, ws.Home}) {
			t.Fatalf("staged sources %v", sources)
		}
	}
}

// TestJailedTypeScriptNodeModules: the real TypeScript server in a real
// jail resolves an import into the packages installed in the tree's
// node_modules, through the tree's read-only bind.
func TestJailedTypeScriptNodeModules(t *testing.T) {
	t.Parallel()
	tsForJail(t)
	l := newLayout(t)
	t.Cleanup(func() { _ = removeTree(l.root) })
	c := filepath.Join(l.root, "trees", "tenant", "repo", "c0")
	ws := runtime.Workspace{Root: filepath.Join(c, "tree"), Home: filepath.Join(l.root, "homes", "tenant", "repo")}
	const mainTS = "import { greet } from \"greet\";\n\nexport const a = greet(\"x\");\n"
	files := map[string]string{
		filepath.Join(ws.Root, "src", "main.ts"):                        mainTS,
		filepath.Join(ws.Root, "node_modules", "greet", "package.json"): `{"name":"greet","version":"1.0.0","types":"index.d.ts"}`,
		filepath.Join(ws.Root, "node_modules", "greet", "index.d.ts"):   "/** Greets. */\nexport declare function greet(name: string): string;\n",
	}
	for p, body := range files {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{filepath.Join(ws.Root, "src"), filepath.Join(ws.Root, "node_modules", "greet"), filepath.Join(ws.Root, "node_modules"), ws.Root} {
		if err := os.Chmod(d, 0o555); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(ws.Home, 0o700); err != nil {
		t.Fatal(err)
	}
	srv, cl := tsServer(t, newSpawner(t, Options{}), ws)
	ctx := context.Background()
	u := srv.URI("src/main.ts")
	if err := cl.DidOpen(ctx, u, "typescript", mainTS); err != nil {
		t.Fatal(err)
	}
	locs, err := cl.Definition(ctx, u, lsp.Position{Line: 2, Character: uint32(strings.Index("export const a = greet(\"x\");", "greet"))})
	if err != nil {
		t.Fatal(err)
	}
	want := "file://" + filepath.Join(ws.Root, "node_modules", "greet", "index.d.ts")
	if len(locs.Items) == 0 || string(locs.Items[0].URI) != want {
		t.Fatalf("definition %+v, want %s: the jail does not show the installed packages", locs.Items, want)
	}
}
