package pool

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// TreeUnlinked measures the disk each root's process tree (processTrees)
// holds in files it has open that no directory names any more: deleted
// while open, or made with O_TMPFILE. A walk of the homes never finds
// them, yet the filesystem keeps their blocks until the last descriptor
// closes, so a jailed process could otherwise fill the disk unseen, a
// gigabyte (RLIMIT_FSIZE) per descriptor. Only files on device dev, the
// filesystem of the daemon's workspaces, count (a jail's other writable
// places are tmpfs: memory, which the RSS budget sees). A file open in
// several processes, or twice in one, counts once, for the first root
// found holding it.
//
// Each descriptor is looked at with fstatat on its /proc/<pid>/fd link,
// which the kernel resolves to the open file itself: nothing a jailed
// process named is walked, and nothing is opened or read.
func TreeUnlinked(roots []int, dev uint64) map[int]int64 {
	out := make(map[int]int64, len(roots))
	seen := map[[2]uint64]bool{}
	for root, pids := range processTrees(roots) {
		var sum int64
		for _, pid := range pids {
			sum += unlinkedOpen(pid, dev, seen)
		}
		out[root] = sum
	}
	return out
}

// unlinkedOpen is what pid's unlinked open files on dev take, leaving out
// (and adding to) seen.
func unlinkedOpen(pid int, dev uint64, seen map[[2]uint64]bool) int64 {
	dir, err := os.Open("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		return 0 // gone, or not ours to look at
	}
	defer dir.Close()
	fd := int(dir.Fd())
	var n int64
	for {
		// In batches: RLIMIT_NOFILE allows a jailed process thousands.
		names, err := dir.Readdirnames(1024)
		for _, name := range names {
			var st unix.Stat_t
			if unix.Fstatat(fd, name, &st, 0) != nil {
				continue // closed since the listing
			}
			if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 0 || uint64(st.Dev) != dev {
				continue
			}
			id := [2]uint64{uint64(st.Dev), st.Ino}
			if !seen[id] {
				seen[id] = true
				n += st.Blocks * 512
			}
		}
		if err != nil {
			return n
		}
	}
}
