//go:build linux

package safefs

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrUnsupported: the kernel has no openat2; nothing is done rather than
// follow a link.
var ErrUnsupported = errors.New("safefs: openat2 is unavailable (Linux 5.6 or later needed); refusing to resolve paths in a jail-writable directory")

// ErrNotPlain: a path given to a Dir method is not a relative path of
// plain names.
var ErrNotPlain = errors.New("safefs: not a relative path of plain names")

// ErrTooLarge: a file ReadFile was asked for is over its bound.
var ErrTooLarge = errors.New("safefs: over the size bound")

// Owner is who gets what a Dir method creates; -1 keeps the daemon's.
type Owner struct{ UID, GID int }

// Keep is the daemon's own ownership.
var Keep = Owner{-1, -1}

func (o Owner) set() bool { return o.UID >= 0 || o.GID >= 0 }

// Dir is an open directory. Close it.
type Dir struct {
	fd   int
	name string // for errors only
}

// Open opens the directory at path, which the caller trusts: no jail can
// change any of its components. Its last component must not be a link.
//
// A Dir.Path (/proc/self/fd/N) opens that same directory again.
func Open(path string) (*Dir, error) {
	flags := unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	if _, rel, ok := fdPath(path); ok && rel == "" {
		flags &^= unix.O_NOFOLLOW // the magic link of a descriptor we hold
	}
	fd, err := unix.Open(path, flags, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	if err := probe(fd); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &Dir{fd: fd, name: path}, nil
}

// probe fails with ErrUnsupported where openat2 is missing.
func probe(fd int) error {
	nfd, err := openat2(fd, ".", unix.O_PATH)
	if err != nil {
		if errors.Is(err, unix.ENOSYS) {
			return ErrUnsupported
		}
		return err
	}
	unix.Close(nfd)
	return nil
}

const fdPrefix = "/proc/self/fd/"

// fdPath splits p into a Dir.Path and the rest below it.
func fdPath(p string) (base, rel string, ok bool) {
	rest, ok := strings.CutPrefix(p, fdPrefix)
	if !ok {
		return "", "", false
	}
	n, rel, _ := strings.Cut(rest, "/")
	if _, err := strconv.Atoi(n); err != nil {
		return "", "", false
	}
	return fdPrefix + n, rel, true
}

// MkdirAllPath is MkdirAll for code that holds paths: p is a Dir.Path
// with a relative path below it (only that directory is trusted), or an
// absolute path resolved from / with no link anywhere on the way.
func MkdirAllPath(p string, perm os.FileMode, o MkdirOpts) (*Dir, error) {
	base, rel, ok := fdPath(p)
	if !ok {
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("%q: %w", p, ErrNotPlain)
		}
		base, rel = "/", strings.TrimPrefix(filepath.Clean(p), "/")
	}
	d, err := Open(base)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.MkdirAll(strings.TrimSuffix(rel, "/"), perm, o)
}

// Close closes d.
func (d *Dir) Close() error { return unix.Close(d.fd) }

// Fd is d's descriptor, valid until Close.
func (d *Dir) Fd() int { return d.fd }

// Path names d as /proc/self/fd/N (see the package doc for what it may be
// used for).
func (d *Dir) Path() string { return "/proc/self/fd/" + strconv.Itoa(d.fd) }

// Stat is d's own status.
func (d *Dir) Stat() (unix.Stat_t, error) {
	var st unix.Stat_t
	err := unix.Fstat(d.fd, &st)
	return st, err
}

// Owner is who should get what the daemon creates in d: d's own owner, or
// Keep when d is the daemon's.
func (d *Dir) Owner() (Owner, error) {
	st, err := d.Stat()
	if err != nil {
		return Keep, &os.PathError{Op: "stat", Path: d.name, Err: err}
	}
	if int(st.Uid) == os.Geteuid() {
		return Keep, nil
	}
	return Owner{int(st.Uid), int(st.Gid)}, nil
}

// sysOpenat2 is the system call; a test makes it a kernel without it.
var sysOpenat2 = unix.Openat2

func openat2(dirfd int, rel string, flags uint64) (int, error) {
	how := unix.OpenHow{
		Flags:   flags | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	}
	for i := 0; ; i++ {
		fd, err := sysOpenat2(dirfd, rel, &how)
		// EAGAIN: a rename raced the lookup; the kernel asks for a retry.
		if errors.Is(err, unix.EAGAIN) && i < 16 {
			continue
		}
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return fd, err
	}
}

