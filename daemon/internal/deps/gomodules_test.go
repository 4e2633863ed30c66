package deps

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"

	"github.com/hanzoai/lsp/daemon/internal/deps/depstest"
	"github.com/hanzoai/lsp/daemon/internal/runtime"
)

// TestVendorConsistent: the go command's rule, on real-world shapes of
// vendor/modules.txt.
func TestVendorConsistent(t *testing.T) {
	gomod := "module m\n\ngo 1.22\n\nrequire (\n\tgithub.com/a/b v1.2.3\n\tgolang.org/x/y v0.1.0 // indirect\n)\n"
	good := "# github.com/a/b v1.2.3\n## explicit; go 1.20\ngithub.com/a/b\ngithub.com/a/b/c\n# golang.org/x/y v0.1.0\n## explicit; go 1.18\ngolang.org/x/y/z\n"
	cases := []struct {
		name, gomod, txt string
		want             bool
	}{
		{"consistent", gomod, good, true},
		{"not explicit", gomod, strings.Replace(good, "## explicit; go 1.20\n", "", 1), false},
		{"other version", gomod, strings.Replace(good, "b v1.2.3", "b v1.2.4", 1), false},
		{"missing module", gomod, "# github.com/a/b v1.2.3\n## explicit\n", false},
		{"explicit but not required", "module m\n\ngo 1.22\n\nrequire github.com/a/b v1.2.3\n", good, false},
		{"implicit extra module", "module m\n\ngo 1.22\n\nrequire github.com/a/b v1.2.3\n", "# github.com/a/b v1.2.3\n## explicit\n# golang.org/x/y v0.1.0\ngolang.org/x/y/z\n", true},
		{"replacement agrees", gomod + "replace github.com/a/b => ../b\n", strings.Replace(good, "# github.com/a/b v1.2.3\n", "# github.com/a/b v1.2.3 => ../b\n", 1), true},
		{"replacement missing in modules.txt", gomod + "replace github.com/a/b => ../b\n", good, false},
		{"replacement missing in go.mod", gomod, strings.Replace(good, "# github.com/a/b v1.2.3\n", "# github.com/a/b v1.2.3 => ../b\n", 1), false},
		{"replacement of a version", gomod + "replace github.com/a/b v1.2.3 => github.com/c/b v1.0.0\n", strings.Replace(good, "# github.com/a/b v1.2.3\n", "# github.com/a/b v1.2.3 => github.com/c/b v1.0.0\n", 1), true},
		{"whole-module replacement line", gomod + "replace github.com/q/r => ./r\n", good + "# github.com/q/r => ./r\n", true},
		{"vendored for a workspace", gomod, "## workspace\n" + good, false},
		{"malformed", gomod, "# github.com/a/b\n", false},
		{"duplicate", gomod, good + "# github.com/a/b v1.2.3\n", false},
	}
	for _, c := range cases {
		mf, err := modfile.Parse("go.mod", []byte(c.gomod), nil)
		if err != nil {
			t.Fatal(err)
		}
		metas, ok := parseModulesTxt([]byte(c.txt))
		if got := ok && vendorConsistent(mf, metas); got != c.want {
			t.Errorf("%s: consistent = %v, want %v", c.name, got, c.want)
		}
	}
}

// FuzzModulesTxt: any modules.txt parses without panicking, and what it
// accepts names each module line once.
func FuzzModulesTxt(f *testing.F) {
	f.Add([]byte("# github.com/a/b v1.2.3\n## explicit; go 1.20\ngithub.com/a/b\n"))
	f.Add([]byte("# a v1 => ../b\n# c => d v2\n## workspace\n"))
	f.Add([]byte("# \n## explicit\n#  =>  \n"))
	mf, _ := modfile.Parse("go.mod", []byte("module m\n\ngo 1.22\n\nrequire a v1\n\nreplace a => ../b\n"), nil)
	f.Fuzz(func(t *testing.T, data []byte) {
		metas, ok := parseModulesTxt(data)
		if !ok {
			return
		}
		for k, m := range metas {
			if k == "" || m == nil {
				t.Fatalf("entry %q %+v", k, m)
			}
		}
		_ = vendorConsistent(mf, metas)
	})
}

