//go:build linux

package jail

import (
	"context"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hanzoai/lsp/daemon/internal/deps"
	"github.com/hanzoai/lsp/daemon/internal/deps/depstest"
	"github.com/hanzoai/lsp/daemon/internal/runtime"
)

// TestJailedGoModules: the real gopls in a real jail, on a read-only tree
// whose root go.mod has no go directive (the go command would add one)
// and whose nested module (replace ../) requires a module the root does
// not: every answer is there, no diagnostic says the go command wanted to
// write, and the tree is untouched. The dependency phase runs as the
// daemon does, before the first server of the home starts and again for a
// second revision once the home belongs to the jail's uid.
func TestJailedGoModules(t *testing.T) {
	t.Parallel()
	gopls := goplsPath(t)
	mirror := t.TempDir()
	var sums []string
	for _, m := range []depstest.Module{
		{Path: "example.com/dep", Version: "v1.0.0", Files: map[string]string{"go.mod": "module example.com/dep\n\ngo 1.22\n", "dep.go": "package dep\n\n// Hello greets.\nfunc Hello() string { return \"hello\" }\n"}},
		{Path: "example.com/dep2", Version: "v1.0.0", Files: map[string]string{"go.mod": "module example.com/dep2\n\ngo 1.22\n", "dep2.go": "package dep2\n\n// Hello2 greets twice.\nfunc Hello2() string { return \"hello2\" }\n"}},
	} {
		s, err := depstest.Write(mirror, m)
		if err != nil {
			t.Fatal(err)
		}
		sums = append(sums, s)
	}
	files := map[string]string{
		"go.mod":     "module example.com/app\n\nrequire example.com/dep v1.0.0\n",
		"go.sum":     sums[0],
		"app.go":     "// Package app greets.\npackage app\n\nimport \"example.com/dep\"\n\n// Greet greets through dep.\nfunc Greet() string { return dep.Hello() }\n",
		"sub/go.mod": "module example.com/app/sub\n\ngo 1.22\n\nrequire (\n\texample.com/app v0.0.0\n\texample.com/dep v1.0.0\n\texample.com/dep2 v1.0.0\n)\n\nreplace example.com/app => ../\n",
		"sub/go.sum": sums[0] + sums[1],
		"sub/sub.go": "package sub\n\nimport (\n\t\"example.com/app\"\n\t\"example.com/dep2\"\n)\n\n// Both greets twice.\nfunc Both() string { return app.Greet() + dep2.Hello2() }\n",
	}
	l := newLayout(t)
	u, _ := url.Parse("file://" + mirror)
	f := deps.New(deps.Config{GoProxies: []*url.URL{u}, MaxModules: 100, MaxBytes: 1 << 30, MaxZip: 1 << 20}, slog.New(slog.DiscardHandler))
	sp := newSpawner(t, Options{})
	spec := runtime.Spec{ID: "gopls", Language: "go", Extensions: []string{".go"}, Executable: gopls, Args: []string{"serve"}, Folders: deps.Folders("go")}
	for _, rev := range []string{"c0", "c1"} {
		ws := runtime.Workspace{
			Root: filepath.Join(l.root, "trees", "tenant", "repo", rev, "tree"),
			Home: filepath.Join(l.root, "homes", "tenant", "repo"),
		}
		writeTree(t, ws, files)
		if w := f.Fetch(context.Background(), ws); len(w) != 0 {
			t.Fatalf("%s: warnings %q", rev, w)
		}
		before := readTree(t, ws.Root)
		srv := start(t, sp, spec, ws)
		ctx := context.Background()
		c, _, err := srv.Client(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range []struct{ file, needle, doc string }{
			{"app.go", "dep.Hello()", "Hello greets"},
			{"sub/sub.go", "dep2.Hello2()", "Hello2 greets twice"},
			{"sub/sub.go", "app.Greet()", "Greet greets through dep"},
		} {
			_, rest, _ := strings.Cut(q.needle, ".")
			h, err := hoverAt(ctx, srv, ws, q.file, q.needle, len(q.needle)-len(rest))
			if err != nil || h == nil || !strings.Contains(h.Markdown, q.doc) {
				t.Errorf("%s: hover on %s in %s = %+v, %v", rev, q.needle, q.file, h, err)
			}
			d, err := c.Diagnostics(ctx, srv.URI(q.file))
			if err != nil || len(d.Items) != 0 {
				t.Errorf("%s: diagnostics of %s = %+v, %v; want none", rev, q.file, d.Items, err)
			}
		}
		for _, d := range c.Logs() {
			if strings.Contains(d.Message, "permission denied") || strings.Contains(d.Message, "read-only file system") || strings.Contains(d.Message, "updating go.mod") {
				t.Errorf("%s: gopls logged %q", rev, d.Message)
			}
		}
		if after := readTree(t, ws.Root); after != before {
			t.Errorf("%s: the tree changed", rev)
		}
		_ = srv.Close(ctx)
	}
}

func writeTree(t *testing.T, ws runtime.Workspace, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(ws.Root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	var dirs []string
	_ = filepath.WalkDir(ws.Root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Chmod(dirs[i], 0o555); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(ws.Home, 0o700); err != nil {
		t.Fatal(err)
	}
}

func readTree(t *testing.T, root string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		b.WriteString(p + "\n" + string(data) + "\n")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestJailedGoWork: a tree with a go.work loads in workspace mode in the
// jail through the home's copy of it: a module imports another it does
// not require.
func TestJailedGoWork(t *testing.T) {
	t.Parallel()
	gopls := goplsPath(t)
	l := newLayout(t)
	ws := runtime.Workspace{
		Root: filepath.Join(l.root, "trees", "tenant", "repo", "c0", "tree"),
		Home: filepath.Join(l.root, "homes", "tenant", "repo"),
	}
	files := map[string]string{
		"go.work":    "go 1.22\n\nuse (\n\t./a\n\t./sub\n)\n",
		"a/go.mod":   "module example.com/a\n\ngo 1.22\n",
		"a/a.go":     "package a\n\n// A is in the workspace.\nfunc A() string { return \"a\" }\n",
		"sub/go.mod": "module example.com/b\n\ngo 1.22\n",
		"sub/sub.go": "package b\n\nimport \"example.com/a\"\n\n// B calls a.\nfunc B() string { return a.A() }\n",
	}
	writeTree(t, ws, files)
	f := deps.New(deps.Config{GoProxies: []*url.URL{{Scheme: "file", Path: t.TempDir()}}, MaxModules: 10, MaxBytes: 1 << 20, MaxZip: 1 << 20}, slog.New(slog.DiscardHandler))
	if w := f.Fetch(context.Background(), ws); len(w) != 0 {
		t.Fatalf("warnings %q", w)
	}
	before := readTree(t, ws.Root)
	srv := start(t, newSpawner(t, Options{}), runtime.Spec{ID: "gopls", Language: "go", Extensions: []string{".go"}, Executable: gopls, Args: []string{"serve"}, Folders: deps.Folders("go")}, ws)
	h, err := hoverAt(context.Background(), srv, ws, "sub/sub.go", "a.A()", len("a."))
	if err != nil || h == nil || !strings.Contains(h.Markdown, "A is in the workspace") {
		t.Fatalf("hover on a.A() = %+v, %v", h, err)
	}
	if readTree(t, ws.Root) != before {
		t.Error("the tree changed")
	}
}
