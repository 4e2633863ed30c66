//go:build linux

package jail

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
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

	stderrDone chan struct{}
	tailMu     sync.Mutex
	tail       []string
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
		reapGroup(p.pid, p.log)
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
		select {
		case <-p.stderrDone:
		case <-time.After(time.Second):
		}
		_ = p.stderr.Close()
		<-p.stderrDone
	})
	return p.waitErr
}

// StderrTail returns the last lines the jail wrote to stderr (bwrap's own
// errors included).
func (p *process) StderrTail() string {
	p.tailMu.Lock()
	defer p.tailMu.Unlock()
	return strings.Join(p.tail, "\n")
}

const (
	stderrTailLines = 20
	stderrLineBytes = 512
)

func (p *process) drainStderr() {
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

const reapDeadline = 5 * time.Second

// reapGroup kills every member of process group pgid except the exited,
// unreaped leader and reaps those that are our children, until the group
// is empty. It is runtime's cleanup for unjailed servers, repeated here
// because the jail's init joins the daemon's children when bwrap dies
// first.
func reapGroup(pgid int, log *slog.Logger) {
	self := os.Getpid()
	deadline := time.Now().Add(reapDeadline)
	for {
		_ = unix.Kill(-pgid, unix.SIGKILL)
		procs, err := listProcs()
		if err != nil {
			log.Warn("cannot list processes to reap the jail's group", "err", err)
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
			log.Warn("members of the jail's process group survived cleanup", "pgid", pgid, "count", pending)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type procStat struct {
	pid, ppid, pgrp int
	state           byte
}

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
			continue
		}
		if st, ok := parseStat(pid, b); ok {
			out = append(out, st)
		}
	}
	return out, nil
}

// parseStat reads "pid (comm) state ppid pgrp …"; comm may hold anything,
// so fields count from the last ')'.
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