// TestFindModules: the walk finds modules the way the go command sees
// them, never through a link, and within its bounds.
func TestFindModules(t *testing.T) {
	ws := repo(t, map[string]string{
		"go.mod":                    "module a\n",
		"b/go.mod":                  "module a/b\n",
		"b/c/d/go.mod":              "module a/b/c/d\n",
		"vendor/x/go.mod":           "module x\n",
		"testdata/y/go.mod":         "module y\n",
		"node_modules/z/go.mod":     "module z\n",
		".git/go.mod":               "module g\n",
		"_old/go.mod":               "module o\n",
		"e/go.mod/keep":             "a directory named go.mod is no module\n",
		"f/nested/deeper/x.go":      "package x\n",
		"f/nested/deeper/x_test.go": "package x\n",
	})
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "go.mod"), []byte("module outside\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(ws.Root, "link")); err != nil {
		t.Fatal(err)
	}
	dirs, more := findModules(ws.Root)
	if want := []string{".", "b", "b/c/d"}; !slices.Equal(dirs, want) || more {
		t.Errorf("modules %q (more %v), want %q", dirs, more, want)
	}

	// The module bound.
	files := map[string]string{}
	for i := range maxGoModules + 3 {
		files[filepath.Join("m", strings.Repeat("x", 1+i%5)+string(rune('a'+i%26))+string(rune('a'+i/26)), "go.mod")] = "module m\n"
	}
	ws = repo(t, files)
	dirs, more = findModules(ws.Root)
	if len(dirs) != maxGoModules || !more {
		t.Errorf("%d modules (more %v), want the bound %d and more", len(dirs), more, maxGoModules)
	}
	// The depth bound.
	ws = repo(t, map[string]string{strings.Repeat("d/", maxWalkDepth+2) + "go.mod": "module deep\n"})
	if dirs, more = findModules(ws.Root); len(dirs) != 0 || !more {
		t.Errorf("deep: %q (more %v)", dirs, more)
	}
}

