package forge

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
)

// Limits bound a fetched tree. A zero or negative field takes the default.
type Limits struct {
	// MaxFiles bounds the non-directory entries of the tree, including
	// those that are then dropped (each costs a warning).
	MaxFiles int
	// MaxTotalBytes bounds the bytes of the files sent, symlink copies
	// included.
	MaxTotalBytes int64
	// MaxFileBytes bounds each file sent.
	MaxFileBytes int64
	// MaxDepth bounds the path components of an entry ("a/b/c" is 3).
	MaxDepth int
	// MaxDirs bounds the distinct directories the entries' paths imply.
	MaxDirs int
	// Stream: a git forge's tree keeps in memory only the blobs that
	// decide what is sent (symlink targets, blobs small enough to be a
	// git-lfs pointer); every other file's bytes are read by Tree.Stream
	// from the fetched repository, which the tree holds until Close.
	Stream bool
}

// DefaultLimits are sane bounds for a source tree held in memory.
func DefaultLimits() Limits {
	return Limits{MaxFiles: 100_000, MaxTotalBytes: 256 << 20, MaxFileBytes: 16 << 20, MaxDepth: 64, MaxDirs: 100_000}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.MaxFiles <= 0 {
		l.MaxFiles = d.MaxFiles
	}
	if l.MaxTotalBytes <= 0 {
		l.MaxTotalBytes = d.MaxTotalBytes
	}
	if l.MaxFileBytes <= 0 {
		l.MaxFileBytes = d.MaxFileBytes
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = d.MaxDepth
	}
	if l.MaxDirs <= 0 {
		l.MaxDirs = d.MaxDirs
	}
	return l
}

// Tree is a normalised commit tree.
type Tree struct {
	Files    []File   // sorted by path (bytewise)
	Warnings []string // one per dropped entry, sorted

	// A streamed tree (Limits.Stream): lazy[i] is the blob Stream reads
	// for Files[i] (nil when its Data is here); read starts reading them;
	// release removes the fetched repository.
	lazy    []*entry
	read    func(ctx context.Context, entries []*entry, fn func(*entry, []byte) error) error
	release func()
}

// File is one file of a Tree. A symlink copy shares Data with its target.
// In a streamed tree a file's Data may be nil and its SHA256 empty until
// Stream hands its bytes over; Size is its length either way.
type File struct {
	Path       string // repository-relative, '/'-separated
	Data       []byte
	Size       int64
	SHA256     string // hex of Data
	Executable bool
}

// Stream hands every file's bytes to fn, in Files order, each once: those
// in memory as they are, the others read one at a time from the fetched
// repository (at most one file's bytes are held at a time, never the
// tree's). fn must not keep data past its return unless the file's Data
// was set. An error of fn stops the stream and is returned.
func (t *Tree) Stream(ctx context.Context, fn func(i int, data []byte) error) error {
	if t.read == nil {
		for i := range t.Files {
			if err := fn(i, t.Files[i].Data); err != nil {
				return err
			}
		}
		return nil
	}
	var lazy []*entry
	var idx []int
	for i, e := range t.lazy {
		if e != nil {
			lazy, idx = append(lazy, e), append(idx, i)
		}
	}
	next, j := 0, 0 // next file to hand over; next lazy one
	eager := func(upto int) error {
		for ; next < upto; next++ {
			if err := fn(next, t.Files[next].Data); err != nil {
				return err
			}
		}
		return nil
	}
	err := t.read(ctx, lazy, func(e *entry, data []byte) error {
		if err := eager(idx[j]); err != nil {
			return err
		}
		j++
		next++
		return fn(idx[j-1], data)
	})
	if err != nil {
		return err
	}
	return eager(len(t.Files))
}

// Close releases what a streamed tree holds; it is a no-op for others and
// may be called more than once.
func (t *Tree) Close() {
	if t.release != nil {
		t.release()
		t.release = nil
	}
}

// Normalisation bounds that are not the caller's to choose.
const (
	maxSymlinkTarget = 4096 // PATH_MAX: a longer target cannot resolve
	maxSymlinkHops   = 40   // Linux's MAXSYMLINKS
	maxLFSPointer    = 1024 // git-lfs never writes a larger pointer
	maxTreeRecord    = 64 << 10
)

