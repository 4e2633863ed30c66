//go:build linux

package jail

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// canaryProbe tells the canary what to try. It comes from the self-test,
// never from a tenant.
type canaryProbe struct {
	Connect   []string `json:"connect"`  // TCP addresses listened on outside the jail
	Abstract  string   `json:"abstract"` // an abstract unix socket listened on outside
	Hidden    []string `json:"hidden"`   // paths that must be invisible
	Tree      string   `json:"tree"`
	TreeFile  string   `json:"tree_file"`
	Home      string   `json:"home"`
	ForkLimit int      `json:"fork_limit"` // stop the fork bomb here, bound or not
}

// canaryReport is what the canary observed: errors are strings, "" where
// the attempt succeeded. The self-test judges it outside the jail.
type canaryReport struct {
	UID          int               `json:"uid"`
	Interfaces   []string          `json:"interfaces"` // of the jail's network namespace (/proc/self/net/dev)
	Sockets      map[string]string `json:"sockets"`    // family -> socket(2) error, "" when one was made
	Connect      map[string]string `json:"connect"`
	Abstract     string            `json:"abstract"`
	Hidden       map[string]string `json:"hidden"`
	TreeCreate   string            `json:"tree_create"`
	TreeWrite    string            `json:"tree_write"`
	TreeChmod    string            `json:"tree_chmod"`
	HomeWrite    string            `json:"home_write"`
	RootWrite    string            `json:"root_write"`
	ProcSysWrite string            `json:"proc_sys_write"`
	Env          []string          `json:"env"`
	ProcEnv      []string          `json:"proc_env"` // every visible process's environment
	Forked       int               `json:"forked"`
	ForkErr      string            `json:"fork_err"`
	ChildFailed  int               `json:"child_failed"` // children that died at start (no thread for them)
	Tasks        int               `json:"tasks"`        // every task in the jail at the bomb's peak
	UserNS       string            `json:"userns"`
	Status       map[string]string `json:"status"`
	Keyctl       string            `json:"keyctl"`
	Ptrace       string            `json:"ptrace"`
	FDs          []string          `json:"fds"` // "n -> target"
	Limits       map[string]uint64 `json:"limits"`
	TTY          string            `json:"tty"`
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// canaryMain runs inside the jail: canary PROBE-JSON, or canary -sleep for
// the fork bomb's children. It prints its report, then waits for stdin to
// close so that the self-test can look at the jail while it is alive.
func canaryMain(args []string) int {
	if len(args) == 1 && args[0] == "-sleep" {
		_, _ = io.Copy(io.Discard, os.Stdin)
		return 0
	}
	if len(args) == 2 && args[0] == "-bomb" {
		limit, err := strconv.Atoi(args[1])
		if err != nil {
			return exitSetup
		}
		return bomberMain(limit)
	}
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "lsp-jail canary: want one probe argument")
		return exitSetup
	}
	var pr canaryProbe
	if err := json.Unmarshal([]byte(args[0]), &pr); err != nil {
		fmt.Fprintln(os.Stderr, "lsp-jail canary:", err)
		return exitSetup
	}
	rep := probe(pr)
	if err := json.NewEncoder(os.Stdout).Encode(rep); err != nil {
		return exitSetup
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

func probe(pr canaryProbe) canaryReport {
	r := canaryReport{UID: os.Getuid(), Connect: map[string]string{}, Hidden: map[string]string{}}
	// Before anything else opens a descriptor.
	r.FDs = openFDs()
	// Not net.Interfaces: that needs a netlink socket, which the filter
	// refuses.
	r.Interfaces = netDevs()
	r.Sockets = socketProbe()
	for _, a := range pr.Connect {
		c, err := net.DialTimeout("tcp", a, 2*time.Second)
		if err == nil {
			c.Close()
		}
		r.Connect[a] = errString(err)
	}
	if pr.Abstract != "" {
		c, err := net.DialTimeout("unix", "@"+pr.Abstract, 2*time.Second)
		if err == nil {
			c.Close()
		}
		r.Abstract = errString(err)
	}
	for _, p := range pr.Hidden {
		r.Hidden[p] = visible(p)
	}
	r.TreeCreate = errString(os.WriteFile(filepath.Join(pr.Tree, ".canary"), []byte("x"), 0o644))
	if f, err := os.OpenFile(pr.TreeFile, os.O_WRONLY|os.O_APPEND, 0); err == nil {
		_, err = f.WriteString("x")
		f.Close()
		r.TreeWrite = errString(err)
	} else {
		r.TreeWrite = err.Error()
	}
	r.TreeChmod = errString(os.Chmod(pr.TreeFile, 0o666))
	hf := filepath.Join(pr.Home, ".canary")
	r.HomeWrite = errString(os.WriteFile(hf, []byte("x"), 0o600))
	_ = os.Remove(hf)
	r.RootWrite = errString(os.WriteFile("/.canary", []byte("x"), 0o600))
	if f, err := os.OpenFile("/proc/sys/kernel/core_pattern", os.O_WRONLY, 0); err == nil {
		f.Close()
	} else {
		r.ProcSysWrite = err.Error()
	}
	r.Env = os.Environ()
	r.ProcEnv = procEnvs()
	r.Status = procStatus()
	_, err := unix.KeyctlInt(unix.KEYCTL_GET_KEYRING_ID, unix.KEY_SPEC_SESSION_KEYRING, 1, 0, 0)
	r.Keyctl = errString(err)
	err = unix.PtraceAttach(1)
	r.Ptrace = errString(err)
	r.Limits = map[string]uint64{}
	for name, res := range initLimitNames {
		var l syscall.Rlimit
		if syscall.Getrlimit(res, &l) == nil {
			r.Limits[strings.TrimPrefix(name, "-")] = l.Cur
		}
	}
	if f, err := os.OpenFile("/dev/tty", os.O_RDWR, 0); err == nil {
		f.Close()
	} else {
		r.TTY = err.Error()
	}
	r.UserNS = userNS()
	forkBomb(pr.ForkLimit, &r)
	return r
}

// probeSockets are the families the canary tries: only unix may work.
var probeSockets = []struct {
	name           string
	family, typ, p int
}{
	{"unix", unix.AF_UNIX, unix.SOCK_STREAM, 0},
	{"inet", unix.AF_INET, unix.SOCK_STREAM, 0},
	{"inet6", unix.AF_INET6, unix.SOCK_DGRAM, 0},
	{"vsock", unix.AF_VSOCK, unix.SOCK_STREAM, 0},
	{"netlink", unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE},
	{"packet", unix.AF_PACKET, unix.SOCK_DGRAM, 0},
}

func socketProbe() map[string]string {
	out := map[string]string{}
	for _, p := range probeSockets {
		fd, err := unix.Socket(p.family, p.typ|unix.SOCK_CLOEXEC, p.p)
		if err == nil {
			unix.Close(fd)
		}
		out[p.name] = errString(err)
	}
	fds, err := unix.Socketpair(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err == nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
	}
	out["socketpair inet"] = errString(err)
	fds, err = unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err == nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
	}
	out["socketpair unix"] = errString(err)
	return out
}

