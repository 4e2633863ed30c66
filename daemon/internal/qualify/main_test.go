package qualify

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
	"go.uber.org/goleak"
)

// TestMain makes the test binary the reaper of the servers' descendants, as
// the command is, and checks that qualification leaves no goroutine and no
// process behind.
func TestMain(m *testing.M) {
	if err := runtime.BecomeSubreaper(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreTopFunction("github.com/hanzoai/lsp/daemon/internal/runtime.spawnLoop")); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
		if kids := children(os.Getpid()); len(kids) > 0 {
			fmt.Fprintf(os.Stderr, "processes survived qualification: %v\n", kids)
			code = 1
		}
	}
	os.Exit(code)
}

// children lists the processes whose parent is pid (zombies included).
func children(pid int) []string {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var out []string
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// pid (comm) state ppid …; comm may hold spaces and parentheses.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, strings.TrimSpace(s[:i+1]))
		}
	}
	return out
}
