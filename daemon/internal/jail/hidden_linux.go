//go:build linux

package jail

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// The daemon's binary has three hidden modes, chosen by its first argument;
// only the jail runs them.
const (
	// modeLaunch runs outside the jail: join the jail's cgroups, then
	// become bwrap.
	modeLaunch = "__lsp-jail-launch"
	// modeInit runs inside the jail, as the first program bwrap starts:
	// set the rlimits, then become the server.
	modeInit = "__lsp-jail-init"
	// modeCanary is the self-test's probe (see SelfTest).
	modeCanary = "__lsp-jail-canary"
)

// Main runs the hidden mode args (os.Args) name, if any, and returns its
// exit code. The daemon's main calls it first; so must the TestMain of any
// test binary that spawns jails, because the jail re-executes the running
// binary.
func Main(args []string) (code int, handled bool) {
	if len(args) < 2 {
		return 0, false
	}
	switch args[1] {
	case modeLaunch:
		return launchMain(args[2:]), true
	case modeInit:
		return initMain(args[2:]), true
	case modeCanary:
		return canaryMain(args[2:]), true
	}
	return 0, false
}

// exitSetup is the exit code of a jail that failed before its server ran.
const exitSetup = 125

// launchMain: -procs FILE… -- bwrap ARGS…
func launchMain(args []string) int {
	var procs []string
	for len(args) > 0 && args[0] != "--" {
		if args[0] != "-procs" || len(args) < 2 || !strings.HasPrefix(args[1], "/sys/fs/cgroup/") {
			fmt.Fprintf(os.Stderr, "lsp-jail launch: bad arguments %q\n", args)
			return exitSetup
		}
		procs = append(procs, args[1])
		args = args[2:]
	}
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "lsp-jail launch: no command")
		return exitSetup
	}
	self := strconv.Itoa(os.Getpid())
	for _, f := range procs {
		if err := os.WriteFile(f, []byte(self), 0); err != nil {
			fmt.Fprintf(os.Stderr, "lsp-jail launch: join cgroup: %v\n", err)
			return exitSetup
		}
	}
	err := syscall.Exec(args[1], args[1:], []string{})
	fmt.Fprintf(os.Stderr, "lsp-jail launch: exec %s: %v\n", args[1], err)
	return exitSetup
}

// initLimitNames map init's flags onto rlimits.
var initLimitNames = map[string]int{
	"-nofile": unix.RLIMIT_NOFILE,
	"-fsize":  unix.RLIMIT_FSIZE,
	"-core":   unix.RLIMIT_CORE,
	"-nproc":  unix.RLIMIT_NPROC,
	"-data":   unix.RLIMIT_DATA,
}

// initMain: [-name value]… -- EXECUTABLE ARGS…
func initMain(args []string) int {
	for len(args) > 0 && args[0] != "--" {
		res, ok := initLimitNames[args[0]]
		if !ok || len(args) < 2 {
			fmt.Fprintf(os.Stderr, "lsp-jail init: bad arguments %q\n", args)
			return exitSetup
		}
		v, err := strconv.ParseUint(args[1], 10, 64)
		if err != nil {
			fmt.Fprintf(os.Stderr, "lsp-jail init: %s %q: %v\n", args[0], args[1], err)
			return exitSetup
		}
		if err := setLimit(res, v); err != nil {
			fmt.Fprintf(os.Stderr, "lsp-jail init: %s: %v\n", args[0], err)
			return exitSetup
		}
		args = args[2:]
	}
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "lsp-jail init: no command")
		return exitSetup
	}
	// Only stdin, stdout and stderr reach the server, whatever bwrap or
	// the Go runtime left open.
	_ = unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	err := syscall.Exec(args[1], args[1:], os.Environ())
	fmt.Fprintf(os.Stderr, "lsp-jail init: exec %s: %v\n", args[1], err)
	return exitSetup
}

// setLimit sets soft and hard limit to v (or to the hard limit already in
// force, if lower: nothing in the jail can raise one). It goes through
// package syscall so that the Go runtime's own RLIMIT_NOFILE adjustment is
// not undone at exec.
func setLimit(res int, v uint64) error {
	var cur syscall.Rlimit
	if err := syscall.Getrlimit(res, &cur); err != nil {
		return err
	}
	v = min(v, cur.Max)
	return syscall.Setrlimit(res, &syscall.Rlimit{Cur: v, Max: v})
}