// netDevs are the interfaces of the caller's network namespace.
func netDevs() []string {
	b, err := os.ReadFile("/proc/self/net/dev")
	if err != nil {
		return []string{"unreadable: " + err.Error()}
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if name, _, ok := strings.Cut(l, ":"); ok && !strings.Contains(name, "|") {
			out = append(out, strings.TrimSpace(name))
		}
	}
	sort.Strings(out)
	return out
}

// visible is "" when p can be seen, else why not.
func visible(p string) string {
	if _, err := os.Lstat(p); err != nil {
		return err.Error()
	}
	return ""
}

// openFDs lists the descriptors the canary was started with. It reads
// them with raw system calls, before anything of its own could open one.
func openFDs() []string {
	dir, err := unix.Open("/proc/self/fd", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return []string{err.Error()}
	}
	defer unix.Close(dir)
	var names []string
	buf := make([]byte, 4096)
	for {
		n, err := unix.Getdents(dir, buf)
		if err != nil {
			return []string{err.Error()}
		}
		if n <= 0 {
			break
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
	own := strconv.Itoa(dir)
	var fds []string
	for _, n := range names {
		if n == own {
			continue
		}
		t, err := os.Readlink("/proc/self/fd/" + n)
		if err != nil {
			t = err.Error()
		}
		// The Go runtime's poller, which package initialisation in the
		// daemon binary may already have started: the canary's own.
		if t == "anon_inode:[eventpoll]" || t == "anon_inode:[eventfd]" {
			continue
		}
		fds = append(fds, n+" -> "+t)
	}
	sort.Strings(fds)
	return fds
}

func procEnvs() []string {
	entries, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		out = append(out, e.Name()+": "+strings.ReplaceAll(string(b), "\x00", " "))
	}
	return out
}

func procStatus() map[string]string {
	out := map[string]string{}
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok {
			switch k {
			case "CapEff", "CapPrm", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp":
				out[k] = strings.TrimSpace(v)
			}
		}
	}
	return out
}