func split(rel string) ([]string, error) {
	if rel == "" || rel == "." {
		return nil, nil
	}
	parts := strings.Split(rel, "/")
	for _, p := range parts {
		if p == "" || p == "." || p == ".." || strings.ContainsRune(p, 0) {
			return nil, fmt.Errorf("%q: %w", rel, ErrNotPlain)
		}
	}
	return parts, nil
}

func checkName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("%q: %w", name, ErrNotPlain)
	}
	return nil
}

func (d *Dir) child(rel string) string { return filepath.Join(d.name, rel) }

// OpenDir opens the directory rel beneath d; a link anywhere on the way is
// refused (ELOOP), and so is a path that leaves d.
func (d *Dir) OpenDir(rel string) (*Dir, error) {
	if _, err := split(rel); err != nil {
		return nil, err
	}
	if rel == "" {
		rel = "."
	}
	fd, err := openat2(d.fd, rel, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, &os.PathError{Op: "openat2", Path: d.child(rel), Err: err}
	}
	return &Dir{fd: fd, name: d.child(rel)}, nil
}

// MkdirPrivate makes a new directory name in d that only the daemon can
// enter (0700, its own uid) and opens it, checking that what it opened is
// the one it made: a jail may rename it away and put its own there, but
// cannot make one owned by another uid.
func (d *Dir) MkdirPrivate(name string) (*Dir, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if err := unix.Mkdirat(d.fd, name, 0o700); err != nil {
		return nil, &os.PathError{Op: "mkdir", Path: d.child(name), Err: err}
	}
	sub, err := d.OpenDir(name)
	if err != nil {
		return nil, err
	}
	st, err := sub.Stat()
	if err == nil && (int(st.Uid) != os.Geteuid() || st.Mode&0o077 != 0) {
		err = &os.PathError{Op: "mkdir", Path: d.child(name), Err: errors.New("replaced while it was made")}
	}
	if err != nil {
		sub.Close()
		return nil, err
	}
	return sub, nil
}

// MkdirOpts say how MkdirAll treats what it finds and makes.
type MkdirOpts struct {
	// Owner gets every directory on the way (created or found), when set.
	Owner Owner
	// KeepFound gives Owner only the directories MkdirAll makes; those
	// already there keep theirs.
	KeepFound bool
	// ReplaceNonDirs removes a link or file found where a directory
	// belongs (it removes the entry, never what a link points at) and
	// makes the directory; otherwise such an entry is an error.
	ReplaceNonDirs bool
}

// MkdirAll opens the directory rel beneath d, making what is missing
// (perm before the umask), and returns it.
func (d *Dir) MkdirAll(rel string, perm os.FileMode, o MkdirOpts) (*Dir, error) {
	parts, err := split(rel)
	if err != nil {
		return nil, err
	}
	// Close-on-exec from its birth: a Dup then CloseOnExec left a moment
	// in which a fork (the launcher, bwrap, the dependency phase's
	// commands) inherited the directory.
	fd, err := unix.FcntlInt(uintptr(d.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	name := d.name
	for _, c := range parts {
		name = filepath.Join(name, c)
		next, err := mkdirOne(fd, c, perm, o)
		unix.Close(fd)
		if err != nil {
			return nil, &os.PathError{Op: "mkdir", Path: name, Err: err}
		}
		fd = next
	}
	return &Dir{fd: fd, name: name}, nil
}

func mkdirOne(fd int, c string, perm os.FileMode, o MkdirOpts) (int, error) {
	for attempt := 0; ; attempt++ {
		err := unix.Mkdirat(fd, c, uint32(perm.Perm()))
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return -1, err
		}
		made := err == nil
		next, err := openat2(fd, c, unix.O_RDONLY|unix.O_DIRECTORY)
		if err == nil {
			if o.Owner.set() && (made || !o.KeepFound) {
				if err := unix.Fchown(next, o.Owner.UID, o.Owner.GID); err != nil {
					unix.Close(next)
					return -1, err
				}
			}
			return next, nil
		}
		if !(errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.EXDEV)) || !o.ReplaceNonDirs || attempt > 2 {
			return -1, err
		}
		// A link or a file where the directory belongs: remove the entry
		// itself (unlinkat never follows) and make the directory.
		if err := unix.Unlinkat(fd, c, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return -1, err
		}
	}
}

