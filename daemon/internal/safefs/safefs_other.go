//go:build !linux

package safefs

import (
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// Off Linux there is no jail (only LSP_UNJAILED=1 development), so nothing
// but the daemon's own servers, running as its own uid, writes a home; the
// operations that need openat2 are unsupported.

var (
	ErrUnsupported = errors.New("safefs: openat2 is unavailable off Linux")
	ErrNotPlain    = errors.New("safefs: not a relative path of plain names")
	ErrTooLarge    = errors.New("safefs: over the size bound")
)

type Owner struct{ UID, GID int }

var Keep = Owner{-1, -1}

type Dir struct{}

type MkdirOpts struct {
	Owner          Owner
	KeepFound      bool
	ReplaceNonDirs bool
}

func Open(string) (*Dir, error)                                       { return nil, ErrUnsupported }
func GrantOwner(string, os.FileMode) error                            { return nil }
func (d *Dir) Close() error                                           { return nil }
func (d *Dir) Path() string                                           { return "" }
func (d *Dir) OpenDir(string) (*Dir, error)                           { return nil, ErrUnsupported }
func (d *Dir) MkdirAll(string, os.FileMode, MkdirOpts) (*Dir, error)  { return nil, ErrUnsupported }
func (d *Dir) WriteFile(string, []byte, os.FileMode, Owner) error     { return ErrUnsupported }
func (d *Dir) CreateFrom(string, io.Reader, os.FileMode, Owner) error { return ErrUnsupported }
func (d *Dir) ReadFile(string, int64) ([]byte, error)                 { return nil, ErrUnsupported }
func (d *Dir) Lstat(string) (unix.Stat_t, error)                      { return unix.Stat_t{}, ErrUnsupported }
func (d *Dir) ReadNames(int) ([]string, error)                        { return nil, ErrUnsupported }
func (d *Dir) Owner() (Owner, error)                                  { return Keep, ErrUnsupported }
func (d *Dir) MoveIn(*Dir, string, os.FileMode) (bool, error)         { return false, ErrUnsupported }
func (d *Dir) ChownTree(int, int) error                               { return ErrUnsupported }
func (d *Dir) StatTree(func(*unix.Stat_t) bool) error                 { return ErrUnsupported }
func (d *Dir) RemoveAll(string) error                                 { return ErrUnsupported }
func TempName() string                                                { return ".tmp" }

// RemoveAll is os.RemoveAll after making directories writable.
func RemoveAll(path string) error { return os.RemoveAll(path) }
