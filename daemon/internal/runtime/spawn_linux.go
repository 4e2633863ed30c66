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
	if err := prepareHome(ws); err != nil {
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

	log := u.log.With("server", spec.ID, "pid", cmd.Process.Pid)
	return &unjailedProcess{
		cmd:        cmd,
		pid:        cmd.Process.Pid,
		stdin:      pp.InW,
		stdout:     pp.OutR,
		stderr:     pp.ErrR,
		log:        log,
		stderrTail: DrainStderr(pp.ErrR, log),
	}, nil
}

type unjailedProcess struct {
	cmd    *exec.Cmd
	pid    int
	stdin  *os.File
	stdout *os.File
	stderr *os.File
	log    *slog.Logger

	mu     sync.Mutex // orders Kill against reaping the leader
	reaped bool

	waitOnce sync.Once
	waitErr  error

	stderrTail *StderrTail
}

func (p *unjailedProcess) Stdin() io.WriteCloser { return p.stdin }
func (p *unjailedProcess) Stdout() io.ReadCloser { return p.stdout }
func (p *unjailedProcess) Pid() int              { return p.pid }

// Kill sends SIGKILL to the whole process group. The group id is the
// leader's pid, which stays reserved until the leader is reaped, so the
// signal cannot reach an unrelated group that reused the number.
func (p *unjailedProcess) Kill() error {
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
// setting included), and only then lets exec reap the leader.
func (p *unjailedProcess) Wait() error {
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
		// Every writer of stderr is dead now, so the drain ends at EOF once
		// it has read what is buffered; the timeout covers a process that
		// left the group and still holds the pipe.
		p.stderrTail.Close(p.stderr)
	})
	return p.waitErr
}

// StderrTail returns the last lines the server wrote to stderr.
func (p *unjailedProcess) StderrTail() string { return p.stderrTail.String() }
