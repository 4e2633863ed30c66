package deps

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"encoding/json"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"

	"github.com/hanzoai/lsp/daemon/internal/workspace"
)

// FuzzValidateLockfile: never panics, and whatever it accepts resolves
// every installed package under the registry (install checks the sha512
// integrity) and links only to relative directories inside the
// repository.
func FuzzValidateLockfile(f *testing.F) {
	f.Add([]byte(lock(map[string]any{"node_modules/a": map[string]any{"version": "1.0.0", "resolved": "https://npm.example/r/a/-/a-1.0.0.tgz", "integrity": integrity}})))
	f.Add([]byte(`{"lockfileVersion":2,"packages":{"":{"dependencies":{"a":"git://x"}}}}`))
	f.Add([]byte(`{"lockfileVersion":3,"packages":{"node_modules/@s/a/node_modules/b":{"inBundle":true}}}`))
	f.Add([]byte(`{"lockfileVersion":3,"packages":{"node_modules/w":{"link":true,"resolved":"packages/w"},"packages/w":{},"packages/w/node_modules/x":{"resolved":"https://npm.example/r/x/-/x-1.0.0.tgz","integrity":"` + integrity + `"}}}`))
	reg, _ := url.Parse("https://npm.example/r")
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, err := ValidateLockfile(data, reg); err != nil {
			return
		}
		var lf lockfile
		if json.Unmarshal(data, &lf) != nil {
			t.Fatal("accepted what does not parse")
		}
		for k, p := range lf.Packages {
			_, rest, ok := splitWorkspaceKey(k)
			if k != "" && !ok {
				t.Fatalf("accepted key %q", k)
			}
			if p.Link {
				if !repoDir(p.Resolved) || strings.Contains(p.Resolved, "..") || strings.HasPrefix(p.Resolved, "/") {
					t.Fatalf("accepted link %q: %+v", k, p)
				}
				continue
			}
			if k == "" || rest == "" || p.InBundle {
				continue
			}
			if !strings.HasPrefix(p.Resolved, "https://npm.example/r/") {
				t.Fatalf("accepted package %q: %+v", k, p)
			}
		}
	})
}

// FuzzExtract: any zip bytes either fail or extract into the target
// directory only, as directories and regular files.
func FuzzExtract(f *testing.F) {
	var ok bytes.Buffer
	zw := zip.NewWriter(&ok)
	w, _ := zw.Create("example.com/dep@v1.0.0/go.mod")
	w.Write([]byte("module example.com/dep\n"))
	w, _ = zw.Create("example.com/dep@v1.0.0/a/b.go")
	w.Write([]byte("package a\n"))
	zw.Close()
	f.Add(ok.Bytes())
	var bad bytes.Buffer
	zw = zip.NewWriter(&bad)
	w, _ = zw.Create("example.com/dep@v1.0.0/../../escape.go")
	w.Write([]byte("x"))
	w, _ = zw.Create("/abs.go")
	w.Write([]byte("x"))
	zw.Close()
	f.Add(bad.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		base := t.TempDir()
		defer workspace.RemoveAll(base)
		zf := filepath.Join(base, "m.zip")
		if err := os.WriteFile(zf, data, 0o600); err != nil {
			t.Fatal(err)
		}
		cache := filepath.Join(base, "cache")
		dir := filepath.Join(cache, "example.com", "dep@v1.0.0")
		_ = extract(module.Version{Path: "example.com/dep", Version: "v1.0.0"}, zf, dir)
		entries, _ := os.ReadDir(base)
		for _, e := range entries {
			if e.Name() != "m.zip" && e.Name() != "cache" {
				t.Fatalf("extract wrote %s outside the cache", e.Name())
			}
		}
		top, _ := os.ReadDir(filepath.Join(cache, "example.com"))
		for _, e := range top {
			if e.Name() != "dep@v1.0.0" {
				t.Fatalf("extract left %s beside the module", e.Name())
			}
		}
		walkClean(t, cache)
	})
}

// FuzzParseGoSum never panics and keeps only h1 lines.
func FuzzParseGoSum(f *testing.F) {
	f.Add([]byte("a v1 h1:x\na v1/go.mod h1:y\nb v2 h2:z\na v1 h1:other\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		for k, v := range parseGoSum(data) {
			if v != "conflict" && !strings.HasPrefix(v, "h1:") || strings.Count(k, " ") != 1 {
				t.Fatalf("%q → %q", k, v)
			}
		}
	})
}

