package soak

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
)

// procStat is one process as /proc shows it.
type procStat struct {
	pid, ppid int
	state     string
}

func readStat(pid int) (procStat, bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return procStat{}, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return procStat{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	return procStat{pid: pid, ppid: ppid, state: f[0]}, true
}

// processes lists every live process.
func processes() []procStat {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []procStat
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := readStat(pid); ok && st.state != "Z" {
			out = append(out, st)
		}
	}
	return out
}

// descendants lists every live descendant of pid.
func descendants(pid int) []int {
	kids := map[int][]int{}
	for _, p := range processes() {
		kids[p.ppid] = append(kids[p.ppid], p.pid)
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, k := range kids[p] {
			out = append(out, k)
			queue = append(queue, k)
		}
	}
	return out
}

// exeOf is the executable of pid ("" when it cannot be read).
func exeOf(pid int) string {
	p, _ := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "exe"))
	return strings.TrimSuffix(p, " (deleted)")
}

// environHas reports whether pid's environment holds kv exactly.
func environHas(pid int, kv string) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "environ"))
	if err != nil {
		return false
	}
	for _, e := range strings.Split(string(b), "\x00") {
		if e == kv {
			return true
		}
	}
	return false
}

// rssKiB is pid's resident set (VmRSS) in KiB, 0 when gone.
func rssKiB(pid int) int64 {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// Resources is what this process holds at one moment.
type Resources struct {
	Goroutines int
	OpenFiles  int
	Children   int // live direct children of this process
}

func snapshot() Resources {
	fds, _ := os.ReadDir("/proc/self/fd")
	me := os.Getpid()
	n := 0
	for _, p := range processes() {
		if p.ppid == me {
			n++
		}
	}
	return Resources{Goroutines: runtime.NumGoroutine(), OpenFiles: len(fds), Children: n}
}

// strays lists live processes whose executable lies below dir: language
// servers (run from the daemon's content-addressed copy) or daemons that
// outlived the run.
func strays(dir string) []int {
	var out []int
	for _, p := range processes() {
		if e := exeOf(p.pid); e != "" && strings.HasPrefix(e, dir+string(os.PathSeparator)) {
			out = append(out, p.pid)
		}
	}
	return out
}

// loadavg is the 1, 5 and 15 minute load averages ("?" when unreadable).
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " / ")
}

// notePoolCharge records the high-water mark of the memory cgroup that
// holds every jail of the daemon at pid (the jail names it
// lsp-jail-<pid>-<n> under the daemon's own memory cgroup), when it has
// one. VmRSS sums count a page the servers share once per process; this
// is what the kernel holds to LSP_POOL_MAX_RSS.
func (r *run) notePoolCharge(i, pid int) {
	peak := poolChargedKiB(pid)
	r.rssMu.Lock()
	defer r.rssMu.Unlock()
	if i < len(r.poolChargedMax) {
		r.poolChargedMax[i] = max(r.poolChargedMax[i], peak)
	}
}

func poolChargedKiB(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return 0
	}
	var dir, file string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		switch {
		case slices.Contains(strings.Split(f[1], ","), "memory"):
			dir, file = filepath.Join("/sys/fs/cgroup/memory", f[2]), "memory.max_usage_in_bytes"
		case f[0] == "0" && f[1] == "" && dir == "":
			dir, file = filepath.Join("/sys/fs/cgroup", f[2]), "memory.peak"
		}
	}
	if dir == "" {
		return 0
	}
	pools, _ := filepath.Glob(filepath.Join(dir, fmt.Sprintf("lsp-jail-%d-*", pid)))
	var peak int64
	for _, p := range pools {
		v, err := os.ReadFile(filepath.Join(p, file))
		if err != nil {
			continue
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(string(v)), 10, 64); err == nil {
			peak = max(peak, n>>10)
		}
	}
	return peak
}
