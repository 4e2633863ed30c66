package forge

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
)

// catFileOf is a `git cat-file --batch` whose answers are canned: git's
// stdin is discarded.
func catFileOf(answers []byte) *catFile {
	return &catFile{kill: func() {}, in: discardCloser{io.Discard}, out: bufio.NewReader(bytes.NewReader(answers)), stderr: &boundedBuffer{max: maxStderr}}
}

type discardCloser struct{ io.Writer }

func (discardCloser) Close() error { return nil }

// boundedSource checks every blob a tree reads: of the size the listing
// gave, the symlink targets (the first read) within maxSymlinkTarget each,
// then the blobs within the file and total bounds.
type boundedSource struct {
	blobSource
	t     *testing.T
	lim   Limits
	reads int
}

func (b *boundedSource) read(entries []*entry, fn func(*entry, []byte) error) error {
	b.reads++
	var total int64
	return b.blobSource.read(entries, func(e *entry, data []byte) error {
		total += int64(len(data))
		switch {
		case int64(len(data)) != e.size:
			b.t.Fatalf("%s: %d bytes read for size %d", e.path, len(data), e.size)
		case b.reads == 1 && e.size > maxSymlinkTarget:
			b.t.Fatalf("read a symlink target of %d bytes", e.size)
		case b.reads > 1 && (e.size > b.lim.MaxFileBytes || total > b.lim.MaxTotalBytes):
			b.t.Fatalf("read %d bytes (%d in all) past the bounds", e.size, total)
		}
		return fn(e, data)
	})
}

// FuzzTreeListing: whatever git's `ls-tree -r -l -z` and `cat-file
// --batch` print, the listing's parser keeps only entries admit takes
// (valid paths, within the files, depth and directories bounds), reads no blob past
// the bounds, and the tree built from them is within them; it never
// panics. small reads the listing through a tiny buffer, as a record
// longer than maxTreeRecord is read.
func FuzzTreeListing(f *testing.F) {
	f.Add([]byte("100644 blob o1       5\ta.go\x00100755 blob o2 3\tb/x.sh\x00120000 blob o3 4\tl\x00160000 commit o4 -\tsub\x00"),
		[]byte("o3 blob 4\na.go\no1 blob 5\nhello\no2 blob 3\nhi!\n"), false)
	f.Add([]byte("100644 blob o1 1\t.git/config\x00100644 blob o1 1\ta\\b\x00100644 blob o1 1\tx/../y\x00100644 blob o1 1\ta//b\x00"+
		"100644 blob o1 1\tok\x00100644 blob o1 1\tok\x00040000 tree o5 -\tdir\x00100644 blob o1 1\ta/b/c/d\x00"),
		[]byte("o1 blob 1\nx\n"), false)
	f.Add([]byte("100644 blob o1\ta\x00100644 blob o1 -1\ta\x00100644 blob o1 +1\ta\x00100644 blob o1 1 a"), []byte("o1 blob 1\nx"), true)
	const pointer = "version https://git-lfs.github.com/spec/v1\noid sha256:0\n"
	f.Add([]byte(fmt.Sprintf("100644 blob o1 %d\tp\x00120000 blob o2 5000\tl\x00120000 blob o3 2\tm\x00", len(pointer))),
		[]byte(fmt.Sprintf("o3 blob 2\n..\no1 blob %d\n%s\n", len(pointer), pointer)), false)
	f.Add([]byte("100644 blob o1 200\tbig\x00100644 blob o2 1\tnot-after-big\x00"), []byte("o2 blob 1\nx\n"), false)
	f.Add([]byte("100644 blob o1 1\ta/b/c/d/e\x00"), []byte("o1 blob 1\nx\n"), false)
	lim := Limits{MaxFiles: 8, MaxTotalBytes: 256, MaxFileBytes: 128, MaxDepth: 4, MaxDirs: 4}
	f.Fuzz(func(t *testing.T, listing, answers []byte, small bool) {
		tr := &treeReader{op: "fetch", log: slog.New(slog.DiscardHandler), lim: lim, entries: make(map[string]*entry), dirs: make(map[string]bool)}
		size := maxTreeRecord
		if small {
			size = 16
		}
		if err := tr.parseListing(bufio.NewReaderSize(bytes.NewReader(listing), size)); err != nil {
			var tl *TooLargeError
			if errors.As(err, &tl) && tl.Bound != "files" && tl.Bound != "depth" && tl.Bound != "directories" {
				t.Fatalf("bound %q", tl.Bound)
			}
			return
		}
		if tr.count > lim.MaxFiles || len(tr.dirs) > lim.MaxDirs {
			t.Fatalf("%d entries, %d directories listed past the bounds", tr.count, len(tr.dirs))
		}
		for p, e := range tr.entries {
			if !validPath(p) || strings.Count(p, "/")+1 > lim.MaxDepth || e.path != p {
				t.Fatalf("admitted %q", p)
			}
			if e.kind != kindSubmodule && e.size < 0 {
				t.Fatalf("%s: size %d", p, e.size)
			}
		}
		tree, err := tr.normalise(&boundedSource{blobSource: catFileOf(answers), t: t, lim: lim})
		if err != nil {
			return
		}
		checkTreeBounds(t, tree, lim)
		for _, fl := range tree.Files {
			if e := tr.entries[fl.Path]; e == nil || e.kind == kindSubmodule {
				t.Fatalf("sent %q, which the listing did not admit as a file", fl.Path)
			}
		}
	})
}

