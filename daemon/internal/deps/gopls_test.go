package deps

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hanzoai/lsp/daemon/internal/deps/depstest"
	"github.com/hanzoai/lsp/daemon/internal/lsp"
	"github.com/hanzoai/lsp/daemon/internal/runtime"
	"github.com/hanzoai/lsp/daemon/internal/servertest"
)

// goplsPath is the reviewed gopls (servertest).
func goplsPath(t *testing.T) string { return servertest.Gopls(t) }

// startGopls serves ws with the real gopls, unjailed, with the Go unit's
// folders, as the daemon does.
func startGopls(t *testing.T, ws runtime.Workspace) *runtime.Server {
	t.Helper()
	gopls := goplsPath(t)
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	runtime.ToolchainDirs = append(runtime.ToolchainDirs, filepath.Dir(mustLookPath(t, "go")))
	log := testLog(t)
	spec := runtime.Spec{
		ID: "gopls", Language: "go", Extensions: []string{".go"},
		Executable: gopls, Args: []string{"serve"},
		RequestTimeout: 2 * time.Minute,
		Folders:        Folders("go"),
	}
	srv, err := runtime.Start(context.Background(), runtime.Unjailed(log), spec, ws, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close(context.Background()) })
	return srv
}

func mustLookPath(t *testing.T, name string) string {
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skip(err)
	}
	return p
}

// treeHash is every file of the tree with its bytes: the go command must
// never write there (the daemon's tests run as root, so a read-only mode
// does not stop it; this does).
func treeHash(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		h := sha256.Sum256(b)
		rel, _ := filepath.Rel(root, p)
		out[rel] = hex.EncodeToString(h[:])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// pos finds needle in rel and returns the file's URI, opened, and the
// position offset bytes into the needle.
func pos(t *testing.T, srv *runtime.Server, ws runtime.Workspace, rel, needle string, offset int) (lsp.DocumentURI, lsp.Position) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(ws.Root, rel))
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(b), needle)
	if i < 0 {
		t.Fatalf("%q not in %s", needle, rel)
	}
	i += offset
	line := strings.Count(string(b[:i]), "\n")
	col := i - (strings.LastIndex(string(b[:i]), "\n") + 1)
	u := srv.URI(rel)
	c, _, err := srv.Client(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !c.IsOpen(u) {
		if err := c.DidOpen(context.Background(), u, "go", string(b)); err != nil {
			t.Fatal(err)
		}
	}
	return u, lsp.Position{Line: uint32(line), Character: uint32(col)}
}

var (
	dep2 = depstest.Module{Path: "example.com/dep2", Version: "v1.0.0", Files: map[string]string{
		"go.mod":  "module example.com/dep2\n\ngo 1.22\n",
		"dep2.go": "// Package dep2 is a dependency of the nested module only.\npackage dep2\n\n// Hello2 greets.\nfunc Hello2() string { return \"hello2\" }\n",
	}}
	// multiModule is a tree of three modules: the root, whose go.mod has no
	// go directive (the go command would add one); sub, nested, which
	// requires the root through replace ../ and a module the root does not
	// require; and vend, which vendors its one dependency (not served).
	multiModule = map[string]string{
		"go.mod":                               "module example.com/app\n\nrequire example.com/dep v1.0.0\n",
		"app.go":                               "// Package app greets.\npackage app\n\nimport \"example.com/dep\"\n\n// Greet greets through dep.\nfunc Greet() string { return dep.Hello() }\n",
		"sub/go.mod":                           "module example.com/app/sub\n\ngo 1.22\n\nrequire (\n\texample.com/app v0.0.0\n\texample.com/dep v1.0.0\n\texample.com/dep2 v1.0.0\n)\n\nreplace example.com/app => ../\n",
		"sub/sub.go":                           "package sub\n\nimport (\n\t\"example.com/app\"\n\t\"example.com/dep2\"\n)\n\n// Both greets twice.\nfunc Both() string { return app.Greet() + dep2.Hello2() }\n",
		"vend/go.mod":                          "module example.com/vend\n\ngo 1.22\n\nrequire example.com/dep3 v1.0.0\n",
		"vend/vendor/modules.txt":              "# example.com/dep3 v1.0.0\n## explicit; go 1.22\nexample.com/dep3\n",
		"vend/vendor/example.com/dep3/dep3.go": "// Package dep3 is vendored.\npackage dep3\n\n// Hello3 greets.\nfunc Hello3() string { return \"hello3\" }\n",
		"vend/v.go":                            "package vend\n\nimport \"example.com/dep3\"\n\n// V greets.\nfunc V() string { return dep3.Hello3() }\n",
		// Skipped by the walk, as by the go command.
		"testdata/x/go.mod": "module broken\n\nrequire nothing/at v1.0.0\n",
	}
)