// userNS tries to create a user namespace through clone, which the seccomp
// filter does not cover: only bwrap's --disable-userns refuses it.
func userNS() string {
	exe, err := os.Executable()
	if err != nil {
		return err.Error()
	}
	cmd := exec.Command(exe, modeCanary, "-sleep")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER}
	if err := cmd.Start(); err != nil {
		return err.Error()
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	return ""
}

// bombReport is what the bomber saw.
type bombReport struct {
	Forked      int    `json:"forked"`
	ForkErr     string `json:"fork_err"`
	ChildFailed int    `json:"child_failed"`
	Tasks       int    `json:"tasks"`
}

// forkBomb runs the bomb in a child process, the bomber, and reports what
// it saw. The bomber may die of the bound itself: the Go runtime aborts
// when the kernel refuses it a thread. Its prober stays out of the line
// of fire: it only waits on a pipe meanwhile, which needs no new thread.
func forkBomb(limit int, r *canaryReport) {
	exe, err := os.Executable()
	if err != nil {
		r.ForkErr = err.Error()
		return
	}
	cmd := exec.Command(exe, modeCanary, "-bomb", strconv.Itoa(limit))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	in, err1 := cmd.StdinPipe()
	out, err2 := cmd.StdoutPipe()
	if err := cmp.Or(err1, err2, cmd.Start()); err != nil {
		r.ForkErr = err.Error()
		return
	}
	var b bombReport
	derr := json.NewDecoder(out).Decode(&b)
	in.Close()
	werr := cmd.Wait()
	r.Forked, r.ForkErr, r.ChildFailed, r.Tasks = b.Forked, b.ForkErr, b.ChildFailed, b.Tasks
	if derr != nil {
		tail := stderr.String()
		if i := strings.Index(tail, "\n"); i >= 0 {
			tail = tail[:i]
		}
		r.ForkErr = fmt.Sprintf("the bomber died (%v): %s", werr, tail)
	}
}

// bomberMain starts children until the jail refuses one (or limit is
// reached), counts every task in the jail at that peak, reports, and keeps
// the children until its stdin closes. It waits for no child while it
// forks: a goroutine blocked in wait4 would make the runtime ask for
// threads the jail is about to refuse.
func bomberMain(limit int) int {
	exe, err := os.Executable()
	if err != nil {
		return exitSetup
	}
	var r bombReport
	var pids []int
	var stdins []io.Closer
	for r.Forked < limit {
		cmd := exec.Command(exe, modeCanary, "-sleep")
		cmd.Env = []string{"GOMAXPROCS=1"}
		in, err := cmd.StdinPipe()
		if err != nil {
			r.ForkErr = err.Error()
			break
		}
		if err := cmd.Start(); err != nil {
			in.Close()
			r.ForkErr = err.Error()
			break
		}
		stdins = append(stdins, in)
		pids = append(pids, cmd.Process.Pid)
		r.Forked++
	}
	r.Tasks = countTasks()
	// A child the jail gave no thread has died at once (and stays a
	// zombie, still counted, until reaped here).
	for _, pid := range pids {
		var ws unix.WaitStatus
		if got, _ := unix.Wait4(pid, &ws, unix.WNOHANG, nil); got == pid && (!ws.Exited() || ws.ExitStatus() != 0) {
			r.ChildFailed++
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		return exitSetup
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	for _, c := range stdins {
		c.Close()
	}
	return 0
}

func countTasks() int {
	entries, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if ts, err := os.ReadDir("/proc/" + e.Name() + "/task"); err == nil {
			n += len(ts)
		}
	}
	return n
}
