package deps

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
)

// Bounds on one package tarball beyond its compressed size.
const (
	maxTarEntries = 50000
	maxTarDepth   = 64
	maxTarName    = 1024
)

// entryCost is what one file or directory costs on disk beyond its bytes
// (at least a block and an inode), charged against the size bounds so that
// a tarball of empty files and directories cannot fill a disk, or its
// inodes, for free.
const entryCost = 4096

// errTarball is a tarball the phase refuses to extract; its message says
// why, in terms of the archive only.
var errTarball = errors.New("tarball refused")

// tarLimits bounds one extraction.
type tarLimits struct {
	// maxBytes bounds the unpacked bytes of this tarball.
	maxBytes int64
	// left, when set, is the phase's remaining unpacked-byte budget.
	left *atomic.Int64
}

// extractTarball unpacks a gzip tar read from r into dir, which must exist
// and be empty, the way npm lays out a package: the first path element
// (package/, or node/ in some @types tarballs) is stripped. Only regular
// files and directories are made, files read-only; a link, a device, a
// path that climbs out or is absolute, a duplicate and anything over the
// bounds refuse the whole tarball (the caller discards dir). Nothing is
// ever made outside dir: every directory is created one level at a time
// below it, never through a link.
func extractTarball(r io.Reader, dir string, lim tarLimits) (err error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return fmt.Errorf("%w: not gzip", errTarball)
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	var total int64
	// charge counts n bytes against this tarball's bound and the phase's;
	// a refused tarball (the caller discards dir) gives the phase's back.
	charge := func(n int64) error {
		if n > lim.maxBytes-total {
			return fmt.Errorf("%w: over the size bound", errTarball)
		}
		total += n
		if lim.left != nil && lim.left.Add(-n) < 0 {
			return fmt.Errorf("%w: over the size bound", errTarball)
		}
		return nil
	}
	defer func() {
		if err != nil && lim.left != nil {
			lim.left.Add(total)
		}
	}()
	made := map[string]bool{"": true}
	written := map[string]bool{} // regular files this extraction wrote
	buf := make([]byte, 32<<10)
	for n := 0; ; n++ {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: not a tar archive", errTarball)
		}
		if n >= maxTarEntries {
			return fmt.Errorf("%w: more than %d entries", errTarball, maxTarEntries)
		}
		switch h.Typeflag {
		case tar.TypeXGlobalHeader:
			continue // metadata only
		case tar.TypeReg, tar.TypeDir:
		case tar.TypeSymlink, tar.TypeLink:
			return fmt.Errorf("%w: it holds a link", errTarball)
		default:
			return fmt.Errorf("%w: it holds an entry that is neither a file nor a directory", errTarball)
		}
		rel, err := tarPath(h.Name)
		if err != nil {
			return err
		}
		if rel == "" {
			continue // the stripped top directory itself, or a file beside it
		}
		if h.Typeflag == tar.TypeDir {
			if err := mkdirUnder(dir, rel, made, charge); err != nil {
				return err
			}
			continue
		}
		if h.Size < 0 {
			return fmt.Errorf("%w: over the size bound", errTarball)
		}
		if err := charge(min(h.Size, math.MaxInt64-entryCost) + entryCost); err != nil {
			return err
		}
		parent, _ := splitLast(rel)
		if err := mkdirUnder(dir, parent, made, charge); err != nil {
			return err
		}
		if made[rel] {
			return fmt.Errorf("%w: a file is also a directory", errTarball)
		}
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if written[rel] {
			// A path repeated as a regular file: the later copy wins, as
			// npm's own extraction has it (published packages such as
			// agent-base carry one). Only a file this extraction wrote is
			// replaced; its charge stays spent.
			if err := os.Remove(p); err != nil {
				return fmt.Errorf("extract: %w", err)
			}
		}
		if err := writeMember(p, tr, h.Size, buf); err != nil {
			return err
		}
		written[rel] = true
	}
}

// tarPath checks a member name and strips its first element. It returns
// "" for the first element alone.
func tarPath(name string) (string, error) {
	if len(name) > maxTarName || name == "" || strings.ContainsAny(name, "\\\x00") {
		return "", fmt.Errorf("%w: a path is malformed", errTarball)
	}
	if strings.HasPrefix(name, "/") {
		return "", fmt.Errorf("%w: a path is absolute", errTarball)
	}
	// "./package/x" and "package//x" name package/x, as tar reads them.
	var segs []string
	for _, s := range strings.Split(name, "/") {
		switch s {
		case "", ".":
			continue
		case "..":
			return "", fmt.Errorf("%w: a path climbs out", errTarball)
		}
		segs = append(segs, s)
	}
	if len(segs) > maxTarDepth {
		return "", fmt.Errorf("%w: a path is too deep", errTarball)
	}
	if len(segs) <= 1 {
		return "", nil
	}
	return strings.Join(segs[1:], "/"), nil
}

func splitLast(rel string) (string, string) {
	if i := strings.LastIndexByte(rel, '/'); i >= 0 {
		return rel[:i], rel[i+1:]
	}
	return "", rel
}

// mkdirUnder makes rel's directories below dir one at a time, each a new
// directory or one this extraction made, so none is a link or a file, and
// charges each one it makes.
func mkdirUnder(dir, rel string, made map[string]bool, charge func(int64) error) error {
	if made[rel] {
		return nil
	}
	parent, _ := splitLast(rel)
	if err := mkdirUnder(dir, parent, made, charge); err != nil {
		return err
	}
	if err := charge(entryCost); err != nil {
		return err
	}
	err := os.Mkdir(filepath.Join(dir, filepath.FromSlash(rel)), 0o700)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%w: a directory is also a file", errTarball)
	}
	if err != nil {
		return fmt.Errorf("extract: %w", err)
	}
	made[rel] = true
	return nil
}

// writeMember writes exactly size bytes to a new file at p, read-only. A
// file already there that this extraction did not write refuses the
// tarball.
func writeMember(p string, r io.Reader, size int64, buf []byte) error {
	// Made read-only at once (the descriptor still writes): no chmod
	// after, one system call less on each of a large install's files.
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o444)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%w: a path appears twice", errTarball)
	}
	if err != nil {
		return fmt.Errorf("extract: %w", err)
	}
	n, err := io.CopyBuffer(f, io.LimitReader(r, size), buf)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, tar.ErrHeader) || errors.Is(err, gzip.ErrChecksum) || errors.Is(err, gzip.ErrHeader) {
			return fmt.Errorf("%w: truncated", errTarball)
		}
		return fmt.Errorf("extract: %w", err)
	}
	if n != size {
		return fmt.Errorf("%w: truncated", errTarball)
	}
	return nil
}