var lfsPrefixes = [][]byte{
	[]byte("version https://git-lfs.github.com/spec/v1\n"),
	[]byte("version https://hawser.github.com/spec/v1\n"), // pre-1.0 git-lfs
}

type entryKind uint8

const (
	kindFile entryKind = iota
	kindSymlink
	kindSubmodule
)

type entry struct {
	path string
	kind entryKind
	exec bool
	oid  string
	size int64
}

// readTree lists and reads commit's tree from the bare repository dir,
// which must not need the network: it runs offline.
func (g *gitForge) readTree(ctx context.Context, op string, log *slog.Logger, home, dir, commit string, lim Limits) (*Tree, error) {
	if out, _, err := g.output(ctx, dir, home, 64, "cat-file", "-t", commit); err != nil || strings.TrimSpace(out) != "commit" {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, lateError(op, ctxErr)
		}
		return nil, newError(op, ErrNotFound, revNotFound)
	}
	tr := &treeReader{g: g, op: op, log: log, home: home, dir: dir, lim: lim,
		entries: make(map[string]*entry), dirs: make(map[string]bool)}
	if err := tr.list(ctx, commit); err != nil {
		return nil, tr.fail(ctx, err)
	}
	t, err := tr.build(ctx)
	if err != nil {
		return nil, tr.fail(ctx, err)
	}
	if t.lazy != nil {
		t.read = func(ctx context.Context, entries []*entry, fn func(*entry, []byte) error) error {
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			cf, err := tr.startCatFile(ctx, cancel)
			if err != nil {
				return tr.fail(ctx, err)
			}
			defer cf.close()
			var fnErr error
			err = cf.read(entries, func(e *entry, data []byte) error {
				if err := fn(e, data); err != nil {
					fnErr = err
					return err
				}
				return nil
			})
			if err != nil && fnErr == nil {
				return tr.fail(ctx, err)
			}
			return err
		}
	}
	return t, nil
}

type treeReader struct {
	g    *gitForge
	op   string
	log  *slog.Logger
	home string
	dir  string
	lim  Limits

	order    []*entry          // files and symlinks, in tree order
	entries  map[string]*entry // every non-directory entry by path
	dirs     map[string]bool   // every directory implied by a path
	warnings []string
	count    int
}

// passSafe returns err when it is safe to hand out as it is — a bound
// passed, or the package's own error — or the late error of a context
// that ended; ok is false when the caller must map err itself.
func passSafe(ctx context.Context, op string, err error) (error, bool) {
	var tooLarge *TooLargeError
	var oe *opError
	switch {
	case errors.As(err, &tooLarge), errors.As(err, &oe):
		return err, true
	case ctx.Err() != nil:
		return lateError(op, ctx.Err()), true
	}
	return nil, false
}

// capWarnings keeps a tree's warnings within daemonv1.MaxTreeWarnings:
// the first ones, then how many more entries were dropped. A tree of a
// hundred thousand submodules is answered with a thousand lines, not a
// hundred thousand.
func capWarnings(w []string) []string {
	if len(w) <= daemonv1.MaxTreeWarnings {
		return w
	}
	keep := daemonv1.MaxTreeWarnings - 1
	return append(w[:keep:keep], fmt.Sprintf("dropped %d more entries (not listed)", len(w)-keep))
}

func (tr *treeReader) warn(format string, args ...any) {
	tr.warnings = append(tr.warnings, fmt.Sprintf(format, args...))
}

// fail maps an internal failure to a safe error.
func (tr *treeReader) fail(ctx context.Context, err error) error {
	if safe, ok := passSafe(ctx, tr.op, err); ok {
		return safe
	}
	tr.log.Error("forge: reading the fetched tree failed", "err", err)
	return newError(tr.op, ErrUnavailable, "reading the fetched tree failed")
}

