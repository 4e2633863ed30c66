package forge

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path"
	"sort"
	"strconv"
	"strings"
)

// errArchive marks an archive that cannot be a `git archive` of the asked
// commit: not gzip, not tar, entries outside the repository's directory, or
// another commit. The forge sent it; the caller sees "forge unavailable".
var errArchive = errors.New("malformed archive")

// archiveRawLimit bounds the decompressed bytes read from an archive, which
// also bounds the time spent on one: the files' own bytes, plus headers and
// the extended records of long names for every entry, plus slack.
func archiveRawLimit(lim Limits) int64 {
	return lim.MaxTotalBytes + int64(lim.MaxFiles)*8192 + 4<<20
}

// readArchive reads a gzipped tar as `git archive --prefix=<repo>/ <commit>`
// writes it (what Gitea and Forgejo serve) and normalises it exactly as the
// git kind normalises the same commit's tree: the same entries are counted
// against the same bounds, symlinks follow the same rules, and the same
// warnings name what was dropped. lim must have its defaults applied.
//
// What `git archive` writes, and how it maps onto a git tree listing:
//   - a pax global header whose comment is the commit id (checked when
//     present: an archive of another commit is refused);
//   - the prefix directory first, then every entry under it in tree order;
//   - regular files with mode 0664 or 0775 (the executable bit survives);
//   - symlinks with their target as the link name;
//   - a directory for every tree, and an empty directory for a submodule:
//     an empty directory can only be a submodule, since git stores no empty
//     trees, so it is dropped with the git kind's "dropped submodule" warning.
//
// Contents are kept in memory only while the files seen stay within the
// byte bounds; past them the rest is only listed, so the verdict (413 naming
// the bound) is the one the git kind reaches from its listing.
func readArchive(r io.Reader, repo, commit string, lim Limits, log *slog.Logger) (*Tree, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	gz, err := gzip.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("%w: not gzip", errArchive)
	}
	defer gz.Close()
	raw := &boundedReader{r: gz, left: archiveRawLimit(lim)}
	a := &archiveReader{
		tr:       &treeReader{op: "fetch", log: log, lim: lim, entries: make(map[string]*entry), dirs: make(map[string]bool)},
		repo:     repo,
		commit:   commit,
		blobs:    make(memBlobs),
		hasChild: make(map[string]bool),
	}
	if err := a.read(tar.NewReader(raw)); err != nil {
		if raw.over {
			return nil, &TooLargeError{Bound: "total_bytes", Limit: lim.MaxTotalBytes}
		}
		return nil, err
	}
	if err := a.finish(); err != nil {
		return nil, err
	}
	return a.tr.normalise(a.blobs)
}

type archiveReader struct {
	tr     *treeReader
	repo   string
	commit string

	prefix   string // "<repo>/" as the forge spelled it
	blobs    memBlobs
	dirs     []string        // declared directories, valid paths only
	hasChild map[string]bool // directories some entry lives in
	stored   int64           // bytes of file contents kept so far
	over     bool            // a byte bound was passed: contents are no longer kept
	seq      int
}

// read walks the archive's entries.
func (a *archiveReader) read(tr *tar.Reader) error {
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			if a.prefix == "" {
				return fmt.Errorf("%w: empty", errArchive)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: %v", errArchive, err)
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			if c, ok := hdr.PAXRecords["comment"]; ok && c != a.commit {
				return fmt.Errorf("%w: it is the archive of another commit", errArchive)
			}
			continue
		}
		if a.prefix == "" {
			// The first entry is the repository's directory.
			name := strings.TrimSuffix(hdr.Name, "/")
			if hdr.Typeflag != tar.TypeDir || !strings.EqualFold(name, a.repo) {
				return fmt.Errorf("%w: entries are not under the repository's directory", errArchive)
			}
			a.prefix = name + "/"
			continue
		}
		rest, ok := strings.CutPrefix(hdr.Name, a.prefix)
		if !ok {
			return fmt.Errorf("%w: an entry is outside the repository's directory", errArchive)
		}
		if hdr.Typeflag == tar.TypeDir {
			rest = strings.TrimSuffix(rest, "/")
		}
		if rest == "" {
			return fmt.Errorf("%w: the repository's directory repeats", errArchive)
		}
		a.hasChild[path.Dir(rest)] = true
		if err := a.entry(tr, hdr, rest); err != nil {
			return err
		}
	}
}

