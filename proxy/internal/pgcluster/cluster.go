// Package pgcluster runs a throwaway PostgreSQL cluster from the locally installed server binaries, for
// tests and for `make run`. It is not for production: the cluster trusts every local connection and runs
// with fsync off (commits still wait for the WAL write: synchronous_commit stays on, so the commit path
// costs what it costs in production minus the disk flush).
//
// The cluster listens only on a unix socket in a private directory (no TCP port to collide with).
// initdb and postgres refuse to run as root, so when the caller is root both run as the `postgres`
// user, which then owns the cluster's directory; that directory's ancestors must be searchable by it
// (a fresh os.MkdirTemp("", …) directory works, t.TempDir does not: its parent is private).
//
// The binaries are found through LSP_PG_BINDIR, then `pg_config --bindir`, then the newest
// /usr/lib/postgresql/*/bin. The postmaster runs in its own session (a terminal's Ctrl-C reaches only
// the caller, which stops the cluster after its own shutdown) and gets SIGQUIT if the caller dies, so
// no server outlives its owner.
package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hanzoai/lsp/proxy/internal/spawnthread"
)

// Superuser is the cluster's superuser role; local connections need no password.
const Superuser = "postgres"

// port names the socket file (.s.PGSQL.5432); no TCP listener is opened.
const port = 5432

// Cluster is a running (or stopped) throwaway PostgreSQL cluster.
type Cluster struct {
	log     *slog.Logger
	bindir  string
	dir     string
	dataDir string
	sockDir string
	ownSock bool // sockDir was made outside dir (path too long) and is removed by Stop
	cred    *syscall.Credential
	logPath string
	mu      sync.Mutex
	proc    *process
}

type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the postmaster has exited and been reaped
}

