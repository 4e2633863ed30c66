//go:build linux

package jail

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
	"github.com/hanzoai/lsp/daemon/internal/safefs"
)

// Spawner runs every language server in its own bubblewrap jail. It
// implements runtime.Spawner.
type Spawner struct {
	// empty is an empty, read-only regular file the jail binds over each
	// cargo config of the tree (a device node is unreadable there).
	empty   string
	opts    Options
	log     *slog.Logger
	root    bool
	cg      *cgroups // nil: rlimits only (an unprivileged daemon)
	version string
	seccomp []byte
	libs    []mount
	cc      cToolchain
	uids    *uids     // root only: the jails' host uids
	lease   *uidLease // root only: the host-wide hold on their range
	seq     atomic.Uint64

	// holes open a deliberate gap, for the tests that prove the self-test
	// notices one.
	holes holes
}

type holes struct {
	shareNet  bool
	noLimits  bool
	bindExtra string
	anySocket bool // a filter that lets every address family through

	// The jail-price bench switches pieces off one at a time (only in a
	// daemon built with -tags lspbench, benchknobs_lspbench.go; a
	// production build has no way to set these).
	noSeccomp   bool
	noInit      bool            // bwrap runs the server itself: no in-jail init, no rlimits
	noCtrl      map[string]bool // controllers whose jail cgroups are not made at all
	jailInShare bool            // memory: jails join their parent cgroup instead of one each
}

// benchOnly reports whether a bench-only hole is open (never in a
// production build: benchHoles returns none there).
func (h holes) benchOnly() bool {
	return h.noSeccomp || h.noInit || len(h.noCtrl) > 0 || h.jailInShare
}

var _ runtime.Spawner = (*Spawner)(nil)

// jailUID is the uid (and gid) inside every jail. bwrap maps it onto the
// daemon's own uid; with it not 0 inside, bwrap drops every capability.
const jailUID = "65534"

// Paths inside the jail.
const (
	jailDir  = "/.lsp-jail"
	initPath = jailDir + "/init"
)

// New checks bubblewrap and prepares the cgroups. As root it requires pids
// and memory cgroups (they bound the jail whatever it does, and nothing in
// it can leave them) and a state directory for the jails' uids; an
// unprivileged daemon without a delegated cgroup subtree relies on the
// rlimits every jail has (RLIMIT_NPROC in the jail's own user namespace)
// plus RLIMIT_DATA for memory.
func New(opts Options, log *slog.Logger) (*Spawner, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("jail: %w", err)
	}
	if opts.Launcher == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("jail: own executable: %w", err)
		}
		opts.Launcher = exe
	}
	if err := checkExecutable(opts.Launcher); err != nil {
		return nil, fmt.Errorf("jail: launcher: %w", err)
	}
	version, err := bwrapVersion(opts.Bwrap)
	if err != nil {
		return nil, fmt.Errorf("jail: %w", err)
	}
	cc, err := resolveCToolchain(opts.CC)
	if err != nil {
		return nil, fmt.Errorf("jail: %w", err)
	}
	s := &Spawner{opts: opts, log: log, root: os.Geteuid() == 0, version: version, seccomp: seccompProgram(), libs: systemLibs(), cc: cc, holes: benchHoles(log)}
	if w := ccStartWarning(opts.CC, cc); w != "" {
		log.Warn(w, "default", DefaultCC)
	}
	cg, missing, err := setupCgroups(opts.PoolMemory)
	if err != nil {
		return nil, fmt.Errorf("jail: %w", err)
	}
	switch {
	case cg == nil && s.root:
		return nil, fmt.Errorf("jail: running as root needs pids and memory cgroups (RLIMIT_NPROC does not bind root); unavailable: %s", strings.Join(missing, ", "))
	case cg == nil:
		log.Warn("jail: no writable pids/memory cgroup for this unprivileged daemon; limiting each jail with RLIMIT_NPROC (in its own user namespace) and RLIMIT_DATA", "unavailable", missing)
		if opts.PoolMemory > 0 {
			log.Warn("jail: without a memory cgroup the pool's memory budget is enforced by sampling and eviction only, not by the kernel", "budget", opts.PoolMemory)
		}
	}
	s.cg = cg
	if s.root {
		if opts.StateDir == "" {
			_ = cg.close()
			return nil, errors.New("jail: a root daemon needs a jail state directory for its uid allocator")
		}
		if s.lease, err = leaseUIDs(opts.UIDLockDir, opts.UIDBase, opts.UIDCount, opts.UIDBaseFixed); err != nil {
			_ = cg.close()
			return nil, fmt.Errorf("jail: %w", err)
		}
		if s.uids, err = newUIDs(s.lease.base, s.lease.count, opts.StateDir); err != nil {
			s.lease.release()
			_ = cg.close()
			return nil, fmt.Errorf("jail: %w", err)
		}
	}
	if s.empty, err = emptyFile(opts.StateDir); err != nil {
		if s.lease != nil {
			s.lease.release()
		}
		if cg != nil {
			_ = cg.close()
		}
		return nil, fmt.Errorf("jail: %w", err)
	}
	return s, nil
}

