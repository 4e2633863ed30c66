//go:build linux

package jail

import (
	"bufio"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hanzoai/lsp/daemon/internal/pool"
	"github.com/hanzoai/lsp/daemon/internal/runtime"
)

// TestUnlinkedFileMeasured: a jailed process that writes a file of its
// home and deletes it while holding it open, or while it has it mapped
// alone, still takes that disk, and the daemon's disk budget measures it
// through the process's descriptors and mappings (pool.TreeUnlinked),
// across the jail's user and PID namespaces.
func TestUnlinkedFileMeasured(t *testing.T) {
	const n = 24 << 20
	s := newSpawner(t, Options{})
	ws := newLayout(t).workspace(t, "tenant", map[string]string{"a.txt": "a\n"})
	var home unix.Stat_t
	if err := unix.Stat(ws.Home, &home); err != nil {
		t.Fatal(err)
	}
	for _, how := range []string{"unlinker", "mapper"} {
		if how == "mapper" && !readsMapFiles() {
			t.Log("mapper: skipped: this process may not read /proc/<pid>/map_files (CAP_SYS_ADMIN)")
			continue
		}
		p, err := s.Spawn(context.Background(), runtime.Spec{
			ID: how, Language: "plaintext", Executable: testExecutable(t),
			Env: []string{serverEnv + "=" + how, "JAILTEST_ALLOC=" + strconv.Itoa(n)},
		}, ws)
		if err != nil {
			t.Fatal(err)
		}
		line, _ := bufio.NewReader(p.Stdout()).ReadString('\n')
		got := pool.TreeUnlinked([]int{p.Pid()}, uint64(home.Dev))[p.Pid()]
		other := pool.TreeUnlinked([]int{p.Pid()}, uint64(home.Dev)+1)[p.Pid()]
		_ = p.Stdin().Close()
		_ = p.Kill()
		_ = p.Wait()
		if !strings.HasPrefix(line, "written") {
			t.Fatalf("%s: the jailed writer said %q", how, line)
		}
		t.Logf("%s: %d bytes held in an unlinked file", how, got)
		if got < n {
			t.Errorf("%s: measured %d bytes of unlinked files held in the jail, want at least %d", how, got, n)
		}
		if other != 0 {
			t.Errorf("%s: %d bytes counted on another device", how, other)
		}
	}
}

// readsMapFiles reports whether this process may look through the links of
// /proc/<pid>/map_files, as TreeUnlinked does (CAP_SYS_ADMIN in the initial
// user namespace: a root daemon's).
func readsMapFiles() bool {
	dir, err := os.Open("/proc/self/map_files")
	if err != nil {
		return false
	}
	defer dir.Close()
	names, err := dir.Readdirnames(1)
	if err != nil || len(names) == 0 {
		return false
	}
	var st unix.Stat_t
	return unix.Fstatat(int(dir.Fd()), names[0], &st, 0) == nil
}