// Start creates a cluster in dir (initdb, unless dir already holds one) and starts it. dir is created
// if missing; the data lives in dir/data, the socket in dir/sock, the server log in dir/postgres.log.
// The caller must Stop the cluster.
func Start(ctx context.Context, dir string, log *slog.Logger) (*Cluster, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c, err := prepare(dir, log)
	if err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	if err := c.initdb(ctx); err != nil {
		c.cleanupSock()
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.startLocked(ctx); err != nil {
		c.cleanupSock()
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	return c, nil
}

func prepare(dir string, log *slog.Logger) (*Cluster, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	bindir, err := findBinDir()
	if err != nil {
		return nil, err
	}
	c := &Cluster{
		log:     log,
		bindir:  bindir,
		dir:     abs,
		dataDir: filepath.Join(abs, "data"),
		sockDir: filepath.Join(abs, "sock"),
		logPath: filepath.Join(abs, "postgres.log"),
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, err
	}
	// sun_path holds 108 bytes including the socket file name and the NUL.
	if len(c.sockDir)+len("/.s.PGSQL.5432")+1 > 100 {
		s, err := os.MkdirTemp("", "pgsock")
		if err != nil {
			return nil, err
		}
		c.sockDir, c.ownSock = s, true
	} else if err := os.MkdirAll(c.sockDir, 0o700); err != nil {
		return nil, err
	}
	if os.Geteuid() == 0 {
		if err := c.runAsPostgres(); err != nil {
			c.cleanupSock()
			return nil, err
		}
	}
	return c, nil
}

// runAsPostgres sets up the credential switch and hands the cluster's directories to the postgres user.
func (c *Cluster) runAsPostgres() error {
	u, err := user.Lookup("postgres")
	if err != nil {
		return fmt.Errorf("running as root needs a postgres user: %w", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return fmt.Errorf("postgres user has ids %q:%q", u.Uid, u.Gid)
	}
	c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	if err := searchable(filepath.Dir(c.dir), c.cred); err != nil {
		return err
	}
	if c.ownSock {
		if err := searchable(filepath.Dir(c.sockDir), c.cred); err != nil {
			return err
		}
	}
	for _, p := range []string{c.dir, c.sockDir} {
		if err := os.Chown(p, int(uid), int(gid)); err != nil {
			return err
		}
	}
	if _, err := os.Stat(c.dataDir); err == nil {
		return filepath.Walk(c.dataDir, func(p string, _ os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(p, int(uid), int(gid))
		})
	}
	return nil
}

// searchable checks that every directory from dir up to / lets cred pass, so that initdb fails with a
// message naming the culprit instead of a bare "Permission denied".
func searchable(dir string, cred *syscall.Credential) error {
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		m := fi.Mode().Perm()
		okDir := m&0o001 != 0 ||
			(st.Uid == cred.Uid && m&0o100 != 0) ||
			(st.Gid == cred.Gid && m&0o010 != 0)
		if !okDir {
			return fmt.Errorf("directory %s is not searchable by the postgres user (mode %v): put the cluster under a directory such as os.MkdirTemp(\"\", ...)", d, m)
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

func findBinDir() (string, error) {
	has := func(d string) bool {
		fi, err := os.Stat(filepath.Join(d, "initdb"))
		return err == nil && !fi.IsDir()
	}
	if d := os.Getenv("LSP_PG_BINDIR"); d != "" {
		if !has(d) {
			return "", fmt.Errorf("LSP_PG_BINDIR=%s has no initdb", d)
		}
		return d, nil
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		if d := strings.TrimSpace(string(out)); has(d) {
			return d, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgMajor(dirs[i]) > pgMajor(dirs[j]) })
	for _, d := range dirs {
		if has(d) {
			return d, nil
		}
	}
	return "", errors.New("no PostgreSQL server binaries found (install postgresql, or set LSP_PG_BINDIR)")
}

func pgMajor(bindir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(bindir)))
	return n
}

func (c *Cluster) env() []string {
	return []string{"PATH=" + c.bindir + ":/usr/bin:/bin", "LC_ALL=C", "LANG=C", "TZ=UTC"}
}

func (c *Cluster) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	var cmd *exec.Cmd
	if ctx != nil {
		cmd = exec.CommandContext(ctx, filepath.Join(c.bindir, name), args...)
		// initdb runs postgres children of its own: cancel the whole group.
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	} else {
		cmd = exec.Command(filepath.Join(c.bindir, name), args...)
	}
	cmd.Dir = c.dir
	cmd.Env = c.env()
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Setpgid: true}
	return cmd
}

func (c *Cluster) initdb(ctx context.Context) error {
	if _, err := os.Stat(filepath.Join(c.dataDir, "PG_VERSION")); err == nil {
		c.log.Info("reusing postgres cluster", "dir", c.dataDir)
		return nil
	}
	cmd := c.command(ctx, "initdb", "-D", c.dataDir, "-U", Superuser, "--auth=trust",
		"--encoding=UTF8", "--locale=C", "--no-sync")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("initdb: %w: %s", err, tail(out.String(), 2000))
	}
	return nil
}

// startLocked spawns the postmaster and waits until it accepts connections.
func (c *Cluster) startLocked(ctx context.Context) error {
	// Stop removes a socket directory made outside dir; a later Restart needs it back.
	if err := os.MkdirAll(c.sockDir, 0o700); err != nil {
		return err
	}
	if c.cred != nil {
		if err := os.Chown(c.sockDir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return err
		}
	}
	logf, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close() // the child holds its own descriptor
	cmd := c.command(context.Background(), "postgres",
		"-D", c.dataDir,
		"-k", c.sockDir,
		"-p", strconv.Itoa(port),
		"-c", "listen_addresses=",
		"-c", "fsync=off",
		"-c", "synchronous_commit=on",
		"-c", "full_page_writes=off",
		"-c", "max_connections=200",
		"-c", "timezone=UTC",
		"-c", "log_timezone=UTC",
		"-c", "log_line_prefix=%m [%p] ",
	)
	cmd.Stdout, cmd.Stderr = logf, logf
	// The parent-death signal makes an orphaned postmaster shut down at once (SIGQUIT).
	cmd.SysProcAttr.Pdeathsig = syscall.SIGQUIT

	p := &process{cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// Linux delivers the parent-death signal when the *thread* that forked the child exits:
		// fork from the process's permanent spawn thread (package spawnthread says why).
		if err := spawnthread.Start(cmd); err != nil {
			started <- err
			close(p.done)
			return
		}
		started <- nil
		_ = cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	c.proc = p
	c.log.Info("postgres starting", "pid", cmd.Process.Pid, "socket_dir", c.sockDir, "log", c.logPath)
	if err := c.waitReady(ctx, p); err != nil {
		c.killLocked(p)
		c.proc = nil
		return err
	}
	return nil
}

func (c *Cluster) waitReady(ctx context.Context, p *process) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var last error
	for delay := 5 * time.Millisecond; ; delay = min(delay*2, 100*time.Millisecond) {
		select {
		case <-p.done:
			return fmt.Errorf("postgres exited during start-up: %s", c.logTail())
		default:
		}
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgconn.Connect(cctx, c.URL("postgres"))
		ccancel()
		if err == nil {
			_ = conn.Close(ctx)
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("postgres not ready: %w (last error: %v): %s", ctx.Err(), last, c.logTail())
		case <-p.done:
		case <-time.After(delay):
		}
	}
}