// TestOverlayPlantedLink: a jailed server of another revision may have
// replaced a directory of the home with a link; the phase writes nothing
// through it, warns, and the module still never writes the tree (the go
// command's default mode).
func TestOverlayPlantedLink(t *testing.T) {
	dir, sum := mirrorDir(t)
	ws := repo(t, map[string]string{"go.mod": "module example.com/app\n\nrequire example.com/dep v1.0.0\n", "go.sum": sum, "app.go": "package app\n\nimport _ \"example.com/dep\"\n"})
	target := t.TempDir()
	if err := os.MkdirAll(filepath.Join(ws.Home, "go"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(ws.Home, "go", "overlay")); err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse("file://" + dir)
	w := fetcher(Config{GoProxies: []*url.URL{u}}).Fetch(context.Background(), ws)
	if len(w) != 1 || !strings.Contains(w[0], "go.mod: its private overlay could not be written; it loads read-only") {
		t.Fatalf("warnings %q", w)
	}
	if ents, _ := os.ReadDir(target); len(ents) != 0 {
		t.Fatalf("the phase wrote through the link: %v", ents)
	}
	f := GoFolders(ws)
	if len(f) != 1 || !strings.Contains(string(f[0].Settings), `"GOFLAGS":""`) {
		t.Fatalf("folders %+v", f)
	}
	// A link in place of the overlay's own directory is refused too.
	if err := os.Remove(filepath.Join(ws.Home, "go", "overlay")); err != nil {
		t.Fatal(err)
	}
	key := overlayKey(".", []byte("module example.com/app\n\nrequire example.com/dep v1.0.0\n"), []byte(sum))
	if err := os.MkdirAll(filepath.Join(ws.Home, "go", "overlay"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(ws.Home, "go", "overlay", key)); err != nil {
		t.Fatal(err)
	}
	if w := fetcher(Config{GoProxies: []*url.URL{u}}).Fetch(context.Background(), ws); len(w) != 1 {
		t.Fatalf("warnings %q", w)
	}
	if ents, _ := os.ReadDir(target); len(ents) != 0 {
		t.Fatalf("the phase wrote through the link: %v", ents)
	}
	// A link where go.mod goes is replaced, not followed.
	if err := os.Remove(filepath.Join(ws.Home, "go", "overlay", key)); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(ws.Home, "go", "overlay", key), 0o755); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(target, "victim")
	if err := os.WriteFile(victim, []byte("keep\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(ws.Home, "go", "overlay", key, "go.mod")); err != nil {
		t.Fatal(err)
	}
	if w := fetcher(Config{GoProxies: []*url.URL{u}}).Fetch(context.Background(), ws); len(w) != 0 {
		t.Fatalf("warnings %q", w)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep\n" {
		t.Fatalf("the phase wrote through the link: %q", b)
	}
	if fi, err := os.Lstat(filepath.Join(ws.Home, "go", "overlay", key, "go.mod")); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("overlay go.mod %v %v", fi, err)
	}
	goListFlags(t, ws, ".", ".")
}

// TestGoFoldersIndex: the index is read back bounded, and an entry
// outside the tree never becomes a folder.
func TestGoFoldersIndex(t *testing.T) {
	ws := repo(t, map[string]string{"go.mod": "module a\n"})
	idx := `{"modules":[{"dir":".","goflags":"-mod=vendor"},{"dir":"../x","goflags":"-mod=mod"},{"dir":"/etc","goflags":""},{"dir":"a/../../b","goflags":""},{"dir":"sub","goflags":"-mod=readonly"}]}`
	if err := os.WriteFile(filepath.Join(filepath.Dir(ws.Root), goIndexFile), []byte(idx), 0o444); err != nil {
		t.Fatal(err)
	}
	f := GoFolders(ws)
	if len(f) != 2 || f[0].Dir != ws.Root || f[1].Dir != filepath.Join(ws.Root, "sub") {
		t.Fatalf("folders %+v", f)
	}
	// A go.work whose paths leave the tree is not written.
	idx = `{"modules":[{"dir":"sub","goflags":""}],"work":{"use":["../x"]},"work_key":"0123456789abcdef0123456789abcdef"}`
	if err := os.Chmod(filepath.Join(filepath.Dir(ws.Root), goIndexFile), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(filepath.Dir(ws.Root), goIndexFile), []byte(idx), 0o444); err != nil {
		t.Fatal(err)
	}
	if f := GoFolders(ws); len(f) != 1 || strings.Contains(string(f[0].Settings), "GOWORK") {
		t.Fatalf("folders %+v", f)
	}
	if _, err := os.Lstat(filepath.Join(ws.Home, "go", "overlay")); err == nil {
		t.Fatal("a go.work was written")
	}
	if Folders("typescript") != nil || Folders("go") == nil {
		t.Error("Folders: only Go has a hook")
	}
	if GoFolders(runtime.Workspace{Root: t.TempDir(), Home: t.TempDir()}) != nil {
		t.Error("no index: folders")
	}
}

// TestFetchGoTransitive: what go.sum vouches for beyond go.mod's
// requirements is fetched with its zip, as go mod download would: a
// package of a dependency's dependency in a graph the module does not
// prune (no go directive), and a requirement an untidy go.mod forgot,
// which the go command then adds to the overlay (never the tree).
func TestFetchGoTransitive(t *testing.T) {
	for _, c := range []struct {
		name, gomod, goVer string
	}{
		{"unpruned", "module example.com/app\n\nrequire example.com/top v1.0.0\n", "1.16"},
		{"untidy", "module example.com/app\n\ngo 1.22\n\nrequire example.com/top v1.0.0\n", "1.22"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			var sum string
			for _, m := range []depstest.Module{
				{Path: "example.com/top", Version: "v1.0.0", Files: map[string]string{
					"go.mod": "module example.com/top\n\ngo " + c.goVer + "\n\nrequire example.com/low v1.0.0\n",
					"top.go": "package top\n\nimport \"example.com/low\"\n\nfunc Top() string { return low.Low() }\n",
				}},
				{Path: "example.com/low", Version: "v1.0.0", Files: map[string]string{
					"go.mod": "module example.com/low\n\ngo " + c.goVer + "\n",
					"low.go": "package low\n\nfunc Low() string { return \"low\" }\n",
				}},
			} {
				s, err := depstest.Write(dir, m)
				if err != nil {
					t.Fatal(err)
				}
				sum += s
			}
			ws := repo(t, map[string]string{
				"go.mod": c.gomod, "go.sum": sum,
				"app.go": "package app\n\nimport \"example.com/top\"\n\nvar X = top.Top()\n",
			})
			before := treeHash(t, ws.Root)
			u, _ := url.Parse("file://" + dir)
			if w := fetcher(Config{GoProxies: []*url.URL{u}, GoSumDB: "off"}).Fetch(context.Background(), ws); len(w) != 0 {
				t.Fatalf("warnings %q", w)
			}
			if out := goListFlags(t, ws, ".", "."); !strings.Contains(out, "example.com/low\n") {
				t.Errorf("go list = %s", out)
			}
			if after := treeHash(t, ws.Root); !equalMaps(before, after) {
				t.Errorf("the tree changed")
			}
		})
	}
}

