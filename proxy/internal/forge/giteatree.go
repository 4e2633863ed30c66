package forge

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// The gitea kind's tree: the forge's listing of the commit's tree decides
// what the tree holds, as ls-tree does for the git kind, and the archive
// brings the contents. `git archive` — what Gitea's archive is — follows
// the tree's .gitattributes: it leaves out every path marked export-ignore
// (a PHP package's tests/, often .gitattributes itself) and rewrites the
// $Format$ placeholders of one marked export-subst. So each content is
// checked against the listing's object id, and what the archive lacks or
// changed is fetched one file at a time through the raw-file API.
const (
	// treesPerPage is the page the listing asks for: Gitea's own default
	// and upper bound (setting.API.DefaultGitTreesPerPage). A forge set
	// lower pages further; the answer says whether more follow.
	treesPerPage = 1000
	// maxTreePageBytes bounds one page of the listing: a thousand entries
	// of long paths, each also named in an URL.
	maxTreePageBytes = 16 << 20
	// maxRawFetches bounds the files fetched one by one for one tree, and
	// rawFetchers how many at once.
	maxRawFetches = 10_000
	rawFetchers   = 8
)

type giteaTreePage struct {
	Entries    []giteaTreeEntry `json:"tree"`
	Truncated  bool             `json:"truncated"`
	Page       int              `json:"page"`
	TotalCount int              `json:"total_count"`
}

type giteaTreeEntry struct {
	Path string `json:"path"`
	Mode string `json:"mode"`
	Type string `json:"type"`
	Size int64  `json:"size"`
	SHA  string `json:"sha"`
}

// listTree records every entry of commit's tree from
// GET {base}/git/trees/{commit}?recursive=true, page by page, through
// treeReader.add as the git kind records ls-tree's lines: the same bounds,
// the same drops and warnings. Directories are implied by the paths, as
// for ls-tree -r; the listing's own count the directories bound too, so
// that a listing of nothing but trees cannot page on.
func (c *giteaCall) listTree(ctx context.Context, base, commit string, tr *treeReader) error {
	seen, trees := 0, 0
	for page := 1; ; page++ {
		var pg giteaTreePage
		q := url.Values{"recursive": {"true"}, "per_page": {strconv.Itoa(treesPerPage)}, "page": {strconv.Itoa(page)}}
		if err := c.getTreePage(ctx, base+"/git/trees/"+commit+"?"+q.Encode(), &pg); err != nil {
			return err
		}
		if pg.Page != page || len(pg.Entries) == 0 && pg.Truncated || seen+len(pg.Entries) > pg.TotalCount {
			return c.malformed("a tree listing's pages do not add up")
		}
		for _, e := range pg.Entries {
			if !isFullSHA(e.SHA) {
				return c.malformed("a tree listing names no object id")
			}
			if e.Type == "tree" {
				if trees++; trees > tr.lim.MaxDirs {
					return &TooLargeError{Bound: "directories", Limit: int64(tr.lim.MaxDirs)}
				}
				continue
			}
			if err := tr.add(e.Mode, e.Type, e.SHA, strconv.FormatInt(e.Size, 10), e.Path); err != nil {
				if tl := (*TooLargeError)(nil); errors.As(err, &tl) {
					return err
				}
				return c.malformed("a tree listing has an entry of no size")
			}
		}
		seen += len(pg.Entries)
		if !pg.Truncated {
			if seen != pg.TotalCount {
				return c.malformed("a tree listing's pages do not add up")
			}
			return nil
		}
	}
}

// getTreePage is getJSON for one page of a listing, whose bound is its
// own; a sha the forge does not hold is 400 to Gitea.
func (c *giteaCall) getTreePage(ctx context.Context, apiPath string, out *giteaTreePage) error {
	resp, err := c.send(ctx, http.MethodGet, apiPath, c.g.client)
	if err != nil {
		return err
	}
	defer drain(resp.Body)
	switch resp.StatusCode {
	case http.StatusOK:
		return c.decodeMax(ctx, resp, out, maxTreePageBytes)
	case http.StatusBadRequest:
		return newError(c.op, ErrNotFound, revNotFound)
	}
	return c.answerError(resp.StatusCode, resp.Header)
}

func (c *giteaCall) malformed(why string) error {
	c.log.Warn("forge: " + why)
	return newError(c.op, ErrUnavailable, "forge sent a malformed answer")
}

