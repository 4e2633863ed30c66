package pool

import (
	"os"

	"golang.org/x/sys/unix"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
)

// TreeUnlinked measures the disk each root's process tree (processTrees)
// holds in files that no directory names any more: deleted while open or
// mapped, or made with O_TMPFILE. A walk of the homes never finds them,
// yet the filesystem keeps their blocks until the last descriptor closes
// and the last mapping goes, so a jailed process could otherwise fill the
// disk unseen, a gigabyte (RLIMIT_FSIZE) per file. Only files on device
// dev, the filesystem of the daemon's workspaces, count (a jail's other
// writable places are tmpfs: memory, which the RSS budget sees). A file
// held by several processes, or twice by one, counts once, for the first
// root found holding it. Not seen: a descriptor in flight on a socket.
//
// Each descriptor and mapping is looked at with fstatat on its link in
// /proc/<pid>/fd or /proc/<pid>/map_files (the latter only with
// CAP_SYS_ADMIN: a root daemon's), which the kernel resolves to the open
// file itself: nothing a jailed process named is walked, and nothing is
// opened or read.
func TreeUnlinked(roots []int, dev uint64) map[int]int64 {
	out := make(map[int]int64, len(roots))
	seen := map[[2]uint64]bool{}
	for root, procs := range processTrees(roots) {
		var sum int64
		for _, p := range procs {
			sum += unlinkedOf(p, dev, seen)
		}
		out[root] = sum
	}
	return out
}

// unlinkedOf is unlinkedIn over p's descriptors and mappings, read through
// its /proc directory (runtime.OpenProc): a pid given to another process
// since the listing is not read.
func unlinkedOf(p runtime.ProcStat, dev uint64, seen map[[2]uint64]bool) int64 {
	proc, err := runtime.OpenProc(p)
	if err != nil {
		return 0
	}
	defer proc.Close()
	var n int64
	for _, name := range []string{"fd", "map_files"} {
		dir, err := proc.Open(name)
		if err != nil {
			continue // gone, or not ours to look at
		}
		n += unlinkedIn(dir, dev, seen)
		dir.Close()
	}
	return n
}

// unlinkedIn is what the files behind the links of dir (a process's fd or
// map_files) that are unlinked and on dev take, leaving out (and adding
// to) seen.
func unlinkedIn(dir *os.File, dev uint64, seen map[[2]uint64]bool) int64 {
	fd := int(dir.Fd())
	var n int64
	for {
		// In batches: RLIMIT_NOFILE allows a jailed process thousands of
		// descriptors, and mappings are as many as it makes.
		names, err := dir.Readdirnames(1024)
		for _, name := range names {
			var st unix.Stat_t
			if unix.Fstatat(fd, name, &st, 0) != nil {
				continue // closed or unmapped since the listing
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
