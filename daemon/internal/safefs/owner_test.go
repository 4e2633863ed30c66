//go:build linux

package safefs

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hanzoai/lsp/daemon/internal/servertest"
)

// TestLockedOutByOwner: a jail that runs as the daemon's own uid
// (unprivileged mode) owns the directories it makes in its home and can
// chmod them to keep the daemon, which has no permission override, out.
// StatTree still measures what they hold, RemoveAll still removes them,
// and GrantOwner unlocks a locked home's top — each through the directory's
// own descriptor, never by a name a link could replace.
func TestLockedOutByOwner(t *testing.T) {
	if os.Geteuid() == 0 {
		// Root reads and removes whatever the modes say: the test
		// means nothing unless it runs as an ordinary uid.
		servertest.AsNobody(t, "TestLockedOutByOwner")
		return
	}
	home, hostDir, hostFile := fixture(t)
	// 64 KiB behind a directory locked to 000 inside another, and a file
	// behind one that can be listed but not searched (0400).
	for _, d := range []string{"x/y", "z"} {
		if err := os.MkdirAll(filepath.Join(home, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"x/y/f", "z/f"} {
		if err := os.WriteFile(filepath.Join(home, f), bytes.Repeat([]byte("b"), 64<<10), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A link beside them: granting must not reach the host through it.
	if err := os.Symlink(hostDir, filepath.Join(home, "l")); err != nil {
		t.Fatal(err)
	}
	lock := func() {
		t.Helper()
		for _, d := range []struct {
			name string
			mode os.FileMode
		}{{"x/y", 0}, {"x", 0}, {"z", 0o400}} {
			if err := os.Chmod(filepath.Join(home, d.name), d.mode); err != nil {
				t.Fatal(err)
			}
		}
	}
	lock()
	before, _ := os.Stat(hostDir)
	var files int64
	if err := open(t, home).StatTree(func(st *unix.Stat_t) bool {
		if st.Mode&unix.S_IFMT == unix.S_IFREG {
			files += st.Size
		}
		return true
	}); err != nil {
		t.Fatalf("StatTree of a home with locked directories: %v", err)
	}
	if files != 2*64<<10 {
		t.Fatalf("StatTree saw %d bytes of files, want %d", files, 2*64<<10)
	}
	// Locked again (StatTree unlocked them), and the home's top too:
	// GrantOwner unlocks that through its trusted parent.
	lock()
	if err := os.Chmod(home, 0); err != nil {
		t.Fatal(err)
	}
	if err := GrantOwner(home, 0o700); err != nil {
		t.Fatal(err)
	}
	// As workspace.DeleteHome does: moved aside (another parent: the move
	// writes its ".."), then removed.
	grave := filepath.Join(filepath.Dir(home), "staging", "grave")
	if err := os.Mkdir(filepath.Dir(grave), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(home, grave); err != nil {
		t.Fatalf("moving a locked home aside: %v", err)
	}
	if err := RemoveAll(grave); err != nil {
		t.Fatalf("RemoveAll of a home with locked directories: %v", err)
	}
	if _, err := os.Lstat(grave); !os.IsNotExist(err) {
		t.Fatalf("home still there: %v", err)
	}
	if after, _ := os.Stat(hostDir); after.Mode() != before.Mode() {
		t.Fatalf("the host directory behind a link changed mode: %v → %v", before.Mode(), after.Mode())
	}
	unchanged(t, hostDir, hostFile)
}
