// Package jail runs each language server in its own bubblewrap (Debian's
// bwrap, 0.8 or later) sandbox: the runtime.Spawner that production uses.
//
// One jail is one server process tree:
//
//	daemon ─▶ lsp-daemon __lsp-jail-launch   (root, or cgroups) joins the
//	           │                             jail's cgroups; as root stages the
//	           │                             bind sources, drops to the home's uid
//	           └ exec bwrap                   new session; user, mount, PID, net,
//	              └ bwrap init (PID 1)        IPC, UTS, cgroup namespaces
//	                 └ lsp-daemon __lsp-jail-init   sets the rlimits, closes fds
//	                    └ exec the server
//
// The jail has no network (a network namespace holding only lo), its own
// PID namespace (the daemon and other jails are invisible; when its init
// dies the kernel kills everything in it), and a fresh root holding only
// read-only system libraries, the operator's toolchain paths (the Go
// toolchain, the pinned TypeScript), the server's executable (the file
// alone, from the daemon's content-addressed bin directory) and argument
// paths (a node_modules tree whole), the daemon binary as /.lsp-jail/init,
// the workspace tree read-only at its own path (so URIs map back to it)
// and the private home read-write at its own path. The root and /dev are
// read-only. Nothing of the daemon's environment enters: bwrap starts from
// an empty one and sets exactly runtime.Environment. The server runs as uid
// 65534 of its own user namespace with no capability, no_new_privs, no way
// to make another user namespace (--disable-userns), no controlling
// terminal (the launcher starts a new session), and a seccomp deny list
// that also lets sockets be made only in AF_UNIX (see seccomp_linux.go).
// The home is the jail's to write: the daemon prepares it before every
// spawn through package safefs, never following a link planted there.
//
// A root daemon never lets a jail be host uid 0: each server home gets an
// unprivileged host uid of its own (uid_linux.go), so bwrap itself runs
// unprivileged. Since the daemon's root is private (0700), the launcher
// first bind-mounts each source under a tmpfs of its own mount namespace,
// where bwrap, running as that uid, can reach it.
//
// Limits hold as root too. A root daemon makes one pids and one memory
// cgroup per jail under its own cgroup (v1 hierarchies where the machine
// mounts them, else v2; see cgroup_linux.go); the launcher writes its own
// pid into them before it becomes bwrap, so every process of the jail is
// born inside them (cgroup v1 has no way to start a child in another
// cgroup). The cgroups are removed once the jail's process tree is gone.
// Every jail's cgroup sits under one parent per hierarchy; with a pool
// memory budget (Options.PoolMemory, LSP_POOL_MAX_RSS) the memory parent's
// limit makes the kernel hold all the jails together under it. The host
// uids of a root daemon's jails come from a range leased host-wide by flock
// (uidlease_linux.go), so two daemons on one host never share one.
// Every jail also gets RLIMIT_NPROC from the in-jail init, inside its own
// user namespace (the kernel counts it per user namespace, so it bounds
// that jail alone), RLIMIT_NOFILE, RLIMIT_FSIZE and no core dumps; an
// unprivileged daemon without a writable cgroup subtree runs jails as its
// own uid and bounds memory with RLIMIT_DATA.
//
// The process contract is runtime.Unjailed's: the launcher is the leader
// of the jail's process group, Kill kills the group (bwrap, its init, and
// with the init every process of the namespace, setsid or not), and Wait
// reaps all of it, then the cgroups.
//
// SelfTest proves the boundary at daemon start with a canary — the daemon
// binary again, in a jail built exactly like a server's — and the daemon
// refuses to serve if it fails. Main dispatches the binary's hidden modes
// (launch, init, canary); the daemon's main and every test binary that
// spawns jails call it first.
package jail
