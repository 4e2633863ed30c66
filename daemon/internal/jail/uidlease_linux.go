//go:build linux

package jail

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// A root daemon's jails run as host uids from a range (uid_linux.go). Two
// daemons on one host must never hand out the same uid — a jail of one
// could then signal, trace or read the files of a jail of the other — and
// each daemon's allocator only knows its own state directory. So the range
// is leased host-wide: a daemon holds an exclusive flock on a file named
// after its range in a runtime directory shared by every daemon of the
// host (LSP_JAIL_UID_LOCK_DIR), for as long as it runs. The kernel drops
// the lock when the daemon dies, however it dies, so a lease never goes
// stale. A range overlapping one another daemon holds (configured with
// another base or count) counts as taken.
//
// With LSP_JAIL_UID_BASE set the range is the operator's partition of the
// host, and a daemon that finds it taken refuses to start; without it a
// daemon takes the first free range of LSP_JAIL_UID_COUNT uids from the
// default base up.

const uidLockPrefix = "uids-"

// uidLease is one held range. Spawners of one process asking for the same
// range share its lease (a daemon has one Spawner; tests have many).
type uidLease struct {
	key         string
	base, count uint32
	f           *os.File
	refs        int
}

var uidLeases = struct {
	sync.Mutex
	m map[string]*uidLease
}{m: map[string]*uidLease{}}

// leaseUIDs leases [base, base+count) in dir, or with fixed false the first
// free range of count uids from base up, below 2^31.
func leaseUIDs(dir string, base, count uint32, fixed bool) (*uidLease, error) {
	key := fmt.Sprintf("%s|%d|%d|%t", dir, base, count, fixed)
	uidLeases.Lock()
	defer uidLeases.Unlock()
	if l, ok := uidLeases.m[key]; ok {
		l.refs++
		return l, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("uid lease directory: %w", err)
	}
	if err := checkLeaseDir(dir); err != nil {
		return nil, err
	}
	for start := uint64(base); start+uint64(count) <= 1<<31; start += uint64(count) {
		f, holder, err := tryLease(dir, uint32(start), count)
		if err != nil {
			return nil, err
		}
		if f != nil {
			l := &uidLease{key: key, base: uint32(start), count: count, f: f, refs: 1}
			uidLeases.m[key] = l
			return l, nil
		}
		if fixed {
			return nil, fmt.Errorf("the jail uid range [%d, %d) is in use by another daemon on this host (%s, under %s): give each daemon its own LSP_JAIL_UID_BASE, or leave it unset to take the next free range",
				start, start+uint64(count), holder, dir)
		}
	}
	return nil, fmt.Errorf("no free jail uid range of %d uids from %d below 2^31 on this host (leases under %s): lower LSP_JAIL_UID_COUNT", count, base, dir)
}

// release drops one reference; the last unlocks the range.
func (l *uidLease) release() {
	if l == nil {
		return
	}
	uidLeases.Lock()
	defer uidLeases.Unlock()
	if l.refs--; l.refs == 0 {
		delete(uidLeases.m, l.key)
		// Closing the file drops the flock. The file stays: removing it
		// would race with another daemon locking it.
		_ = l.f.Close()
	}
}

func leaseFile(dir string, base, count uint32) string {
	return filepath.Join(dir, fmt.Sprintf("%s%d-%d.lock", uidLockPrefix, base, count))
}

func parseLeaseFile(name string) (base, count uint32, ok bool) {
	rest, ok := strings.CutPrefix(name, uidLockPrefix)
	if !ok {
		return 0, 0, false
	}
	rest, ok = strings.CutSuffix(rest, ".lock")
	if !ok {
		return 0, 0, false
	}
	b, c, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, 0, false
	}
	bn, err1 := strconv.ParseUint(b, 10, 32)
	cn, err2 := strconv.ParseUint(c, 10, 32)
	if err1 != nil || err2 != nil || cn == 0 {
		return 0, 0, false
	}
	return uint32(bn), uint32(cn), true
}

// tryLease locks the range's file. It returns nil and who holds it when
// the range, or one overlapping it, is held by someone else.
func tryLease(dir string, base, count uint32) (*os.File, string, error) {
	p := leaseFile(dir, base, count)
	// Never through a link: the daemon writes this file as root.
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o644)
	if err != nil {
		return nil, "", fmt.Errorf("uid lease %s: %w", p, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, holderOf(p), nil
		}
		return nil, "", fmt.Errorf("uid lease %s: %w", p, err)
	}
	// Held now; a range that overlaps ours and is held too means two
	// daemons configured with different bases or counts. Both sides run
	// this check after locking, so at least one of them sees the other.
	entries, err := os.ReadDir(dir)
	if err != nil {
		_ = f.Close()
		return nil, "", fmt.Errorf("uid leases: %w", err)
	}
	for _, e := range entries {
		b, c, ok := parseLeaseFile(e.Name())
		if !ok || b == base && c == count || uint64(b)+uint64(c) <= uint64(base) || uint64(base)+uint64(count) <= uint64(b) {
			continue
		}
		if other := filepath.Join(dir, e.Name()); isLeased(other) {
			_ = f.Close()
			return nil, holderOf(other) + fmt.Sprintf(" holding the overlapping range [%d, %d)", b, uint64(b)+uint64(c)), nil
		}
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(fmt.Sprintf("pid %d\n", os.Getpid())), 0)
	}
	return f, "", nil
}

// isLeased reports whether someone holds p's lock.
func isLeased(p string) bool {
	g, err := os.Open(p)
	if err != nil {
		return false
	}
	defer g.Close()
	return errors.Is(unix.Flock(int(g.Fd()), unix.LOCK_SH|unix.LOCK_NB), unix.EWOULDBLOCK)
}

func holderOf(p string) string {
	b, _ := os.ReadFile(p)
	if s := strings.TrimSpace(string(b)); s != "" {
		return s
	}
	return "a daemon"
}

// checkLeaseDir refuses a lease directory that someone other than the
// daemon's user could write into: its lock files are written as that user
// (root), and whoever can add entries there could plant links or hold
// every range.
func checkLeaseDir(dir string) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return fmt.Errorf("uid lease directory: %w", err)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return fmt.Errorf("uid lease directory %s is not a directory", dir)
	case int(st.Uid) != os.Geteuid():
		return fmt.Errorf("uid lease directory %s belongs to uid %d, not this daemon's", dir, st.Uid)
	case st.Mode&0o022 != 0:
		return fmt.Errorf("uid lease directory %s is writable by group or others", dir)
	}
	return nil
}
