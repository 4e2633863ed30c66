//go:build linux

package jail

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
)

// planterMain runs in a jail: it replaces parts of its home with links to
// host paths it names in JAILTEST_PLANT (home-relative name=target, comma
// separated), as a hostile server would before it crashes, and exits.
func planterMain() int {
	home := os.Getenv("HOME")
	for _, kv := range strings.Split(os.Getenv("JAILTEST_PLANT"), ",") {
		name, target, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			continue
		}
		p := filepath.Join(home, name)
		if err := os.RemoveAll(p); err != nil {
			fmt.Fprintln(os.Stderr, "planter:", err)
			return 1
		}
		if err := os.Symlink(target, p); err != nil {
			fmt.Fprintln(os.Stderr, "planter:", err)
			return 1
		}
	}
	fmt.Println("planted")
	return 0
}

// TestHomeLinksNotFollowed: a jailed process replaces the telemetry mode
// file, and whole directories of its home, with links to host paths. The
// daemon prepares that home again as root before the next spawn (a crash
// restart); it must write through none of them: the host file keeps its
// content and owner, nothing appears in the host directory, and the next
// jail still starts, with the links replaced by the real layout. Before
// safefs the host file became "off".
func TestHomeLinksNotFollowed(t *testing.T) {
	t.Parallel()
	s := newSpawner(t, Options{})
	l := newLayout(t)
	ws := l.workspace(t, "tenant", map[string]string{"a.txt": "x\n"})

	host := t.TempDir() // outside the daemon's root, like /etc
	hostFile := filepath.Join(host, "root-owned.conf")
	if err := os.WriteFile(hostFile, []byte("host content\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hostDir := filepath.Join(host, "dir")
	if err := os.Mkdir(hostDir, 0o755); err != nil {
		t.Fatal(err)
	}
	before := stat(t, hostFile)

	run := func(plant string) string {
		t.Helper()
		spec := runtime.Spec{ID: "planter", Executable: testExecutable(t),
			Env: []string{serverEnv + "=planter", "JAILTEST_PLANT=" + plant}}
		p, err := s.Spawn(context.Background(), spec, ws)
		if err != nil {
			t.Fatalf("spawn after planting: %v", err)
		}
		_ = p.Stdin().Close()
		out := make([]byte, 64)
		n, _ := p.Stdout().Read(out)
		_ = p.Stdout().Close()
		if err := p.Wait(); err != nil {
			t.Fatalf("planter: %v (%s)", err, p.(interface{ StderrTail() string }).StderrTail())
		}
		return string(out[:n])
	}
	// Round one plants the file link; round two, started after it (the
	// daemon prepares the home again), plants directory links; round
	// three starts over those.
	if got := run(".config/go/telemetry/mode=" + hostFile); !strings.Contains(got, "planted") {
		t.Fatalf("planter said %q", got)
	}
	run(".config/go/telemetry=" + hostDir + ",.cache=" + hostDir + ",tmp=" + hostDir + ",go/pkg=" + hostDir)
	run(".config=" + hostDir)
	run("")

	if b, err := os.ReadFile(hostFile); err != nil || string(b) != "host content\n" {
		t.Errorf("host file = %q, %v: written through a planted link", b, err)
	}
	if after := stat(t, hostFile); after.Uid != before.Uid || after.Gid != before.Gid || after.Mode != before.Mode {
		t.Errorf("host file owner/mode changed: %d:%d %o -> %d:%d %o", before.Uid, before.Gid, before.Mode, after.Uid, after.Gid, after.Mode)
	}
	if entries, _ := os.ReadDir(hostDir); len(entries) > 0 {
		t.Errorf("the daemon wrote into the host directory through a link: %v", entries)
	}
	if st := stat(t, hostDir); int(st.Uid) != os.Geteuid() {
		t.Errorf("host directory given to uid %d", st.Uid)
	}
	// The last spawn prepared the home over the links: the layout is real.
	mode := filepath.Join(ws.Home, ".config/go/telemetry/mode")
	fi, err := os.Lstat(mode)
	if err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("telemetry mode: %v, %v", fi, err)
	}
	if b, _ := os.ReadFile(mode); string(b) != "off\n" {
		t.Errorf("telemetry mode = %q", b)
	}
	for _, d := range []string{".config", ".cache/go-build", "tmp", "go/pkg/mod"} {
		if fi, err := os.Lstat(filepath.Join(ws.Home, d)); err != nil || !fi.IsDir() {
			t.Errorf("home %s: %v, %v", d, fi, err)
		}
	}
}

// TestUnjailedHomeLinksNotFollowed: the development spawner prepares the
// home the same way.
func TestUnjailedHomeLinksNotFollowed(t *testing.T) {
	t.Parallel()
	ws := newLayout(t).workspace(t, "tenant", map[string]string{"a.txt": "x\n"})
	host := t.TempDir()
	hostFile := filepath.Join(host, "f")
	if err := os.WriteFile(hostFile, []byte("host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(ws.Home, ".config/go/telemetry"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(hostFile, filepath.Join(ws.Home, ".config/go/telemetry/mode")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(host, filepath.Join(ws.Home, "tmp")); err != nil {
		t.Fatal(err)
	}
	p, err := runtime.Unjailed(testLogger(t)).Spawn(context.Background(), runtime.Spec{ID: "true", Executable: "/bin/true"}, ws)
	if err != nil {
		t.Fatal(err)
	}
	_ = p.Stdin().Close()
	_ = p.Stdout().Close()
	_ = p.Wait()
	if b, _ := os.ReadFile(hostFile); string(b) != "host\n" {
		t.Errorf("host file = %q: written through a planted link", b)
	}
	if entries, _ := os.ReadDir(host); len(entries) != 1 {
		t.Errorf("host directory now holds %d entries", len(entries))
	}
}

func stat(t *testing.T, p string) syscall.Stat_t {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st
}
