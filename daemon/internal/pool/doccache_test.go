package pool

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDocumentCacheBoundedByBytes: the per-workspace document cache keeps
// at most maxCachedDocBytes, not only maxCachedDocs documents (1,024
// documents of 8 MiB each would be 8 GiB held by one workspace).
func TestDocumentCacheBoundedByBytes(t *testing.T) {
	w := &Workspace{Dir: t.TempDir()}
	data := strings.Repeat("x", 7<<20)
	for i := range 12 {
		if err := os.WriteFile(filepath.Join(w.Dir, fmt.Sprintf("f%d", i)), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 12 {
		d, err := w.Document(fmt.Sprintf("f%d", i), 8<<20)
		if err != nil || len(d.Text) != len(data) {
			t.Fatalf("Document(f%d): %v", i, err)
		}
	}
	var held int
	w.docs.Range(func(_, v any) bool {
		held += len(v.(*Document).Text)
		return true
	})
	if held > maxCachedDocBytes || held == 0 {
		t.Fatalf("the document cache holds %d bytes; want some, at most %d", held, maxCachedDocBytes)
	}
}
