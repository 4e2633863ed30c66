package bench

import (
	"archive/zip"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// writeModuleZip writes a module zip as the Go module proxy serves one:
// every entry below "path@version/".
func writeModuleZip(t *testing.T, prefix string, files map[string]string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "m.zip")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	zw := zip.NewWriter(f)
	for name, content := range files {
		w, err := zw.Create(prefix + name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

func gitOut(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := runIn(context.Background(), dir, nil, "git", args...)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func treeFiles(t *testing.T, bare, rev string) []string {
	t.Helper()
	return strings.Fields(gitOut(t, bare, "ls-tree", "-r", "--name-only", rev))
}

func manyFiles(n int) map[string]string {
	m := map[string]string{"go.mod": "module example.com/big\n\ngo 1.22\n"}
	for i := 1; i < n; i++ {
		m[fmt.Sprintf("pkg%02d/sub/f%04d.go", i%7, i)] = fmt.Sprintf("package sub\n\n// F%d is file %d.\nfunc F%d() int { return %d }\n", i, i, i, i)
	}
	return m
}

func TestImportModuleZip(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
	}{
		{"one file", map[string]string{"go.mod": "module example.com/one\n"}},
		{"an empty file and a deep path", map[string]string{"go.mod": "module example.com/e\n", "a/b/c/d/empty.txt": "", "LICENSE": "x"}},
		{"a few thousand files", manyFiles(2500)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			zipPath := writeModuleZip(t, "example.com/m@v1.2.3/", tc.files)
			bare := filepath.Join(t.TempDir(), "forge", "o", "r.git")
			commit, n, err := importModuleZip(ctx, zipPath, bare)
			if err != nil {
				t.Fatal(err)
			}
			if n != len(tc.files) {
				t.Fatalf("import reported %d files, want %d", n, len(tc.files))
			}
			got := treeFiles(t, bare, "main")
			if len(got) != len(tc.files) {
				t.Fatalf("the commit holds %d files, want %d", len(got), len(tc.files))
			}
			for _, p := range got {
				want, ok := tc.files[p]
				if !ok {
					t.Fatalf("unexpected file %q (prefix not stripped?)", p)
				}
				if c := gitOut(t, bare, "cat-file", "blob", "main:"+p); c != want {
					t.Fatalf("%s: content %q, want %q", p, c, want)
				}
			}
			if strings.TrimSpace(gitOut(t, bare, "rev-list", "--count", "main")) != "1" {
				t.Fatal("want exactly one commit")
			}
			if strings.TrimSpace(gitOut(t, bare, "config", "uploadpack.allowFilter")) != "true" {
				t.Fatal("partial fetches are not allowed, unlike the dev forge's repositories")
			}

			// A per-run copy with one more commit: same tree plus a marker.
			run := filepath.Join(filepath.Dir(bare), "r-0.git")
			if err := cloneBare(ctx, bare, run); err != nil {
				t.Fatal(err)
			}
			next, err := nextCommit(ctx, run, ".lsp-bench-run", "run 0\n")
			if err != nil {
				t.Fatal(err)
			}
			if next == commit {
				t.Fatal("nextCommit did not make a new commit")
			}
			if parent := strings.TrimSpace(gitOut(t, run, "rev-parse", "main^")); parent != commit {
				t.Fatalf("new commit's parent %s, want %s", parent, commit)
			}
			if got := treeFiles(t, run, "main"); len(got) != len(tc.files)+1 {
				t.Fatalf("after nextCommit: %d files, want %d", len(got), len(tc.files)+1)
			}
			if c := gitOut(t, run, "cat-file", "blob", "main:.lsp-bench-run"); c != "run 0\n" {
				t.Fatalf("marker %q", c)
			}
		})
	}
}

func TestImportModuleZipRefuses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		names []string
	}{
		{"no version prefix", []string{"go.mod"}},
		{"two modules", []string{"example.com/a@v1.0.0/go.mod", "example.com/b@v1.0.0/go.mod"}},
		{"nothing below the prefix", []string{"example.com/a@v1.0.0/go.mod", "example.com/a@v1.0.0/"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "m.zip")
			f, err := os.Create(p)
			if err != nil {
				t.Fatal(err)
			}
			zw := zip.NewWriter(f)
			for _, n := range tc.names {
				if _, err := zw.Create(n); err != nil {
					t.Fatal(err)
				}
			}
			zw.Close()
			f.Close()
			bare := filepath.Join(t.TempDir(), "r.git")
			_, n, err := importModuleZip(context.Background(), p, bare)
			if tc.name == "nothing below the prefix" {
				// A directory entry is skipped, not refused.
				if err != nil || n != 1 {
					t.Fatalf("got %d files, %v; want 1 file", n, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("imported %d files from a zip that is not one module", n)
			}
		})
	}
}

func TestImportCachedReuses(t *testing.T) {
	ctx := context.Background()
	cache := t.TempDir()
	files := manyFiles(40)
	src := &moduleSource{Path: "example.com/m", Version: "v1.0.0", Zip: writeModuleZip(t, "example.com/m@v1.0.0/", files)}
	bare, n, err := importCached(ctx, cache, src)
	if err != nil || n != len(files) {
		t.Fatalf("first import: %d files, %v; want %d", n, err, len(files))
	}
	// The second call must not need the zip.
	if err := os.Remove(src.Zip); err != nil {
		t.Fatal(err)
	}
	again, n, err := importCached(ctx, cache, src)
	if err != nil || again != bare || n != len(files) {
		t.Fatalf("cached import: %s, %d files, %v; want %s, %d", again, n, err, bare, len(files))
	}
}

func FuzzModulePrefix(f *testing.F) {
	for _, s := range []string{"golang.org/x/tools@v0.52.0/go.mod", "a@b/", "@v1/x", "m@/x", "no-at/x", "a@v1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		p, err := modulePrefix(name)
		if err != nil {
			return
		}
		if !strings.HasPrefix(name, p) || !strings.HasSuffix(p, "/") || strings.Count(p[strings.IndexByte(p, '@'):], "/") != 1 {
			t.Fatalf("modulePrefix(%q) = %q", name, p)
		}
		if strings.IndexByte(p, '@') == 0 || strings.HasSuffix(p, "@/") {
			t.Fatalf("modulePrefix(%q) = %q: empty path or version", name, p)
		}
	})
}

// The direct side loads what the service's jail loads: cgo as LSP_JAIL_CC
// gives it, so that neither side is timed on work the other skips.
func TestBaselineCgo(t *testing.T) {
	if got := baselineCgo("off"); !slices.Equal(got, []string{"CGO_ENABLED=0"}) {
		t.Errorf("off: %q", got)
	}
	if got := baselineCgo("/opt/cc/bin/gcc-12"); !slices.Equal(got, []string{"CGO_ENABLED=1", "CC=/opt/cc/bin/gcc-12"}) {
		t.Errorf("a named compiler: %q", got)
	}
	want := []string{"CGO_ENABLED=0"}
	if _, err := os.Stat(defaultJailCC); err == nil {
		want = []string{"CGO_ENABLED=1", "CC=" + defaultJailCC}
	}
	if got := baselineCgo(""); !slices.Equal(got, want) {
		t.Errorf("the default: %q, want %q", got, want)
	}
}
