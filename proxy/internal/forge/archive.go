package forge

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
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
// writes it (what Gitea and Forgejo serve) for the contents of the entries
// want names by path, handing each to keep, which says whether it took
// it. The tree itself is the forge's listing (giteaCall.listTree), not the
// archive: `git archive` follows the tree's .gitattributes, so a path
// marked export-ignore is missing from it and one marked export-subst may
// have other bytes than its blob. So only a content of the same kind and
// size as the listing's entry is offered (keep checks the bytes against
// the entry's object id), and what is not kept is for the caller to fetch
// by itself. Entries the listing lacks are passed over.
//
// What is refused (errArchive): not gzip or tar, an entry outside the
// repository's directory, a global header naming another commit.
func readArchive(r io.Reader, repo, commit string, want map[string]*entry, lim Limits, keep func(e *entry, data io.Reader) (bool, error)) error {
	// The compressed bytes are bounded too: a stream of empty deflate
	// blocks decompresses to nothing, forever.
	compressed := &boundedReader{r: r, left: archiveRawLimit(lim) + 1<<20}
	gz, err := gzip.NewReader(compressed)
	if err != nil {
		return fmt.Errorf("%w: not gzip", errArchive)
	}
	defer gz.Close()
	raw := &boundedReader{r: gz, left: archiveRawLimit(lim)}
	if err := readEntries(tar.NewReader(raw), repo, commit, want, keep); err != nil {
		if raw.over || compressed.over {
			return &TooLargeError{Bound: "total_bytes", Limit: lim.MaxTotalBytes}
		}
		return err
	}
	return nil
}

func readEntries(tr *tar.Reader, repo, commit string, want map[string]*entry, keep func(*entry, io.Reader) (bool, error)) error {
	var prefix string
	taken := make(map[string]bool) // object ids kept
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			if prefix == "" {
				return fmt.Errorf("%w: empty", errArchive)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: %v", errArchive, err)
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			if c, ok := hdr.PAXRecords["comment"]; ok && c != commit {
				return fmt.Errorf("%w: it is the archive of another commit", errArchive)
			}
			continue
		}
		if prefix == "" {
			// The first entry is the repository's directory.
			name := strings.TrimSuffix(hdr.Name, "/")
			if hdr.Typeflag != tar.TypeDir || !strings.EqualFold(name, repo) {
				return fmt.Errorf("%w: entries are not under the repository's directory", errArchive)
			}
			prefix = name + "/"
			continue
		}
		p, ok := strings.CutPrefix(hdr.Name, prefix)
		if !ok {
			return fmt.Errorf("%w: an entry is outside the repository's directory", errArchive)
		}
		e := want[p]
		if e == nil || taken[e.oid] {
			continue
		}
		var data io.Reader
		switch {
		case hdr.Typeflag == tar.TypeReg && e.kind == kindFile && hdr.Size == e.size:
			data = tr
		case hdr.Typeflag == tar.TypeSymlink && e.kind == kindSymlink && int64(len(hdr.Linkname)) == e.size:
			data = strings.NewReader(hdr.Linkname)
		default:
			continue
		}
		ok, err = keep(e, data)
		if err != nil {
			return err
		}
		taken[e.oid] = ok
	}
}

// blobID is the git object id of a blob holding data, in the object
// format of oid (SHA-1's 40 hex digits or SHA-256's 64).
func blobID(oid string, data []byte) string {
	h := blobHash(oid, int64(len(data)))
	h.Write(data)
	return hex.EncodeToString(h.Sum(nil))
}

// blobHash is the hash of a git blob of size bytes in oid's object format,
// its header written: the blob's bytes follow.
func blobHash(oid string, size int64) hash.Hash {
	var h hash.Hash
	if len(oid) == 64 {
		h = sha256.New()
	} else {
		h = sha1.New()
	}
	h.Write([]byte("blob " + strconv.FormatInt(size, 10) + "\x00"))
	return h
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
