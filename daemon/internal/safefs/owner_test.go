//go:build linux

package safefs

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
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
		runAsNobody(t, "TestLockedOutByOwner")
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

// runAsNobody runs test in a copy of this test binary as uid and gid
// 65534, and fails with its output unless it ran and passed.
func runAsNobody(t *testing.T, test string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "safefs-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// World-usable: the binary to run, and the child's TMPDIR.
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o777); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dir, tmp} {
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "safefs.test")
	exe, err := os.ReadFile(os.Args[0])
	if err == nil {
		err = os.WriteFile(bin, exe, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^"+test+"$", "-test.v", "-test.count=1")
	cmd.Env = []string{"TMPDIR=" + tmp, "PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+test) {
		t.Fatalf("%s as uid 65534: %v\n%s", test, err, out)
	}
}
