package deps

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
)

// TestInstallFromCache: a second revision of a repository links its
// packages from the daemon's cache (the same read-only inodes) without a
// request; an entry missing or holding anything but directories and
// regular files is fetched again; an install keeps only what its lockfile
// uses.
func TestInstallFromCache(t *testing.T) {
	r, lf := fixture(t)
	cache := t.TempDir()
	commit := func(lockfile string) runtime.Workspace {
		ws := repo(t, map[string]string{"package-lock.json": lockfile, "src/main.ts": "import { greet } from 'greet';\n"})
		ws.Cache = cache
		return ws
	}
	f := fetcher(Config{NPMRegistry: r.url})
	install := func(ws runtime.Workspace) int64 {
		t.Helper()
		before := r.n.Load()
		if w := f.Fetch(context.Background(), ws); len(w) != 0 {
			t.Fatalf("warnings %q", w)
		}
		for p, want := range map[string]string{
			"greet/index.d.ts":                    greetDTS,
			"greet/node_modules/inner/index.d.ts": "export declare const inner: number;\n",
		} {
			full := filepath.Join(runtime.NodeModules(ws), p)
			if b, err := os.ReadFile(full); err != nil || string(b) != want {
				t.Fatalf("%s: %q, %v", p, b, err)
			}
			if fi, err := os.Lstat(full); err != nil || fi.Mode().Perm() != 0o444 {
				t.Fatalf("%s: %v, %v; want a read-only file", p, fi.Mode(), err)
			}
		}
		return r.n.Load() - before
	}
	entries := func() []string {
		t.Helper()
		es, err := os.ReadDir(npmCacheDir(cache))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range es {
			names = append(names, e.Name())
		}
		return names
	}

	first := commit(lf)
	if n := install(first); n != 3 {
		t.Fatalf("first revision: %d requests, want 3", n)
	}
	kept := entries()
	if len(kept) != 3 {
		t.Fatalf("cache holds %v, want the 3 packages", kept)
	}
	second := commit(lf)
	if n := install(second); n != 0 {
		t.Fatalf("second revision: %d requests, want none (all cached)", n)
	}
	// Linked, not copied: both revisions' file is one inode.
	a, _ := os.Stat(filepath.Join(runtime.NodeModules(first), "greet/index.d.ts"))
	b, _ := os.Stat(filepath.Join(runtime.NodeModules(second), "greet/index.d.ts"))
	if a.Sys().(*syscall.Stat_t).Ino != b.Sys().(*syscall.Stat_t).Ino {
		t.Fatal("the second revision's package is a copy, not the cached files")
	}

	// An entry gone: that package alone is fetched again.
	if err := os.RemoveAll(filepath.Join(npmCacheDir(cache), kept[0])); err != nil {
		t.Fatal(err)
	}
	if n := install(commit(lf)); n != 1 {
		t.Fatalf("with an entry gone: %d requests, want 1", n)
	}
	// A link inside an entry is never copied nor followed: the package is
	// fetched again.
	var planted string
	for _, e := range entries() {
		if _, err := os.Lstat(filepath.Join(npmCacheDir(cache), e, "index.d.ts")); err == nil {
			planted = filepath.Join(npmCacheDir(cache), e, "zz-link")
			break
		}
	}
	if err := os.Symlink("/etc/passwd", planted); err != nil {
		t.Fatal(err)
	}
	ws := commit(lf)
	if n := install(ws); n != 1 {
		t.Fatalf("with a link in an entry: %d requests, want 1", n)
	}
	_ = filepath.WalkDir(runtime.NodeModules(ws), func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Name() == "zz-link" {
			t.Errorf("the planted link reached node_modules: %s", p)
		}
		return nil
	})

	if n := install(commit(lf)); n != 0 {
		t.Fatalf("after the unusable entry was made again: %d requests, want none", n)
	}

	// A revision whose lockfile dropped a package: the cache keeps only
	// what that install used.
	var doc map[string]any
	if err := json.Unmarshal([]byte(lf), &doc); err != nil {
		t.Fatal(err)
	}
	delete(doc["packages"].(map[string]any), "node_modules/@types/shout")
	smaller, _ := json.Marshal(doc)
	if n := install(commit(string(smaller))); n != 0 {
		t.Fatalf("smaller lockfile: %d requests, want none", n)
	}
	if got := entries(); len(got) != 2 {
		t.Fatalf("cache after the smaller install holds %v, want 2 entries", got)
	}

	// Without a cache directory nothing is kept anywhere.
	if n := install(repo(t, map[string]string{"package-lock.json": lf})); n != 3 {
		t.Fatalf("no cache: %d requests, want 3", n)
	}
}

// TestInstallBerryFromCache: a Berry lockfile's next revision asks the
// registry again only for what the last install could not look up: the
// version manifests' dists are kept with the packages, and used only for
// the registry they came from.
func TestInstallBerryFromCache(t *testing.T) {
	r, tree := berryFixture(t)
	cache := t.TempDir()
	f := fetcher(Config{NPMRegistry: r.url})
	install := func(f *Fetcher, r *registry) int64 {
		t.Helper()
		ws := repo(t, tree)
		ws.Cache = cache
		before := r.n.Load()
		if w := f.Fetch(context.Background(), ws); !slices.Equal(w, berryWarnings) {
			t.Fatalf("warnings\n%q\nwant\n%q", w, berryWarnings)
		}
		if b, err := os.ReadFile(filepath.Join(runtime.NodeModules(ws), "greet/index.d.ts")); err != nil || string(b) != greetDTS {
			t.Fatalf("greet: %q, %v", b, err)
		}
		return r.n.Load() - before
	}
	if n := install(f, r); n != 9 {
		t.Fatalf("first revision: %d requests, want 9 (5 manifests, 4 tarballs)", n)
	}
	if n := install(f, r); n != 1 {
		t.Fatalf("next revision: %d requests, want 1 (the manifest the registry did not serve)", n)
	}
	// Another registry serving the same: the dists the first one gave are
	// not trusted for it; the packages are the same bytes, so linked.
	mirror := newRegistry(t)
	mirror.files = r.files
	if n := install(fetcher(Config{NPMRegistry: mirror.url}), mirror); n != 5 {
		t.Fatalf("another registry: %d requests, want the 5 manifests", n)
	}
}