// WriteFile replaces name in d with a regular file holding data: written
// under a fresh name, given to o and perm through its own descriptor,
// then renamed over name. A link or file at name is replaced, never
// written through; a directory there is an error.
func (d *Dir) WriteFile(name string, data []byte, perm os.FileMode, o Owner) error {
	return d.writeFrom(name, func(f *os.File) error {
		_, err := f.Write(data)
		return err
	}, perm, o)
}

// CreateFrom is WriteFile with the content copied from r.
func (d *Dir) CreateFrom(name string, r io.Reader, perm os.FileMode, o Owner) error {
	return d.writeFrom(name, func(f *os.File) error {
		_, err := io.Copy(f, r)
		return err
	}, perm, o)
}

func (d *Dir) writeFrom(name string, fill func(*os.File) error, perm os.FileMode, o Owner) error {
	if err := checkName(name); err != nil {
		return err
	}
	tmp := TempName()
	fd, err := unix.Openat(d.fd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return &os.PathError{Op: "create", Path: d.child(name), Err: err}
	}
	f := os.NewFile(uintptr(fd), d.child(tmp))
	fail := func(err error) error {
		f.Close()
		_ = unix.Unlinkat(d.fd, tmp, 0)
		return &os.PathError{Op: "write", Path: d.child(name), Err: err}
	}
	if err := fill(f); err != nil {
		return fail(err)
	}
	if o.set() {
		if err := unix.Fchown(fd, o.UID, o.GID); err != nil {
			return fail(err)
		}
	}
	if err := unix.Fchmod(fd, uint32(perm.Perm())); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		_ = unix.Unlinkat(d.fd, tmp, 0)
		return &os.PathError{Op: "write", Path: d.child(name), Err: err}
	}
	if err := unix.Renameat(d.fd, tmp, d.fd, name); err != nil {
		_ = unix.Unlinkat(d.fd, tmp, 0)
		return &os.PathError{Op: "rename", Path: d.child(name), Err: err}
	}
	return nil
}

// TempName is a fresh name for a file about to be renamed into place.
func TempName() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return ".tmp-" + hex.EncodeToString(b[:])
}

// ReadFile reads the regular file rel beneath d, never through a link
// (anywhere on the way) and never a device or pipe, at most max bytes
// (more is ErrTooLarge).
func (d *Dir) ReadFile(rel string, max int64) ([]byte, error) {
	parts, err := split(rel)
	if err != nil {
		return nil, err
	}
	if len(parts) == 0 {
		return nil, fmt.Errorf("%q: %w", rel, ErrNotPlain)
	}
	fd, err := openat2(d.fd, rel, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: d.child(rel), Err: err}
	}
	f := os.NewFile(uintptr(fd), d.child(rel))
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, &os.PathError{Op: "read", Path: d.child(rel), Err: errors.New("not a regular file")}
	}
	if fi.Size() > max {
		return nil, &os.PathError{Op: "read", Path: d.child(rel), Err: ErrTooLarge}
	}
	// The file may grow while it is read.
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, &os.PathError{Op: "read", Path: d.child(rel), Err: ErrTooLarge}
	}
	return b, nil
}

// Lstat is the status of rel beneath d, not following a link: one as
// rel's last component is what is reported, one on the way is an error.
func (d *Dir) Lstat(rel string) (unix.Stat_t, error) {
	var st unix.Stat_t
	parts, err := split(rel)
	if err != nil {
		return st, err
	}
	if len(parts) == 0 {
		return st, fmt.Errorf("%q: %w", rel, ErrNotPlain)
	}
	fd := d.fd
	if len(parts) > 1 {
		dir := strings.Join(parts[:len(parts)-1], "/")
		pfd, err := openat2(d.fd, dir, unix.O_PATH|unix.O_DIRECTORY)
		if err != nil {
			return st, &os.PathError{Op: "openat2", Path: d.child(dir), Err: err}
		}
		defer unix.Close(pfd)
		fd = pfd
	}
	if err := unix.Fstatat(fd, parts[len(parts)-1], &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return st, &os.PathError{Op: "lstat", Path: d.child(rel), Err: err}
	}
	return st, nil
}

