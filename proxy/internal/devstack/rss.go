package devstack

import (
	"bytes"
	"os"
	"strconv"
	"strings"
)

// Resident memory of process trees, read from /proc, for the bench's and
// the corpus's memory figures: a server run directly is measured by its
// tree, a jailed one by the trees of the processes below the daemon that
// run its reviewed entry (bwrap and the in-jail init counted, the daemon
// itself never).

type proc struct {
	ppid    int
	rss     int64
	cmdline string
}

// readProc reads one process's parent, VmRSS and (when cmdline) command line.
func readProc(pid string, cmdline bool) (proc, bool) {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return proc{}, false
	}
	var p proc
	for _, line := range bytes.Split(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("PPid:")); ok {
			p.ppid, _ = strconv.Atoi(strings.TrimSpace(string(v)))
		}
		if v, ok := bytes.CutPrefix(line, []byte("VmRSS:")); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(string(v)), " kB"), 10, 64)
			p.rss = kb << 10
		}
	}
	if cmdline {
		cl, _ := os.ReadFile("/proc/" + pid + "/cmdline")
		p.cmdline = string(bytes.ReplaceAll(cl, []byte{0}, []byte{' '}))
	}
	return p, true
}

func procs(cmdline bool) map[int]proc {
	out := map[int]proc{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, ok := readProc(e.Name(), cmdline); ok {
			out[pid] = p
		}
	}
	return out
}

// subtree sums the RSS of pid and its descendants.
func subtree(ps map[int]proc, pid int) int64 {
	children := map[int][]int{}
	for p, pr := range ps {
		children[pr.ppid] = append(children[pr.ppid], p)
	}
	var total int64
	stack := []int{pid}
	for len(stack) > 0 {
		p := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		total += ps[p].rss
		stack = append(stack, children[p]...)
	}
	return total
}

// ProcRSS is one process's VmRSS.
func ProcRSS(pid int) int64 {
	p, _ := readProc(strconv.Itoa(pid), false)
	return p.rss
}

// TreeRSS sums VmRSS over pid and all its descendants.
func TreeRSS(pid int) int64 {
	if pid <= 0 {
		return 0
	}
	return subtree(procs(false), pid)
}

// MatchingRSS sums, below root, the trees of the topmost processes whose
// command line contains needle (bwrap's, for a jailed server).
func MatchingRSS(root int, needle string) int64 {
	if root <= 0 || needle == "" {
		return 0
	}
	ps := procs(true)
	below := func(p int) bool {
		for i := 0; i < 64 && p > 1; i++ {
			if p = ps[p].ppid; p == root {
				return true
			}
		}
		return false
	}
	var total int64
	for p, pr := range ps {
		if !strings.Contains(pr.cmdline, needle) || !below(p) {
			continue
		}
		if parent, ok := ps[pr.ppid]; ok && strings.Contains(parent.cmdline, needle) {
			continue // counted with its parent's tree
		}
		total += subtree(ps, p)
	}
	return total
}
