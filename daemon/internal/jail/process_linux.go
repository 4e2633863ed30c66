//go:build linux

package jail

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
)

// process is one jail: bwrap outside (the leader of a new session and
// process group), bwrap's init as PID 1 of the jail's PID namespace, and
// the server under it. Everything that init's namespace holds dies with
// init, and init is in the leader's process group, so killing the group
// kills the whole jail — including a server child that called setsid.
type process struct {
	cmd    *exec.Cmd
	pid    int
	stdin  *os.File
	stdout *os.File
	stderr *os.File
	cg     *jailCgroup
	log    *slog.Logger

	mu     sync.Mutex // orders Kill against reaping the leader
	reaped bool

	waitOnce sync.Once
	waitErr  error

	stderrTail *runtime.StderrTail
}

func (p *process) Stdin() io.WriteCloser { return p.stdin }
func (p *process) Stdout() io.ReadCloser { return p.stdout }
func (p *process) Pid() int              { return p.pid }

// Kill sends SIGKILL to the jail's process group. The group id is the
// leader's pid, reserved until the leader is reaped.
func (p *process) Kill() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reaped {
		return nil
	}
	if err := unix.Kill(-p.pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("kill jail %d: %w", p.pid, err)
	}
	return nil
}

// Wait waits for the leader to exit without reaping it, kills and reaps the
// rest of its group (the jail's init re-parented to the daemon, if the
// leader died first), lets exec reap the leader, and removes the jail's
// cgroups once they are empty.
func (p *process) Wait() error {
	p.waitOnce.Do(func() {
		for {
			var info unix.Siginfo
			err := unix.Waitid(unix.P_PID, p.pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
			if !errors.Is(err, unix.EINTR) {
				break
			}
		}
		runtime.ReapGroup(p.pid, p.log)
		p.mu.Lock()
		p.waitErr = p.cmd.Wait()
		p.reaped = true
		p.mu.Unlock()
		if p.cg != nil {
			// The namespace is gone with its init; anything still listed
			// is a bug worth a loud line, and is killed before removal.
			if left := p.cg.members(); len(left) > 0 {
				p.log.Warn("processes left in the jail's cgroup after its init died", "pids", left)
				for _, pid := range left {
					_ = unix.Kill(pid, unix.SIGKILL)
				}
			}
			if err := p.cg.remove(); err != nil {
				p.log.Warn("cannot remove the jail's cgroup", "err", err)
			}
		}
		p.stderrTail.Close(p.stderr)
	})
	return p.waitErr
}

// StderrTail returns the last lines the jail wrote to stderr (bwrap's own
// errors included).
func (p *process) StderrTail() string { return p.stderrTail.String() }
