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
	goruntime "runtime"
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

	// Our own pipes rather than exec's: exec.Cmd.Wait closes the parent's
	// ends of pipes it made, which would race with the connection reading
	// the server's last replies, and it waits for copying goroutines that a
	// surviving grandchild could hold open forever.
	var files []*os.File
	closeAll := func() {
		for _, f := range files {
			_ = f.Close()
		}
	}
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err == nil {
			files = append(files, r, w)
		}
		return r, w, err
	}
	inR, inW, err := pipe()
	if err != nil {
		return nil, fmt.Errorf("spawn %s: %w", spec.ID, err)
	}
	outR, outW, err := pipe()
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("spawn %s: %w", spec.ID, err)
	}
	errR, errW, err := pipe()
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("spawn %s: %w", spec.ID, err)
	}

	cmd := &exec.Cmd{
		Path:   spec.Executable,
		Args:   append([]string{spec.Executable}, spec.Args...),
		Env:    Environment(spec, ws),
		Dir:    ws.Root,
		Stdin:  inR,
		Stdout: outW,
		Stderr: errW,
		SysProcAttr: &syscall.SysProcAttr{
			Setpgid:   true,
			Pdeathsig: syscall.SIGKILL,
		},
	}
	if err := startOnSpawnThread(cmd); err != nil {
		closeAll()
		return nil, fmt.Errorf("spawn %s: %w", spec.ID, err)
	}
	// The child holds its ends now.
	_ = inR.Close()
	_ = outW.Close()
	_ = errW.Close()

	log := u.log.With("server", spec.ID, "pid", cmd.Process.Pid)
	return &unjailedProcess{
		cmd:        cmd,
		pid:        cmd.Process.Pid,
		stdin:      inW,
		stdout:     outR,
		stderr:     errR,
		log:        log,
		stderrTail: DrainStderr(errR, log),
	}, nil
}

// The parent-death signal fires when the thread that forked the child
// exits, not the process. Go retires threads (a goroutine that exits while
// locked to its thread takes the thread with it), which would kill healthy
// servers at random; forking from one locked thread that never exits ties
// the signal to the daemon's life instead.
var spawnThread struct {
	once sync.Once
	reqs chan spawnRequest
}

type spawnRequest struct {
	cmd  *exec.Cmd
	done chan error
}

func startOnSpawnThread(cmd *exec.Cmd) error {
	spawnThread.once.Do(func() {
		spawnThread.reqs = make(chan spawnRequest)
		go spawnLoop(spawnThread.reqs)
	})
	done := make(chan error, 1)
	spawnThread.reqs <- spawnRequest{cmd: cmd, done: done}
	return <-done
}

func spawnLoop(reqs <-chan spawnRequest) {
	goruntime.LockOSThread()
	for r := range reqs {
		r.done <- r.cmd.Start()
	}
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
