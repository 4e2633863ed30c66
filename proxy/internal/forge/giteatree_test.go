package forge

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/hanzoai/lsp/proxy/internal/devforge"
)

// attrsRepo is a tree whose archive (git archive) lacks two files, one of
// them a symlink, so that both come from the raw-file API.
func attrsRepo() map[string]string {
	return map[string]string{
		".gitattributes":  "/tests export-ignore\nlink export-ignore\n",
		"tests/a_test.go": "package tests\n",
		"main.go":         "package app\n",
		"link":            devforge.SymlinkPrefix + "main.go",
	}
}

// TestGiteaCancelledFetchFails: a caller gone between the archive and the
// raw files gets an error, never a tree whose files the archive lacked are
// empty and whose symlinks are "dangling" (the raw fetchers skipped every
// file once the context was done and said nothing; the push that follows
// runs detached, so such a tree was published and charged).
func TestGiteaCancelledFetchFails(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fx := newFixture(t, nil)
	commit := musts(t)(devforge.CreateRepo(fx.root, "acme", "attrs", attrsRepo(), "attrs"))
	// The caller leaves once the archive has arrived whole.
	client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := fx.client.Transport.RoundTrip(r)
		if err != nil || !strings.Contains(r.URL.Path, "/archive/") {
			return resp, err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		cancel()
		return resp, err
	})}
	tree, err := NewGitea(fx.server.URL, client, nil).Fetch(ctx, bearer(readerToken), "acme", "attrs", commit, Limits{})
	if err == nil {
		t.Fatalf("Fetch after its caller left = %s; want an error", describe(tree))
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestGiteaStreamedTreeFetchesWithinFetch: what the archive lacks is
// fetched before Fetch returns — within its download slot — and the push
// that streams the tree reads the spool alone.
func TestGiteaStreamedTreeFetchesWithinFetch(t *testing.T) {
	fx := newFixture(t, nil)
	files := attrsRepo()
	files["tests/big.txt"] = strings.Repeat("b", 4096) // too large to be an LFS pointer: streamed
	commit := musts(t)(devforge.CreateRepo(fx.root, "acme", "attrs", files, "attrs"))
	tree, err := fx.newGitea().Fetch(context.Background(), bearer(readerToken), "acme", "attrs", commit, Limits{Stream: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tree.Close()
	before := fx.forge.PackDownloads("acme", "attrs")
	got := map[string]string{}
	if err := tree.Stream(context.Background(), func(i int, data []byte) error {
		got[tree.Files[i].Path] = string(data)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if after := fx.forge.PackDownloads("acme", "attrs"); after != before {
		t.Errorf("streaming the tree downloaded %d more times from the forge", after-before)
	}
	if got["tests/big.txt"] != files["tests/big.txt"] || got["link"] != "package app\n" {
		t.Errorf("streamed %d files; big %d bytes, link %q", len(got), len(got["tests/big.txt"]), got["link"])
	}
}

// TestGiteaRawNotServed: a file the listing names that the raw-file API
// does not serve (Gitea answers 404 "repository is empty" for a
// repository whose first push it has not yet taken in) is the forge's
// trouble, not "no such repository".
func TestGiteaRawNotServed(t *testing.T) {
	fx := newFixture(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.Contains(r.URL.Path, "/raw/") {
				http.Error(w, `{"message":"repository is empty"}`, http.StatusNotFound)
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	commit := musts(t)(devforge.CreateRepo(fx.root, "acme", "attrs", attrsRepo(), "attrs"))
	_, err := fx.newGitea().Fetch(context.Background(), bearer(readerToken), "acme", "attrs", commit, Limits{})
	if !errors.Is(err, ErrUnavailable) {
		t.Errorf("Fetch = %v, want ErrUnavailable", err)
	}
}

// TestGiteaSpoolBounded: the spool holds at most what a tree may send —
// symlinks whose targets are too long to resolve are not kept (they were,
// up to the archive's raw bound, a gigabyte and more on disk per fetch).
func TestGiteaSpoolBounded(t *testing.T) {
	fx := newFixture(t, nil)
	files := map[string]string{"main.go": "package app\n"}
	for i := range 20 {
		files["l"+strings.Repeat("x", i)] = devforge.SymlinkPrefix + strings.Repeat("a/", 2500) + strings.Repeat("b", i)
	}
	commit := musts(t)(devforge.CreateRepo(fx.root, "acme", "links", files, "links"))
	g := fx.newGitea().(*giteaForge)
	ctx := context.Background()
	c, err := g.begin(ctx, "fetch", bearer(readerToken), "acme", "links", g.log)
	if err != nil {
		t.Fatal(err)
	}
	lim := Limits{MaxTotalBytes: 10 << 10}.withDefaults()
	tr := &treeReader{op: "fetch", log: g.log, lim: lim, entries: make(map[string]*entry), dirs: make(map[string]bool)}
	if err := c.listTree(ctx, repoPath("acme", "links"), commit, tr); err != nil {
		t.Fatal(err)
	}
	src := &giteaBlobs{ctx: ctx, c: c, tr: tr, base: repoPath("acme", "links"), repo: "links", commit: commit}
	defer src.close()
	tree, err := tr.normalise(src)
	if err != nil {
		t.Fatal(err)
	}
	if len(tree.Files) != 1 || src.end > lim.MaxTotalBytes {
		t.Errorf("%d files sent, %d bytes spooled; want main.go alone and at most %d", len(tree.Files), src.end, lim.MaxTotalBytes)
	}
}
