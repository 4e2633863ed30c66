package workspace

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
)

// chains is n empty files, each at the end of its own chain of depth
// directories (dNNNNN/a/a/…/f): no bytes, each within the depth bound,
// and n×depth directories on disk.
func chains(n, depth int) []*daemonv1.FileEntry {
	empty, _ := entry("x", "")
	files := make([]*daemonv1.FileEntry, n)
	for i := range files {
		p := fmt.Sprintf("d%05d/", i) + strings.Repeat("a/", depth-1) + "f"
		files[i] = &daemonv1.FileEntry{Path: p, Sha256: empty.Sha256}
	}
	return files
}

// TestManifestDirectoriesBounded: distinct directories are bounded like
// files, bytes and depth. The default refuses 2,000 chains of 60
// directories (120,000: the shape that, at 100,000 files, made 6 million
// directories for 0 bytes) before anything is written; a directory shared
// by many files counts once, and MaxDirs itself is allowed.
func TestManifestDirectoriesBounded(t *testing.T) {
	lim := DefaultLimits()
	if lim.MaxDirs != 100_000 {
		t.Fatalf("default MaxDirs = %d, want 100000", lim.MaxDirs)
	}
	files := chains(2000, 60)
	_, err := CheckManifest(files, lim)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "more than 100000 directories") {
		t.Fatalf("CheckManifest of 120,000 directories: %v", err)
	}
	s, err := NewStore(t.TempDir(), lim)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Write(testKey, "p", files, strings.NewReader(""), nil); ok || !errors.Is(err, ErrInvalid) {
		t.Fatalf("Write = %v, %v; want ErrInvalid", ok, err)
	}
	if left, _ := os.ReadDir(filepath.Join(s.root, "staging")); len(left) != 0 {
		t.Fatalf("a refused tree left %v staged", left)
	}

	// a, a/b, a/c: three, however many files share them.
	shared, _ := manifest([2]string{"a/b/x", ""}, [2]string{"a/b/y", ""}, [2]string{"a/c/z", ""}, [2]string{"a/w", ""}, [2]string{"top", ""})
	lim.MaxDirs = 3
	if _, err := CheckManifest(shared, lim); err != nil {
		t.Fatalf("three directories within MaxDirs 3: %v", err)
	}
	lim.MaxDirs = 2
	if _, err := CheckManifest(shared, lim); !errors.Is(err, ErrInvalid) {
		t.Fatalf("three directories within MaxDirs 2: %v", err)
	}
	lim.MaxDirs = 120
	if _, err := CheckManifest(chains(2, 60), lim); err != nil {
		t.Fatalf("120 directories within MaxDirs 120: %v", err)
	}
	// The walk that counts still finds a file used as a directory, also
	// below a directory another file counted first.
	clash, _ := manifest([2]string{"a/b/x", ""}, [2]string{"a/b", ""})
	if _, err := CheckManifest(clash, DefaultLimits()); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "is a file and a directory") {
		t.Fatalf("a file used as a directory: %v", err)
	}
	deep, _ := manifest([2]string{"a/b/c/x", ""}, [2]string{"a/y", ""}, [2]string{"a/b/c/d/z", ""}, [2]string{"a/b/c/d", ""})
	for range 20 { // map order varies: which file is walked first
		if _, err := CheckManifest(deep, DefaultLimits()); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "is a file and a directory") {
			t.Fatalf("a file used as a directory below a counted one: %v", err)
		}
	}
}