// giteaBlobs is the gitea kind's blobSource. The first read downloads the
// archive (normalise reads symlink targets first, then the files it
// reads before sending) and writes each content that is the listing's into
// a spool, an unlinked temporary file: the tree's bytes are never in the
// proxy's memory together, as for the git kind, whose blobs stay in the
// fetched repository. Every read then fetches what the spool still lacks
// through the raw-file API, into the spool too, checked the same way. A
// streamed tree reads the spool while it is pushed and closes it with the
// tree.
type giteaBlobs struct {
	ctx    context.Context
	c      *giteaCall
	tr     *treeReader
	base   string
	repo   string
	commit string

	spool   *os.File
	mu      sync.Mutex      // at, end (raw fetches write side by side)
	at      map[string]span // contents in the spool by object id, each checked
	end     int64           // the spool's written end
	fetched int             // files fetched one by one
}

type span struct{ off, n int64 }

// streams: the spool is read again when the tree is pushed.
func (b *giteaBlobs) streams() bool { return true }

func (b *giteaBlobs) read(entries []*entry, fn func(*entry, []byte) error) error {
	return b.readCtx(b.ctx, entries, fn)
}

func (b *giteaBlobs) readCtx(ctx context.Context, entries []*entry, fn func(*entry, []byte) error) error {
	if err := b.fetch(ctx, entries); err != nil {
		return err
	}
	for _, e := range entries {
		sp, ok := b.at[e.oid]
		if !ok {
			// fetch returns nil only with every entry in the spool.
			return fmt.Errorf("spool: %s missing", e.path)
		}
		data := make([]byte, sp.n)
		if _, err := b.spool.ReadAt(data, sp.off); err != nil {
			return fmt.Errorf("spool: %w", err)
		}
		if err := fn(e, data); err != nil {
			return err
		}
	}
	return nil
}

// fetch puts every entry's contents in the spool: the archive's on the
// first call, then what it lacked from the raw-file API.
func (b *giteaBlobs) fetch(ctx context.Context, entries []*entry) error {
	if b.spool == nil {
		if err := b.download(ctx); err != nil {
			return err
		}
	}
	var missing []*entry
	queued := make(map[string]bool)
	for _, e := range entries {
		if _, ok := b.at[e.oid]; !ok && !queued[e.oid] {
			queued[e.oid] = true
			missing = append(missing, e)
		}
	}
	if b.fetched += len(missing); b.fetched > maxRawFetches {
		return &TooLargeError{Bound: "files_outside_archive", Limit: maxRawFetches}
	}
	return b.fetchRaw(ctx, missing)
}

// close removes the spool.
func (b *giteaBlobs) close() {
	if b.spool != nil {
		_ = b.spool.Close()
	}
}

// download reads the archive for the entries normalise kept into the spool.
func (b *giteaBlobs) download(ctx context.Context) error {
	f, err := os.CreateTemp("", "lsp-forge-gitea-")
	if err != nil {
		b.c.log.Error("forge: temp file", "err", err)
		return newError(b.c.op, ErrNoRoom, "no room to fetch")
	}
	// Unlinked at once: it goes when it is closed, whatever happens.
	_ = os.Remove(f.Name())
	b.spool, b.at = f, make(map[string]span)
	want := make(map[string]*entry, len(b.tr.order))
	for _, e := range b.tr.order {
		want[e.path] = e
	}
	resp, err := b.c.get(ctx, b.base+"/archive/"+b.commit+".tar.gz", b.c.g.archive)
	if err != nil {
		return err
	}
	defer drain(resp.Body)
	// The spool holds at most what a tree may send: normalise refuses a
	// larger one, and drops a symlink whose target could not resolve.
	stored, most := int64(0), b.tr.lim.MaxTotalBytes
	return readArchive(resp.Body, b.repo, b.commit, want, b.tr.lim, func(e *entry, data io.Reader) (bool, error) {
		if stored+e.size > most || e.kind == kindSymlink && e.size > maxSymlinkTarget {
			return false, nil // not to be sent, or fetched if it is
		}
		off := b.end
		ok, err := b.write(e, data, off)
		if ok {
			b.at[e.oid], b.end = span{off, e.size}, off+e.size
			stored += e.size
		}
		return ok, err
	})
}

// write copies e's bytes from data into the spool at off — never more
// than e.size, its place — and reports whether they are e's blob: exactly
// its size (data ends there), hashing to its id.
func (b *giteaBlobs) write(e *entry, data io.Reader, off int64) (bool, error) {
	h := blobHash(e.oid, e.size)
	_, err := io.CopyN(io.MultiWriter(io.NewOffsetWriter(b.spool, off), h), data, e.size)
	if errors.Is(err, io.EOF) {
		return false, nil // shorter
	}
	if err != nil {
		var we *fs.PathError
		if errors.As(err, &we) {
			b.c.log.Error("forge: spool", "err", err)
			return false, newError(b.c.op, ErrNoRoom, "no room to fetch")
		}
		return false, err
	}
	var more [1]byte
	if n, _ := io.ReadFull(data, more[:]); n > 0 {
		return false, nil // longer
	}
	return hex.EncodeToString(h.Sum(nil)) == e.oid, nil
}

