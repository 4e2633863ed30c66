//go:build linux

package jail

import (
	"bufio"
	"context"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hanzoai/lsp/daemon/internal/pool"
	"github.com/hanzoai/lsp/daemon/internal/runtime"
)

// TestUnlinkedFileMeasured: a jailed process that writes a file of its
// home and deletes it while holding it open still takes that disk, and the
// daemon's disk budget measures it through the process's descriptors
// (pool.TreeUnlinked), across the jail's user and PID namespaces.
func TestUnlinkedFileMeasured(t *testing.T) {
	const n = 24 << 20
	s := newSpawner(t, Options{})
	ws := newLayout(t).workspace(t, "tenant", map[string]string{"a.txt": "a\n"})
	p, err := s.Spawn(context.Background(), runtime.Spec{
		ID: "unlinker", Language: "plaintext", Executable: testExecutable(t),
		Env: []string{serverEnv + "=unlinker", "JAILTEST_ALLOC=" + strconv.Itoa(n)},
	}, ws)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = p.Stdin().Close()
		_ = p.Kill()
		_ = p.Wait()
	}()
	line, _ := bufio.NewReader(p.Stdout()).ReadString('\n')
	if !strings.HasPrefix(line, "written") {
		t.Fatalf("the jailed writer said %q", line)
	}
	var home unix.Stat_t
	if err := unix.Stat(ws.Home, &home); err != nil {
		t.Fatal(err)
	}
	got := pool.TreeUnlinked([]int{p.Pid()}, uint64(home.Dev))[p.Pid()]
	t.Logf("%s: %d bytes held in an unlinked file", s.Describe(), got)
	if got < n {
		t.Fatalf("measured %d bytes of unlinked open files in the jail, want at least %d", got, n)
	}
	if other := pool.TreeUnlinked([]int{p.Pid()}, uint64(home.Dev)+1)[p.Pid()]; other != 0 {
		t.Fatalf("%d bytes counted on another device", other)
	}
}