// FuzzExtractTarball: any bytes either are refused or unpack below the
// target directory only, as directories and read-only regular files,
// within the size bound.
func FuzzExtractTarball(f *testing.F) {
	f.Add(tgz(f, tarEntry{name: "package/package.json", body: "{}"}, tarEntry{name: "package/lib/", typ: tar.TypeDir}, tarEntry{name: "package/lib/a.d.ts", body: "export {};\n"}))
	f.Add(tgz(f, tarEntry{name: "package/../../escape", body: "x"}))
	f.Add(tgz(f, tarEntry{name: "/abs", body: "x"}))
	f.Add(tgz(f, tarEntry{name: "package/l", typ: tar.TypeSymlink, link: "../../x"}, tarEntry{name: "package/l/x", body: "x"}))
	f.Add(tgz(f, tarEntry{name: "package/h", typ: tar.TypeLink, link: "package/a"}))
	f.Add(tgz(f, tarEntry{name: "package/big", size: 70000}))
	f.Add([]byte{0x1f, 0x8b, 8, 0})
	const bound = 64 << 10
	f.Fuzz(func(t *testing.T, data []byte) {
		base := t.TempDir()
		defer workspace.RemoveAll(base)
		out := filepath.Join(base, "out")
		if err := os.Mkdir(out, 0o700); err != nil {
			t.Fatal(err)
		}
		err := extractTarball(bytes.NewReader(data), out, tarLimits{maxBytes: bound})
		entries, _ := os.ReadDir(base)
		if len(entries) != 1 || entries[0].Name() != "out" {
			t.Fatalf("extract wrote beside its directory: %v", entries)
		}
		walkClean(t, out)
		if err != nil {
			return
		}
		var total int64
		_ = filepath.WalkDir(out, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return nil
			}
			fi, _ := d.Info()
			if fi.Mode().Perm() != 0o444 {
				t.Fatalf("%s: mode %v", p, fi.Mode())
			}
			total += fi.Size()
			return nil
		})
		if total > bound {
			t.Fatalf("%d bytes unpacked, bound %d", total, bound)
		}
	})
}

// FuzzParsePNPMLock: never panics, and whatever it lays out is a
// node_modules path, resolved under the registry with a sha512 integrity,
// or a link to a relative directory inside the repository.
func FuzzParsePNPMLock(f *testing.F) {
	f.Add([]byte(strings.NewReplacer("@A@", integrity, "@B@", integrity, "@P1@", integrity, "@P2@", integrity, "@REAL@", integrity, "@FAR@", integrity, "@OL@", integrity).Replace(pnpmV9)))
	f.Add([]byte("lockfileVersion: '6.0'\ndependencies:\n  a:\n    specifier: ^1\n    version: 1.0.0(b@1.0.0)\npackages:\n  /a@1.0.0(b@1.0.0):\n    resolution: {integrity: " + integrity + "}\n    dependencies:\n      a: 1.0.0(b@1.0.0)\n"))
	f.Add([]byte("lockfileVersion: '9.0'\nimporters:\n  .:\n    dependencies:\n      w:\n        specifier: workspace:*\n        version: link:../x\n"))
	f.Add([]byte("lockfileVersion: '9.0'\nx: &a [*a, *a]\n"))
	reg, _ := url.Parse("https://npm.example/r")
	f.Fuzz(func(t *testing.T, data []byte) {
		out, _, err := ParsePNPMLock(data, reg)
		if err != nil {
			return
		}
		for k, p := range out {
			if !installPath(k) || p.LinkTo != "" && (pnpmLevel(strings.TrimPrefix(p.LinkTo, "node_modules/")) == 0 || out[p.LinkTo].LinkTo != "") {
				t.Fatalf("laid out at %q (linked to %q)", k, p.LinkTo)
			}
			if p.Link {
				if !repoDir(p.Resolved) {
					t.Fatalf("link %q to %q", k, p.Resolved)
				}
				continue
			}
			if !underRegistry(p.Resolved, reg) || !pinnedIntegrity(p.Integrity) {
				t.Fatalf("accepted %q: %+v", k, p)
			}
		}
	})
}

// FuzzGoWork: any go.work reads without panicking; what it keeps stays
// inside the tree, and the home's copy written from it parses back to the
// same directories (nothing a go.work holds can add a directive).
func FuzzGoWork(f *testing.F) {
	f.Add([]byte("go 1.22\n\nuse (\n\t./a\n\t./b\n)\n\nreplace example.com/x => ./x\n"))
	f.Add([]byte("use ../outside\nuse /abs\nuse \"a b\"\nreplace a v1.0.0 => b v1.1.0\n"))
	f.Add([]byte("go 1.99\n"))
	f.Add([]byte("use \"a\\nreplace x => /etc\"\n"))
	root := f.TempDir()
	fe := &Fetcher{cfg: Config{GoVersion: "go1.26.0"}}
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(filepath.Join(root, "go.work"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		gw, _ := fe.readGoWork(root, &warnings{})
		if gw == nil {
			return
		}
		for _, u := range gw.Use {
			if !treeDir(u) {
				t.Fatalf("kept %q", u)
			}
		}
		text := gw.text("/published/tree")
		wf, err := modfile.ParseWork("go.work", text, nil)
		if err != nil {
			t.Fatalf("the copy does not parse: %v\n%s", err, text)
		}
		if len(wf.Use) != len(gw.Use) || len(wf.Replace) != len(gw.Replace) {
			t.Fatalf("the copy has %d uses and %d replaces, want %d and %d:\n%s", len(wf.Use), len(wf.Replace), len(gw.Use), len(gw.Replace), text)
		}
		for _, u := range wf.Use {
			if u.Path != "/published/tree" && !strings.HasPrefix(u.Path, "/published/tree/") {
				t.Fatalf("the copy uses %q", u.Path)
			}
		}
	})
}
