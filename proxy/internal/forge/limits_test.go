package forge

import (
	"context"
	"crypto/rand"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/devforge"
)

// countingWriter counts the bytes the forge writes for pack downloads.
type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (w countingWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	w.n.Add(int64(n))
	return n, err
}

func (w countingWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// TestFetchStopsAtTheBytesBound: a commit far larger than
// LSP_TREE_MAX_BYTES is not downloaded whole before its 413: git is killed
// once what has arrived passes the bound. Before, the whole 32 MiB pack
// came down first.
func TestFetchStopsAtTheBytesBound(t *testing.T) {
	var sent atomic.Int64
	fx := newFixture(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-upload-pack") {
				w = countingWriter{ResponseWriter: w, n: &sent}
			}
			h.ServeHTTP(w, r)
		})
	})
	big := make([]byte, 32<<20)
	_, _ = rand.Read(big) // incompressible: the pack is as large as the file
	commit, err := devforge.CreateRepo(fx.root, "acme", "huge", map[string]string{"blob.bin": string(big), "a.go": "package a\n"}, "huge")
	if err != nil {
		t.Fatal(err)
	}
	f := fx.newForge("")
	lim := Limits{MaxFiles: 10, MaxTotalBytes: 1 << 20, MaxFileBytes: 64 << 20}
	start := time.Now()
	_, err = f.Fetch(context.Background(), bearer(readerToken), "acme", "huge", commit, lim)
	var tl *TooLargeError
	if !errors.As(err, &tl) || tl.Bound != "total_bytes" || tl.Limit != lim.MaxTotalBytes {
		t.Fatalf("Fetch error = %v; want TooLargeError{total_bytes}", err)
	}
	t.Logf("32 MiB commit, 1 MiB bound: refused after %v, the forge sent %.1f MiB", time.Since(start).Round(time.Millisecond), float64(sent.Load())/(1<<20))
	if sent.Load() > 16<<20 {
		t.Fatalf("the forge sent %d bytes of a commit over a 1 MiB bound", sent.Load())
	}
}
