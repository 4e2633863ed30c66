//go:build linux

package safefs

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// fixture is a trusted dir holding a jail-writable "home" and, beside it,
// a host directory with a file that links planted in the home point at.
func fixture(t *testing.T) (home, hostDir, hostFile string) {
	t.Helper()
	root := t.TempDir()
	home, hostDir = filepath.Join(root, "home"), filepath.Join(root, "host")
	hostFile = filepath.Join(hostDir, "f")
	for _, d := range []string{home, hostDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(hostFile, []byte("host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return home, hostDir, hostFile
}

func open(t *testing.T, p string) *Dir {
	t.Helper()
	d, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func unchanged(t *testing.T, hostDir, hostFile string) {
	t.Helper()
	if b, _ := os.ReadFile(hostFile); string(b) != "host\n" {
		t.Errorf("host file = %q", b)
	}
	if es, _ := os.ReadDir(hostDir); len(es) != 1 {
		t.Errorf("host dir holds %d entries", len(es))
	}
}

func TestWriteFileReplacesLink(t *testing.T) {
	home, hostDir, hostFile := fixture(t)
	if err := os.Symlink(hostFile, filepath.Join(home, "mode")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(hostFile, filepath.Join(home, "hard")); err != nil {
		t.Fatal(err)
	}
	d := open(t, home)
	for _, n := range []string{"mode", "hard"} {
		if err := d.WriteFile(n, []byte("off\n"), 0o600, Keep); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Lstat(filepath.Join(home, n))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v", n, fi, err)
		}
	}
	unchanged(t, hostDir, hostFile)
	for _, bad := range []string{"", ".", "..", "a/b"} {
		if err := d.WriteFile(bad, nil, 0o600, Keep); !errors.Is(err, ErrNotPlain) {
			t.Errorf("WriteFile(%q) = %v", bad, err)
		}
	}
}

func TestMkdirAllLinks(t *testing.T) {
	home, hostDir, hostFile := fixture(t)
	if err := os.Symlink(hostDir, filepath.Join(home, "cache")); err != nil {
		t.Fatal(err)
	}
	d := open(t, home)
	// A link as the last component is ENOTDIR (O_DIRECTORY|O_NOFOLLOW),
	// one on the way ELOOP (RESOLVE_NO_SYMLINKS).
	if _, err := d.MkdirAll("cache/go-build", 0o700, MkdirOpts{}); !errors.Is(err, syscall.ENOTDIR) {
		t.Errorf("through a link: %v, want ENOTDIR", err)
	}
	if _, err := d.OpenDir("cache"); !errors.Is(err, syscall.ENOTDIR) {
		t.Errorf("OpenDir of a link: %v, want ENOTDIR", err)
	}
	if _, err := d.OpenDir("cache/x"); !errors.Is(err, syscall.ELOOP) {
		t.Errorf("OpenDir through a link: %v, want ELOOP", err)
	}
	if _, err := d.OpenDir("../host"); err == nil {
		t.Error("OpenDir left the directory")
	}
	sub, err := d.MkdirAll("cache/go-build", 0o700, MkdirOpts{ReplaceNonDirs: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := sub.WriteFile("x", []byte("1"), 0o644, Keep); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(home, "cache/go-build/x")); err != nil || string(b) != "1" {
		t.Errorf("x = %q, %v", b, err)
	}
	if fi, err := os.Lstat(filepath.Join(home, "cache")); err != nil || !fi.IsDir() {
		t.Errorf("cache: %v %v", fi, err)
	}
	unchanged(t, hostDir, hostFile)
}

func TestChownTreeSkipsLinks(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown needs root")
	}
	home, hostDir, hostFile := fixture(t)
	if err := os.MkdirAll(filepath.Join(home, "a/b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "a/b/f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{"a/link", "a/b/dirlink"} {
		if err := os.Symlink(hostDir, filepath.Join(home, l)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Link(hostFile, filepath.Join(home, "a/hard")); err != nil {
		t.Fatal(err)
	}
	const uid = 4321
	if err := open(t, home).ChownTree(uid, uid); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"", "a", "a/b", "a/b/f", "a/link"} {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(home, p), &st); err != nil || st.Uid != uid {
			t.Errorf("%q: uid %d, %v", p, st.Uid, err)
		}
	}
	for _, p := range []string{hostDir, hostFile} {
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil || st.Uid != 0 {
			t.Errorf("host %s given to %d, %v", p, st.Uid, err)
		}
	}
}

func TestRemoveAllDoesNotFollow(t *testing.T) {
	home, hostDir, hostFile := fixture(t)
	if err := os.MkdirAll(filepath.Join(home, "ro/sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(hostDir, filepath.Join(home, "ro/sub/link")); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"ro/sub", "ro"} {
		if err := os.Chmod(filepath.Join(home, d), 0o555); err != nil {
			t.Fatal(err)
		}
	}
	removedWhole(t, home, hostDir, hostFile)
	if err := RemoveAll(home); err != nil {
		t.Errorf("a missing path: %v", err)
	}
	if err := RemoveAll("/"); err == nil {
		t.Error("removed /")
	}
}

func TestPath(t *testing.T) {
	home, _, _ := fixture(t)
	d := open(t, home)
	if err := os.WriteFile(filepath.Join(d.Path(), "x"), []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(home, "x")); err != nil {
		t.Fatal(err)
	}
}

func TestMkdirAllPath(t *testing.T) {
	home, hostDir, hostFile := fixture(t)
	d := open(t, home)
	if err := os.Symlink(hostDir, filepath.Join(home, "l")); err != nil {
		t.Fatal(err)
	}
	if _, err := MkdirAllPath(d.Path()+"/l/x", 0o755, MkdirOpts{}); err == nil {
		t.Error("MkdirAllPath followed a link below a Dir.Path")
	}
	sub, err := MkdirAllPath(d.Path()+"/a/b", 0o755, MkdirOpts{})
	if err != nil {
		t.Fatal(err)
	}
	sub.Close()
	if _, err := MkdirAllPath(filepath.Join(home, "l", "y"), 0o755, MkdirOpts{}); err == nil {
		t.Error("MkdirAllPath followed a link in an absolute path")
	}
	sub, err = MkdirAllPath(filepath.Join(home, "c"), 0o755, MkdirOpts{})
	if err != nil {
		t.Fatal(err)
	}
	priv, err := sub.MkdirPrivate("p")
	if err != nil {
		t.Fatal(err)
	}
	priv.Close()
	sub.Close()
	if fi, err := os.Stat(filepath.Join(home, "a/b")); err != nil || !fi.IsDir() {
		t.Fatal(err)
	}
	unchanged(t, hostDir, hostFile)
}

// TestNoOpenat2Refuses: on a kernel without openat2 nothing is done, and
// nothing falls back to following a link.
func TestNoOpenat2Refuses(t *testing.T) {
	home, hostDir, hostFile := fixture(t)
	if err := os.Symlink(hostFile, filepath.Join(home, "mode")); err != nil {
		t.Fatal(err)
	}
	old := sysOpenat2
	sysOpenat2 = func(int, string, *unix.OpenHow) (int, error) { return -1, unix.ENOSYS }
	defer func() { sysOpenat2 = old }()
	if _, err := Open(home); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("Open = %v, want ErrUnsupported", err)
	}
	if err := RemoveAll(filepath.Join(home, "mode")); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("RemoveAll = %v, want ErrUnsupported", err)
	}
	unchanged(t, hostDir, hostFile)
}

// TestOpenFdPathBelow: a Dir.Path opens its directory again, but a link
// below one is not followed.
func TestOpenFdPathBelow(t *testing.T) {
	home, hostDir, _ := fixture(t)
	d := open(t, home)
	if err := os.Symlink(hostDir, filepath.Join(home, "l")); err != nil {
		t.Fatal(err)
	}
	again, err := Open(d.Path())
	if err != nil {
		t.Fatal(err)
	}
	again.Close()
	if _, err := Open(d.Path() + "/l"); err == nil {
		t.Error("Open followed a link below a Dir.Path")
	}
}

// TestMoveIn: a staged directory or file moves in by name; a link there
// is replaced, whether a file or a directory moves (never followed), a
// directory there is kept, and perm reaches the moved entry.
func TestMoveIn(t *testing.T) {
	home, hostDir, hostFile := fixture(t)
	stage := t.TempDir()
	for _, n := range []string{"m@v1", "kept@v1", "linked@v1"} {
		if err := os.MkdirAll(filepath.Join(stage, n), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(stage, n, "f"), []byte("new"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(stage, "list"), []byte("v1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(home, "kept@v1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "kept@v1", "old"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(hostFile, filepath.Join(home, "list")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(hostDir, filepath.Join(home, "linked@v1")); err != nil {
		t.Fatal(err)
	}
	d, src := open(t, home), open(t, stage)
	if kept, err := d.MoveIn(src, "m@v1", 0o555); kept || err != nil {
		t.Fatalf("m@v1: kept %v, %v", kept, err)
	}
	if fi, err := os.Lstat(filepath.Join(home, "m@v1")); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o555 {
		t.Errorf("m@v1: %v %v", fi, err)
	}
	if kept, err := d.MoveIn(src, "kept@v1", 0o555); !kept || err != nil {
		t.Errorf("kept@v1: kept %v, %v", kept, err)
	}
	if _, err := os.Stat(filepath.Join(home, "kept@v1", "old")); err != nil {
		t.Errorf("the existing directory was replaced: %v", err)
	}
	if kept, err := d.MoveIn(src, "list", 0); kept || err != nil {
		t.Errorf("list: kept %v, %v", kept, err)
	}
	if fi, err := os.Lstat(filepath.Join(home, "list")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("list: %v %v", fi, err)
	}
	// A directory over a link to a directory: the link is replaced, never
	// followed (refused, it left the home without the module for good).
	if kept, err := d.MoveIn(src, "linked@v1", 0o555); kept || err != nil {
		t.Errorf("linked@v1: kept %v, %v", kept, err)
	}
	if b, err := os.ReadFile(filepath.Join(home, "linked@v1", "f")); err != nil || string(b) != "new" {
		t.Errorf("linked@v1 after the move: %q, %v", b, err)
	}
	if fi, err := os.Lstat(filepath.Join(home, "linked@v1")); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o555 {
		t.Errorf("linked@v1: %v %v", fi, err)
	}
	if _, err := d.MoveIn(src, "../x", 0); !errors.Is(err, ErrNotPlain) {
		t.Errorf("../x: %v", err)
	}
	unchanged(t, hostDir, hostFile)
}

// TestReadFileLstatLinks: ReadFile and Lstat take a relative path and
// follow no link on it; ReadFile is bounded.
func TestReadFileLstatLinks(t *testing.T) {
	home, hostDir, hostFile := fixture(t)
	if err := os.MkdirAll(filepath.Join(home, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "a/f"), []byte("12345"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(hostDir, filepath.Join(home, "dl")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(hostFile, filepath.Join(home, "a/fl")); err != nil {
		t.Fatal(err)
	}
	d := open(t, home)
	if b, err := d.ReadFile("a/f", 5); err != nil || string(b) != "12345" {
		t.Errorf("a/f = %q, %v", b, err)
	}
	if _, err := d.ReadFile("a/f", 4); !errors.Is(err, ErrTooLarge) {
		t.Errorf("over the bound: %v", err)
	}
	for _, p := range []string{"a/fl", "dl/f"} {
		if b, err := d.ReadFile(p, 100); err == nil {
			t.Errorf("ReadFile(%s) read through a link: %q", p, b)
		}
	}
	if _, err := d.Lstat("a/fl"); err != nil {
		t.Errorf("a link as the last component is there: %v", err)
	}
	if _, err := d.Lstat("dl/f"); err == nil {
		t.Error("Lstat followed a link on the way")
	}
	if _, err := d.Lstat("a/missing"); err == nil {
		t.Error("Lstat of a missing file")
	}
}

// TestMkdirAllKeepFound: with KeepFound only the directories made get
// Owner.
func TestMkdirAllKeepFound(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown needs root")
	}
	home, _, _ := fixture(t)
	if err := os.Mkdir(filepath.Join(home, "found"), 0o755); err != nil {
		t.Fatal(err)
	}
	const uid = 4321
	sub, err := open(t, home).MkdirAll("found/made", 0o755, MkdirOpts{Owner: Owner{uid, uid}, KeepFound: true})
	if err != nil {
		t.Fatal(err)
	}
	sub.Close()
	for p, want := range map[string]uint32{"found": 0, "found/made": uid} {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(home, p), &st); err != nil || st.Uid != want {
			t.Errorf("%s: uid %d, want %d (%v)", p, st.Uid, want, err)
		}
	}
	if o, err := open(t, filepath.Join(home, "found/made")).Owner(); err != nil || o != (Owner{uid, uid}) {
		t.Errorf("Owner = %v, %v", o, err)
	}
	if o, err := open(t, home).Owner(); err != nil || o != Keep {
		t.Errorf("Owner of the daemon's = %v, %v", o, err)
	}
}

func TestReadNames(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"a", "b", "c"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/", filepath.Join(dir, "l")); err != nil {
		t.Fatal(err)
	}
	d := open(t, dir)
	all, err := d.ReadNames(10)
	if err != nil || len(all) != 4 {
		t.Fatalf("ReadNames(10) = %q, %v; want the 4 entries", all, err)
	}
	if some, err := d.ReadNames(2); err != nil || len(some) != 2 {
		t.Fatalf("ReadNames(2) = %q, %v", some, err)
	}
	empty := open(t, t.TempDir())
	if none, err := empty.ReadNames(5); err != nil || len(none) != 0 {
		t.Fatalf("empty directory: %q, %v", none, err)
	}
}

// chain makes depth nested directories named d under dir, one level at a
// time (the path soon passes PATH_MAX), and opens the deepest.
func chain(t *testing.T, dir *Dir, depth int) *Dir {
	t.Helper()
	bottom, err := dir.MkdirAll(strings.TrimSuffix(strings.Repeat("d/", depth), "/"), 0o755, MkdirOpts{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		bottom.Close()
		_ = dir.RemoveAll("d") // before t.TempDir's cleanup, which holds a descriptor per level
	})
	return bottom
}

func openFds(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

// TestStatTreeDeepNoLinks: StatTree reports a link as itself and never
// what it points at, and reaches the bottom of a chain whose path is far
// beyond PATH_MAX with a bounded number of descriptors.
func TestStatTreeDeepNoLinks(t *testing.T) {
	home, hostDir, hostFile := fixture(t)
	if err := os.Symlink(hostDir, filepath.Join(home, "l")); err != nil {
		t.Fatal(err)
	}
	d := open(t, home)
	const depth = 2100 // "d/" × 2100: 4200 bytes, past PATH_MAX (4096)
	if err := chain(t, d, depth).WriteFile("f", []byte("bottom"), 0o644, Keep); err != nil {
		t.Fatal(err)
	}
	var host syscall.Stat_t
	if err := syscall.Stat(hostFile, &host); err != nil {
		t.Fatal(err)
	}
	fds := openFds(t)
	var dirs, links, files, bottomFds int
	err := d.StatTree(func(st *unix.Stat_t) bool {
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			dirs++
		case unix.S_IFLNK:
			links++
		case unix.S_IFREG:
			files++
			if st.Ino == host.Ino {
				t.Error("reported the file a link points at")
			}
			if st.Size == 6 {
				bottomFds = openFds(t)
			}
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if dirs != depth+1 || links != 1 || files != 1 || bottomFds == 0 {
		t.Errorf("reported %d directories (want %d), %d links (want 1), %d files (want the bottom one)", dirs, depth+1, links, files)
	}
	if bottomFds > fds+heldDirs {
		t.Errorf("%d descriptors open at the bottom, %d before the walk (bound: %d more)", bottomFds, fds, heldDirs)
	}
	if n := openFds(t); n != fds {
		t.Errorf("%d descriptors open after the walk, %d before", n, fds)
	}
	unchanged(t, hostDir, hostFile)
}

// TestStatTreeSwappedForLink: a directory that becomes a link to a host
// directory between its lstat and its opening (done here from fn, at
// exactly that moment) is reported as first seen and never entered.
func TestStatTreeSwappedForLink(t *testing.T) {
	home, hostDir, hostFile := fixture(t)
	sub, link := filepath.Join(home, "sub"), filepath.Join(home, "link")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(hostDir, link); err != nil {
		t.Fatal(err)
	}
	var subSt, host syscall.Stat_t
	if err := syscall.Lstat(sub, &subSt); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(hostFile, &host); err != nil {
		t.Fatal(err)
	}
	err := open(t, home).StatTree(func(st *unix.Stat_t) bool {
		if st.Ino == subSt.Ino {
			if err := unix.Renameat2(unix.AT_FDCWD, sub, unix.AT_FDCWD, link, unix.RENAME_EXCHANGE); err != nil {
				t.Fatal(err)
			}
		}
		if st.Ino == host.Ino {
			t.Error("walked into the host directory through a swapped link")
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	unchanged(t, hostDir, hostFile)
}

// TestStatTreeMovedAbove: deeper than the descriptors it holds, the walk
// goes back up through "..", and a directory moved meanwhile (here out of
// the tree, into the host directory) ends it with an error instead of
// walking where ".." now leads: the host's f, named like an entry of the
// directory it left, is never reported.
func TestStatTreeMovedAbove(t *testing.T) {
	home, hostDir, hostFile := fixture(t)
	d := open(t, home)
	if err := chain(t, d, 3*heldDirs).WriteFile("f", []byte("bottom"), 0o644, Keep); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "d", "d", "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var host syscall.Stat_t
	if err := syscall.Stat(hostFile, &host); err != nil {
		t.Fatal(err)
	}
	// The directory at depth 3: its descriptor is long released when the
	// walk reaches the bottom.
	moved := filepath.Join(home, "d", "d", "d")
	err := d.StatTree(func(st *unix.Stat_t) bool {
		if st.Mode&unix.S_IFMT == unix.S_IFREG && st.Size == 6 {
			if err := os.Rename(moved, filepath.Join(hostDir, "moved")); err != nil {
				t.Fatal(err)
			}
		}
		if st.Ino == host.Ino {
			t.Error("walked the host directory")
		}
		return true
	})
	if !errors.Is(err, errMoved) {
		t.Errorf("StatTree = %v, want %v", err, errMoved)
	}
}

// TestRemoveAllDeep: a tree nested deeper than maxDepth (twice over) goes
// whole, read-only directories and links included, following none.
func TestRemoveAllDeep(t *testing.T) {
	home, hostDir, hostFile := fixture(t)
	d := open(t, home)
	bottom := chain(t, d, 2*maxDepth+100)
	if err := bottom.WriteFile("f", []byte("x"), 0o444, Keep); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(hostDir, filepath.Join(bottom.Path(), "l")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fchmod(bottom.Fd(), 0o555); err != nil {
		t.Fatal(err)
	}
	removedWhole(t, home, hostDir, hostFile)
}

// removedWhole removes home with RemoveAll: it goes, and what its links
// pointed at outside stays as it was.
func removedWhole(t *testing.T, home, hostDir, hostFile string) {
	t.Helper()
	if err := RemoveAll(home); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(home); !os.IsNotExist(err) {
		t.Errorf("home still there: %v", err)
	}
	unchanged(t, hostDir, hostFile)
}

// smallBatches makes the walks read n entries at a time for one test; the
// result is the most names a read returned.
func smallBatches(t *testing.T, n int) *int {
	t.Helper()
	most := new(int)
	oldBatch, oldHook := readBatch, onBatch
	readBatch, onBatch = n, func(got int) { *most = max(*most, got) }
	t.Cleanup(func() { readBatch, onBatch = oldBatch, oldHook })
	return most
}

// touch makes an empty file name in dir.
func touch(t *testing.T, dir *Dir, name string) {
	t.Helper()
	if err := unix.Mknodat(dir.Fd(), name, unix.S_IFREG|0o644, 0); err != nil {
		t.Fatal(err)
	}
}

// TestWideDirBatched: a directory of 20,000 entries (names up to 254
// bytes, some of them directories) is measured, given and removed whole,
// a batch of readBatch names at a time, never more.
func TestWideDirBatched(t *testing.T) {
	const batch, entries = 16, 20000
	most := smallBatches(t, batch)
	home, hostDir, hostFile := fixture(t)
	wide := filepath.Join(home, "wide")
	if err := os.Mkdir(wide, 0o755); err != nil {
		t.Fatal(err)
	}
	w := open(t, wide)
	files, dirs := 0, 2 // home and wide
	for i := range entries {
		n := strings.Repeat("n", i%250) + strconv.Itoa(i)
		if i%2000 != 0 {
			touch(t, w, n)
			files++
			continue
		}
		// A directory of a few batches, read-only, with a link.
		dirs++
		p := filepath.Join(wide, n)
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		sub := open(t, p)
		for j := range 3 * batch {
			touch(t, sub, strconv.Itoa(j))
			files++
		}
		if err := os.Symlink(hostDir, filepath.Join(p, "l")); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, 0o555); err != nil {
			t.Fatal(err)
		}
	}
	links := entries / 2000
	walk := func(want uint32) {
		t.Helper()
		seen := map[uint64]bool{}
		var gotFiles, gotDirs, gotLinks int
		err := open(t, home).StatTree(func(st *unix.Stat_t) bool {
			if seen[st.Ino] {
				t.Fatalf("inode %d reported twice", st.Ino) // and the walk ends
			}
			seen[st.Ino] = true
			if st.Mode&unix.S_IFMT != unix.S_IFLNK && st.Uid != want {
				t.Errorf("inode %d: uid %d, want %d", st.Ino, st.Uid, want)
			}
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFREG:
				gotFiles++
			case unix.S_IFDIR:
				gotDirs++
			case unix.S_IFLNK:
				gotLinks++
			}
			return true
		})
		if err != nil {
			t.Fatal(err)
		}
		if gotFiles != files || gotDirs != dirs || gotLinks != links {
			t.Errorf("StatTree saw %d files, %d directories, %d links; want %d, %d, %d", gotFiles, gotDirs, gotLinks, files, dirs, links)
		}
	}
	walk(uint32(os.Geteuid()))
	if os.Geteuid() == 0 {
		const uid = 4321
		if err := open(t, home).ChownTree(uid, uid); err != nil {
			t.Fatal(err)
		}
		walk(uid)
	}
	removedWhole(t, home, hostDir, hostFile)
	if *most == 0 || *most > batch {
		t.Errorf("the most names read at once: %d, want 1..%d", *most, batch)
	}
}

// TestStatTreeDeepBatched: below heldDirs, where a directory's descriptor
// is closed on the way down and opened again on the way up, the walk reads
// on from where it stopped: every entry once, none missed.
func TestStatTreeDeepBatched(t *testing.T) {
	const batch, perLevel = 16, 3 * 16
	most := smallBatches(t, batch)
	home, _, _ := fixture(t)
	d := open(t, home)
	depth := 2 * heldDirs
	chain(t, d, depth).Close()
	level := d
	for range depth {
		next, err := level.OpenDir("d")
		if err != nil {
			t.Fatal(err)
		}
		if level != d {
			level.Close()
		}
		level = next
		for j := range perLevel {
			touch(t, level, strconv.Itoa(j))
		}
	}
	level.Close()
	seen := map[uint64]bool{}
	var files, dirs int
	err := d.StatTree(func(st *unix.Stat_t) bool {
		if seen[st.Ino] {
			t.Fatalf("inode %d reported twice", st.Ino) // and the walk ends
		}
		seen[st.Ino] = true
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			files++
		case unix.S_IFDIR:
			dirs++
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if files != depth*perLevel || dirs != depth+1 {
		t.Errorf("StatTree saw %d files and %d directories, want %d and %d", files, dirs, depth*perLevel, depth+1)
	}
	if *most == 0 || *most > batch {
		t.Errorf("the most names read at once: %d, want 1..%d", *most, batch)
	}
}