// MoveIn renames name in src, a directory only the daemon can write, to
// name in d: a file or link there is replaced, never followed, whether
// name is a file or a directory (so is an empty directory when name is
// one). A directory that stays (a non-empty one, or any when name is a
// file) is kept and nothing moves: kept reports it. A perm other than 0
// is given to what moved afterwards through a descriptor opened before the
// move, so it reaches exactly that entry whatever a jail does in d
// meanwhile (a directory moved to another parent must stay writable until
// then: rename updates its "..").
func (d *Dir) MoveIn(src *Dir, name string, perm os.FileMode) (kept bool, err error) {
	if err := checkName(name); err != nil {
		return false, err
	}
	fd := -1
	if perm != 0 {
		if fd, err = openat2(src.fd, name, unix.O_RDONLY|unix.O_NONBLOCK); err != nil {
			return false, &os.PathError{Op: "open", Path: src.child(name), Err: err}
		}
		defer unix.Close(fd)
	}
	err = unix.Renameat(src.fd, name, d.fd, name)
	if errors.Is(err, unix.ENOTDIR) {
		// A directory onto a file or link: rename(2) refuses, and a
		// refusal left the home without the entry for good (every later
		// install of a module a jail had planted a link for failed).
		// Remove that entry, never following it, and move once more.
		var st unix.Stat_t
		if serr := unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); serr == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR {
			if uerr := unix.Unlinkat(d.fd, name, 0); uerr == nil || errors.Is(uerr, unix.ENOENT) {
				err = unix.Renameat(src.fd, name, d.fd, name)
			}
		}
	}
	if err != nil {
		if errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EISDIR) {
			return true, nil
		}
		return false, &os.PathError{Op: "rename", Path: d.child(name), Err: err}
	}
	if fd >= 0 {
		if err := unix.Fchmod(fd, uint32(perm.Perm())); err != nil {
			return false, &os.PathError{Op: "chmod", Path: d.child(name), Err: err}
		}
	}
	return false, nil
}

// maxDepth bounds the descents that hold a descriptor per level
// (ChownTree, RemoveAll's): a jail can make a tree far deeper than any
// cache the daemon writes.
const maxDepth = 512

// ChownTree gives d and everything beneath it to uid and gid, never
// following a link (a link itself is given, harmlessly) and never giving
// a non-directory with more than one link (a hard link the jail could
// have made to a file outside). Entries already owned by uid and gid are
// left alone, but directories are still walked.
func (d *Dir) ChownTree(uid, gid int) error {
	// A descriptor of its own: reading a directory moves its offset.
	fd, err := openat2(d.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return &os.PathError{Op: "open", Path: d.name, Err: err}
	}
	defer unix.Close(fd)
	return chownTree(fd, d.name, uid, gid, 0, batchBuf())
}

func chownTree(fd int, name string, uid, gid, depth int, buf []byte) error {
	if depth > maxDepth {
		return &os.PathError{Op: "chown", Path: name, Err: errors.New("too deep")}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if int(st.Uid) != uid || int(st.Gid) != gid {
		if err := unix.Fchown(fd, uid, gid); err != nil {
			return &os.PathError{Op: "chown", Path: name, Err: err}
		}
	}
	var names []string
	for {
		var err error
		if names, err = readBatchAt(fd, buf, names); err != nil {
			return &os.PathError{Op: "readdir", Path: name, Err: err}
		}
		if len(names) == 0 {
			return nil
		}
		if err := chownNames(fd, name, names, uid, gid, depth, buf); err != nil {
			return err
		}
	}
}

// chownNames is chownTree for a batch of fd's entries.
func chownNames(fd int, name string, names []string, uid, gid, depth int, buf []byte) error {
	for _, n := range names {
		var cs unix.Stat_t
		if err := unix.Fstatat(fd, n, &cs, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // removed meanwhile
			}
			return &os.PathError{Op: "lstat", Path: filepath.Join(name, n), Err: err}
		}
		switch cs.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			cfd, err := openat2(fd, n, unix.O_RDONLY|unix.O_DIRECTORY)
			if err != nil {
				if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
					continue // replaced meanwhile: not ours to give
				}
				return &os.PathError{Op: "open", Path: filepath.Join(name, n), Err: err}
			}
			err = chownTree(cfd, filepath.Join(name, n), uid, gid, depth+1, buf)
			unix.Close(cfd)
			if err != nil {
				return err
			}
		default:
			if int(cs.Uid) == uid && int(cs.Gid) == gid {
				continue
			}
			if cs.Nlink > 1 && cs.Mode&unix.S_IFMT != unix.S_IFLNK {
				continue
			}
			if err := unix.Fchownat(fd, n, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil && !errors.Is(err, unix.ENOENT) {
				return &os.PathError{Op: "chown", Path: filepath.Join(name, n), Err: err}
			}
		}
	}
	return nil
}

