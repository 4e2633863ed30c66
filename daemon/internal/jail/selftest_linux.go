//go:build linux

package jail

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
	"github.com/hanzoai/lsp/daemon/internal/safefs"
)

// SelfTestParams say where the self-test may write and what else the
// canary must not see.
type SelfTestParams struct {
	// Scratch is a directory the self-test owns (emptied first, removed
	// after): its workspace, home and another tenant's tree go there.
	Scratch string
	// Hidden are more paths the canary must not see: the daemon's real
	// trees and homes, its configuration, its socket.
	Hidden []string
}

// selfTestPids bounds the canary's jail: the same mechanism as every jail,
// with a bound small enough that the fork bomb ends quickly.
const selfTestPids = 48

// secretEnv is set in the daemon's environment while the canary runs; the
// canary must not find its value anywhere.
const secretEnv = "LSP_JAIL_SELFTEST_SECRET"

// SelfTest starts a canary in a jail exactly like a server's and fails
// unless the boundary holds: no network (only lo, no connection to a
// listener outside, no abstract socket), another tenant's tree and the
// host's private paths invisible, the workspace read-only and the home
// writable, nothing of the daemon's environment (the canary's is exactly
// runtime.Environment), the process bound enforced by a fork bomb, no
// nested user namespace, no capability, no_new_privs and the seccomp
// filter in force, no descriptor but stdin/stdout/stderr, the rlimits set,
// no controlling terminal, and the jail's processes inside its cgroups.
func SelfTest(ctx context.Context, s *Spawner, p SelfTestParams) (err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("jail self-test: %w", err)
		}
	}()
	if s.holes.benchOnly() {
		// A bench build (-tags lspbench) with a piece switched off to
		// price it: the self-test would refuse (or wait out its probes).
		s.log.Warn("BENCH BUILD: jail self-test not run: a piece of the jail is switched off")
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, selfTestTimeout)
	defer cancel()
	if !filepath.IsAbs(p.Scratch) {
		return fmt.Errorf("scratch %q is not absolute", p.Scratch)
	}
	if err := removeTree(p.Scratch); err != nil {
		return err
	}
	defer func() { _ = removeTree(p.Scratch) }()
	ws := runtime.Workspace{
		Root: filepath.Join(p.Scratch, "trees", "self", "repo", "c0"),
		Home: filepath.Join(p.Scratch, "homes", "self", "repo"),
	}
	other := filepath.Join(p.Scratch, "trees", "other", "repo", "c0")
	treeFile := filepath.Join(ws.Root, "go.mod")
	for _, f := range []struct{ path, body string }{
		{treeFile, "module example.com/canary\n"},
		{filepath.Join(other, "secret.go"), "package secret\n"},
	} {
		if err := os.MkdirAll(filepath.Dir(f.path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(f.path, []byte(f.body), 0o644); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(ws.Home, 0o700); err != nil {
		return err
	}
	// Read-only like a published tree, so that the write attempts meet
	// the mount and not just permissions.
	for _, d := range []string{treeFile, ws.Root} {
		if err := os.Chmod(d, 0o555); err != nil {
			return err
		}
	}

	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		return err
	}
	defer ln.Close()
	var accepted atomic.Int32
	go acceptCount(ln, &accepted)
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	connect := []string{net.JoinHostPort("127.0.0.1", port)}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() && !ipn.IP.IsLinkLocalUnicast() {
				connect = append(connect, net.JoinHostPort(ipn.IP.String(), port))
			}
		}
	}
	abstract := "lsp-jail-selftest-" + randomHex(8)
	aln, err := net.Listen("unix", "@"+abstract)
	if err != nil {
		return err
	}
	defer aln.Close()
	go acceptCount(aln, &accepted)

	secret := randomHex(16)
	if err := os.Setenv(secretEnv, secret); err != nil {
		return err
	}
	defer os.Unsetenv(secretEnv)

	spec := runtime.Spec{ID: "jail-canary", Executable: initPath}
	hidden := hiddenBeside(append([]string{
		other, filepath.Join(other, "secret.go"), filepath.Join(p.Scratch, "trees", "other"),
		"/etc/shadow", "/etc/passwd", "/root", "/home", "/var", "/run", "/sys",
	}, p.Hidden...), s.mounts(spec, ws, jailSpec{exe: initPath}))
	probeJSON, err := json.Marshal(canaryProbe{
		Connect: connect, Abstract: abstract, Hidden: hidden,
		Tree: ws.Root, TreeFile: treeFile, Home: ws.Home, ForkLimit: 4 * selfTestPids,
	})
	if err != nil {
		return err
	}
	wantEnv := runtime.Environment(spec, ws)
	proc, err := s.spawn(ctx, spec, ws, jailSpec{
		exe: initPath, args: []string{modeCanary, string(probeJSON)}, env: wantEnv, pids: selfTestPids,
	})
	if err != nil {
		return err
	}
	defer func() {
		_ = proc.Kill()
		_ = proc.Wait()
	}()

	type decoded struct {
		rep canaryReport
		err error
	}
	got := make(chan decoded, 1)
	go func() {
		var d decoded
		d.err = json.NewDecoder(proc.Stdout()).Decode(&d.rep)
		got <- d
	}()
	var rep canaryReport
	select {
	case d := <-got:
		if d.err != nil {
			_ = proc.Kill()
			_ = proc.Wait()
			return fmt.Errorf("canary report: %w (stderr: %s)", d.err, proc.StderrTail())
		}
		rep = d.rep
	case <-ctx.Done():
		_ = proc.Kill()
		_ = proc.Wait()
		<-got
		return fmt.Errorf("canary: %w (stderr: %s)", ctx.Err(), proc.StderrTail())
	}
	// The canary waits for stdin to close: its jail is alive now.
	var inCgroup []int
	if proc.cg != nil {
		inCgroup = proc.cg.members()
	}
	_ = proc.Stdin().Close()
	waited := make(chan error, 1)
	go func() { waited <- proc.Wait() }()
	select {
	case werr := <-waited:
		if werr != nil {
			return fmt.Errorf("canary exited: %w (stderr: %s)", werr, proc.StderrTail())
		}
	case <-ctx.Done():
		_ = proc.Kill()
		<-waited
		return fmt.Errorf("canary did not exit: %w", ctx.Err())
	}

	fails := s.judge(rep, judgeInput{
		wantEnv: wantEnv, secret: secret, accepted: int(accepted.Load()),
		hidden: hidden, pids: selfTestPids, inCgroup: inCgroup,
	})
	if len(fails) > 0 {
		return errors.New(strings.Join(fails, "; "))
	}
	s.log.Info("jail self-test passed", "interfaces", rep.Interfaces, "connect", rep.Connect,
		"fork_bomb", fmt.Sprintf("%d started, then %q (%d tasks, bound %d)", rep.Forked, rep.ForkErr, rep.Tasks, selfTestPids),
		"sockets", rep.Sockets, "userns", rep.UserNS, "keyctl", rep.Keyctl, "ptrace", rep.Ptrace, "tree_write", rep.TreeCreate, "proc_sys", rep.ProcSysWrite,
		"limits", rep.Limits, "cgroup_members", len(inCgroup))
	return nil
}

