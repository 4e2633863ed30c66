package runtime

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The process-tree helpers every Spawner shares: the unjailed one here and
// the jail's (daemon/internal/jail).

// ProcStat is one process as /proc/<pid>/stat describes it.
type ProcStat struct {
	PID, PPID, PGRP int
	State           byte
	// Start is when the process started, in clock ticks since boot: with
	// the pid it names one process, never a later one given the same pid.
	Start uint64
}

// ListProcs reads pid, state, parent and process group of every process
// from /proc.
func ListProcs() ([]ProcStat, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []ProcStat
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
func parseStat(pid int, b []byte) (ProcStat, bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 > len(b) {
		return ProcStat{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 3 || len(f[0]) == 0 {
		return ProcStat{}, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	pgrp, err2 := strconv.Atoi(f[2])
	if err1 != nil || err2 != nil {
		return ProcStat{}, false
	}
	st := ProcStat{PID: pid, PPID: ppid, PGRP: pgrp, State: f[0][0]}
	if len(f) > 19 { // starttime, the 22nd field
		st.Start, _ = strconv.ParseUint(f[19], 10, 64)
	}
	return st, true
}

// Proc is one process's /proc directory, opened by OpenProc.
type Proc struct{ dir *os.File }

// OpenProc opens /proc/<pid> of the process p describes, and only of it: a
// process that has exited since p was read, its pid perhaps given to
// another, is an error. What is read through it afterwards (Proc.Open) is
// that process's or fails, never another's.
func OpenProc(p ProcStat) (*Proc, error) {
	dir, err := os.Open("/proc/" + strconv.Itoa(p.PID))
	if err != nil {
		return nil, err
	}
	proc := &Proc{dir}
	f, err := proc.Open("stat")
	if err == nil {
		var b []byte
		b, err = io.ReadAll(io.LimitReader(f, 4096))
		f.Close()
		if st, ok := parseStat(p.PID, b); err == nil && (!ok || st.Start != p.Start) {
			err = errors.New("not the process listed")
		}
	}
	if err != nil {
		dir.Close()
		return nil, fmt.Errorf("/proc/%d: %w", p.PID, err)
	}
	return proc, nil
}

// Open opens name (a file or a directory) in the process's /proc
// directory, read-only.
func (p *Proc) Open(name string) (*os.File, error) {
	fd, err := unix.Openat(int(p.dir.Fd()), name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), name), nil
}

// Close closes the directory.
func (p *Proc) Close() error { return p.dir.Close() }

// reapDeadline bounds the cleanup of one process group.
const reapDeadline = 5 * time.Second

// ReapGroup kills every member of process group pgid except the (already
// exited, not yet reaped) leader, and reaps those that are our children. A
// member whose parent is another member becomes our child when that parent
// dies (we are a subreaper), so the loop runs until the group is empty. A
// zombie whose parent is outside the group and not us (PID 1, when the
// daemon is not a subreaper) is someone else's to reap and is not waited
// for.
func ReapGroup(pgid int, log *slog.Logger) {
	self := os.Getpid()
	deadline := time.Now().Add(reapDeadline)
	for {
		_ = unix.Kill(-pgid, unix.SIGKILL)
		procs, err := ListProcs()
		if err != nil {
			log.Warn("cannot list processes to reap a server's group", "err", err)
			return
		}
		inGroup := map[int]bool{}
		for _, p := range procs {
			if p.PGRP == pgid {
				inGroup[p.PID] = true
			}
		}
		pending := 0
		for _, p := range procs {
			if p.PGRP != pgid || p.PID == pgid {
				continue
			}
			if p.PPID == self {
				var ws unix.WaitStatus
				if pid, _ := unix.Wait4(p.PID, &ws, unix.WNOHANG, nil); pid == p.PID {
					continue
				}
				pending++
				continue
			}
			if p.State == 'Z' && !inGroup[p.PPID] {
				continue
			}
			pending++
		}
		if pending == 0 {
			return
		}
		if time.Now().After(deadline) {
			log.Warn("members of a server's process group survived cleanup", "pgid", pgid, "count", pending)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

const (
	stderrTailLines = 20
	stderrLineBytes = 512
)

// StderrTail keeps a server's stderr flowing (a full pipe would block the
// server) and remembers its last lines, each cut to a bounded length.
type StderrTail struct {
	done  chan struct{}
	mu    sync.Mutex
	lines []string
}

// DrainStderr starts draining r.
func DrainStderr(r io.Reader, log *slog.Logger) *StderrTail {
	t := &StderrTail{done: make(chan struct{})}
	go t.drain(r, log)
	return t
}

func (t *StderrTail) drain(r io.Reader, log *slog.Logger) {
	defer close(t.done)
	br := bufio.NewReaderSize(r, 4096)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			s := string(bytes.TrimRight(line, "\r\n"))
			if len(s) > stderrLineBytes {
				s = s[:stderrLineBytes]
			}
			log.Debug("language server stderr", "line", s)
			t.mu.Lock()
			t.lines = append(t.lines, s)
			if len(t.lines) > stderrTailLines {
				t.lines = t.lines[len(t.lines)-stderrTailLines:]
			}
			t.mu.Unlock()
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return
		}
	}
}

// Close ends the drain once every writer is dead: it lets the drain read
// what is buffered up to EOF, then (for a process that left the group and
// still holds the pipe) closes r after a second.
func (t *StderrTail) Close(r io.Closer) {
	select {
	case <-t.done:
	case <-time.After(time.Second):
	}
	_ = r.Close()
	<-t.done
}

// String returns the last lines.
func (t *StderrTail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, "\n")
}
