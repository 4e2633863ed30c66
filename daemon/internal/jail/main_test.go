//go:build linux

package jail

import (
	"fmt"
	"log/slog"
	"os"
	"testing"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The jail re-executes this binary: as its launcher, its in-jail init,
	// its canary, and as the test servers below.
	if code, ok := Main(os.Args); ok {
		os.Exit(code)
	}
	if code, ok := testServerMain(); ok {
		os.Exit(code)
	}
	if err := runtime.BecomeSubreaper(); err != nil {
		fmt.Fprintln(os.Stderr, "BecomeSubreaper:", err)
		os.Exit(1)
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(
			goleak.IgnoreTopFunction("github.com/hanzoai/lsp/daemon/internal/jail.spawnLoop"),
			goleak.IgnoreTopFunction("github.com/hanzoai/lsp/daemon/internal/runtime.spawnLoop"),
		); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
		procs, _ := runtime.ListProcs()
		for _, p := range procs {
			if p.PPID == os.Getpid() {
				stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.PID))
				fmt.Fprintf(os.Stderr, "child process survived the tests: %s\n", stat)
				code = 1
			}
		}
	}
	os.Exit(code)
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(b))
	return len(b), nil
}
