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
// want names by path, and returns those it holds, by object id. The tree
// itself is the forge's listing (giteaCall.listTree), not the archive:
// `git archive` follows the tree's .gitattributes, so a path marked
// export-ignore is missing from it and one marked export-subst has other
// bytes than its blob. So each content is kept only when it is what the
// listing says — the same kind of entry, the same size, bytes that hash to
// the entry's object id — and what is not kept is for the caller to fetch
// by itself. Entries the listing lacks are passed over. At most keep bytes
// of files are kept (the tree's byte bound: more cannot be sent anyway),
// and symlinks' targets.
//
// What is refused (errArchive): not gzip or tar, an entry outside the
// repository's directory, a global header naming another commit.
func readArchive(r io.Reader, repo, commit string, want map[string]*entry, keep int64, lim Limits) (map[string][]byte, error) {
	// The compressed bytes are bounded too: a stream of empty deflate
	// blocks decompresses to nothing, forever.
	compressed := &boundedReader{r: r, left: archiveRawLimit(lim) + 1<<20}
	gz, err := gzip.NewReader(compressed)
	if err != nil {
		return nil, fmt.Errorf("%w: not gzip", errArchive)
	}
	defer gz.Close()
	raw := &boundedReader{r: gz, left: archiveRawLimit(lim)}
	kept := make(map[string][]byte)
	if err := readEntries(tar.NewReader(raw), repo, commit, want, keep, kept); err != nil {
		if raw.over || compressed.over {
			return nil, &TooLargeError{Bound: "total_bytes", Limit: lim.MaxTotalBytes}
		}
		return nil, err
	}
	return kept, nil
}

func readEntries(tr *tar.Reader, repo, commit string, want map[string]*entry, keep int64, kept map[string][]byte) error {
	var prefix string
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
		if e == nil || kept[e.oid] != nil {
			continue
		}
		var data []byte
		switch {
		case hdr.Typeflag == tar.TypeReg && e.kind == kindFile:
			if hdr.Size != e.size || e.size > keep {
				continue
			}
			data = make([]byte, hdr.Size)
			if _, err := io.ReadFull(tr, data); err != nil {
				return fmt.Errorf("%w: %v", errArchive, err)
			}
		case hdr.Typeflag == tar.TypeSymlink && e.kind == kindSymlink:
			data = []byte(hdr.Linkname)
		default:
			continue
		}
		if blobID(e.oid, data) != e.oid {
			continue // export-subst, or not the listing's blob
		}
		if e.kind == kindFile {
			keep -= int64(len(data))
		}
		kept[e.oid] = data
	}
}

// blobID is the git object id of a blob holding data, in the object
// format of oid (SHA-1's 40 hex digits or SHA-256's 64).
func blobID(oid string, data []byte) string {
	var h hash.Hash
	if len(oid) == 64 {
		h = sha256.New()
	} else {
		h = sha1.New()
	}
	h.Write([]byte("blob " + strconv.Itoa(len(data)) + "\x00"))
	h.Write(data)
	return hex.EncodeToString(h.Sum(nil))
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