type judgeInput struct {
	wantEnv  []string
	secret   string
	accepted int
	hidden   []string
	pids     int
	inCgroup []int
}

// judge lists every way the report shows a hole.
func (s *Spawner) judge(r canaryReport, in judgeInput) []string {
	var f []string
	fail := func(format string, args ...any) { f = append(f, fmt.Sprintf(format, args...)) }

	if !slices.Equal(r.Interfaces, []string{"lo"}) {
		fail("network: interfaces %v, want only lo", r.Interfaces)
	}
	for a, e := range r.Connect {
		if e == "" {
			fail("network: connected to %s outside the jail", a)
		}
	}
	if in.accepted > 0 {
		fail("network: the outside listeners accepted %d connections", in.accepted)
	}
	if r.Abstract == "" {
		fail("network: reached an abstract unix socket outside the jail")
	}
	for _, p := range in.hidden {
		if e, ok := r.Hidden[p]; !ok || e == "" {
			fail("paths: %s is visible", p)
		}
	}
	if r.TreeCreate == "" || r.TreeWrite == "" || r.TreeChmod == "" {
		fail("workspace: writable (create %q, write %q, chmod %q)", r.TreeCreate, r.TreeWrite, r.TreeChmod)
	}
	if r.HomeWrite != "" {
		fail("home: not writable: %s", r.HomeWrite)
	}
	if r.RootWrite == "" {
		fail("root file system writable")
	}
	if r.ProcSysWrite == "" {
		fail("/proc/sys writable")
	}
	gotEnv, wantEnv := slices.Sorted(slices.Values(r.Env)), slices.Sorted(slices.Values(in.wantEnv))
	if !slices.Equal(gotEnv, wantEnv) {
		fail("environment: %q, want exactly %q", gotEnv, wantEnv)
	}
	for _, e := range append(append([]string{}, r.Env...), r.ProcEnv...) {
		if strings.Contains(e, in.secret) || strings.Contains(e, "LSP_") {
			fail("environment: the daemon's environment leaks: %.200q", e)
			break
		}
	}
	if r.ForkErr == "" && r.ChildFailed == 0 {
		fail("processes: %d children started and none was refused (bound %d)", r.Forked, in.pids)
	}
	if r.Tasks > in.pids {
		fail("processes: %d tasks in a jail bound to %d", r.Tasks, in.pids)
	}
	if r.UserNS == "" {
		fail("a nested user namespace was created")
	}
	for _, k := range []string{"CapEff", "CapPrm", "CapBnd", "CapAmb"} {
		if v := r.Status[k]; strings.Trim(v, "0") != "" || v == "" {
			fail("capabilities: %s = %q", k, v)
		}
	}
	if r.Status["NoNewPrivs"] != "1" {
		fail("no_new_privs not set (%q)", r.Status["NoNewPrivs"])
	}
	if s.seccomp != nil {
		if r.Status["Seccomp"] != "2" {
			fail("seccomp: mode %q, want 2 (filter)", r.Status["Seccomp"])
		}
		if r.Keyctl == "" || r.Ptrace == "" {
			fail("seccomp: keyctl (%q) or ptrace (%q) allowed", r.Keyctl, r.Ptrace)
		}
		for _, p := range probeSockets {
			e, ok := r.Sockets[p.name]
			switch {
			case !ok:
				fail("sockets: %s not probed", p.name)
			case p.family == unix.AF_UNIX && e != "":
				fail("sockets: unix refused (%s), which the servers need", e)
			case p.family != unix.AF_UNIX && e == "":
				fail("sockets: socket(%s) succeeded", p.name)
			}
		}
		if r.Sockets["socketpair inet"] == "" || r.Sockets["socketpair unix"] != "" {
			fail("sockets: socketpair inet %q, unix %q", r.Sockets["socketpair inet"], r.Sockets["socketpair unix"])
		}
	}
	if len(r.FDs) != 3 || !strings.HasPrefix(r.FDs[0], "0 ") || !strings.HasPrefix(r.FDs[1], "1 ") || !strings.HasPrefix(r.FDs[2], "2 ") {
		fail("descriptors: %q open, want only 0, 1 and 2", r.FDs)
	}
	wantLimits := map[string]uint64{"nofile": s.opts.Files, "fsize": uint64(s.opts.FileSize), "core": 0}
	if s.cg == nil {
		wantLimits["nproc"] = uint64(in.pids)
		wantLimits["data"] = uint64(s.opts.Memory)
	}
	for k, v := range wantLimits {
		if got, ok := r.Limits[k]; !ok || got != v {
			fail("rlimit %s = %d, want %d", k, got, v)
		}
	}
	if r.TTY == "" {
		fail("a controlling terminal is reachable")
	}
	if r.UID != 65534 {
		fail("uid %d inside, want %s", r.UID, jailUID)
	}
	if s.cg != nil && len(in.inCgroup) == 0 {
		fail("cgroups: the jail's processes are not in its cgroups")
	}
	return f
}