// TestGoplsModules: with the phase's overlays and folders, the real gopls
// answers in every module of the tree as on an ordinary writable checkout
// after go mod download — the root without a go directive, the nested
// module with its own requirement, the vendoring module from vendor/ —
// and nothing writes the tree.
func TestGoplsModules(t *testing.T) {
	dir := t.TempDir()
	sum1, err := depstest.Write(dir, dep)
	if err != nil {
		t.Fatal(err)
	}
	sum2, err := depstest.Write(dir, dep2)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"go.sum": sum1, "sub/go.sum": sum1 + sum2}
	for k, v := range multiModule {
		files[k] = v
	}
	ws := repo(t, files)
	u, _ := url.Parse("file://" + dir)
	if w := fetcher(Config{GoProxies: []*url.URL{u}}).Fetch(context.Background(), ws); len(w) != 0 {
		t.Fatalf("warnings %q", w)
	}
	before := treeHash(t, ws.Root)
	folders := GoFolders(ws)
	if len(folders) != 3 {
		t.Fatalf("folders %+v, want the three modules", folders)
	}
	// The root has no go directive: it keeps its overlay (workspace mode
	// would report no go version, and gopls would check it as the newest
	// Go); sub loads in workspace mode through its own go.work.
	for _, f := range folders {
		st := string(f.Settings)
		switch f.Dir {
		case ws.Root:
			if !strings.Contains(st, overlayFlags) || strings.Contains(st, "GOWORK") {
				t.Errorf("root folder %s, want its overlay", st)
			}
		case filepath.Join(ws.Root, "sub"):
			if !strings.Contains(st, `"GOWORK":"`+ws.Home) || strings.Contains(st, overlayFlags) {
				t.Errorf("sub folder %s, want a go.work in the home", st)
			}
		}
	}
	srv := startGopls(t, ws)
	c, _, err := srv.Client(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	mc := runtime.ModCache(ws)
	cases := []struct {
		file, needle string
		offset       int
		want         string // the definition's file, relative to the tree or the module cache
	}{
		{"app.go", "dep.Hello()", len("dep."), "mc:example.com/dep@v1.0.0/dep.go"},
		{"sub/sub.go", "dep2.Hello2()", len("dep2."), "mc:example.com/dep2@v1.0.0/dep2.go"},
		{"sub/sub.go", "app.Greet()", len("app."), "app.go"},
		{"vend/v.go", "dep3.Hello3()", len("dep3."), "vend/vendor/example.com/dep3/dep3.go"},
	}
	for _, tc := range cases {
		uri, p := pos(t, srv, ws, tc.file, tc.needle, tc.offset)
		want := lsp.FileURI(filepath.Join(ws.Root, tc.want))
		if rest, ok := strings.CutPrefix(tc.want, "mc:"); ok {
			want = lsp.FileURI(filepath.Join(mc, rest))
		}
		l, err := c.Definition(ctx, uri, p)
		if err != nil || len(l.Items) != 1 || l.Items[0].URI != want {
			t.Errorf("definition of %s in %s = %+v, %v; want %s", tc.needle, tc.file, l.Items, err, want)
		}
		h, err := c.Hover(ctx, uri, p)
		if err != nil || h == nil || !strings.Contains(h.Markdown, "greets") {
			t.Errorf("hover on %s in %s = %+v, %v", tc.needle, tc.file, h, err)
		}
		d, err := c.Diagnostics(ctx, uri)
		if err != nil || len(d.Items) != 0 {
			t.Errorf("diagnostics of %s = %+v, %v; want none", tc.file, d.Items, err)
		}
	}
	if after := treeHash(t, ws.Root); !equalMaps(before, after) {
		t.Errorf("the tree changed while serving:\nbefore %v\nafter  %v", before, after)
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func testLog(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// proxyMirror is the first mirror of the go command's GOPROXY, when it
// answers; otherwise the test is skipped.
func proxyMirror(t *testing.T) *url.URL {
	t.Helper()
	out, err := exec.Command("go", "env", "GOPROXY").Output()
	if err != nil {
		t.Skip("no go command")
	}
	first, _, _ := strings.Cut(strings.TrimSpace(string(out)), ",")
	first, _, _ = strings.Cut(first, "|")
	u, err := parseMirror(first)
	if err != nil {
		t.Skipf("GOPROXY %q has no mirror", out)
	}
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(u.String() + "/github.com/google/uuid/@v/v1.6.0.info")
	if err != nil {
		t.Skipf("the module proxy is not reachable: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Skipf("the module proxy answers %s", resp.Status)
	}
	return u
}

// TestGoplsUUIDOrdinaryCheckout: github.com/google/uuid v1.6.0 (its go.mod has
// no go directive), prepared and served as the daemon does, answers
// exactly as gopls does on an ordinary writable checkout of it, and its
// tree is never written.
func TestGoplsUUIDOrdinaryCheckout(t *testing.T) {
	u := proxyMirror(t)
	// The module's files, fetched and verified by the phase itself.
	getter := repo(t, map[string]string{"go.mod": "module example.com/get\n\ngo 1.22\n\nrequire github.com/google/uuid v1.6.0\n"})
	if w := fetcher(Config{GoProxies: []*url.URL{u}}).Fetch(context.Background(), getter); len(w) != 0 {
		t.Fatalf("warnings %q", w)
	}
	src := filepath.Join(runtime.ModCache(getter), "github.com/google/uuid@v1.6.0")
	files := map[string]string{}
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(src, p)
		files[filepath.ToSlash(rel)] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(files["go.mod"], "\ngo ") {
		t.Fatalf("uuid's go.mod has a go directive now: %q", files["go.mod"])
	}
	ws := repo(t, files)
	if w := fetcher(Config{GoProxies: []*url.URL{u}}).Fetch(context.Background(), ws); len(w) != 0 {
		t.Fatalf("warnings %q", w)
	}
	before := treeHash(t, ws.Root)
	served := startGopls(t, ws)

	// The ordinary checkout: writable, no overlay, no folders.
	plain := repo(t, files)
	if err := filepath.WalkDir(plain.Root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Chmod(p, map[bool]os.FileMode{true: 0o755, false: 0o644}[d.IsDir()])
	}); err != nil {
		t.Fatal(err)
	}
	log := testLog(t)
	ordinary, err := runtime.Start(context.Background(), runtime.Unjailed(log), runtime.Spec{
		ID: "gopls", Language: "go", Extensions: []string{".go"},
		Executable: goplsPath(t), Args: []string{"serve"}, RequestTimeout: 2 * time.Minute,
	}, plain, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ordinary.Close(context.Background()) })

	type answer struct {
		hover, definition string
		symbols, diags    []string
	}
	ask := func(srv *runtime.Server, ws runtime.Workspace) answer {
		ctx := context.Background()
		c, _, err := srv.Client(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var a answer
		uri, p := pos(t, srv, ws, "version4.go", "Must(NewRandom())", len("Must("))
		if h, err := c.Hover(ctx, uri, p); err == nil && h != nil {
			a.hover = h.Markdown
		}
		if l, err := c.Definition(ctx, uri, p); err == nil && len(l.Items) == 1 {
			a.definition = strings.TrimPrefix(string(l.Items[0].URI), string(lsp.FileURI(ws.Root)))
		}
		if s, err := c.DocumentSymbols(ctx, uri); err == nil {
			for _, x := range s.Items {
				a.symbols = append(a.symbols, x.Name)
			}
		}
		d, err := c.Diagnostics(ctx, uri)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range d.Items {
			a.diags = append(a.diags, x.Message)
		}
		return a
	}
	got, want := ask(served, ws), ask(ordinary, plain)
	if !strings.Contains(want.hover, "NewRandom returns a Random") || want.definition != "/version4.go" {
		t.Fatalf("the ordinary checkout answers %+v", want)
	}
	if got.hover != want.hover || got.definition != want.definition || strings.Join(got.symbols, ",") != strings.Join(want.symbols, ",") || strings.Join(got.diags, "|") != strings.Join(want.diags, "|") {
		t.Errorf("served %+v\nordinary %+v", got, want)
	}
	if after := treeHash(t, ws.Root); !equalMaps(before, after) {
		t.Errorf("the tree changed while serving")
	}
}

// TestGoplsGoWork: a tree with a go.work loads in workspace mode, as on an
// ordinary checkout: a module imports another it does not require, the
// other's requirement comes from the module cache, and a module the
// go.work does not use loads on its own; the tree is not written.
func TestGoplsGoWork(t *testing.T) {
	dir := t.TempDir()
	sum1, err := depstest.Write(dir, dep)
	if err != nil {
		t.Fatal(err)
	}
	sum2, err := depstest.Write(dir, dep2)
	if err != nil {
		t.Fatal(err)
	}
	ws := repo(t, map[string]string{
		"go.work":  "go 1.22\n\nuse (\n\t./a\n\t./b\n)\n",
		"a/go.mod": "module example.com/a\n\ngo 1.22\n\nrequire example.com/dep v1.0.0\n",
		"a/go.sum": sum1,
		"a/a.go":   "package a\n\nimport \"example.com/dep\"\n\n// A greets through dep.\nfunc A() string { return dep.Hello() }\n",
		"b/go.mod": "module example.com/b\n\ngo 1.22\n",
		"b/b.go":   "package b\n\nimport \"example.com/a\"\n\n// B greets through a.\nfunc B() string { return a.A() }\n",
		"c/go.mod": "module example.com/c\n\ngo 1.22\n\nrequire example.com/dep2 v1.0.0\n",
		"c/go.sum": sum2,
		"c/c.go":   "package c\n\nimport \"example.com/dep2\"\n\n// C greets.\nfunc C() string { return dep2.Hello2() }\n",
	})
	u, _ := url.Parse("file://" + dir)
	if w := fetcher(Config{GoProxies: []*url.URL{u}}).Fetch(context.Background(), ws); len(w) != 0 {
		t.Fatalf("warnings %q", w)
	}
	before := treeHash(t, ws.Root)
	srv := startGopls(t, ws)
	c, _, err := srv.Client(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	mc := runtime.ModCache(ws)
	for _, tc := range []struct {
		file, needle string
		offset       int
		want         string
	}{
		{"b/b.go", "a.A()", len("a."), filepath.Join(ws.Root, "a/a.go")},
		{"a/a.go", "dep.Hello()", len("dep."), filepath.Join(mc, "example.com/dep@v1.0.0/dep.go")},
		{"c/c.go", "dep2.Hello2()", len("dep2."), filepath.Join(mc, "example.com/dep2@v1.0.0/dep2.go")},
	} {
		uri, p := pos(t, srv, ws, tc.file, tc.needle, tc.offset)
		l, err := c.Definition(ctx, uri, p)
		if err != nil || len(l.Items) != 1 || l.Items[0].URI != lsp.FileURI(tc.want) {
			t.Errorf("definition of %s in %s = %+v, %v; want %s", tc.needle, tc.file, l.Items, err, tc.want)
		}
		d, err := c.Diagnostics(ctx, uri)
		if err != nil || len(d.Items) != 0 {
			t.Errorf("diagnostics of %s = %+v, %v; want none", tc.file, d.Items, err)
		}
	}
	if after := treeHash(t, ws.Root); !equalMaps(before, after) {
		t.Errorf("the tree changed while serving")
	}
}

// TestGoWorkPerRevision: two revisions with the same go.work share a home;
// each gets a copy naming its own tree.
func TestGoWorkPerRevision(t *testing.T) {
	files := map[string]string{"go.work": "go 1.22\n\nuse ./a\n", "a/go.mod": "module example.com/a\n\ngo 1.22\n"}
	u, _ := url.Parse("file://" + t.TempDir())
	ws1, ws2 := repo(t, files), repo(t, files)
	ws2.Home = ws1.Home
	var works []string
	for _, ws := range []runtime.Workspace{ws1, ws2} {
		if w := fetcher(Config{GoProxies: []*url.URL{u}}).Fetch(context.Background(), ws); len(w) != 0 {
			t.Fatalf("warnings %q", w)
		}
		f := GoFolders(ws)
		if len(f) != 1 || f[0].Dir != ws.Root {
			t.Fatalf("folders %+v", f)
		}
		_, rest, _ := strings.Cut(string(f[0].Settings), `"GOWORK":"`)
		work, _, _ := strings.Cut(rest, `"`)
		works = append(works, work)
	}
	if works[0] == works[1] {
		t.Fatalf("both revisions use %s", works[0])
	}
	for i, ws := range []runtime.Workspace{ws1, ws2} {
		b, err := os.ReadFile(works[i])
		if err != nil || !strings.Contains(string(b), "use "+filepath.Join(ws.Root, "a")+"\n") {
			t.Errorf("go.work of revision %d = %q, %v", i, b, err)
		}
	}
}

// TestGoplsReferencesWholeModule: references to a symbol of the root
// package, asked with only its file open, find the uses in every package of
// the module — a subdirectory package importing a dependency and the
// external test package — as gopls does on an ordinary checkout. Through
// -modfile, go list reported the overlay's go.mod as the module's, so gopls
// counted only open packages as the workspace's and found neither (cobra's
// doc/, logrus's hooks/*).
func TestGoplsReferencesWholeModule(t *testing.T) {
	dir, sum := mirrorDir(t)
	ws := repo(t, map[string]string{
		"go.mod":          "module example.com/app\n\ngo 1.22\n\nrequire example.com/dep v1.0.0\n",
		"go.sum":          sum,
		"app.go":          "package app\n\n// Greet greets.\nfunc Greet() string { return \"hi\" }\n",
		"app_ext_test.go": "package app_test\n\nimport \"example.com/app\"\n\nvar _ = app.Greet()\n",
		"sub/sub.go":      "package sub\n\nimport (\n\t\"example.com/app\"\n\t\"example.com/dep\"\n)\n\n// Both greets twice.\nfunc Both() string { return app.Greet() + dep.Hello() }\n",
	})
	u, _ := url.Parse("file://" + dir)
	if w := fetcher(Config{GoProxies: []*url.URL{u}}).Fetch(context.Background(), ws); len(w) != 0 {
		t.Fatalf("warnings %q", w)
	}
	before := treeHash(t, ws.Root)
	srv := startGopls(t, ws)
	c, _, err := srv.Client(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	uri, p := pos(t, srv, ws, "app.go", "Greet()", 0)
	l, err := c.References(context.Background(), uri, p, true)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, it := range l.Items {
		p, _ := lsp.URIPath(it.URI)
		rel, _ := filepath.Rel(ws.Root, p)
		got[rel]++
	}
	want := map[string]int{"app.go": 1, "app_ext_test.go": 1, "sub/sub.go": 1}
	if len(got) != len(want) || got["app.go"] != 1 || got["app_ext_test.go"] != 1 || got["sub/sub.go"] != 1 {
		t.Errorf("references of Greet in %v, want %v", got, want)
	}
	if after := treeHash(t, ws.Root); !equalMaps(before, after) {
		t.Errorf("the tree changed while serving")
	}
}
