package forge

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os/exec"
	"path/filepath"
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

// countPacks wraps a forge so that n counts the bytes of its upload-pack
// answers.
func countPacks(n *atomic.Int64) func(http.Handler) http.Handler {
	return func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-upload-pack") {
				w = countingWriter{ResponseWriter: w, n: n}
			}
			h.ServeHTTP(w, r)
		})
	}
}

// TestFetchStopsAtTheBytesBound: a commit far larger than
// LSP_TREE_MAX_BYTES is not downloaded whole before its 413: git is killed
// once what has arrived passes the bound. Before, the whole 32 MiB pack
// came down first.
func TestFetchStopsAtTheBytesBound(t *testing.T) {
	var sent atomic.Int64
	fx := newFixture(t, countPacks(&sent))
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

// TestResolveOlderSHAStopsAtTheBound: proving that a commit which is no ref
// tip is reachable runs before the payment gate, for any caller who can see
// the repository. On a forge that neither filters nor serves commits by sha
// (stock git http-backend) the proof is every branch's whole history, which
// used to come down whole. It now stops at packBound of the limits in force
// with a "history" TooLargeError (413), which the cache keeps; the tip and a
// repository whose history fits still resolve, and Fetch, after the gate,
// stops at the same bound.
func TestResolveOlderSHAStopsAtTheBound(t *testing.T) {
	must := musts(t)
	var sent atomic.Int64
	fx := newFixture(t, countPacks(&sent))
	old := must(devforge.CreateRepo(fx.root, "acme", "history", map[string]string{"a.go": "package a\n"}, "old"))
	// Random blobs have no deltas: spare the forge looking for them.
	gitIn(t, filepath.Join(fx.root, "acme", "history.git"), "config", "core.bigFileThreshold", "256k")
	const commits, blob = 32, 1 << 20
	var tip string
	for i := range commits {
		b := make([]byte, blob)
		_, _ = rand.Read(b) // incompressible: the history weighs commits × blob
		tip = must(devforge.CreateRepo(fx.root, "acme", "history", map[string]string{"a.go": "package a\n", "blob.bin": string(b)}, fmt.Sprint("blob ", i)))
	}
	for _, repo := range []string{"history", "app"} {
		if err := fx.forge.SetAllowReachableSHA1InWant("acme", repo, false); err != nil {
			t.Fatal(err)
		}
		if err := fx.forge.SetAllowFilter("acme", repo, false); err != nil {
			t.Fatal(err)
		}
	}
	// Every tree of the history fits these limits; the history does not.
	lim := Limits{MaxFiles: 10, MaxTotalBytes: 2 << 20}
	bound := packBound(lim.withDefaults()) // about 3 MiB
	f := NewGit(fx.server.URL, fx.client, "", lim, slog.New(slog.NewTextHandler(fx.logs, nil)))
	ctx := context.Background()
	wantHistory := func(what string, err error) {
		t.Helper()
		var tl *TooLargeError
		if !errors.As(err, &tl) || tl.Bound != "history" || tl.Limit != bound {
			t.Fatalf("%s: error = %v; want TooLargeError{history, %d}", what, err, bound)
		}
		if msg := err.Error(); !strings.Contains(msg, "bytes of history") || strings.Contains(msg, fx.server.URL) {
			t.Fatalf("%s: message %q does not say why, or says too much", what, msg)
		}
	}

	cached := NewCache(f, time.Minute, time.Minute, nil)
	_, err := cached.Resolve(ctx, bearer(readerToken), "acme", "history", mustRev(t, old))
	wantHistory("Resolve(old sha)", err)
	t.Logf("%d MiB of history, %d byte bound: the forge sent %.1f MiB", commits*blob>>20, bound, float64(sent.Load())/(1<<20))
	if sent.Load() > commits*blob/2 {
		t.Fatalf("the forge sent %d bytes of a %d byte history over a %d byte bound", sent.Load(), commits*blob, bound)
	}
	// The cache keeps the answer: asking again downloads nothing.
	before := sent.Load()
	_, err = cached.Resolve(ctx, bearer(readerToken), "acme", "history", mustRev(t, old))
	wantHistory("cached Resolve, again", err)
	if sent.Load() != before {
		t.Fatalf("a cached answer downloaded %d bytes", sent.Load()-before)
	}

	// After the gate, Fetch reaches the old commit through the same
	// history, and stops at the same bound.
	_, err = f.Fetch(ctx, bearer(readerToken), "acme", "history", old, lim)
	wantHistory("Fetch(old sha)", err)

	// The tip needs no proof, and its tree is within lim.
	if got, err := f.Resolve(ctx, bearer(readerToken), "acme", "history", mustRev(t, tip)); err != nil || got != tip {
		t.Fatalf("Resolve(tip) = %q, %v; want %q", got, err, tip)
	}
	if tree, err := f.Fetch(ctx, bearer(readerToken), "acme", "history", tip, lim); err != nil || len(tree.Files) != 2 {
		t.Fatalf("Fetch(tip) = %v, %v; want 2 files", tree, err)
	}
	// A repository whose history fits proves an old sha as before.
	if got, err := f.Resolve(ctx, bearer(readerToken), "acme", "app", mustRev(t, fx.c0)); err != nil || got != fx.c0 {
		t.Fatalf("Resolve(small repository, old sha) = %q, %v; want %q", got, err, fx.c0)
	}
	// A forge that serves commits by sha sends the old commit's small tree.
	if err := fx.forge.SetAllowReachableSHA1InWant("acme", "history", true); err != nil {
		t.Fatal(err)
	}
	before = sent.Load()
	if got, err := f.Resolve(ctx, bearer(readerToken), "acme", "history", mustRev(t, old)); err != nil || got != old {
		t.Fatalf("Resolve(old sha, served by sha) = %q, %v; want %q", got, err, old)
	}
	if n := sent.Load() - before; n > blob {
		t.Fatalf("a proof by sha of a small commit downloaded %d bytes", n)
	}
}

// TestResolveOlderSHAManyTags: the proof of an older sha on a forge that
// serves no commit by sha fetches the tips, and git writes each branch and
// tag as a file of its own: thousands of tags on one commit make a pack of
// a few kilobytes and a block per tag on disk. The fetch's bound counts
// the whole repository's disk, not only its objects, so such a proof
// stops at it (413 history) instead of writing one file per tag.
func TestResolveOlderSHAManyTags(t *testing.T) {
	must := musts(t)
	fx := newFixture(t, nil)
	old := must(devforge.CreateRepo(fx.root, "acme", "tags", map[string]string{"a.go": "package a\n"}, "old"))
	tip := must(devforge.CreateRepo(fx.root, "acme", "tags", map[string]string{"a.go": "package a\n\nvar X int\n"}, "tip"))
	bare := filepath.Join(fx.root, "acme", "tags.git")
	var refs strings.Builder
	const tags = 3000 // 12 MiB in 4 KiB blocks, against a bound of about 3 MiB
	for i := range tags {
		fmt.Fprintf(&refs, "create refs/tags/t%d %s\n", i, tip)
	}
	cmd := exec.Command("git", "update-ref", "--stdin")
	cmd.Dir, cmd.Stdin = bare, strings.NewReader(refs.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git update-ref: %v: %s", err, out)
	}
	gitIn(t, bare, "pack-refs", "--all")
	if err := fx.forge.SetAllowReachableSHA1InWant("acme", "tags", false); err != nil {
		t.Fatal(err)
	}
	if err := fx.forge.SetAllowFilter("acme", "tags", false); err != nil {
		t.Fatal(err)
	}
	lim := Limits{MaxFiles: 10, MaxTotalBytes: 2 << 20}
	bound := packBound(lim.withDefaults())
	f := NewGit(fx.server.URL, fx.client, "", lim, slog.New(slog.NewTextHandler(fx.logs, nil)))
	_, err := f.Resolve(context.Background(), bearer(readerToken), "acme", "tags", mustRev(t, old))
	var tl *TooLargeError
	if !errors.As(err, &tl) || tl.Bound != "history" || tl.Limit != bound {
		t.Fatalf("Resolve(old sha) with %d tags: %v; want TooLargeError{history, %d}", tags, err, bound)
	}
	// The tip needs no proof.
	if got, err := f.Resolve(context.Background(), bearer(readerToken), "acme", "tags", mustRev(t, tip)); err != nil || got != tip {
		t.Fatalf("Resolve(tip) = %q, %v", got, err)
	}
}
