package runtime

import (
	"fmt"
	"log/slog"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// sharedHome is one private Home for every server this test binary starts,
// so gopls builds its caches once per run instead of once per test.
var sharedHome string

func TestMain(m *testing.M) {
	switch {
	case os.Getenv(fakeSleeperEnv) == "1":
		fakeSleeperMain()
		os.Exit(0)
	case os.Getenv(fakeServerEnv) == "1":
		os.Exit(fakeServerMain(os.Args[1:]))
	}
	if err := BecomeSubreaper(); err != nil {
		fmt.Fprintln(os.Stderr, "BecomeSubreaper:", err)
		os.Exit(1)
	}
	// The fake servers' timeouts are short: the hang verdict needs no more
	// silence than its strikes (TestHangPolicy tests the floor).
	hungSilence = 0
	var err error
	sharedHome, err = os.MkdirTemp("", "runtime-test-home-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if code == 0 {
		// Every server was closed: no goroutine and no child may remain.
		if err := goleak.Find(goleak.IgnoreTopFunction("github.com/hanzoai/lsp/daemon/internal/runtime.spawnLoop")); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
		if kids := childrenOf(os.Getpid()); len(kids) > 0 {
			for _, k := range kids {
				stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", k.PID))
				fmt.Fprintf(os.Stderr, "child process survived the tests: %s\n", stat)
			}
			code = 1
		}
	}
	// The gopls module cache is written read-only; make it removable.
	_ = chmodTree(sharedHome)
	_ = os.RemoveAll(sharedHome)
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

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) []ProcStat {
	procs, err := ListProcs()
	if err != nil {
		return nil
	}
	var out []ProcStat
	for _, p := range procs {
		if p.PPID == pid {
			out = append(out, p)
		}
	}
	return out
}

// groupMembers lists the processes of group pgid.
func groupMembers(pgid int) []ProcStat {
	procs, _ := ListProcs()
	var out []ProcStat
	for _, p := range procs {
		if p.PGRP == pgid {
			out = append(out, p)
		}
	}
	return out
}

// assertGroupGone fails when any process of group pgid exists, or any
// zombie child of this process belonged to it.
func assertGroupGone(t *testing.T, pgid int) {
	t.Helper()
	procs, err := ListProcs()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if p.PGRP == pgid {
			t.Errorf("process %d (state %c, parent %d) of the server's group %d survived", p.PID, p.State, p.PPID, pgid)
		}
		if p.PPID == os.Getpid() && p.State == 'Z' && p.PGRP == pgid {
			t.Errorf("zombie %d of the server's group left unreaped", p.PID)
		}
	}
}

func chmodTree(root string) error {
	return walkDirs(root, func(path string) { _ = os.Chmod(path, 0o700) })
}

func walkDirs(dir string, fn func(string)) error {
	fn(dir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			_ = walkDirs(dir+"/"+e.Name(), fn)
		}
	}
	return nil
}