// entry records one entry below the prefix, as record does for one line of
// ls-tree.
func (a *archiveReader) entry(r io.Reader, hdr *tar.Header, p string) error {
	t := a.tr
	if hdr.Typeflag == tar.TypeDir {
		// git lists no trees; an empty one is a submodule (see finish).
		if len(p) <= maxTreeRecord && validPath(p) {
			a.dirs = append(a.dirs, p)
		}
		return nil
	}
	if ok, err := t.admit(p); !ok {
		return err
	}
	a.seq++
	e := &entry{path: p, oid: "tar:" + strconv.Itoa(a.seq)}
	switch hdr.Typeflag {
	case tar.TypeReg: // the reader turns the old TypeRegA into TypeReg
		if hdr.Size < 0 {
			return fmt.Errorf("%w: negative size", errArchive)
		}
		e.size = hdr.Size
		e.exec = hdr.Mode&0o100 != 0
		if !a.over && (hdr.Size > t.lim.MaxFileBytes || a.stored+hdr.Size > t.lim.MaxTotalBytes) {
			// normalise reports the bound from the sizes alone, as the
			// git kind does; no file's contents need to be held now.
			a.over = true
			for _, f := range t.order {
				if f.kind == kindFile {
					delete(a.blobs, f.oid)
				}
			}
		}
		if !a.over {
			data := make([]byte, hdr.Size)
			if _, err := io.ReadFull(r, data); err != nil {
				return fmt.Errorf("%w: %v", errArchive, err)
			}
			a.stored += hdr.Size
			a.blobs[e.oid] = data
		}
	case tar.TypeSymlink:
		e.kind = kindSymlink
		e.size = int64(len(hdr.Linkname))
		a.blobs[e.oid] = []byte(hdr.Linkname)
	default:
		// git archive writes nothing else (no hard links, devices, FIFOs).
		t.warn("dropped unsupported entry (type %q): %s", hdr.Typeflag, p)
		return nil
	}
	t.order = append(t.order, e)
	t.entries[p] = e
	for d := path.Dir(p); d != "."; d = path.Dir(d) {
		if t.dirs[d] {
			break
		}
		t.dirs[d] = true
	}
	return nil
}

// finish turns empty directories into the submodules they stand for.
func (a *archiveReader) finish() error {
	t := a.tr
	sort.Strings(a.dirs)
	for _, d := range a.dirs {
		if a.hasChild[d] {
			continue
		}
		t.count++
		if t.count > t.lim.MaxFiles {
			return &TooLargeError{Bound: "files", Limit: int64(t.lim.MaxFiles)}
		}
		if depth := strings.Count(d, "/") + 1; depth > t.lim.MaxDepth {
			return &TooLargeError{Bound: "depth", Limit: int64(t.lim.MaxDepth)}
		}
		if _, dup := t.entries[d]; dup {
			continue
		}
		t.warn("dropped submodule: %s", d)
		t.entries[d] = &entry{path: d, kind: kindSubmodule, size: -1}
		for p := path.Dir(d); p != "."; p = path.Dir(p) {
			t.dirs[p] = true
		}
	}
	// A file that is also a directory is dropped in normalise, as for the
	// git kind.
	return nil
}

// memBlobs is a blobSource over contents already read, by entry oid.
type memBlobs map[string][]byte

// streams: an archive's contents are read once, into memory.
func (m memBlobs) streams() bool { return false }

func (m memBlobs) read(entries []*entry, fn func(*entry, []byte) error) error {
	for _, e := range entries {
		data, ok := m[e.oid]
		if !ok || int64(len(data)) != e.size {
			return fmt.Errorf("%w: contents of %s missing", errArchive, e.path)
		}
		if err := fn(e, data); err != nil {
			return err
		}
	}
	return nil
}

// boundedReader stops after left bytes and remembers that it did.
type boundedReader struct {
	r    io.Reader
	left int64
	over bool
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.left <= 0 {
		b.over = true
		return 0, errors.New("archive over its bound")
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	return n, err
}
