package deps

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// corpusDir is the real-repository corpus beside the clone (shared/corpus).
const corpusDir = "../../../../shared/corpus"

// openCorpus opens a snapshot's tar, skipping the test when the corpus is
// not beside the clone.
func openCorpus(t *testing.T, repo string) (*tar.Reader, func()) {
	t.Helper()
	f, err := os.Open(filepath.Join(corpusDir, repo+".tar.gz"))
	if errors.Is(err, os.ErrNotExist) {
		t.Skipf("the corpus snapshot %s is not beside the clone", repo)
	}
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(f)
	if err != nil {
		f.Close()
		t.Fatal(err)
	}
	return tar.NewReader(zr), func() { zr.Close(); f.Close() }
}

// corpusFile is one file of a corpus snapshot, by its path in the
// repository.
func corpusFile(t *testing.T, repo, name string) []byte {
	t.Helper()
	tr, done := openCorpus(t, repo)
	defer done()
	for {
		h, err := tr.Next()
		if err == io.EOF {
			t.Fatalf("%s has no %s", repo, name)
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == repo+"/"+name {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
}

// corpusFiles is a snapshot's regular files, by path in the repository,
// those keep accepts.
func corpusFiles(t *testing.T, repo string, keep func(string) bool) map[string]string {
	t.Helper()
	tr, done := openCorpus(t, repo)
	defer done()
	out := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		name, ok := strings.CutPrefix(h.Name, repo+"/")
		if !ok || h.Typeflag != tar.TypeReg || !keep(name) {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = string(b)
	}
}