func checkExecutable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", p)
	}
	return nil
}

// bwrapVersion runs bwrap --version; --disable-userns needs 0.8.0.
func bwrapVersion(bwrap string) (string, error) {
	if err := checkExecutable(bwrap); err != nil {
		return "", fmt.Errorf("bubblewrap (%s; `make deps` installs Debian's bubblewrap): %w", bwrap, err)
	}
	out, err := exec.Command(bwrap, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", bwrap, err)
	}
	v := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(out)), "bubblewrap"))
	if !versionAtLeast(v, 0, 8) {
		return "", fmt.Errorf("bubblewrap %q: need 0.8.0 or later (--disable-userns)", v)
	}
	return v, nil
}

func versionAtLeast(v string, major, minor int) bool {
	f := strings.SplitN(v, ".", 3)
	if len(f) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(f[0])
	mi, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}

// Describe says how jails are built and limited, for the start-up log.
func (s *Spawner) Describe() string {
	limits := "cgroups " + s.cg.describe()
	if s.cg == nil {
		limits = "rlimits NPROC (per user namespace) and DATA"
	}
	sc := "seccomp deny-list"
	if s.seccomp == nil {
		sc = "no seccomp filter on " + goruntime.GOARCH
	}
	uid := "the daemon's own uid"
	if s.uids != nil {
		uid = fmt.Sprintf("a host uid per home from the range [%d, %d) leased under %s", s.uids.base, uint64(s.uids.base)+uint64(s.uids.count), s.opts.UIDLockDir)
	}
	return fmt.Sprintf("bubblewrap %s; %s; %s; %s; %s; memory %d, tasks %d, files %d, file size %d",
		s.version, uid, limits, sc, s.cc.describe(), s.opts.Memory, s.opts.Pids, s.opts.Files, s.opts.FileSize)
}

// Close removes the daemon's parent cgroups and gives up its uid range.
// Call it after every server is gone.
func (s *Spawner) Close() error {
	if s.empty != "" {
		_ = os.RemoveAll(filepath.Dir(s.empty))
	}
	s.lease.release()
	s.lease = nil
	return s.cg.close()
}

// mount is one bwrap file-system operation.
type mount struct {
	op       string // --ro-bind, --bind, --symlink
	src, dst string
	// system paths are world-readable and bound by name; the others may
	// sit under directories only the daemon can enter (its root is 0700),
	// so a root daemon's launcher stages them first (see launchMain).
	system bool
}

// systemLibs are the dynamic loader and shared libraries (gopls is linked
// against libc, node against much more): /usr/lib* read-only, and /lib*
// as the host has them (symlinks into /usr on merged-/usr systems).
func systemLibs() []mount {
	var out []mount
	for _, d := range []string{"/usr/lib", "/usr/lib64", "/usr/lib32", "/usr/libx32"} {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			out = append(out, mount{op: "--ro-bind", src: d, dst: d, system: true})
		}
	}
	for _, d := range []string{"/lib", "/lib64", "/lib32", "/libx32"} {
		fi, err := os.Lstat(d)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			if target, err := os.Readlink(d); err == nil {
				out = append(out, mount{op: "--symlink", src: target, dst: d, system: true})
			}
		case fi.IsDir():
			out = append(out, mount{op: "--ro-bind", src: d, dst: d, system: true})
		}
	}
	return out
}