func (c *Cluster) logTail() string {
	b, err := os.ReadFile(c.logPath)
	if err != nil {
		return "(no server log)"
	}
	return tail(string(b), 2000)
}

func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	return s
}

// URL returns a pgx connection URL for dbname on this cluster (unix socket, superuser, no password).
func (c *Cluster) URL(dbname string) string {
	q := url.Values{}
	q.Set("host", c.sockDir)
	q.Set("port", strconv.Itoa(port))
	q.Set("sslmode", "disable")
	u := url.URL{Scheme: "postgres", User: url.User(Superuser), Path: "/" + dbname, RawQuery: q.Encode()}
	return u.String()
}

// SocketDir is the directory holding the server's unix socket (psql -h SocketDir -U postgres).
func (c *Cluster) SocketDir() string { return c.sockDir }

// CreateDatabase creates an empty database named name.
func (c *Cluster) CreateDatabase(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

// Stop shuts the cluster down (fast shutdown: sessions are disconnected, open transactions roll back).
// When ctx ends first the server is shut down immediately and, failing that, killed with its whole
// process group. Stop is idempotent.
func (c *Cluster) Stop(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	err := c.stopLocked(ctx, syscall.SIGINT)
	c.cleanupSock()
	if err != nil {
		return fmt.Errorf("stop postgres: %w", err)
	}
	return nil
}

// Restart stops the server (immediately when immediate is set: no checkpoint, crash recovery on the way
// up, as after a crash) and starts it again on the same data and socket. Open connections break.
func (c *Cluster) Restart(ctx context.Context, immediate bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	sig := syscall.SIGINT
	if immediate {
		sig = syscall.SIGQUIT
	}
	if err := c.stopLocked(ctx, sig); err != nil {
		return fmt.Errorf("restart postgres: %w", err)
	}
	if err := c.startLocked(ctx); err != nil {
		return fmt.Errorf("restart postgres: %w", err)
	}
	return nil
}

func (c *Cluster) stopLocked(ctx context.Context, sig syscall.Signal) error {
	p := c.proc
	if p == nil {
		return nil
	}
	c.proc = nil
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
		c.log.Info("postgres stopped", "pid", p.cmd.Process.Pid)
		return nil
	case <-ctx.Done():
	}
	c.killLocked(p)
	return fmt.Errorf("postgres did not stop in time, killed: %w", ctx.Err())
}

// killLocked ends the postmaster and every process of its group, whatever state they are in.
func (c *Cluster) killLocked(p *process) {
	pid := p.cmd.Process.Pid
	_ = syscall.Kill(pid, syscall.SIGQUIT)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
	}
	// Every server process makes itself a process-group leader (setsid), so a group kill does not
	// reach them: kill the postmaster's children one by one. Orphans would notice the postmaster's
	// death and exit anyway, but not before holding the data directory a little longer.
	kids := childrenOf(pid)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	for _, k := range kids {
		_ = syscall.Kill(k, syscall.SIGKILL)
	}
	<-p.done
}

// childrenOf lists the processes whose parent is pid (Linux /proc).
func childrenOf(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// After the parenthesised command: state, ppid, ...
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, n)
		}
	}
	return out
}

func (c *Cluster) cleanupSock() {
	if c.ownSock {
		_ = os.RemoveAll(c.sockDir)
	}
}
