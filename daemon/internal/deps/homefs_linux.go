package deps

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// A home is writable by the jailed servers of every revision of its
// repository, and they may be running while a prepare writes there: any
// directory in it may have been replaced by a link. So the phase writes in
// a home one path component at a time, relative to the directory it has
// open, never following a link (O_NOFOLLOW on every component), and gives
// what it creates to the home's owner with fchown on its own descriptor.

// homeDir is an open directory beneath a home.
type homeDir struct {
	fd       int
	uid, gid int // -1: keep the daemon's
}

// openHomeDir opens rel (a clean slash path of plain names) beneath home,
// creating what is missing. home itself lies in a daemon-owned directory
// and is opened without following a link either.
func openHomeDir(home, rel string) (*homeDir, error) { return walkHomeDir(home, rel, true) }

// findHomeDir opens rel beneath home without creating anything.
func findHomeDir(home, rel string) (*homeDir, error) { return walkHomeDir(home, rel, false) }

func walkHomeDir(home, rel string, create bool) (*homeDir, error) {
	uid, gid := -1, -1
	var st unix.Stat_t
	if err := unix.Lstat(home, &st); err != nil {
		return nil, err
	}
	if int(st.Uid) != os.Geteuid() {
		uid, gid = int(st.Uid), int(st.Gid)
	}
	fd, err := unix.Open(home, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	for _, c := range strings.Split(rel, "/") {
		if c == "" || c == "." || c == ".." || strings.ContainsRune(c, 0) {
			unix.Close(fd)
			return nil, errors.New("not a plain relative path")
		}
		created := false
		if create {
			err := unix.Mkdirat(fd, c, 0o755)
			created = err == nil
			if err != nil && !errors.Is(err, unix.EEXIST) {
				unix.Close(fd)
				return nil, err
			}
		}
		next, err := unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return nil, err // ELOOP or ENOTDIR: something planted
		}
		fd = next
		if created && uid >= 0 {
			if err := unix.Fchown(fd, uid, gid); err != nil {
				unix.Close(fd)
				return nil, err
			}
		}
	}
	return &homeDir{fd: fd, uid: uid, gid: gid}, nil
}

func (d *homeDir) Close() error { return unix.Close(d.fd) }

// writeFile replaces name in d with data, whole: a new file under a
// random name, owned by the home's owner, renamed over the old one (a link
// there is replaced, never followed).
func (d *homeDir) writeFile(name string, data []byte, perm uint32) error {
	var b [8]byte
	_, _ = rand.Read(b[:])
	tmp := ".tmp-" + hex.EncodeToString(b[:])
	fd, err := unix.Openat(d.fd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	fail := func(err error) error {
		unix.Close(fd)
		_ = unix.Unlinkat(d.fd, tmp, 0)
		return err
	}
	for rest := data; len(rest) > 0; {
		n, err := unix.Write(fd, rest)
		if err != nil {
			return fail(err)
		}
		rest = rest[n:]
	}
	if d.uid >= 0 {
		if err := unix.Fchown(fd, d.uid, d.gid); err != nil {
			return fail(err)
		}
	}
	if err := unix.Fchmod(fd, perm); err != nil {
		return fail(err)
	}
	if err := unix.Close(fd); err != nil {
		_ = unix.Unlinkat(d.fd, tmp, 0)
		return err
	}
	if err := unix.Renameat(d.fd, tmp, d.fd, name); err != nil {
		_ = unix.Unlinkat(d.fd, tmp, 0)
		return err
	}
	return nil
}

// readHome reads the regular file rel beneath home, at most max bytes,
// never through a link.
func readHome(home, rel string, max int64) ([]byte, error) {
	dir, name := path.Split(rel)
	d, err := findHomeDir(home, strings.TrimSuffix(dir, "/"))
	if err != nil {
		return nil, err
	}
	defer d.Close()
	fd, err := unix.Openat(d.fd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	fh := os.NewFile(uintptr(fd), name)
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	if fi.Size() > max {
		return nil, errTooLarge
	}
	return io.ReadAll(io.LimitReader(fh, max))
}

// inHome reports whether rel exists beneath home (a link counts, and is
// never followed).
func inHome(home, rel string) bool {
	dir, name := path.Split(rel)
	d, err := findHomeDir(home, strings.TrimSuffix(dir, "/"))
	if err != nil {
		return false
	}
	defer d.Close()
	var st unix.Stat_t
	return unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil
}

// moveIn renames srcDir/name (a daemon-owned directory) into d, replacing
// a file (or link) of that name; a directory already there is kept
// (exists true). A moved directory is made read-only afterwards through
// its new descriptor, never through a path.
func (d *homeDir) moveIn(srcDir, name string, readOnlyDir bool) (exists bool, err error) {
	src, err := unix.Open(srcDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, err
	}
	defer unix.Close(src)
	if err := unix.Renameat(src, name, d.fd, name); err != nil {
		if errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EISDIR) {
			return true, nil
		}
		return false, err
	}
	if readOnlyDir {
		fd, err := unix.Openat(d.fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return false, err
		}
		defer unix.Close(fd)
		return false, unix.Fchmod(fd, 0o555)
	}
	return false, nil
}