// list runs ls-tree and records every entry, enforcing the files and depth
// bounds as entries stream in.
func (tr *treeReader) list(ctx context.Context, commit string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := tr.g.gitCmd(ctx, tr.dir, tr.home, nil, "ls-tree", "-r", "-l", "-z", "--full-tree", commit)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	stderr := &boundedBuffer{max: maxStderr}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	perr := tr.parseListing(bufio.NewReaderSize(stdout, maxTreeRecord))
	if perr != nil {
		cancel() // stop git early: the tree is refused anyway
	}
	werr := cmd.Wait()
	if perr != nil {
		return perr
	}
	if werr != nil {
		return fmt.Errorf("ls-tree: %w: %s", werr, stderr.String())
	}
	return nil
}

func (tr *treeReader) parseListing(r *bufio.Reader) error {
	for {
		rec, err := r.ReadSlice(0)
		if err == bufio.ErrBufferFull {
			// A path longer than any file system allows: skip the record.
			for err == bufio.ErrBufferFull {
				_, err = r.ReadSlice(0)
			}
			if err != nil {
				return fmt.Errorf("ls-tree: %w", err)
			}
			tr.count++
			if tr.count > tr.lim.MaxFiles {
				return &TooLargeError{Bound: "files", Limit: int64(tr.lim.MaxFiles)}
			}
			tr.warn("dropped invalid path: (over %d bytes)", maxTreeRecord)
			continue
		}
		if err == io.EOF && len(rec) == 0 {
			return nil
		}
		if err != nil {
			return fmt.Errorf("ls-tree: %w", err)
		}
		if err := tr.record(rec[:len(rec)-1]); err != nil {
			return err
		}
	}
}

// record handles one "<mode> SP <type> SP <oid> SP+ <size> TAB <path>".
func (tr *treeReader) record(rec []byte) error {
	meta, p, ok := bytes.Cut(rec, []byte{'\t'})
	f := strings.Fields(string(meta))
	if !ok || len(f) != 4 {
		return fmt.Errorf("ls-tree: malformed record")
	}
	return tr.add(f[0], f[1], f[2], f[3], string(p))
}

// add records one non-directory entry of a tree listing — a line of
// ls-tree, or an entry of the Gitea API's listing, which name the same
// things: its mode, object type, object id, size (of a blob) and path.
func (tr *treeReader) add(mode, typ, oid, sizeField, pth string) error {
	if ok, err := tr.admit(pth); !ok {
		return err
	}
	e := &entry{path: pth, oid: oid, size: -1}
	switch {
	case mode == "160000" && typ == "commit":
		tr.warn("dropped submodule: %s", pth)
		e.kind = kindSubmodule
	case typ != "blob":
		tr.warn("dropped unsupported entry (mode %s): %s", mode, pth)
		return nil
	case mode == "100644" || mode == "100755" || mode == "120000":
		size, err := strconv.ParseInt(sizeField, 10, 64)
		if err != nil || size < 0 {
			return fmt.Errorf("tree listing: malformed size")
		}
		e.size = size
		e.exec = mode == "100755"
		if mode == "120000" {
			e.kind = kindSymlink
		}
		tr.order = append(tr.order, e)
	default:
		tr.warn("dropped unsupported entry (mode %s): %s", mode, pth)
		return nil
	}
	tr.entries[pth] = e
	return tr.addDirs(pth)
}

// addDirs records the directories p lies in. Their number is bounded
// apart from the files': a hundred thousand files, each at the end of a
// chain of sixty directories of its own, are a small repository to git
// (it stores a repeated subtree once) and six million directories to
// every checkout of it.
func (tr *treeReader) addDirs(p string) error {
	for d := path.Dir(p); d != "."; d = path.Dir(d) {
		if tr.dirs[d] {
			break
		}
		if len(tr.dirs) >= tr.lim.MaxDirs {
			return &TooLargeError{Bound: "directories", Limit: int64(tr.lim.MaxDirs)}
		}
		tr.dirs[d] = true
	}
	return nil
}

