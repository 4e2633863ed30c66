package devstack

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/spawnthread"
)

// DaemonOptions describe one extra lsp-daemon process: a shard of a stack
// started with Options.Daemons.
type DaemonOptions struct {
	Bin    string // the lsp-daemon binary
	Dir    string // its directory: root, config and log live below it
	Listen string // LSP_DAEMON_LISTEN: unix:///path.sock or host:port
	// Servers is the stack's options, for the reviewed-server file (the
	// pinned gopls, TypeScript when configured).
	Servers Options
	// Env adds LSP_* variables (the TLS files of a host:port daemon, the
	// log level).
	Env map[string]string
}

// Daemon is one running lsp-daemon process.
type Daemon struct {
	o       DaemonOptions
	Root    string // LSP_DAEMON_ROOT
	LogFile string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// StartDaemon writes the daemon's reviewed-server file and starts it; it
// returns once the daemon listens.
func StartDaemon(ctx context.Context, o DaemonOptions) (*Daemon, error) {
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	d := &Daemon{o: o, Root: filepath.Join(o.Dir, "root"), LogFile: filepath.Join(o.Dir, "daemon.log")}
	if err := WriteServerConfig(filepath.Join(o.Dir, "servers.json"), o.Servers); err != nil {
		return nil, err
	}
	return d, d.Start(ctx)
}

// Start (re)starts the process on the same address and root: its
// workspaces on disk survive a restart, its language servers do not.
func (d *Daemon) Start(ctx context.Context) error {
	d.Stop()
	sock, unix := strings.CutPrefix(d.o.Listen, "unix://")
	if unix {
		_ = os.Remove(sock)
	}
	cmd := exec.Command(d.o.Bin)
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"LSP_DAEMON_LISTEN=" + d.o.Listen,
		"LSP_DAEMON_CONFIG=" + filepath.Join(d.o.Dir, "servers.json"),
		"LSP_DAEMON_ROOT=" + d.Root,
		"LSP_LOG_LEVEL=warn",
	}
	if d.o.Servers.Unjailed {
		cmd.Env = append(cmd.Env, "LSP_UNJAILED=1")
	}
	for k, v := range d.o.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	logf, err := os.OpenFile(d.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if uid := d.o.Servers.DaemonUID; uid != 0 {
		if err := chownAll(d.o.Dir, uid); err != nil {
			logf.Close()
			return fmt.Errorf("daemon: give %s to uid %d: %w", d.o.Dir, uid, err)
		}
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}}
	}
	if err := spawnthread.Start(cmd); err != nil {
		logf.Close()
		return fmt.Errorf("daemon: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	d.mu.Lock()
	d.cmd, d.done = cmd, done
	d.mu.Unlock()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var c net.Conn
		if unix {
			c, err = net.Dial("unix", sock)
		} else {
			c, err = net.Dial("tcp", d.o.Listen)
		}
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("daemon exited at start: %s", logTail(d.LogFile))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.New("daemon did not listen within 60s")
		}
	}
}

// chownAll gives dir and what it holds to uid, once: before the daemon's
// first start, when the stack alone has written there. Later its jails
// have written the homes, and a walk by path could be led through a
// directory swapped for a link.
func chownAll(dir string, uid int) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) == uid {
		return nil
	}
	return filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, uid)
	})
}

// Pid is the daemon process's id (0 when it is not running).
func (d *Daemon) Pid() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cmd == nil {
		return 0
	}
	return d.cmd.Process.Pid
}

// Kill ends the daemon at once (SIGKILL to its process group), as a crash
// or a lost machine would.
func (d *Daemon) Kill() {
	d.mu.Lock()
	cmd, done := d.cmd, d.done
	d.cmd = nil
	d.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
}

// Stop stops the daemon gracefully, then kills its process group.
func (d *Daemon) Stop() {
	d.mu.Lock()
	cmd, done := d.cmd, d.done
	d.cmd = nil
	d.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
}

// BuildSeedWait bounds AwaitBuildSeed for a measurement: the daemon's own
// bound on making the seed (deps.seedTimeout, 3 min) and some.
const BuildSeedWait = 4 * time.Minute

// AwaitBuildSeed waits until the daemon's standard-library build seed
// (daemon/internal/deps.BuildSeed) is made — its stamp is written last,
// under the root's gobuild-seed (app.startBuildSeed) — or has failed (the
// daemon warns, at the default log level), at most max. A measurement
// waits for it so that the seed's go command and compilers, which run
// under the daemon at niceness 10 for several seconds after it starts, do
// not compete with the figure or count in its process tree, and so that
// every workspace measured gets the seed as on a daemon that has been up a
// while. Only for a daemon that serves Go: one that does not makes no seed.
func (d *Daemon) AwaitBuildSeed(ctx context.Context, max time.Duration) error {
	stamp := filepath.Join(d.Root, "gobuild-seed", "stamp")
	deadline := time.Now().Add(max)
	for {
		if _, err := os.Stat(stamp); err == nil {
			return nil
		}
		if log := d.Log(); strings.Contains(log, "go build cache seed not made") {
			return fmt.Errorf("the daemon made no build seed: %s", logTail(d.LogFile))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the daemon's build seed was not made within %v", max)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Log is what the daemon has logged so far.
func (d *Daemon) Log() string {
	b, _ := os.ReadFile(d.LogFile)
	return string(b)
}

// StopProxy stops only the in-process proxy, gracefully, and returns once
// app.Run has returned (its in-flight requests and prepares have finished
// within LSP_SHUTDOWN_GRACE). Postgres, the forge and the daemon keep
// running, so a test can look at what the shutdown left behind.
func (s *Stack) StopProxy() error {
	if s.proxyCancel == nil {
		return nil
	}
	s.proxyCancel()
	err := <-s.proxyDone
	s.proxyCancel = nil
	return err
}
