//go:build linux

package jail

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hanzoai/lsp/daemon/internal/lsp"
	"github.com/hanzoai/lsp/daemon/internal/runtime"
)

// TestBwrapArgsNodeModules: the npm packages installed beside a tree are
// bound read-only at their own path, after the tree and before the home,
// and only when they are a real directory.
func TestBwrapArgsNodeModules(t *testing.T) {
	s := &Spawner{opts: Options{Launcher: "/usr/local/bin/lsp-daemon"}.withDefaults(), libs: systemLibs()}
	base := t.TempDir()
	ws := runtime.Workspace{Root: filepath.Join(base, "c", "tree"), Home: filepath.Join(base, "home")}
	nm := filepath.Join(base, "c", "node_modules")
	spec := runtime.Spec{Executable: "/bin/true"}
	js := jailSpec{exe: spec.Executable}
	binds := func(staged bool) (ops, dsts, sources []string) {
		args, sources := s.bwrapArgs(spec, ws, js, staged)
		for i := 0; i < len(args); i++ {
			switch args[i] {
			case "--ro-bind", "--bind":
				ops, dsts = append(ops, args[i]), append(dsts, args[i+2])
				i += 2
			}
		}
		return ops, dsts, sources
	}

	// None installed: nothing bound for them.
	if _, dsts, _ := binds(false); slices.Contains(dsts, nm) {
		t.Fatalf("a missing node_modules is bound: %v", dsts)
	}
	// A link where node_modules would be is not followed.
	if err := os.MkdirAll(filepath.Join(base, "c"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", nm); err != nil {
		t.Fatal(err)
	}
	if _, dsts, _ := binds(false); slices.Contains(dsts, nm) || slices.Contains(dsts, "/etc") {
		t.Fatalf("a node_modules link is bound: %v", dsts)
	}
	if err := os.Remove(nm); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(nm, 0o555); err != nil {
		t.Fatal(err)
	}
	for _, staged := range []bool{false, true} {
		ops, dsts, sources := binds(staged)
		n := len(dsts)
		if !slices.Equal(dsts[n-4:], []string{initPath, ws.Root, nm, ws.Home}) {
			t.Fatalf("staged=%v: the init, tree, node_modules and home must come last, got %v", staged, dsts)
		}
		if ops[n-2] != "--ro-bind" {
			t.Fatalf("staged=%v: node_modules is bound %s, want --ro-bind", staged, ops[n-2])
		}
		if staged && !slices.Equal(sources[len(sources)-3:], []string{ws.Root, nm, ws.Home}) {
			t.Fatalf("staged sources %v", sources)
		}
	}
}

// TestJailedTypeScriptNodeModules: the real TypeScript server in a real
// jail resolves an import into the packages installed beside the tree,
// through the read-only bind.
func TestJailedTypeScriptNodeModules(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed")
	}
	node, _ = filepath.EvalSymlinks(node)
	ts, err := filepath.Abs("../../../.bin/ts")
	if err == nil {
		ts, err = filepath.EvalSymlinks(ts)
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("the TypeScript server is not installed; make deps installs it")
		}
		t.Skip("the TypeScript server is not installed (make deps installs it)")
	}
	l := newLayout(t)
	t.Cleanup(func() { _ = removeTree(l.root) })
	c := filepath.Join(l.root, "trees", "tenant", "repo", "c0")
	ws := runtime.Workspace{Root: filepath.Join(c, "tree"), Home: filepath.Join(l.root, "homes", "tenant", "repo")}
	const mainTS = "import { greet } from \"greet\";\n\nexport const a = greet(\"x\");\n"
	files := map[string]string{
		filepath.Join(ws.Root, "src", "main.ts"):                  mainTS,
		filepath.Join(c, "node_modules", "greet", "package.json"): `{"name":"greet","version":"1.0.0","types":"index.d.ts"}`,
		filepath.Join(c, "node_modules", "greet", "index.d.ts"):   "/** Greets. */\nexport declare function greet(name: string): string;\n",
	}
	for p, body := range files {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{filepath.Join(ws.Root, "src"), ws.Root, filepath.Join(c, "node_modules", "greet"), filepath.Join(c, "node_modules")} {
		if err := os.Chmod(d, 0o555); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(ws.Home, 0o700); err != nil {
		t.Fatal(err)
	}
	initOpts, _ := json.Marshal(map[string]any{
		"tsserver":                          map[string]any{"path": filepath.Join(ts, "node_modules/typescript/lib/tsserver.js"), "useSyntaxServer": "never"},
		"disableAutomaticTypingAcquisition": true,
	})
	srv := start(t, newSpawner(t, Options{}), runtime.Spec{
		ID: "typescript", Language: "typescript", Extensions: []string{".ts"},
		Executable: node, Args: []string{filepath.Join(ts, "node_modules/typescript-language-server/lib/cli.mjs"), "--stdio"},
		InitializationOptions: initOpts,
	}, ws)
	ctx := context.Background()
	cl, _, err := srv.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	u := srv.URI("src/main.ts")
	if err := cl.DidOpen(ctx, u, "typescript", mainTS); err != nil {
		t.Fatal(err)
	}
	locs, err := cl.Definition(ctx, u, lsp.Position{Line: 2, Character: uint32(strings.Index("export const a = greet(\"x\");", "greet"))})
	if err != nil {
		t.Fatal(err)
	}
	want := "file://" + filepath.Join(c, "node_modules", "greet", "index.d.ts")
	if len(locs.Items) == 0 || string(locs.Items[0].URI) != want {
		t.Fatalf("definition %+v, want %s: the jail does not show the installed packages", locs.Items, want)
	}
}