// TestListingFileAlsoDirectory: a listing in which "a" is a file and the
// directory of "a/b" (a tree no checkout could hold, which a forge that
// does not check pushes may serve) sends a/b and drops a with a warning,
// as the archive kind does (TestReadArchiveEdges): the daemon refuses a
// tree holding both, and the repository could never be prepared.
func TestListingFileAlsoDirectory(t *testing.T) {
	lim := DefaultLimits()
	tr := &treeReader{op: "fetch", log: slog.New(slog.DiscardHandler), lim: lim, entries: make(map[string]*entry), dirs: make(map[string]bool)}
	if err := tr.parseListing(bufio.NewReader(strings.NewReader("100644 blob o1 1\ta\x00100644 blob o2 1\ta/b\x00"))); err != nil {
		t.Fatal(err)
	}
	tree, err := tr.normalise(&boundedSource{blobSource: catFileOf([]byte("o2 blob 1\ny\n")), t: t, lim: lim})
	if err != nil {
		t.Fatal(err)
	}
	checkTreeBounds(t, tree, lim)
	if len(tree.Files) != 1 || tree.Files[0].Path != "a/b" || string(tree.Files[0].Data) != "y" {
		t.Fatalf("files %+v, want a/b alone", tree.Files)
	}
	if want := []string{"dropped a file that is also a directory: a"}; !equalSlices(tree.Warnings, want) {
		t.Fatalf("warnings %q, want %q", tree.Warnings, want)
	}
}

// TestListingSubmoduleAlsoDirectory: a submodule whose path is also the
// directory of a file is dropped (and said so), and a symlink through
// that path reaches the file, as it would in a checkout.
func TestListingSubmoduleAlsoDirectory(t *testing.T) {
	lim := DefaultLimits()
	tr := &treeReader{op: "fetch", log: slog.New(slog.DiscardHandler), lim: lim, entries: make(map[string]*entry), dirs: make(map[string]bool)}
	listing := "160000 commit o4 -\ta\x00100644 blob o1 1\ta/b\x00120000 blob o3 3\tl\x00"
	if err := tr.parseListing(bufio.NewReader(strings.NewReader(listing))); err != nil {
		t.Fatal(err)
	}
	tree, err := tr.normalise(&boundedSource{blobSource: catFileOf([]byte("o3 blob 3\na/b\no1 blob 1\ny\n")), t: t, lim: lim})
	if err != nil {
		t.Fatal(err)
	}
	checkTreeBounds(t, tree, lim)
	var got []string
	for _, f := range tree.Files {
		got = append(got, f.Path+"="+string(f.Data))
	}
	if want := []string{"a/b=y", "l=y"}; !equalSlices(got, want) {
		t.Fatalf("files %q, want %q (warnings %q)", got, want, tree.Warnings)
	}
}