// serverPaths are what one server needs besides the system libraries and
// the toolchain: its executable (the file alone, not the daemon's bin
// directory around it), and every existing absolute path among its
// arguments — for a script inside a node_modules tree, that whole tree (its
// imports live there; typescript-language-server and the pinned TypeScript
// share one). A program the server runs by a path its environment,
// initialization options or settings name (bash-language-server's
// shellcheckPath) is not bound by that: the entry lists it in read_only,
// which the configuration checks against the daemon's root.
func serverPaths(spec runtime.Spec) []string {
	out := []string{spec.Executable}
	for _, a := range spec.Args {
		if !filepath.IsAbs(a) || filepath.Clean(a) != a || a == "/" {
			continue
		}
		if _, err := os.Stat(a); err != nil {
			continue
		}
		if i := strings.Index(a, "/node_modules/"); i >= 0 {
			a = a[:i+len("/node_modules")]
		}
		out = append(out, a)
	}
	return out
}

// emptyFile makes the empty file the jail binds over a tree's cargo
// configs, in a directory of its own that only its creator writes: under
// the jail's state directory when there is one (replacing what a daemon
// that did not stop cleanly left there), else a fresh one under the
// system's temporary directory.
func emptyFile(stateDir string) (string, error) {
	var dir string
	var err error
	if stateDir == "" {
		dir, err = os.MkdirTemp("", "lsp-jail-empty-")
	} else {
		dir = filepath.Join(stateDir, "empty")
		if err = os.MkdirAll(stateDir, 0o700); err == nil {
			if err = safefs.RemoveAll(dir); err == nil {
				err = os.Mkdir(dir, 0o700)
			}
		}
	}
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, "empty")
	if err := os.WriteFile(p, nil, 0o444); err != nil {
		_ = os.RemoveAll(dir)
		return "", err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		_ = os.RemoveAll(dir)
		return "", err
	}
	return p, nil
}

// maxCargoConfigs bounds the .cargo config files a jail masks.
const maxCargoConfigs = 64

