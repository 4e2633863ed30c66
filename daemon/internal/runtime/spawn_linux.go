//go:build linux

package runtime

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

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

	p := &unjailedProcess{
		cmd:        cmd,
		pid:        cmd.Process.Pid,
		stdin:      inW,
		stdout:     outR,
		stderr:     errR,
		log:        u.log.With("server", spec.ID, "pid", cmd.Process.Pid),
		stderrDone: make(chan struct{}),
	}
	go p.drainStderr()
	return p, nil
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

	stderrDone chan struct{}
	tailMu     sync.Mutex
	tail       []string
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
		reapGroup(p.pid, p.log)
		p.mu.Lock()
		p.waitErr = p.cmd.Wait()
		p.reaped = true
		p.mu.Unlock()
		// Every writer of stderr is dead now, so the drain ends at EOF once
		// it has read what is buffered; the timeout covers a process that
		// left the group and still holds the pipe.
		select {
		case <-p.stderrDone:
		case <-time.After(time.Second):
		}
		_ = p.stderr.Close()
		<-p.stderrDone
	})
	return p.waitErr
}

// StderrTail returns the last lines the server wrote to stderr.
func (p *unjailedProcess) StderrTail() string {
	p.tailMu.Lock()
	defer p.tailMu.Unlock()
	return strings.Join(p.tail, "\n")
}

const (
	stderrTailLines = 20
	stderrLineBytes = 512
)

// drainStderr keeps the server's stderr flowing (a full pipe would block the
// server) and remembers its last lines, each cut to a bounded length.
func (p *unjailedProcess) drainStderr() {
	defer close(p.stderrDone)
	r := bufio.NewReaderSize(p.stderr, 4096)
	for {
		line, err := r.ReadSlice('\n')
		if len(line) > 0 {
			s := string(bytes.TrimRight(line, "\r\n"))
			if len(s) > stderrLineBytes {
				s = s[:stderrLineBytes]
			}
			p.log.Debug("language server stderr", "line", s)
			p.tailMu.Lock()
			p.tail = append(p.tail, s)
			if len(p.tail) > stderrTailLines {
				p.tail = p.tail[len(p.tail)-stderrTailLines:]
			}
			p.tailMu.Unlock()
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return
		}
	}
}

// reapDeadline bounds the cleanup of one process group.
const reapDeadline = 5 * time.Second

// reapGroup kills every member of process group pgid except the (already
// exited, not yet reaped) leader, and reaps those that are our children. A
// member whose parent is another member becomes our child when that parent
// dies (we are a subreaper), so the loop runs until the group is empty. A
// zombie whose parent is outside the group and not us (PID 1, when the
// daemon is not a subreaper) is someone else's to reap and is not waited
// for.
func reapGroup(pgid int, log *slog.Logger) {
	self := os.Getpid()
	deadline := time.Now().Add(reapDeadline)
	for {
		_ = unix.Kill(-pgid, unix.SIGKILL)
		procs, err := listProcs()
		if err != nil {
			log.Warn("cannot list processes to reap the server's group", "err", err)
			return
		}
		inGroup := map[int]bool{}
		for _, p := range procs {
			if p.pgrp == pgid {
				inGroup[p.pid] = true
			}
		}
		pending := 0
		for _, p := range procs {
			if p.pgrp != pgid || p.pid == pgid {
				continue
			}
			if p.ppid == self {
				var ws unix.WaitStatus
				if pid, _ := unix.Wait4(p.pid, &ws, unix.WNOHANG, nil); pid == p.pid {
					continue
				}
				pending++
				continue
			}
			if p.state == 'Z' && !inGroup[p.ppid] {
				continue
			}
			pending++
		}
		if pending == 0 {
			return
		}
		if time.Now().After(deadline) {
			log.Warn("members of the server's process group survived cleanup", "pgid", pgid, "count", pending)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type procStat struct {
	pid, ppid, pgrp int
	state           byte
}

// listProcs reads pid, state, parent and process group of every process
// from /proc.
func listProcs() ([]procStat, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []procStat
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // exited meanwhile
		}
		if st, ok := parseStat(pid, b); ok {
			out = append(out, st)
		}
	}
	return out, nil
}

// parseStat reads /proc/<pid>/stat: "pid (comm) state ppid pgrp …"; comm
// may contain anything, so fields are counted from the last ')'.
func parseStat(pid int, b []byte) (procStat, bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 > len(b) {
		return procStat{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 3 || len(f[0]) == 0 {
		return procStat{}, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	pgrp, err2 := strconv.Atoi(f[2])
	if err1 != nil || err2 != nil {
		return procStat{}, false
	}
	return procStat{pid: pid, ppid: ppid, pgrp: pgrp, state: f[0][0]}, true
}
