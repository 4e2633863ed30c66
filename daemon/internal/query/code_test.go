package query

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"

	"github.com/hanzoai/lsp/daemon/internal/pool"
	"github.com/hanzoai/lsp/daemon/internal/uri"
	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
)

// TestExternalCodeNeverFollowsLinks: the module cache lives in the
// workspace's home, which jailed servers write. Code for a location in
// it is read beneath the home with no link followed anywhere: a link a
// jail planted as a module directory, as a file, or in place of the
// cache's own directories reads nothing.
func TestExternalCodeNeverFollowsLinks(t *testing.T) {
	root := t.TempDir()
	w := &pool.Workspace{Dir: filepath.Join(root, "tree"), Home: filepath.Join(root, "home")}
	secret := filepath.Join(root, "secret")
	mod := filepath.Join(w.Home, "go", "pkg", "mod")
	std := filepath.Join(root, "goroot", "src")
	for _, d := range []string{w.Dir, secret, filepath.Join(mod, "example.com", "!big@v1.0.0"), filepath.Join(std, "io")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p, s string) {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(secret, "x.go"), "package secret\n")
	write(filepath.Join(mod, "example.com", "!big@v1.0.0", "a.go"), "package big\n\nfunc A() {}\n")
	write(filepath.Join(std, "io", "io.go"), "package io\n")
	link := func(target, p string) {
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	link(secret, filepath.Join(mod, "example.com", "evil@v1.0.0"))
	link(filepath.Join(secret, "x.go"), filepath.Join(mod, "example.com", "!big@v1.0.0", "link.go"))
	r := &Runner{Externals: func(*pool.Workspace) []uri.External {
		return []uri.External{{Dir: std, Module: "std@go1.26.8"}, {Dir: mod}}
	}}
	w.Derived(scrubKey{}, func() any { return strings.NewReplacer(root, "$ROOT") })

	for _, tc := range []struct {
		module, path string
		ok           bool
	}{
		{"example.com/Big@v1.0.0", "a.go", true},
		{"std@go1.26.8", "io/io.go", true},
		{"example.com/evil@v1.0.0", "x.go", false},      // a planted module directory
		{"example.com/Big@v1.0.0", "link.go", false},    // a planted file
		{"example.com/Big@v1.0.0", "../../x.go", false}, // out of the module
		{"std@go1.0", "io/io.go", false},                // no such root
	} {
		b, err := r.externalFile(w, tc.module, tc.path, maxExternalFile)
		if (err == nil) != tc.ok {
			t.Errorf("externalFile(%s, %s) = %q, %v; want ok=%v", tc.module, tc.path, b, err, tc.ok)
		}
	}

	// The cache's own directory replaced by a link: nothing is read
	// through it either.
	if err := os.Rename(filepath.Join(w.Home, "go"), filepath.Join(root, "moved")); err != nil {
		t.Fatal(err)
	}
	link(filepath.Join(root, "moved"), filepath.Join(w.Home, "go"))
	if b, err := r.externalFile(w, "example.com/Big@v1.0.0", "a.go", maxExternalFile); err == nil {
		t.Errorf("read through a linked home/go: %q", b)
	}

	// Through the answer: a location whose source cannot be read carries
	// no code, and the answer says so.
	cd := r.newCoder(w, 1)
	resp := &daemonv1.QueryResponse{Result: &daemonv1.QueryResponse_Locations{Locations: &daemonv1.Locations{Items: []*daemonv1.Location{
		{Path: "io/io.go", External: true, Module: "std@go1.26.8", Range: &daemonv1.Range{Start: &daemonv1.Position{}, End: &daemonv1.Position{}}},
		{Path: "x.go", External: true, Module: "example.com/evil@v1.0.0", Range: &daemonv1.Range{Start: &daemonv1.Position{}, End: &daemonv1.Position{}}},
	}}}}
	attachCode(cd, &converter{}, resp, false, false)
	items := resp.GetLocations().GetItems()
	if got := items[0].GetCode().GetLines(); len(got) != 1 || got[0] != "package io" {
		t.Errorf("std code = %q", got)
	}
	if items[1].Code != nil || len(cd.warnings()) != 1 {
		t.Errorf("planted module: code %v, warnings %v", items[1].Code, cd.warnings())
	}
}

// TestCodeBudgetStopsReading: once an answer has read its budget of
// source, no further file is read at all (a references answer over many
// large files read each in full and threw it away), and code lines carry
// no host path.
func TestCodeBudgetStopsReading(t *testing.T) {
	w, root, std := stdWorkspace(t)
	line := "// " + root + " is where this daemon keeps its files\n"
	big := strings.Repeat(line, 7<<20/len(line))
	const files = 12
	for i := range files {
		if err := os.WriteFile(filepath.Join(std, fmt.Sprintf("f%d.go", i)), []byte(big), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := &Runner{Externals: func(*pool.Workspace) []uri.External { return []uri.External{{Dir: std, Module: "std@go1.26.8"}} }}
	w.Derived(scrubKey{}, func() any { return strings.NewReplacer(root, "$ROOT") })
	// What reading n files allocates, and what they carried.
	read := func(n int) (*coder, int, uint64) {
		cd := r.newCoder(w, 0)
		var got int
		var before, after goruntime.MemStats
		goruntime.ReadMemStats(&before)
		for i := range n {
			if c := cd.code("std@go1.26.8", fmt.Sprintf("f%d.go", i), 0, 0); c != nil {
				got++
				if strings.Contains(strings.Join(c.Lines, "\n"), root) {
					t.Errorf("code line carries the host path: %q", c.Lines)
				}
			}
		}
		goruntime.ReadMemStats(&after)
		return cd, got, after.TotalAlloc - before.TotalAlloc
	}
	// Four files fit the budget. Asking for twelve must allocate about
	// what the four do: reading the other eight in full and throwing
	// them away would add at least 56 MiB.
	_, fit, four := read(4)
	cd, got, twelve := read(files)
	if twelve > four+3*(7<<20) {
		t.Errorf("twelve files allocated %d MiB, the four that fit %d MiB: files past the budget were read", twelve>>20, four>>20)
	}
	if fit != 4 || got != fit {
		t.Errorf("%d of 4 and %d of 12 files carried code: want the four that fit the budget", fit, got)
	}
	if cd.read > maxSourceBytes {
		t.Errorf("read %d bytes of source, budget %d", cd.read, maxSourceBytes)
	}
	if !cd.cut {
		t.Error("the answer does not say its code was cut")
	}
}

// TestCodeBudgetStopsReadingTreeFiles: the same budget for the tree's own
// files, which the workspace's document reader reads: a file larger than
// what is left is not read, and the document cache holds at most its
// byte bound however many large files an answer touches.
func TestCodeBudgetStopsReadingTreeFiles(t *testing.T) {
	root := t.TempDir()
	w := &pool.Workspace{Dir: filepath.Join(root, "tree"), Home: filepath.Join(root, "home")}
	if err := os.MkdirAll(w.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("// a line of a large file\n", 7<<20/26)
	const files = 12
	for i := range files {
		if err := os.WriteFile(filepath.Join(w.Dir, fmt.Sprintf("f%d.go", i)), []byte(big), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := &Runner{MaxDocument: 8 << 20, Externals: func(*pool.Workspace) []uri.External { return nil }}
	w.Derived(scrubKey{}, func() any { return strings.NewReplacer() })
	cd := r.newCoder(w, 0)
	var before, after goruntime.MemStats
	goruntime.ReadMemStats(&before)
	got := 0
	for i := range files {
		if cd.code("", fmt.Sprintf("f%d.go", i), 0, 0) != nil {
			got++
		}
	}
	goruntime.ReadMemStats(&after)
	if got != 4 || !cd.cut || cd.read > maxSourceBytes {
		t.Errorf("%d files carried code, cut %v, read %d; want the four that fit the budget of %d, cut", got, cd.cut, cd.read, maxSourceBytes)
	}
	// The four that fit are read once each (and hashed, split); reading
	// the other eight would add at least 56 MiB.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4*3*(7<<20)+(16<<20) {
		t.Errorf("twelve files allocated %d MiB: files past the budget were read", alloc>>20)
	}
}

// TestReadTooLargeIsNotMissing: reading an external file over the bound is
// a 400 saying so, not "no such file"; a file that is not there is still
// not found.
func TestReadTooLargeIsNotMissing(t *testing.T) {
	w, _, std := stdWorkspace(t)
	if err := os.WriteFile(filepath.Join(std, "big.go"), bytes.Repeat([]byte("// x\n"), maxExternalFile/5+1), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &Runner{Externals: func(*pool.Workspace) []uri.External { return []uri.External{{Dir: std, Module: "std@go1.26.8"}} }}
	w.Derived(scrubKey{}, func() any { return strings.NewReplacer() })
	for _, tc := range []struct {
		path string
		want daemonv1.Status
	}{{"big.go", daemonv1.Status_STATUS_INVALID_REQUEST}, {"none.go", daemonv1.Status_STATUS_NOT_FOUND}} {
		resp := r.read(w, &daemonv1.QueryRequest{Op: daemonv1.Op_OP_READ, Module: "std@go1.26.8", Path: tc.path, EndLine: 10})
		if resp.GetStatus() != tc.want {
			t.Errorf("read %s: %v %q; want %v", tc.path, resp.GetStatus(), resp.GetMessage(), tc.want)
		}
	}
}

// stdWorkspace is a workspace under a temporary root, and the directory
// of a standard library's sources beside it (root/goroot/src).
func stdWorkspace(t *testing.T) (w *pool.Workspace, root, std string) {
	t.Helper()
	root = t.TempDir()
	w = &pool.Workspace{Dir: filepath.Join(root, "tree"), Home: filepath.Join(root, "home")}
	std = filepath.Join(root, "goroot", "src")
	if err := os.MkdirAll(std, 0o755); err != nil {
		t.Fatal(err)
	}
	return w, root, std
}