// ReadNames lists at most max entries of d (in directory order; fewer
// when d has fewer). Nothing is opened or followed.
func (d *Dir) ReadNames(max int) ([]string, error) {
	if max <= 0 {
		return nil, nil
	}
	rfd, err := openat2(d.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, &os.PathError{Op: "openat2", Path: d.name, Err: err}
	}
	f := os.NewFile(uintptr(rfd), d.name)
	defer f.Close()
	names, err := f.Readdirnames(max)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return names, err
}

// readBatch bounds the names the walks (ChownTree, StatTree, RemoveAll)
// read from a directory at once. A jail can make millions of entries in
// one directory of its home; the daemon, which shares its memory with the
// jails, holds at most one batch per directory on its way down, never a
// whole listing. One getdents fills a buffer that fits readBatch entries
// of the shortest name (and ~24 KiB of names). A variable for tests.
var readBatch = 1024

// onBatch, when set (by tests), sees the length of every batch read.
var onBatch func(int)

const (
	minDirent = 24  // a linux_dirent64 with a 1-byte name, 8-aligned
	maxDirent = 280 // one with a 255-byte name: getdents needs room for one
)

// batchBuf is a walk's buffer for readBatchAt, one for all its levels
// (the names are copied out of it).
func batchBuf() []byte { return make([]byte, max(readBatch*minDirent, maxDirent)) }

// readBatchAt reads fd's next entries from its offset on, by one getdents
// into buf, into names[:0] ("." and ".." left out); none at the end. fd
// must be the walk's own: the offset is where the next batch starts.
func readBatchAt(fd int, buf []byte, names []string) ([]string, error) {
	for {
		n, err := unix.Getdents(fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return names[:0], err
		}
		if n <= 0 {
			return names[:0], nil
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names[:0])
		if len(names) > 0 {
			if onBatch != nil {
				onBatch(len(names))
			}
			return names, nil
		}
		// Only "." and "..": read on.
	}
}

// heldDirs bounds the descriptors StatTree holds: deeper, a directory's
// descriptor is closed on the way down and opened again through ".." on
// the way up, checked to be the same directory, and read on from where
// it stopped.
const heldDirs = 64

// errMoved: a directory StatTree was below moved meanwhile, so the way
// back up no longer leads to where the walk came from.
var errMoved = errors.New("moved while walked")

// StatTree calls fn with the status of d and of every entry beneath it,
// as lstat(2) gives it: a link is reported as itself, never followed.
// Only directories are opened, one level at a time by openat2, so a tree
// of any depth (paths beyond PATH_MAX too) is walked with at most
// heldDirs+2 descriptors of its own. An entry that disappears, or turns
// into a link or a file, while the walk runs is reported as first seen
// and not entered. An entry that cannot be read is passed over and its
// error returned at the end; a directory moved while the walk is below it
// ends the walk (what was reported stays reported). Each directory is
// read readBatch entries at a time. The walk ends, with what it has
// returned so far, as soon as fn returns false.
func (d *Dir) StatTree(fn func(*unix.Stat_t) bool) error {
	var st unix.Stat_t
	if err := unix.Fstat(d.fd, &st); err != nil {
		return &os.PathError{Op: "stat", Path: d.name, Err: err}
	}
	if !fn(&st) {
		return nil
	}
	// A descriptor of its own: reading a directory moves its offset.
	rfd, err := openat2(d.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return &os.PathError{Op: "open", Path: d.name, Err: err}
	}
	buf := batchBuf()
	// stack[i] is the directory at depth i on the way down; stack[0] is d.
	stack := []statDir{{fd: rfd}}
	defer func() {
		for _, s := range stack {
			if s.fd >= 0 {
				unix.Close(s.fd)
			}
		}
	}()
	var first error
	fail := func(op, n string, err error) {
		if first == nil {
			first = &os.PathError{Op: op, Path: d.below(stack, n), Err: err}
		}
	}
	for {
		top := &stack[len(stack)-1]
		if len(top.names) == 0 {
			// The top of the stack is always held.
			if top.names, err = readBatchAt(top.fd, buf, top.names); err != nil {
				fail("readdir", "", err) // and pass over the rest of it
			}
			if len(top.names) > 0 {
				continue
			}
			if len(stack) == 1 {
				return first
			}
			up := &stack[len(stack)-2]
			if up.fd < 0 {
				if up.fd, err = top.parent(up); err != nil {
					return &os.PathError{Op: "open", Path: d.below(stack[:len(stack)-1], ""), Err: err}
				}
			}
			unix.Close(top.fd)
			stack = stack[:len(stack)-1]
			continue
		}
		n := top.names[len(top.names)-1]
		top.names = top.names[:len(top.names)-1]
		var cs unix.Stat_t
		if err := unix.Fstatat(top.fd, n, &cs, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if !errors.Is(err, unix.ENOENT) {
				fail("lstat", n, err)
			}
			continue
		}
		if !fn(&cs) {
			return first
		}
		if cs.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		if cs.Mode&0o500 != 0o500 {
			grantOwner(top.fd, n, 0o500)
		}
		cfd, err := openat2(top.fd, n, unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			if !(errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR)) {
				fail("open", n, err)
			}
			continue
		}
		// stack[0] and the heldDirs-1 deepest, cfd's among them, stay held.
		if i := len(stack) - heldDirs + 1; i > 0 && stack[i].fd >= 0 {
			if err := stack[i].release(); err != nil {
				unix.Close(cfd)
				return &os.PathError{Op: "stat", Path: d.below(stack[:i+1], ""), Err: err}
			}
		}
		stack = append(stack, statDir{fd: cfd, name: n})
	}
}