// admit counts one entry of a listing or an archive against the bounds and
// says whether to keep it: a bound passed is an error (the whole tree is
// refused), a path that cannot be served is dropped with a warning.
func (tr *treeReader) admit(p string) (bool, error) {
	tr.count++
	if tr.count > tr.lim.MaxFiles {
		return false, &TooLargeError{Bound: "files", Limit: int64(tr.lim.MaxFiles)}
	}
	if len(p) > maxTreeRecord {
		tr.warn("dropped invalid path: (over %d bytes)", maxTreeRecord)
		return false, nil
	}
	if depth := strings.Count(p, "/") + 1; depth > tr.lim.MaxDepth {
		return false, &TooLargeError{Bound: "depth", Limit: int64(tr.lim.MaxDepth)}
	}
	if len(p) > daemonv1.MaxTreePathBytes {
		tr.warn("dropped invalid path: (over %d bytes)", daemonv1.MaxTreePathBytes)
		return false, nil
	}
	if !validPath(p) {
		tr.warn("dropped invalid path: %q", p)
		return false, nil
	}
	if _, dup := tr.entries[p]; dup {
		tr.warn("dropped duplicate path: %s", p)
		return false, nil
	}
	return true, nil
}

// validPath is the tree path rule the daemon applies to every tree
// (daemonv1.CheckTreePath: no empty, "." or ".." segment, no control
// character or backslash, valid UTF-8, at most 1,024 bytes and 255 per
// segment), so that no tree sent is refused for a path, plus no ".git"
// segment, which a checkout would refuse, and no U+FFFD: a forge's API
// spells a name's undecodable bytes so, and what they were cannot be told
// from it (both kinds drop such a path alike). Entries it refuses are
// dropped with a warning in the prepare answer.
func validPath(p string) bool {
	if !daemonv1.ValidTreePath(p) || strings.ContainsRune(p, utf8.RuneError) {
		return false
	}
	for _, seg := range strings.Split(p, "/") {
		if strings.EqualFold(seg, ".git") {
			return false
		}
	}
	return true
}

// send is one file to send: an entry, or a symlink copying its target.
type send struct {
	path   string
	target *entry
	link   bool
}

// blobSource hands over the contents of entries: a `git cat-file --batch`
// process for the git kind, the archive already in memory for gitea.
type blobSource interface {
	read(entries []*entry, fn func(*entry, []byte) error) error
	// streams: the blobs can be read again later (Tree.Stream), so a
	// streamed tree need not keep them.
	streams() bool
}

func (c *catFile) streams() bool { return true }

// build reads the tree's blobs from git cat-file and normalises it.
func (tr *treeReader) build(ctx context.Context) (*Tree, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cf, err := tr.startCatFile(ctx, cancel)
	if err != nil {
		return nil, err
	}
	defer cf.close()
	return tr.normalise(cf)
}

