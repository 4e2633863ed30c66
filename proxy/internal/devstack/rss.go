package devstack

import (
	"bytes"
	"os"
	"strconv"
	"strings"
)

// ProcRSS is one process's VmRSS.
func ProcRSS(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("VmRSS:")); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(string(v)), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// TreeRSS sums VmRSS over pid and all its descendants.
func TreeRSS(pid int) int64 {
	children := map[int][]int{}
	rss := map[int]int64{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		var ppid int
		for _, line := range bytes.Split(b, []byte("\n")) {
			if v, ok := bytes.CutPrefix(line, []byte("PPid:")); ok {
				ppid, _ = strconv.Atoi(strings.TrimSpace(string(v)))
			}
			if v, ok := bytes.CutPrefix(line, []byte("VmRSS:")); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(string(v)), " kB"), 10, 64)
				rss[p] = kb << 10
			}
		}
		children[ppid] = append(children[ppid], p)
	}
	var total int64
	stack := []int{pid}
	for len(stack) > 0 {
		p := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		total += rss[p]
		stack = append(stack, children[p]...)
	}
	return total
}
