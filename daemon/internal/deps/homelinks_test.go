package deps

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
)

// TestFetchGoPlantedLinks: a jailed server of an earlier revision has
// replaced directories and files of the home's module cache with links
// to host paths. The phase writes through none of them (the host
// directory stays empty, the host file keeps its content, nothing host
// side is read into the cache); with the links gone it fills the cache.
func TestFetchGoPlantedLinks(t *testing.T) {
	dir, sum := mirrorDir(t)
	ws := repo(t, map[string]string{
		"go.mod":  "module example.com/app\n\ngo 1.22\n\nrequire example.com/dep v1.0.0\n",
		"go.sum":  sum,
		"main.go": mainGo,
	})
	host := t.TempDir()
	hostDir := filepath.Join(host, "dir")
	hostFile := filepath.Join(host, "secret")
	if err := os.Mkdir(hostDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(hostFile, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	mc := runtime.ModCache(ws)
	plant := func(name, target string) {
		t.Helper()
		p := filepath.Join(mc, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	plant("cache/download/example.com/dep", hostDir) // where .mod, .zip, list go
	plant("example.com", hostDir)                    // where the module is extracted
	u, _ := url.Parse("file://" + dir)
	f := fetcher(Config{GoProxies: []*url.URL{u}})
	// Refusing (a warning) or replacing the links are both fine; writing
	// through them is not.
	w := f.Fetch(context.Background(), ws)
	t.Logf("warnings %q", w)
	if es, _ := os.ReadDir(hostDir); len(es) != 0 {
		t.Fatalf("the phase wrote into the host directory through a link: %v", es)
	}
	if _, err := os.Stat(filepath.Join(mc, "example.com/dep@v1.0.0/dep.go")); err != nil && len(w) == 0 {
		t.Fatalf("module not extracted, and no warning says why: %v", err)
	}
	// The links removed (a jail may also just give up), the phase fills
	// the cache.
	for _, l := range []string{"cache/download/example.com/dep", "example.com"} {
		if err := os.Remove(filepath.Join(mc, l)); err != nil {
			t.Fatal(err)
		}
	}
	if w := f.Fetch(context.Background(), ws); len(w) != 0 {
		t.Fatalf("warnings %q", w)
	}

	// A list file linked to a host file is neither read into the cache
	// nor written through; nor is a .info.
	dl := filepath.Join(mc, "cache/download/example.com/dep/@v")
	for _, n := range []string{"list", "v1.0.0.info"} {
		if err := os.Remove(filepath.Join(dl, n)); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(hostFile, filepath.Join(dl, n)); err != nil {
			t.Fatal(err)
		}
	}
	_ = f.Fetch(context.Background(), ws)
	if b, _ := os.ReadFile(hostFile); string(b) != "secret\n" {
		t.Fatalf("host file = %q", b)
	}
	for _, n := range []string{"list", "v1.0.0.info", "v1.0.0.mod"} {
		p := filepath.Join(dl, n)
		if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() {
			if b, _ := os.ReadFile(p); string(b) == "secret\n" {
				t.Fatalf("%s holds the host file", n)
			}
		}
	}
}