// TestModCachePlantedLink: links a jailed server planted in the home's
// module cache are never written through nor read through: a link in
// place of the cache's download directory refuses the move (a warning),
// and a module's list file linked to a secret is replaced by the phase's
// own, which never holds the secret.
func TestModCachePlantedLink(t *testing.T) {
	dir, sum := mirrorDir(t)
	u, _ := url.Parse("file://" + dir)
	files := map[string]string{"go.mod": "module example.com/app\n\ngo 1.22\n\nrequire example.com/dep v1.0.0\n", "go.sum": sum, "main.go": mainGo}

	ws := repo(t, files)
	target := t.TempDir()
	mc := runtime.ModCache(ws)
	if err := os.MkdirAll(mc, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(mc, "cache")); err != nil {
		t.Fatal(err)
	}
	w := fetcher(Config{GoProxies: []*url.URL{u}}).Fetch(context.Background(), ws)
	if len(w) != 1 || !strings.Contains(w[0], "the module cache could not be written in the home") {
		t.Fatalf("warnings %q", w)
	}
	if ents, _ := os.ReadDir(target); len(ents) != 0 {
		t.Fatalf("the phase wrote through the link: %v", ents)
	}

	ws = repo(t, files)
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("s3cr3t\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dl := filepath.Join(runtime.ModCache(ws), "cache/download/example.com/dep/@v")
	if err := os.MkdirAll(dl, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(dl, "list")); err != nil {
		t.Fatal(err)
	}
	if w := fetcher(Config{GoProxies: []*url.URL{u}}).Fetch(context.Background(), ws); len(w) != 0 {
		t.Fatalf("warnings %q", w)
	}
	b, err := os.ReadFile(filepath.Join(dl, "list"))
	if fi, _ := os.Lstat(filepath.Join(dl, "list")); err != nil || fi == nil || !fi.Mode().IsRegular() || strings.Contains(string(b), "s3cr3t") || string(b) != "v1.0.0\n" {
		t.Fatalf("list = %q, %v", b, err)
	}
	if b, _ := os.ReadFile(secret); string(b) != "s3cr3t\n" {
		t.Fatalf("the secret changed: %q", b)
	}
	goList(t, ws)
}
