package pool

import (
	"fmt"
	"os"
	"testing"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
	"go.uber.org/goleak"
)

// TestMain makes the test binary a subreaper, as the daemon is, and fails
// the run when a goroutine or a child process outlives the tests.
func TestMain(m *testing.M) {
	if err := runtime.BecomeSubreaper(); err != nil {
		fmt.Fprintln(os.Stderr, "BecomeSubreaper:", err)
		os.Exit(1)
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreTopFunction("github.com/hanzoai/lsp/daemon/internal/runtime.spawnLoop")); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
		procs, _ := runtime.ListProcs()
		for _, p := range procs {
			if p.PPID == os.Getpid() || p.PGRP == os.Getpid() && p.PID != os.Getpid() {
				fmt.Fprintf(os.Stderr, "process %d (state %c) survived the tests\n", p.PID, p.State)
				code = 1
			}
		}
	}
	os.Exit(code)
}
