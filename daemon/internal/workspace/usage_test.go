package workspace

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hanzoai/lsp/daemon/internal/safefs"
)

// homeStore is a store with testKey's home made, as a prepare makes it.
func homeStore(t *testing.T) (*Store, Home) {
	t.Helper()
	s, err := NewStore(t.TempDir(), DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(s.HomeDir(testKey), 0o700); err != nil {
		t.Fatal(err)
	}
	return s, testKey.Home()
}

// deepChain nests depth directories named d in dir, one level at a time
// (as a jail can with mkdirat: the path soon passes PATH_MAX), and opens
// the deepest.
func deepChain(t *testing.T, dir string, depth int) *safefs.Dir {
	t.Helper()
	d, err := safefs.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	bottom, err := d.MkdirAll(strings.TrimSuffix(strings.Repeat("d/", depth), "/"), 0o755, safefs.MkdirOpts{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		bottom.Close()
		_ = RemoveAll(filepath.Join(dir, "d")) // before t.TempDir's cleanup, which holds a descriptor per level
	})
	return bottom
}

// TestUsageNeverFollowsASwappedDir: a jail that keeps swapping a
// directory of its home with a link to a directory outside (here one
// holding a 16 MiB sentinel) never gets the walk to count what the link
// points at, whenever the swap falls between the listing and the descent.
// Once the swapping stops, the link counts as a link.
func TestUsageNeverFollowsASwappedDir(t *testing.T) {
	s, h := homeStore(t)
	home := s.HomeDir(testKey)
	outside := filepath.Join(t.TempDir(), "outside")
	if err := os.Mkdir(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	const sentinel = 16 << 20
	if err := os.WriteFile(filepath.Join(outside, "big"), make([]byte, sentinel), 0o644); err != nil {
		t.Fatal(err)
	}
	// Entries listed before the pair widen the window between the
	// listing and the descent.
	for i := range 200 {
		if err := os.WriteFile(filepath.Join(home, fmt.Sprintf("f%03d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dir, link := filepath.Join(home, "zz-a"), filepath.Join(home, "zz-b")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = unix.Renameat2(unix.AT_FDCWD, dir, unix.AT_FDCWD, link, unix.RENAME_EXCHANGE)
		}
	}()
	var got int64
	for range 1000 {
		if got = homeBytes(t, s, h); got >= sentinel {
			break
		}
	}
	close(stop)
	wg.Wait()
	if got >= sentinel {
		t.Fatalf("home bytes %d: the walk followed a swapped link to the %d-byte sentinel", got, sentinel)
	}
	if got := homeBytes(t, s, h); got >= sentinel {
		t.Fatalf("home bytes %d: the walk followed a link to the %d-byte sentinel", got, sentinel)
	}
}

// TestUsageHardLinksOnce: ten thousand links to one file in a home are
// one file's disk, not ten thousand (which would make the budget evict
// other tenants' trees).
func TestUsageHardLinksOnce(t *testing.T) {
	s, h := homeStore(t)
	home := s.HomeDir(testKey)
	const size = 1 << 20
	f := filepath.Join(home, "f")
	if err := os.WriteFile(f, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	links := filepath.Join(home, "links")
	if err := os.Mkdir(links, 0o755); err != nil {
		t.Fatal(err)
	}
	before := homeBytes(t, s, h)
	for i := range 10000 {
		if err := os.Link(f, filepath.Join(links, fmt.Sprintf("l%05d", i))); err != nil {
			t.Fatal(err)
		}
	}
	// What the links add is the directory's own entries.
	if got := homeBytes(t, s, h); before < size || got-before >= size {
		t.Fatalf("home bytes %d with one 1 MiB file, %d with 10000 more links to it", before, got)
	}
}

// TestUsageBeyondPathMax: a file at the bottom of a chain of directories
// whose path is longer than PATH_MAX (4096 bytes) is counted.
func TestUsageBeyondPathMax(t *testing.T) {
	s, h := homeStore(t)
	bottom := deepChain(t, s.HomeDir(testKey), 2100) // "d/" × 2100: 4200 bytes
	before := homeBytes(t, s, h)
	const size = 1 << 20
	if err := bottom.WriteFile("f", make([]byte, size), 0o644, safefs.Keep); err != nil {
		t.Fatal(err)
	}
	if got := homeBytes(t, s, h); got-before < size {
		t.Fatalf("home bytes %d with a 1 MiB file past PATH_MAX, %d without", got, before)
	}
}

// TestDeleteHomeDeep: a home a jail nested 600 levels deep (more than any
// per-level walk holds descriptors for) is deleted whole, and nothing is
// left in staging.
func TestDeleteHomeDeep(t *testing.T) {
	s, h := homeStore(t)
	bottom := deepChain(t, s.HomeDir(testKey), 600)
	if err := bottom.WriteFile("f", []byte("x"), 0o444, safefs.Keep); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fchmod(bottom.Fd(), 0o555); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteHome(h); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(s.HomeDir(testKey)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the home survived DeleteHome: %v", err)
	}
	if left, _ := os.ReadDir(filepath.Join(s.Root(), "staging")); len(left) != 0 {
		t.Errorf("staging holds %d entries after DeleteHome", len(left))
	}
	// RemoveAll, which deletes trees and graves, alike.
	dir := filepath.Join(t.TempDir(), "deep")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	deepChain(t, dir, 600)
	if err := RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s survived RemoveAll: %v", dir, err)
	}
}

// homeBytes is h's measure, which must be complete.
func homeBytes(t *testing.T, s *Store, h Home) int64 {
	t.Helper()
	n, _, complete := s.HomeUsage(h)
	if !complete {
		t.Fatalf("home %v: too many entries to measure", h)
	}
	return n
}

// TestHomeEntriesBound: the walk measuring a home stops at
// MaxHomeEntries and says the measure is incomplete; under the bound it is
// complete, whatever the daemon's cache of the repository holds.
func TestHomeEntriesBound(t *testing.T) {
	lim := DefaultLimits()
	lim.MaxHomeEntries = 100
	s, err := NewStore(t.TempDir(), lim)
	if err != nil {
		t.Fatal(err)
	}
	h := testKey.Home()
	fill := func(dir string, n int, content []byte) {
		t.Helper()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprint("f", i)), content, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	fill(filepath.Join(s.homeDir(h), "a"), 97, nil)
	fill(filepath.Join(s.cacheDir(h), "a"), 200, nil)
	if _, _, complete := s.HomeUsage(h); !complete {
		t.Fatal("a home of 99 entries (its cache of 202), bound 100: incomplete")
	}
	fill(filepath.Join(s.homeDir(h), "b"), 0, nil)
	if _, _, complete := s.HomeUsage(h); complete {
		t.Fatal("a home of 100 entries, bound 100: complete")
	}
	// Links to one file count once in bytes, yet each is an entry.
	links, err := NewStore(t.TempDir(), lim)
	if err != nil {
		t.Fatal(err)
	}
	fill(links.homeDir(h), 1, []byte("x"))
	for i := range 200 {
		if err := os.Link(filepath.Join(links.homeDir(h), "f0"), filepath.Join(links.homeDir(h), fmt.Sprint("l", i))); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, complete := links.HomeUsage(h); complete {
		t.Fatal("a home of 202 entries, 201 of them links to one file, bound 100: complete")
	}
	// A thousand files of a block each: the walk stops near the bound.
	fill(filepath.Join(s.homeDir(h), "b"), 1000, []byte("x"))
	n, _, complete := s.HomeUsage(h)
	if complete {
		t.Fatal("a home of 1,100 entries, bound 100: complete")
	}
	if n > 200*4096 {
		t.Fatalf("the walk of a home bounded to 100 entries counted %d bytes: it went on past the bound", n)
	}
}
