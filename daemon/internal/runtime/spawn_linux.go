//go:build linux

package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/hanzoai/lsp/daemon/internal/safefs"
)

// BecomeSubreaper makes this process the reaper of its orphaned
// descendants (prctl PR_SET_CHILD_SUBREAPER). The daemon calls it at start:
// the machines' PID 1 does not reap, so without it a language server's
// grandchildren would outlive their parent as zombies nobody collects.
func BecomeSubreaper() error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_CHILD_SUBREAPER): %w", err)
	}
	return nil
}

// Unjailed returns the development spawner: the server runs as a direct
// child with the minimal Environment, cwd at the workspace root, in its own
// process group, killed by the kernel if the daemon dies. It isolates
// nothing else.
func Unjailed(log *slog.Logger) Spawner {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &unjailed{log: log}
}

type unjailed struct{ log *slog.Logger }

func (u *unjailed) Spawn(ctx context.Context, spec Spec, ws Workspace) (Process, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("spawn %s: %w", spec.ID, err)
	}
	if !filepath.IsAbs(spec.Executable) {
		return nil, fmt.Errorf("spawn %s: executable %q is not an absolute path", spec.ID, spec.Executable)
	}
	if !filepath.IsAbs(ws.Root) || !filepath.IsAbs(ws.Home) {
		return nil, fmt.Errorf("spawn %s: workspace root and home must be absolute", spec.ID)
	}
	if err := PrepareHome(ws, safefs.Keep); err != nil {
		return nil, fmt.Errorf("spawn %s: home: %w", spec.ID, err)
	}

	pp, err := NewPipes()
	if err != nil {
		return nil, fmt.Errorf("spawn %s: %w", spec.ID, err)
	}
	cmd := &exec.Cmd{
		Path:   spec.Executable,
		Args:   append([]string{spec.Executable}, spec.Args...),
		Env:    Environment(spec, ws),
		Dir:    ws.Root,
		Stdin:  pp.InR,
		Stdout: pp.OutW,
		Stderr: pp.ErrW,
		SysProcAttr: &syscall.SysProcAttr{
			Setpgid:   true,
			Pdeathsig: syscall.SIGKILL,
		},
	}
	if err := StartOnSpawnThread(cmd); err != nil {
		pp.Close()
		return nil, fmt.Errorf("spawn %s: %w", spec.ID, err)
	}
	pp.CloseChildEnds()

	return NewGroupProcess(cmd, pp, u.log.With("server", spec.ID, "pid", cmd.Process.Pid), nil), nil
}

// GroupProcess is a started server that leads its own process group: the
// unjailed spawner's server, and the jail's bwrap (whose init, and so the
// whole jail, is in that group).
type GroupProcess struct {
	cmd       *exec.Cmd
	pid       int
	stdin     *os.File
	stdout    *os.File
	stderr    *os.File
	log       *slog.Logger
	afterReap func()

	mu     sync.Mutex // orders Kill against reaping the leader
	reaped bool

	waitOnce sync.Once
	waitErr  error

	stderrTail *StderrTail
}

// NewGroupProcess wraps cmd, started as a process-group leader on pp's
// child ends (already closed here). afterReap, when set, runs once the
// leader and the rest of its group are reaped (the jail removes its
// cgroups there).
func NewGroupProcess(cmd *exec.Cmd, pp *Pipes, log *slog.Logger, afterReap func()) *GroupProcess {
	return &GroupProcess{
		cmd:        cmd,
		pid:        cmd.Process.Pid,
		stdin:      pp.InW,
		stdout:     pp.OutR,
		stderr:     pp.ErrR,
		log:        log,
		afterReap:  afterReap,
		stderrTail: DrainStderr(pp.ErrR, log),
	}
}

func (p *GroupProcess) Stdin() io.WriteCloser { return p.stdin }
func (p *GroupProcess) Stdout() io.ReadCloser { return p.stdout }
func (p *GroupProcess) Pid() int              { return p.pid }

// Kill sends SIGKILL to the whole process group. The group id is the
// leader's pid, which stays reserved until the leader is reaped, so the
// signal cannot reach an unrelated group that reused the number.
func (p *GroupProcess) Kill() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reaped {
		return nil
	}
	if err := unix.Kill(-p.pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("kill process group %d: %w", p.pid, err)
	}
	return nil
}

// Wait waits for the leader to exit without reaping it, kills and reaps the
// rest of its group (grandchildren re-parented to us by the subreaper
// setting, or a jail's init, included), and only then lets exec reap the
// leader.
func (p *GroupProcess) Wait() error {
	p.waitOnce.Do(func() {
		for {
			var info unix.Siginfo
			err := unix.Waitid(unix.P_PID, p.pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
			if !errors.Is(err, unix.EINTR) {
				break
			}
		}
		ReapGroup(p.pid, p.log)
		p.mu.Lock()
		p.waitErr = p.cmd.Wait()
		p.reaped = true
		p.mu.Unlock()
		if p.afterReap != nil {
			p.afterReap()
		}
		// Every writer of stderr is dead now, so the drain ends at EOF once
		// it has read what is buffered; the timeout covers a process that
		// left the group and still holds the pipe.
		p.stderrTail.Close(p.stderr)
	})
	return p.waitErr
}

// StderrTail returns the last lines the server (or its jail) wrote to
// stderr.
func (p *GroupProcess) StderrTail() string { return p.stderrTail.String() }
