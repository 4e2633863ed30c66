package workspace

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/hanzoai/lsp/daemon/internal/safefs"
)

// MakeReadOnly drops write permission on every file and directory under
// root, so that a language server (even unjailed) cannot change what it
// serves: a published tree, or the dependencies the daemon unpacked for
// it. Only regular files and directories may be there; anything else is
// an error (nothing the daemon writes makes one).
func MakeReadOnly(root string) error {
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
			return nil
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s is not a regular file", p)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Mode().Perm()&0o222 == 0 {
			return nil // read-only already (an npm package's files are made so)
		}
		return os.Chmod(p, info.Mode().Perm()&^0o222)
	})
	if err != nil {
		return err
	}
	// Directories last, deepest first, so the walk above could still descend.
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Chmod(dirs[i], 0o555); err != nil {
			return err
		}
	}
	return nil
}

// MoveReadOnly renames src, a directory MakeReadOnly locked, to dst under
// another parent, read-only there too. A directory moved to another
// parent rewrites its "..", which takes write permission on it — which
// only root's override skips, and the daemon runs as an ordinary uid in
// production — so src is writable for the move alone.
func MoveReadOnly(src, dst string) error {
	if err := os.Chmod(src, 0o755); err != nil {
		return err
	}
	if err := os.Rename(src, dst); err != nil {
		_ = os.Chmod(src, 0o555)
		return err
	}
	return os.Chmod(dst, 0o555)
}

// RemoveAll removes a tree MakeReadOnly may have locked, or a home a jail
// wrote, never following a link (safefs.RemoveAll: the old walk chmodded
// by path, which follows one). root's parent must be the daemon's.
func RemoveAll(root string) error { return safefs.RemoveAll(root) }
