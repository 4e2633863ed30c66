package corpus

import (
	"bytes"
	"os"
	"strconv"
	"strings"
)

// The warm RSS of a language's server, both sides: the direct server's
// process tree once the ground truth is recorded, and, in the daemon,
// the trees of the processes running the same reviewed entry (its first
// absolute argument on the command line, or the executable's
// content-addressed copy in the daemon's bin directory) once the
// service's answers are in. A jailed tree counts bwrap's init too; the
// daemon itself never.

type proc struct {
	ppid    int
	rss     int64
	cmdline string
}

func procs() map[int]proc {
	out := map[int]proc{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
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
		cl, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		p.cmdline = string(bytes.ReplaceAll(cl, []byte{0}, []byte{' '}))
		out[pid] = p
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
	var walk func(int)
	walk = func(p int) {
		total += ps[p].rss
		for _, c := range children[p] {
			walk(c)
		}
	}
	walk(pid)
	return total
}

// treeRSSOf is the RSS of pid's process tree.
func treeRSSOf(pid int) int64 {
	if pid <= 0 {
		return 0
	}
	return subtree(procs(), pid)
}

// matchingRSS sums, below root, the trees of the topmost processes whose
// command line contains needle (bwrap's, for a jailed server).
func matchingRSS(root int, needle string) int64 {
	if root <= 0 || needle == "" {
		return 0
	}
	ps := procs()
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
