package deps

import (
	"errors"
	"os"
	"testing"

	"github.com/hanzoai/lsp/daemon/internal/deps/depstest"
)

// corpusFiles is a corpus snapshot's files that keep accepts, skipping the
// test when the corpus is not beside the clone.
func corpusFiles(t *testing.T, repo string, keep func(string) bool) map[string]string {
	t.Helper()
	files, err := depstest.CorpusFiles(repo, keep)
	if errors.Is(err, os.ErrNotExist) {
		t.Skipf("the corpus snapshot %s is not beside the clone", repo)
	}
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// corpusFile is one file of a corpus snapshot.
func corpusFile(t *testing.T, repo, name string) []byte {
	t.Helper()
	files := corpusFiles(t, repo, func(n string) bool { return n == name })
	b, ok := files[name]
	if !ok {
		t.Fatalf("%s has no %s", repo, name)
	}
	return []byte(b)
}
