package pool

import (
	"bufio"
	"bytes"
	"strconv"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
)

// TreeRSS measures each root's process tree in one pass over /proc and
// returns its resident bytes by root pid. A server's tree is the root (the
// Spawner's pid: the jail launcher, which became bwrap, or the unjailed
// server), every descendant of it, and every member of the process group it
// leads — the union, because an unjailed server's orphans are re-parented to
// the daemon (a subreaper) yet stay in the group, while a jailed server runs
// in a new session inside its PID namespace, whose init reaps its orphans, so
// it leaves the group yet stays a descendant.
//
// Each process counts its VmRSS from /proc/<pid>/status: readable for every
// process whatever its uid or namespace, and an upper bound of what the
// tree holds (pages shared between processes count once per process), so a
// budget held on this sum is held on real memory. A jail's memory cgroup
// would also count page cache, which the kernel reclaims, and exists only
// when the daemon is root.
func TreeRSS(roots []int) map[int]int64 {
	out := make(map[int]int64, len(roots))
	for root, procs := range processTrees(roots) {
		var sum int64
		for _, p := range procs {
			sum += vmRSS(p)
		}
		out[root] = sum
	}
	return out
}

// processTrees lists each root's process tree (TreeRSS says which
// processes that is) from one pass over /proc, by root pid.
func processTrees(roots []int) map[int][]runtime.ProcStat {
	out := make(map[int][]runtime.ProcStat, len(roots))
	if len(roots) == 0 {
		return out
	}
	procs, err := runtime.ListProcs()
	if err != nil {
		return out
	}
	byPID := make(map[int]runtime.ProcStat, len(procs))
	children := map[int][]int{}
	for _, p := range procs {
		byPID[p.PID] = p
		children[p.PPID] = append(children[p.PPID], p.PID)
	}
	for _, root := range roots {
		if root <= 0 {
			continue
		}
		seen := map[int]bool{}
		queue := []int{root}
		for _, p := range procs {
			if p.PGRP == root {
				queue = append(queue, p.PID)
			}
		}
		var tree []runtime.ProcStat
		for len(queue) > 0 {
			pid := queue[0]
			queue = queue[1:]
			if seen[pid] {
				continue
			}
			seen[pid] = true
			if p, ok := byPID[pid]; ok {
				tree = append(tree, p)
			}
			queue = append(queue, children[pid]...)
		}
		out[root] = tree
	}
	return out
}

// vmRSS reads a process's resident set in bytes (0 when it is gone, its
// pid perhaps another's since the listing, or a zombie, which has no VmRSS
// line).
func vmRSS(p runtime.ProcStat) int64 {
	proc, err := runtime.OpenProc(p)
	if err != nil {
		return 0
	}
	defer proc.Close()
	f, err := proc.Open("status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Bytes()
		if v, ok := bytes.CutPrefix(line, []byte("VmRSS:")); ok {
			fields := bytes.Fields(v)
			if len(fields) == 0 {
				return 0
			}
			kb, err := strconv.ParseInt(string(fields[0]), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}