// treeCargoConfigs are the cargo configuration files of a published tree
// (.cargo/config.toml and the older .cargo/config, in any directory): only
// regular files and directories are ever published, so a walk that
// follows no link sees them all. At most maxCargoConfigs+1 are returned.
// The node_modules the dependency phase installed (runtime.NPMIndex says
// so) is not walked: registry packages, hundreds of thousands of entries
// in a large install, which every server start walked (300 ms for 17,000
// entries here) though no package of a lockfile was masked while they
// lived beside the tree either. A node_modules the repository commits is
// the repository's, walked as the rest.
func treeCargoConfigs(ws runtime.Workspace) []string {
	root, skip := ws.Root, ""
	if fi, err := os.Lstat(runtime.NPMIndex(ws)); err == nil && fi.Mode().IsRegular() {
		skip = runtime.NodeModules(ws)
	}
	var out []string
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if len(out) > maxCargoConfigs {
			return filepath.SkipAll
		}
		if p == skip {
			return filepath.SkipDir
		}
		if !d.Type().IsRegular() || filepath.Base(filepath.Dir(p)) != ".cargo" {
			return nil
		}
		if n := d.Name(); n == "config.toml" || n == "config" {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// jailSpec is one jail's parts beyond the server's spec.
type jailSpec struct {
	exe  string // the program bwrap's init runs (through the in-jail init)
	args []string
	env  []string
	// ownBinds: bind the executable and argument paths
	// (false for the canary, which is the init binary itself).
	ownBinds bool
	pids     int
	// initLimits are rlimits the in-jail init applies: -name value pairs.
	initLimits []string
	// cargoConfigs are the tree's cargo configs Spawn found (non-nil, so
	// the mounts need not walk the tree again); nil: the mounts look.
	cargoConfigs []string
}

// stageDir is where a root daemon's launcher stages the sources of a
// jail's binds, in its own mount namespace: /tmp exists everywhere, and the
// launcher covers it with a private tmpfs that nobody else sees.
const stageDir = "/tmp"

func stagePath(i int) string { return stageDir + "/" + strconv.Itoa(i) }

// mounts are one jail's file-system operations. The order matters: later
// mounts cover earlier ones, so the tree (read-only) and then the home
// (writable) come after every generic path.
func (s *Spawner) mounts(spec runtime.Spec, ws runtime.Workspace, js jailSpec) []mount {
	var ms []mount
	ms = append(ms, s.libs...)
	ms = append(ms, s.cc.mounts...)
	for _, p := range s.opts.ReadOnly {
		if _, err := os.Stat(p); err == nil {
			ms = append(ms, mount{op: "--ro-bind", src: p, dst: p})
		}
	}
	if js.ownBinds {
		for _, p := range spec.ReadOnly {
			if _, err := os.Stat(p); err == nil {
				ms = append(ms, mount{op: "--ro-bind", src: p, dst: p})
			}
		}
		for _, p := range serverPaths(spec) {
			ms = append(ms, mount{op: "--ro-bind", src: p, dst: p})
		}
	}
	if s.holes.bindExtra != "" {
		ms = append(ms, mount{op: "--ro-bind", src: s.holes.bindExtra, dst: s.holes.bindExtra})
	}
	ms = append(ms,
		mount{op: "--ro-bind", src: s.opts.Launcher, dst: initPath},
		mount{op: "--ro-bind", src: ws.Root, dst: ws.Root},
	)
	// Cargo reads a tree's .cargo/config.toml wherever it runs, and its
	// [env] (force = true) reaches every rustc it starts: LD_PRELOAD of a
	// tree file loaded repository code into rustc for rust-analyzer's
	// probes. The jail shows each such file empty (an empty file over it);
	// treeCargoConfigs bounds the walk, and a tree with more than it
	// finds is refused by Spawn before this.
	cargo := js.cargoConfigs
	if cargo == nil {
		cargo = treeCargoConfigs(ws)
	}
	for _, p := range cargo {
		ms = append(ms, mount{op: "--ro-bind", src: s.empty, dst: p})
	}
	// The npm packages the dependency phase installed are the tree's
	// node_modules (runtime.NodeModules): its read-only bind shows them.
	return append(ms, mount{op: "--bind", src: ws.Home, dst: ws.Home})
}

func realDir(p string) bool {
	fi, err := os.Lstat(p)
	return err == nil && fi.IsDir()
}

// bwrapArgs are bubblewrap's arguments for one jail; with staged, every
// non-system source is named by its stage path, and sources lists the
// real paths in stage order. --remount-ro / comes last so that bwrap can
// still create mount points on its root.
func (s *Spawner) bwrapArgs(spec runtime.Spec, ws runtime.Workspace, js jailSpec, staged bool) (args, sources []string) {
	a := []string{
		"--unshare-all", "--unshare-user", "--disable-userns",
		"--uid", jailUID, "--gid", jailUID,
		"--cap-drop", "ALL",
		"--die-with-parent",
		"--hostname", "lsp-jail",
	}
	if s.holes.shareNet {
		a = append(a, "--share-net")
	}
	if s.seccomp != nil && !s.holes.noSeccomp {
		a = append(a, "--seccomp", "3")
	}
	ms := s.mounts(spec, ws, js)
	for _, m := range ms {
		src := m.src
		if staged && !m.system && m.op != "--symlink" {
			src = stagePath(len(sources))
			sources = append(sources, m.src)
		}
		a = append(a, m.op, src, m.dst)
	}
	a = append(a, "--proc", "/proc", "--dev", "/dev", "--remount-ro", "/dev")
	// Programs that ignore TMPDIR find /tmp in the private home, unless a
	// bound path already lives under /tmp (tests), which makes /tmp a
	// read-only directory of mount points instead.
	if !anyUnder(ms, "/tmp") {
		a = append(a, "--symlink", filepath.Join(ws.Home, "tmp"), "/tmp")
	}
	a = append(a, "--remount-ro", "/", "--chdir", ws.Root, "--clearenv")
	for _, kv := range js.env {
		k, v, _ := strings.Cut(kv, "=")
		a = append(a, "--setenv", k, v)
	}
	if s.holes.noInit {
		a = append(a, "--", js.exe)
		return append(a, js.args...), sources
	}
	a = append(a, "--", initPath, modeInit)
	a = append(a, js.initLimits...)
	a = append(a, "--", js.exe)
	return append(a, js.args...), sources
}

func anyUnder(ms []mount, dir string) bool {
	for _, m := range ms {
		if m.op != "--symlink" && (m.dst == dir || strings.HasPrefix(m.dst, dir+"/")) {
			return true
		}
	}
	return false
}

// Cgo reports whether the jail gives the go command a C compiler
// (LSP_JAIL_CC; runtime.CgoSpawner).
func (s *Spawner) Cgo() bool { return s.cc.cc != "" }

// ServerEnv is the environment spec's server gets in a jail over ws: the
// C compiler's variables replace the minimal environment's CGO_ENABLED=0,
// and Go programs get a soft memory limit below the jail's; the server's
// own Env still has the last word.
func (s *Spawner) ServerEnv(spec runtime.Spec, ws runtime.Workspace) []string {
	base := spec
	base.Env = nil
	env := append(s.cc.withCC(runtime.Environment(base, ws)), goMemLimit(s.opts.Memory))
	return append(env, spec.Env...)
}

// Spawn starts spec's server in a new jail over ws.
func (s *Spawner) Spawn(ctx context.Context, spec runtime.Spec, ws runtime.Workspace) (runtime.Process, error) {
	if !filepath.IsAbs(spec.Executable) {
		return nil, fmt.Errorf("spawn %s: executable %q is not an absolute path", spec.ID, spec.Executable)
	}
	if err := checkExecutable(spec.Executable); err != nil {
		return nil, fmt.Errorf("spawn %s: %w", spec.ID, err)
	}
	// One walk of the tree per start: the mounts take what it found.
	cargo := append([]string{}, treeCargoConfigs(ws)...)
	if len(cargo) > maxCargoConfigs {
		return nil, fmt.Errorf("spawn %s: the tree has more than %d .cargo config files; the jail masks at most that many", spec.ID, maxCargoConfigs)
	}
	return s.spawn(ctx, spec, ws, jailSpec{
		exe: spec.Executable, args: spec.Args, env: s.ServerEnv(spec, ws),
		ownBinds: true, pids: s.opts.Pids, cargoConfigs: cargo,
	})
}

func (s *Spawner) spawn(ctx context.Context, spec runtime.Spec, ws runtime.Workspace, js jailSpec) (_ *process, err error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("spawn %s: %w", spec.ID, err)
	}
	for _, p := range []string{ws.Root, ws.Home} {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p || p == "/" {
			return nil, fmt.Errorf("spawn %s: workspace root and home must be clean absolute paths, not %q", spec.ID, p)
		}
	}
	uid, owner := -1, safefs.Keep
	if s.uids != nil {
		if uid, err = s.uids.forHome(ws.Home); err != nil {
			return nil, fmt.Errorf("spawn %s: %w", spec.ID, err)
		}
		owner = safefs.Owner{UID: uid, GID: uid}
	}
	// The home is the jail's: the previous server may have planted links
	// in it, which PrepareHome never follows.
	if err := runtime.PrepareHome(ws, owner); err != nil {
		return nil, fmt.Errorf("spawn %s: home: %w", spec.ID, err)
	}
	js.initLimits = s.initLimits(js.pids)

	var jc *jailCgroup
	if s.cg != nil && !s.holes.noLimits {
		name := strconv.FormatUint(s.seq.Add(1), 10)
		if jc, err = s.cg.create(name, js.pids, s.opts.Memory, s.holes.noCtrl, s.holes.jailInShare); err != nil {
			return nil, fmt.Errorf("spawn %s: %w", spec.ID, err)
		}
		defer func() {
			if err != nil {
				_ = jc.remove()
			}
		}()
	}

	pp, err := runtime.NewPipes()
	if err != nil {
		return nil, fmt.Errorf("spawn %s: %w", spec.ID, err)
	}
	closeAll := pp.Close
	var extra []*os.File
	prog := s.seccomp
	if s.holes.anySocket && prog != nil {
		prog = buildSeccomp(nil)
	}
	if s.holes.noSeccomp {
		prog = nil
	}
	if prog != nil {
		scR, scW, err := os.Pipe()
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("spawn %s: %w", spec.ID, err)
		}
		// A few hundred bytes: the pipe holds them all, and bwrap reads to
		// EOF.
		if _, err := scW.Write(prog); err != nil {
			_ = scR.Close()
			_ = scW.Close()
			closeAll()
			return nil, fmt.Errorf("spawn %s: seccomp: %w", spec.ID, err)
		}
		_ = scW.Close()
		extra = append(extra, scR)
	}

	bargs, sources := s.bwrapArgs(spec, ws, js, s.root)
	argv := append([]string{s.opts.Bwrap}, bargs...)
	var sys syscall.SysProcAttr
	if s.root || jc != nil {
		// The launcher is the daemon binary again. It joins the cgroups
		// and only then becomes bwrap, so every process of the jail is
		// born inside them (cgroup v1 cannot start a child in another
		// cgroup). As root it also stages the bind sources in a private
		// mount namespace and drops to the home's uid before it execs
		// bwrap, which then runs unprivileged.
		launch := []string{s.opts.Launcher, modeLaunch}
		if jc != nil {
			for _, f := range jc.procsFiles() {
				launch = append(launch, "-procs", f)
			}
		}
		if s.root {
			launch = append(launch, "-stage", stageDir)
			for _, src := range sources {
				launch = append(launch, "-src", src)
			}
			launch = append(launch, "-uid", strconv.Itoa(uid), "-ppid", strconv.Itoa(os.Getpid()))
			sys.Unshareflags = syscall.CLONE_NEWNS
		}
		argv = append(append(launch, "--"), argv...)
	}
	// A new session: the jail has no controlling terminal to inject input
	// into, and the session id is the process group that Kill and Wait
	// clean up.
	sys.Setsid = true
	sys.Pdeathsig = syscall.SIGKILL
	cmd := &exec.Cmd{
		Path: argv[0],
		Args: argv,
		// Nothing of the daemon's environment: bwrap's own environment is
		// what the jail's PID 1 shows in /proc/1/environ.
		Env:         []string{},
		Dir:         "/",
		Stdin:       pp.InR,
		Stdout:      pp.OutW,
		Stderr:      pp.ErrW,
		ExtraFiles:  extra,
		SysProcAttr: &sys,
	}
	err = runtime.StartOnSpawnThread(cmd)
	for _, f := range extra {
		_ = f.Close()
	}
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("spawn %s: %w", spec.ID, err)
	}
	pp.CloseChildEnds()
	log := s.log.With("server", spec.ID, "pid", cmd.Process.Pid)
	// The whole jail is in bwrap's process group: bwrap outside (the
	// leader of a new session), its init as PID 1 of the jail's PID
	// namespace, and the server under it, so killing the group kills a
	// server child that called setsid too.
	return &process{runtime.NewGroupProcess(cmd, pp, log, func() { removeCgroup(jc, log) }), jc}, nil
}

// initLimits are the rlimits the in-jail init sets before it runs the
// server. RLIMIT_NPROC counts tasks per user and user namespace, so set
// inside the jail's own user namespace it bounds this jail alone (set
// outside it would count every process of the daemon's uid); a root
// daemon's jails have the pids cgroup on top, which nothing can leave.
func (s *Spawner) initLimits(pids int) []string {
	l := []string{
		"-nofile", strconv.FormatUint(s.opts.Files, 10),
		"-fsize", strconv.FormatInt(s.opts.FileSize, 10),
		"-core", "0",
	}
	if !s.holes.noLimits {
		l = append(l, "-nproc", strconv.Itoa(pids))
		if s.cg == nil {
			l = append(l, "-data", strconv.FormatInt(s.opts.Memory, 10))
		}
	}
	return l
}