// normalise reads the symlink targets, resolves them, checks the byte
// bounds on the sizes the listing reported, and only then reads the blobs.
// Both forge kinds end here, so they yield the same tree for the same
// commit.
func (tr *treeReader) normalise(cf blobSource) (*Tree, error) {
	tr.dropShadowed()
	// Symlink targets first: they decide which files are sent.
	var links []*entry
	targets := make(map[string]string)
	for _, e := range tr.order {
		if e.kind != kindSymlink {
			continue
		}
		if e.size > maxSymlinkTarget {
			tr.warn("dropped dangling symlink: %s", e.path)
			continue
		}
		links = append(links, e)
	}
	err := cf.read(links, func(e *entry, data []byte) error {
		targets[e.path] = string(data)
		return nil
	})
	if err != nil {
		return nil, err
	}

	var sends []send
	for _, e := range tr.order {
		switch e.kind {
		case kindFile:
			sends = append(sends, send{path: e.path, target: e})
		case kindSymlink:
			t, ok := targets[e.path]
			if !ok {
				continue // already warned
			}
			if target, why := tr.resolve(e.path, t, targets); target != nil {
				sends = append(sends, send{path: e.path, target: target, link: true})
			} else {
				tr.warn("dropped %s: %s", why, e.path)
			}
		}
	}

	// Byte bounds, on sizes alone: nothing has been read yet.
	var total int64
	for _, s := range sends {
		if s.target.size > tr.lim.MaxFileBytes {
			return nil, &TooLargeError{Bound: "file_bytes", Limit: tr.lim.MaxFileBytes, Path: s.target.path}
		}
		total += s.target.size
		if total > tr.lim.MaxTotalBytes {
			return nil, &TooLargeError{Bound: "total_bytes", Limit: tr.lim.MaxTotalBytes}
		}
	}

	// Each distinct blob is read once. A streamed tree reads here only
	// those that may be git-lfs pointers, which decide what is sent.
	stream := tr.lim.Stream && cf.streams()
	var blobs []*entry
	seen := make(map[string]bool)
	for _, s := range sends {
		if stream && s.target.size >= maxLFSPointer {
			continue
		}
		if !seen[s.target.oid] {
			seen[s.target.oid] = true
			blobs = append(blobs, s.target)
		}
	}
	type content struct {
		data []byte
		sum  string
		lfs  bool
	}
	contents := make(map[string]*content, len(blobs))
	err = cf.read(blobs, func(e *entry, data []byte) error {
		sum := sha256.Sum256(data)
		contents[e.oid] = &content{data: data, sum: hex.EncodeToString(sum[:]), lfs: isLFSPointer(data)}
		return nil
	})
	if err != nil {
		return nil, err
	}

	t := &Tree{Files: make([]File, 0, len(sends))}
	var lazy []*entry
	for _, s := range sends {
		c, ok := contents[s.target.oid]
		switch {
		case !ok: // streamed: too large to be a pointer
			t.Files = append(t.Files, File{Path: s.path, Size: s.target.size, Executable: s.target.exec})
			lazy = append(lazy, s.target)
		case c.lfs && s.link:
			tr.warn("dropped symlink to git-lfs pointer: %s", s.path)
		case c.lfs:
			tr.warn("dropped git-lfs pointer: %s", s.path)
		default:
			t.Files = append(t.Files, File{Path: s.path, Data: c.data, Size: int64(len(c.data)), SHA256: c.sum, Executable: s.target.exec})
			lazy = append(lazy, nil)
		}
	}
	order := make([]int, len(t.Files))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(i, j int) bool { return t.Files[order[i]].Path < t.Files[order[j]].Path })
	files := make([]File, len(order))
	for i, o := range order {
		files[i] = t.Files[o]
	}
	t.Files = files
	if stream {
		t.lazy = make([]*entry, len(order))
		for i, o := range order {
			t.lazy[i] = lazy[o]
		}
	}
	sort.Strings(tr.warnings)
	t.Warnings = capWarnings(tr.warnings)
	if t.Warnings == nil {
		t.Warnings = []string{}
	}
	return t, nil
}

func isLFSPointer(data []byte) bool {
	if len(data) >= maxLFSPointer {
		return false
	}
	for _, p := range lfsPrefixes {
		if bytes.HasPrefix(data, p) {
			return true
		}
	}
	return false
}

// dropShadowed drops, with a warning, each file or symlink whose path is
// also a directory of the tree. git never writes such a tree, but a forge
// that does not check what is pushed can hold one, and no checkout could:
// the directory's files are sent, the entry is not (the daemon would
// refuse the whole tree). Both forge kinds end here.
func (tr *treeReader) dropShadowed() {
	kept := tr.order[:0]
	for _, e := range tr.order {
		if tr.dirs[e.path] {
			tr.warn("dropped a file that is also a directory: %s", e.path)
			delete(tr.entries, e.path)
			continue
		}
		kept = append(kept, e)
	}
	tr.order = kept
	// A submodule (dropped already, and said so) whose path is a
	// directory too is a directory to the symlinks that pass through it.
	for p, e := range tr.entries {
		if e.kind == kindSubmodule && tr.dirs[p] {
			delete(tr.entries, p)
		}
	}
}

