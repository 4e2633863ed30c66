//go:build linux

package jail

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/hanzoai/lsp/daemon/internal/safefs"
)

// A root daemon never lets a jail run as host uid 0, even without
// capabilities: the kernel still gives uid 0 the owner's rights over
// root-owned files that a namespace does not hide, and /proc/sys is one
// (kernel.core_pattern, for one, is then writable — a way to run a command
// as real root). So every server home gets its own unprivileged host uid
// from a reserved range, recorded as the home's owner: servers of the same
// tenant and repository (which share the home anyway) share it, and no two
// homes ever do. The allocator's counter lives in the state directory, one
// per range, and only grows, so a uid is never handed to a second home; the
// range itself is leased host-wide (uidlease_linux.go), so no other daemon
// hands out the same uids meanwhile.
type uids struct {
	mu    sync.Mutex // the counter
	base  uint32
	count uint32
	file  string
	// homes serialises the hand-over of one home (by a stripe of its
	// path's hash) without holding the counter: a first hand-over chowns
	// a whole home (a module cache, a build seed), and every other
	// tenant's starts waited for it.
	homes [64]sync.Mutex
	// chown gives a home to a uid (chownTree; tests watch it).
	chown func(dir string, uid int) error
}

func newUIDs(base, count uint32, stateDir string) (*uids, error) {
	if stateDir == "" {
		return nil, errors.New("a root daemon needs a jail state directory for its uid allocator")
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, err
	}
	u := &uids{base: base, count: count, file: filepath.Join(stateDir, fmt.Sprintf("last-uid-%d", base)), chown: chownTree}
	// Before ranges were leased the counter had one file; carry it over
	// when it belongs to this range.
	if _, err := os.Stat(u.file); errors.Is(err, fs.ErrNotExist) {
		if b, err := os.ReadFile(filepath.Join(stateDir, "last-uid")); err == nil {
			if n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32); err == nil && u.inRange(uint32(n)) {
				if err := os.WriteFile(u.file, b, 0o600); err != nil {
					return nil, err
				}
			}
		}
	}
	return u, nil
}

func (u *uids) inRange(id uint32) bool { return id >= u.base && id-u.base < u.count }

// forHome returns the uid of home, allocating one (and giving the home's
// whole existing content to it) the first time.
func (u *uids) forHome(home string) (int, error) {
	l := u.homeLock(home)
	l.Lock()
	defer l.Unlock()
	fi, err := os.Lstat(home)
	if err != nil {
		return 0, err
	}
	st := fi.Sys().(*syscall.Stat_t)
	if u.inRange(st.Uid) {
		return int(st.Uid), nil
	}
	u.mu.Lock()
	id, err := u.next()
	u.mu.Unlock()
	if err != nil {
		return 0, err
	}
	if err := u.chown(home, int(id)); err != nil {
		return 0, fmt.Errorf("give home %s to uid %d: %w", home, id, err)
	}
	return int(id), nil
}

// homeLock is the lock of home's hand-over.
func (u *uids) homeLock(home string) *sync.Mutex {
	h := fnv.New32a()
	_, _ = h.Write([]byte(home))
	return &u.homes[h.Sum32()%uint32(len(u.homes))]
}

func (u *uids) next() (uint32, error) {
	last := u.base - 1
	b, err := os.ReadFile(u.file)
	switch {
	case err == nil:
		n, perr := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
		if perr != nil || !u.inRange(uint32(n)) {
			return 0, fmt.Errorf("uid counter %s: %q is not in the jail range", u.file, b)
		}
		last = uint32(n)
	case !errors.Is(err, fs.ErrNotExist):
		return 0, err
	}
	id := last + 1
	if !u.inRange(id) {
		return 0, fmt.Errorf("the jail uid range [%d, %d) is used up", u.base, uint64(u.base)+uint64(u.count))
	}
	tmp := u.file + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.FormatUint(uint64(id), 10)+"\n"), 0o600); err != nil {
		return 0, err
	}
	if err := os.Rename(tmp, u.file); err != nil {
		return 0, err
	}
	return id, nil
}

// chownTree gives dir and everything under it to uid (and the same gid),
// never following a link and never giving away a file with a second link
// (safefs.ChownTree): a home that changes range may hold what an earlier
// jail planted.
func chownTree(dir string, uid int) error {
	d, err := safefs.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.ChownTree(uid, uid)
}