func acceptCount(ln net.Listener, n *atomic.Int32) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		n.Add(1)
		c.Close()
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// removeTree removes a directory that holds read-only trees and the
// canary's home, never following a link the canary left (safefs).
func removeTree(dir string) error {
	if err := safefs.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}

// selfTestTimeout bounds the whole self-test.
const selfTestTimeout = time.Minute

// hiddenBeside adjusts the paths the canary must not see to the jail's
// mounts. A hidden directory that is a mount's ancestor — /root when the
// daemon's root is in root's home, as a checkout there puts it — exists in
// the jail as bwrap's empty mount-point parent, so it is not the directory
// itself that must be invisible but everything in it that leads to no
// mount: those host entries (at most maxBeside, by name) take its place.
// A hidden path inside a mount is the mount's business and left as is.
func hiddenBeside(hidden []string, ms []mount) []string {
	const maxBeside = 16
	ancestor := func(dir string) bool {
		for _, m := range ms {
			if m.dst == dir || strings.HasPrefix(m.dst, dir+"/") {
				return true
			}
		}
		return false
	}
	var out []string
	for _, h := range hidden {
		if !ancestor(h) {
			out = append(out, h)
			continue
		}
		names, err := os.ReadDir(h)
		if err != nil {
			continue
		}
		n := 0
		for _, e := range names {
			c := filepath.Join(h, e.Name())
			if ancestor(c) || n == maxBeside {
				continue
			}
			out = append(out, c)
			n++
		}
	}
	return out
}
