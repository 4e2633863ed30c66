//go:build linux

package jail

import (
	"errors"
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

// launchMain: [-procs FILE]… [-stage DIR -src PATH… -uid UID -ppid PID]
// -- bwrap ARGS…
//
// It joins the jail's cgroups; as root it then stages each -src at DIR/<n>
// (a private tmpfs over DIR, in the mount namespace of its own that the
// daemon started it in: bwrap, running unprivileged, could not reach
// sources under the daemon's 0700 root), drops every privilege to uid and
// gid UID, and re-arms the parent-death signal that the uid change
// cleared. Then it becomes bwrap.
func launchMain(args []string) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "lsp-jail launch: "+format+"\n", a...)
		return exitSetup
	}
	var procs, srcs []string
	stage, uid, ppid := "", -1, -1
	for len(args) > 0 && args[0] != "--" {
		if len(args) < 2 {
			return fail("bad arguments %q", args)
		}
		switch v := args[1]; args[0] {
		case "-procs":
			if !strings.HasPrefix(v, "/sys/fs/cgroup/") {
				return fail("bad cgroup %q", v)
			}
			procs = append(procs, v)
		case "-stage":
			stage = v
		case "-src":
			srcs = append(srcs, v)
		case "-uid", "-ppid":
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return fail("bad %s %q", args[0], v)
			}
			if args[0] == "-uid" {
				uid = n
			} else {
				ppid = n
			}
		default:
			return fail("bad arguments %q", args)
		}
		args = args[2:]
	}
	if len(args) < 2 {
		return fail("no command")
	}
	self := strconv.Itoa(os.Getpid())
	for _, f := range procs {
		if err := os.WriteFile(f, []byte(self), 0); err != nil {
			return fail("join cgroup: %v", err)
		}
	}
	if stage != "" {
		if err := stageSources(stage, srcs); err != nil {
			return fail("stage: %v", err)
		}
	}
	if uid > 0 {
		if ppid <= 0 {
			return fail("-uid needs -ppid")
		}
		if err := dropTo(uid, ppid); err != nil {
			return fail("drop privileges: %v", err)
		}
	}
	err := syscall.Exec(args[1], args[1:], []string{})
	return fail("exec %s: %v", args[1], err)
}

// stageSources mounts a private tmpfs over dir and bind-mounts each source
// at dir/<index>. The sources are opened before dir is covered, since they
// may lie under it.
func stageSources(dir string, srcs []string) error {
	fds := make([]int, len(srcs))
	for i, src := range srcs {
		fd, err := unix.Open(src, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open %s: %w", src, err)
		}
		defer unix.Close(fd)
		fds[i] = fd
	}
	if err := unix.Mount("lsp-jail-stage", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=64k"); err != nil {
		return fmt.Errorf("tmpfs on %s: %w", dir, err)
	}
	for i, fd := range fds {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return err
		}
		at := stagePath(i)
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			if err := os.Mkdir(at, 0o755); err != nil {
				return err
			}
		} else if err := os.WriteFile(at, nil, 0o644); err != nil {
			return err
		}
		if err := unix.Mount(fmt.Sprintf("/proc/self/fd/%d", fd), at, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s: %w", srcs[i], err)
		}
	}
	return nil
}

// dropTo gives up root for uid (and the same gid, no supplementary
// groups). A credential change clears the parent-death signal, so it is
// set again, and a parent that died meanwhile is noticed.
func dropTo(uid, ppid int) error {
	if err := syscall.Setgroups([]int{}); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setresgid(uid, uid, uid); err != nil {
		return fmt.Errorf("setresgid: %w", err)
	}
	if err := syscall.Setresuid(uid, uid, uid); err != nil {
		return fmt.Errorf("setresuid: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return fmt.Errorf("prctl: %w", err)
	}
	if os.Getppid() != ppid {
		return errors.New("the daemon is gone")
	}
	return nil
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
	// bwrap --chdir exports PWD; the server's environment is exactly the
	// one the daemon chose.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PWD=") {
			env = append(env, kv)
		}
	}
	err := syscall.Exec(args[1], args[1:], env)
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