// fetchRaw fetches each entry's bytes from
// GET {base}/raw/{path}?ref={commit} into the spool, at most rawFetchers
// at once, each into a place of its own.
func (b *giteaBlobs) fetchRaw(ctx context.Context, entries []*entry) error {
	if len(entries) == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
	)
	next := make(chan *entry)
	for range min(rawFetchers, len(entries)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for e := range next {
				if err := b.raw(ctx, e); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
						cancel()
					}
					mu.Unlock()
				}
			}
		}()
	}
	for _, e := range entries {
		select {
		case next <- e:
		case <-ctx.Done():
		}
	}
	close(next)
	wg.Wait()
	if firstErr == nil && ctx.Err() != nil {
		// Cancelled from above while entries were still to be fetched:
		// those never were.
		return lateError(b.c.op, ctx.Err())
	}
	return firstErr
}

// raw fetches one entry's bytes (the raw API serves a blob as stored, a
// symlink's as its target) into the spool: exactly its size, hashing to
// its id, or the forge is not to be trusted with this tree.
func (b *giteaBlobs) raw(ctx context.Context, e *entry) error {
	segs := strings.Split(e.path, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	resp, err := b.c.send(ctx, http.MethodGet, b.base+"/raw/"+strings.Join(segs, "/")+"?"+url.Values{"ref": {b.commit}}.Encode(), b.c.g.archive)
	if err != nil {
		return err
	}
	defer drain(resp.Body)
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		// Its listing named the file a moment ago: not a repository the
		// caller cannot see (Gitea answers so for a repository whose
		// first push it has not yet taken in), and a retry may do.
		b.c.log.Warn("forge: the raw-file API did not serve a file of the listing", "path", e.path)
		return newError(b.c.op, ErrUnavailable, "forge did not serve a file its tree listing names")
	default:
		return b.c.answerError(resp.StatusCode, resp.Header)
	}
	b.mu.Lock()
	off := b.end
	b.end += e.size
	b.mu.Unlock()
	ok, err := b.write(e, resp.Body, off)
	switch {
	case err != nil && ctx.Err() != nil:
		return lateError(b.c.op, ctx.Err())
	case err != nil:
		var oe *opError
		if errors.As(err, &oe) {
			return err
		}
		return newError(b.c.op, ErrUnavailable, "forge connection failed")
	case !ok:
		return fmt.Errorf("%w: %s is not the listing's blob", errArchive, e.path)
	}
	b.mu.Lock()
	b.at[e.oid] = span{off, e.size}
	b.mu.Unlock()
	return nil
}

// fetchTree is the gitea kind's Fetch once the call is set up: the
// listing, then normalise over the archive and the raw files. A streamed
// tree keeps the spool until it is closed; every content it will read is
// in it before Fetch returns — fetched within Fetch's download slot and
// deadline, and a tree that needs too many raw files refused before a
// byte is pushed — so the push reads the spool alone.
func (c *giteaCall) fetchTree(ctx context.Context, owner, repo, commit string, lim Limits) (*Tree, error) {
	tr := &treeReader{op: c.op, log: c.log, lim: lim, entries: make(map[string]*entry), dirs: make(map[string]bool)}
	base := repoPath(owner, repo)
	if err := c.listTree(ctx, base, commit, tr); err != nil {
		return nil, err
	}
	src := &giteaBlobs{ctx: ctx, c: c, tr: tr, base: base, repo: repo, commit: commit}
	t, err := tr.normalise(src)
	if err == nil && t.lazy != nil {
		err = src.fetch(ctx, slices.DeleteFunc(slices.Clone(t.lazy), func(e *entry) bool { return e == nil }))
	}
	if err != nil {
		src.close()
		return nil, c.fetchError(ctx, err)
	}
	if t.lazy == nil {
		src.close()
		return t, nil
	}
	t.read = func(ctx context.Context, entries []*entry, fn func(*entry, []byte) error) error {
		var fnErr error
		err := src.readCtx(ctx, entries, func(e *entry, data []byte) error {
			fnErr = fn(e, data)
			return fnErr
		})
		if err != nil && fnErr == nil {
			return c.fetchError(ctx, err)
		}
		return err
	}
	t.release = src.close
	return t, nil
}

// fetchError maps a failure of the gitea kind's fetch to a safe error,
// logging what the caller is not told.
func (c *giteaCall) fetchError(ctx context.Context, err error) error {
	if safe, ok := passSafe(ctx, c.op, err); ok {
		return safe
	}
	c.log.Warn("forge: unusable archive", "err", redact(err.Error(), c.secrets))
	return newError(c.op, ErrUnavailable, "forge sent an unusable archive")
}
