package deps

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
)

// A Cargo.lock version or name that is not one plain file name is left
// out: it would name a path in the home (another tenant's tree through
// "..", or a wildcard).
func TestParseCargoLockRefusesPaths(t *testing.T) {
	lock := ""
	for _, v := range []string{"1.0.0", "1.2.3-rc.1+build.5", "../../../../other/x", "1.0.0/../../y", "*", "1.*.0", "1.0", "1.0.0-[a]", "1.0.0\\x"} {
		lock += "[[package]]\nname = \"serde\"\nversion = \"" + v + "\"\nsource = \"registry+x\"\n\n"
	}
	lock += "[[package]]\nname = \"..\"\nversion = \"1.0.0\"\nsource = \"registry+x\"\n"
	var got []string
	for _, c := range parseCargoLock([]byte(lock)) {
		got = append(got, c.Name+" "+c.Version)
	}
	if want := []string{"serde 1.0.0", "serde 1.2.3-rc.1+build.5"}; !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// A crate counts as offline only when a regular Cargo.toml is beneath
// registry/src/<registry>/<name>-<version>/, reached without a link; links
// a jailed server planted in the home are not followed.
func TestCargoOfflineNoLinks(t *testing.T) {
	root, home, elsewhere := t.TempDir(), t.TempDir(), t.TempDir()
	ws := runtime.Workspace{Root: root, Home: home}
	src := filepath.Join(runtime.CargoHome(ws), "registry", "src")
	write := func(p, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, p string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(src, "index.crates.io-1", "here-1.0.0", "Cargo.toml"), "[package]\n")
	// Outside the home, reached through planted links.
	write(filepath.Join(elsewhere, "reg", "viareg-1.0.0", "Cargo.toml"), "[package]\n")
	write(filepath.Join(elsewhere, "viadir-1.0.0", "Cargo.toml"), "[package]\n")
	write(filepath.Join(elsewhere, "toml"), "[package]\n")
	link(filepath.Join(elsewhere, "reg"), filepath.Join(src, "planted"))
	link(filepath.Join(elsewhere, "viadir-1.0.0"), filepath.Join(src, "index.crates.io-1", "viadir-1.0.0"))
	link(filepath.Join(elsewhere, "toml"), filepath.Join(src, "index.crates.io-1", "viafile-1.0.0", "Cargo.toml"))

	lock := ""
	for _, n := range []string{"here", "viareg", "viadir", "viafile", "absent"} {
		lock += "[[package]]\nname = \"" + n + "\"\nversion = \"1.0.0\"\nsource = \"registry+https://github.com/rust-lang/crates.io-index\"\n\n"
	}
	write(filepath.Join(root, "Cargo.toml"), "[package]\nname = \"p\"\n")
	write(filepath.Join(root, "Cargo.lock"), lock)
	var w warnings
	(*Fetcher)(nil).checkCargo(ws, &w)
	if len(w.all) != 1 {
		t.Fatalf("warnings %q", w.all)
	}
	want := "Cargo.lock pins 4 crate(s) not available offline (no crates mirror), unresolved: viareg 1.0.0, viadir 1.0.0, viafile 1.0.0, absent 1.0.0"
	if !strings.HasSuffix(w.all[0], want) {
		t.Fatalf("warning %q, want %q", w.all[0], want)
	}
}

func FuzzCargoToml(f *testing.F) {
	f.Add([]byte("[package]\nname = \"p\"\n[dependencies]\nserde = { version = \"1\" }\nlocal = { path = \"x\" }\n[target.'cfg(unix)'.dependencies]\nlibc = \"0.2\"\n[dependencies.rand]\nversion = \"0.8\"\n"))
	f.Add([]byte("[dev-dependencies]\n\"quoted\" = \"1\"\n# c\n[build-dependencies.x-y]\n[target.\"cfg(a)\".build-dependencies]\nbad name = 1\n"))
	f.Add([]byte("[dependencies]\n" + strings.Repeat("a = \"1\"\n", 100) + "[dependencies.../../x]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		names := cargoTomlDeps(data)
		if len(names) > maxCargoCrate {
			t.Fatalf("%d dependencies", len(names))
		}
		if !slices.IsSorted(names) {
			t.Fatalf("not sorted: %q", names)
		}
		for i, n := range names {
			if !crateNameRE.MatchString(n) {
				t.Fatalf("bad dependency name %q", n)
			}
			if i > 0 && names[i-1] == n {
				t.Fatalf("%q twice", n)
			}
		}
	})
}
