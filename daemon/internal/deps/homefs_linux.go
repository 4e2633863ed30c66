package deps

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
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
func openHomeDir(home, rel string) (*homeDir, error) {
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
		err := unix.Mkdirat(fd, c, 0o755)
		created := err == nil
		if err != nil && !errors.Is(err, unix.EEXIST) {
			unix.Close(fd)
			return nil, err
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