// grantOwner gives directory n in pfd, when the daemon owns it, back its
// owner's permission bits once any of want is missing. In unprivileged
// mode every jail runs as the daemon's own uid and owns what it makes in
// its home, so it can chmod a directory there to keep the daemon, which
// has no permission override, out of it: out of the disk budget's measure
// and out of its removal. n is reached as any other entry (no link
// followed) and changed through its own descriptor, never by name.
func grantOwner(pfd int, n string, want uint32) {
	fd, err := openat2(pfd, n, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Geteuid() || st.Mode&want == want {
		return
	}
	// chmod follows the magic link of our own O_PATH descriptor: the
	// very directory opened above (fchmod refuses an O_PATH descriptor).
	_ = unix.Chmod("/proc/self/fd/"+strconv.Itoa(fd), st.Mode&0o7777|0o700)
}

// GrantOwner is grantOwner for the directory at path, whose parent the
// caller trusts (see Open): want are the owner bits the caller needs, 0o500
// to read and search it, 0o700 to change it too (moving a directory to
// another parent writes its "..").
func GrantOwner(path string, want os.FileMode) error {
	path = filepath.Clean(path)
	p, err := Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer p.Close()
	grantOwner(p.fd, filepath.Base(path), uint32(want.Perm()))
	return nil
}

// statDir is a directory on StatTree's way down: its descriptor (-1 once
// released), its identity and read offset then, its name in its parent
// and the entries of the batch read not yet visited.
type statDir struct {
	fd       int
	dev, ino uint64
	off      int64
	name     string
	names    []string
}

// release closes s's descriptor, keeping its identity and where its
// next batch starts (the offset is the position after the batch read
// last, which is wholly in s.names: getdents buffers nothing).
func (s *statDir) release() error {
	var st unix.Stat_t
	if err := unix.Fstat(s.fd, &st); err != nil {
		return err
	}
	off, err := unix.Seek(s.fd, 0, io.SeekCurrent)
	if err != nil {
		return err
	}
	unix.Close(s.fd)
	s.fd, s.dev, s.ino, s.off = -1, uint64(st.Dev), uint64(st.Ino), off
	return nil
}

// parent opens s's parent again, which must still be up: ".." is never
// a link, but s may have moved. It is read on from where it was released.
func (s *statDir) parent(up *statDir) (int, error) {
	fd, err := unix.Openat(s.fd, "..", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if uint64(st.Dev) != up.dev || uint64(st.Ino) != up.ino {
		unix.Close(fd)
		return -1, errMoved
	}
	if _, err := unix.Seek(fd, up.off, io.SeekStart); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// below names n in the directory at the end of stack, for errors only.
func (d *Dir) below(stack []statDir, n string) string {
	p := d.name
	for _, s := range stack[1:] {
		p = filepath.Join(p, s.name)
	}
	return filepath.Join(p, n)
}

// RemoveAll removes path and everything beneath it without following a
// link, making directories writable on the way (trees are read-only).
// path's parent must be trusted (see Open); a missing path is not an
// error.
func RemoveAll(path string) error {
	path = filepath.Clean(path)
	parent, base := filepath.Dir(path), filepath.Base(path)
	if base == "/" || base == "." || base == ".." {
		return fmt.Errorf("safefs: refusing to remove %q", path)
	}
	p, err := Open(parent)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	defer p.Close()
	return p.RemoveAll(base)
}

// RemoveAll removes name in d and everything beneath it, never following
// a link; a missing name is not an error. A tree of any depth goes, with
// at most maxDepth+2 descriptors: a directory deeper than maxDepth is
// moved up into name (renameat, within the tree) and removed from there.
func (d *Dir) RemoveAll(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	r := remover{top: -1, buf: batchBuf()}
	return r.removeAt(d.fd, d.name, name, 0)
}

// remover removes one tree: top is the descriptor of its top directory
// once open, moved says a directory was moved into top since top's
// current round began, buf is for readBatchAt.
type remover struct {
	top   int
	moved bool
	buf   []byte
}

func (r *remover) removeAt(pfd int, pname, n string, depth int) error {
	full := filepath.Join(pname, n)
	var fd int
	for attempt := 0; ; attempt++ {
		err := unix.Unlinkat(pfd, n, 0)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
			return &os.PathError{Op: "unlink", Path: full, Err: err}
		}
		fd, err = openat2(pfd, n, unix.O_RDONLY|unix.O_DIRECTORY)
		if errors.Is(err, unix.EACCES) {
			grantOwner(pfd, n, 0o700)
			fd, err = openat2(pfd, n, unix.O_RDONLY|unix.O_DIRECTORY)
		}
		if err == nil {
			break
		}
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		// Replaced by a link or file meanwhile: remove that entry.
		if !(errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR)) || attempt >= 3 {
			return &os.PathError{Op: "open", Path: full, Err: err}
		}
	}
	// Writable, for its entries to go (and, deep, for its ".." to change
	// when it moves).
	_ = unix.Fchmod(fd, 0o700)
	if depth > maxDepth {
		// One descriptor more per level would be unbounded: move it up
		// beside top's entries, where a later round of top's removes it.
		unix.Close(fd)
		if err := unix.Renameat(pfd, n, r.top, TempName()); err != nil && !errors.Is(err, unix.ENOENT) {
			return &os.PathError{Op: "rename", Path: full, Err: err}
		}
		r.moved = true
		return nil
	}
	if depth == 0 {
		r.top = fd
	}
	err := r.empty(fd, full, depth)
	unix.Close(fd)
	if err != nil {
		return err
	}
	if err := unix.Unlinkat(pfd, n, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		return &os.PathError{Op: "rmdir", Path: full, Err: err}
	}
	return nil
}

// empty removes the entries of fd, the directory full at depth, in
// rounds: each reads fd from its start to its end, a batch at a time,
// removing a batch before reading the next. A directory read while its
// entries go may skip or repeat one (a repeat is gone already: not an
// error); the next round, from the start again, finds what was skipped,
// and one that finds nothing ends them.
func (r *remover) empty(fd int, full string, depth int) error {
	var names []string
	for round := 0; ; round++ {
		_, err := unix.Seek(fd, 0, io.SeekStart)
		if err == nil {
			names, err = readBatchAt(fd, r.buf, names)
		}
		if err != nil {
			return &os.PathError{Op: "readdir", Path: full, Err: err}
		}
		// A few rounds for what a writer adds meanwhile; top's go on for
		// as long as directories move up into it (each move brings a
		// subtree maxDepth levels nearer, so they end).
		if len(names) == 0 || round >= 4 && !(depth == 0 && r.moved) {
			return nil // rmdir tells what is left
		}
		if depth == 0 {
			r.moved = false
		}
		for len(names) > 0 {
			for _, c := range names {
				if err := r.removeAt(fd, full, c, depth+1); err != nil {
					return err
				}
			}
			if names, err = readBatchAt(fd, r.buf, names); err != nil {
				return &os.PathError{Op: "readdir", Path: full, Err: err}
			}
		}
	}
}