// resolve follows the symlink at link (whose content is target) through the
// tree as a kernel would, component by component, and returns the regular
// file it ends at, or why it cannot be sent. Leaving the repository root at
// any point is "out of tree", even if a later ".." would come back.
func (tr *treeReader) resolve(link, target string, targets map[string]string) (*entry, string) {
	hops := 0
	var cur []string // the resolved directory, as components
	if d := path.Dir(link); d != "." {
		cur = strings.Split(d, "/")
	}
	queue := []string{}
	push := func(t string) bool {
		if t == "" || strings.HasPrefix(t, "/") || strings.ContainsRune(t, 0) {
			return false
		}
		queue = append(strings.Split(t, "/"), queue...)
		return true
	}
	if strings.HasPrefix(target, "/") {
		return nil, "symlink out of tree"
	}
	if !push(target) {
		return nil, "dangling symlink"
	}
	for len(queue) > 0 {
		c := queue[0]
		queue = queue[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(cur) == 0 {
				return nil, "symlink out of tree"
			}
			cur = cur[:len(cur)-1]
			continue
		}
		p := strings.Join(append(append([]string{}, cur...), c), "/")
		if e, ok := tr.entries[p]; ok {
			switch e.kind {
			case kindSymlink:
				hops++
				if hops > maxSymlinkHops {
					return nil, "symlink loop"
				}
				t, ok := targets[p]
				if !ok {
					return nil, "dangling symlink" // its own target was unreadable
				}
				if strings.HasPrefix(t, "/") {
					return nil, "symlink out of tree"
				}
				if !push(t) {
					return nil, "dangling symlink"
				}
				continue
			case kindFile:
				if len(queue) > 0 {
					return nil, "dangling symlink" // a file used as a directory
				}
				return e, ""
			case kindSubmodule:
				return nil, "symlink to submodule"
			}
		}
		if tr.dirs[p] {
			cur = append(cur, c)
			continue
		}
		return nil, "dangling symlink"
	}
	return nil, "symlink to directory"
}

// catFile is one `git cat-file --batch` process.
type catFile struct {
	cmd    interface{ Wait() error }
	kill   context.CancelFunc
	in     io.WriteCloser
	out    *bufio.Reader
	stderr *boundedBuffer
}

func (tr *treeReader) startCatFile(ctx context.Context, kill context.CancelFunc) (*catFile, error) {
	cmd := tr.g.gitCmd(ctx, tr.dir, tr.home, nil, "cat-file", "--batch")
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr := &boundedBuffer{max: maxStderr}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &catFile{cmd: cmd, kill: kill, in: in, out: bufio.NewReaderSize(out, 64<<10), stderr: stderr}, nil
}

// close ends git: with its input closed it exits once it has answered.
func (c *catFile) close() {
	_ = c.in.Close()
	_ = c.cmd.Wait()
}

// read asks for every entry's blob and hands each to fn. A writer goroutine
// feeds the requests so git never blocks on a full pipe; the answers must
// match what ls-tree said (object, type, size), and no more than that size
// is ever allocated.
func (c *catFile) read(entries []*entry, fn func(*entry, []byte) error) error {
	if len(entries) == 0 {
		return nil
	}
	werr := make(chan error, 1)
	go func() {
		w := bufio.NewWriter(c.in)
		for _, e := range entries {
			if _, err := w.WriteString(e.oid + "\n"); err != nil {
				werr <- err
				return
			}
		}
		werr <- w.Flush()
	}()
	err := c.readAnswers(entries, fn)
	if err != nil {
		// Unblock the writer, which may be stuck behind git's full output.
		c.kill()
		_ = c.in.Close()
		<-werr
		return err
	}
	return <-werr
}

func (c *catFile) readAnswers(entries []*entry, fn func(*entry, []byte) error) error {
	for _, e := range entries {
		hdr, err := c.out.ReadString('\n')
		if err != nil {
			return fmt.Errorf("cat-file: %w: %s", err, c.stderr.String())
		}
		f := strings.Fields(hdr)
		if len(f) != 3 || f[0] != e.oid || f[1] != "blob" || f[2] != strconv.FormatInt(e.size, 10) {
			return fmt.Errorf("cat-file: unexpected answer for %s", e.oid)
		}
		data := make([]byte, e.size)
		if _, err := io.ReadFull(c.out, data); err != nil {
			return fmt.Errorf("cat-file: %w", err)
		}
		if b, err := c.out.ReadByte(); err != nil || b != '\n' {
			return fmt.Errorf("cat-file: unterminated object %s", e.oid)
		}
		if err := fn(e, data); err != nil {
			return err
		}
	}
	return nil
}
