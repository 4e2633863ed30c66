package forge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
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
	return c.statusError(resp.StatusCode)
}

func (c *giteaCall) malformed(why string) error {
	c.log.Warn("forge: " + why)
	return newError(c.op, ErrUnavailable, "forge sent a malformed answer")
}

// giteaBlobs is the gitea kind's blobSource. The first read downloads the
// archive (normalise reads symlink targets first, then the files it
// sends) and keeps the contents that match the listing; every read then
// fetches what is still missing through the raw-file API, checked the
// same way.
type giteaBlobs struct {
	ctx    context.Context
	c      *giteaCall
	tr     *treeReader
	base   string
	repo   string
	commit string

	kept    map[string][]byte // contents by object id, each checked
	fetched int               // files fetched one by one
}

// streams: contents come in one archive download, read into memory.
func (b *giteaBlobs) streams() bool { return false }

func (b *giteaBlobs) read(entries []*entry, fn func(*entry, []byte) error) error {
	if b.kept == nil {
		if err := b.download(); err != nil {
			return err
		}
	}
	var missing []*entry
	queued := make(map[string]bool)
	for _, e := range entries {
		if b.kept[e.oid] == nil && !queued[e.oid] {
			queued[e.oid] = true
			missing = append(missing, e)
		}
	}
	if b.fetched += len(missing); b.fetched > maxRawFetches {
		return &TooLargeError{Bound: "files_outside_archive", Limit: maxRawFetches}
	}
	if err := b.fetchRaw(missing); err != nil {
		return err
	}
	for _, e := range entries {
		if err := fn(e, b.kept[e.oid]); err != nil {
			return err
		}
	}
	return nil
}

// download reads the archive for the entries normalise kept.
func (b *giteaBlobs) download() error {
	want := make(map[string]*entry, len(b.tr.order))
	for _, e := range b.tr.order {
		want[e.path] = e
	}
	resp, err := b.c.get(b.ctx, b.base+"/archive/"+b.commit+".tar.gz", b.c.g.archive)
	if err != nil {
		return err
	}
	defer drain(resp.Body)
	lim := b.tr.lim
	kept, err := readArchive(resp.Body, b.repo, b.commit, want, lim.MaxTotalBytes, lim)
	if err != nil {
		return err
	}
	b.kept = kept
	return nil
}

// fetchRaw fetches each entry's bytes from
// GET {base}/raw/{path}?ref={commit}, at most rawFetchers at once.
func (b *giteaBlobs) fetchRaw(entries []*entry) error {
	if len(entries) == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(b.ctx)
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
				data, err := b.raw(ctx, e)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
					cancel()
				} else if err == nil {
					b.kept[e.oid] = data
				}
				mu.Unlock()
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
	return firstErr
}

// raw fetches one entry's bytes: exactly its size, hashing to its id (the
// raw API serves a blob as stored, a symlink's as its target).
func (b *giteaBlobs) raw(ctx context.Context, e *entry) ([]byte, error) {
	segs := strings.Split(e.path, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	resp, err := b.c.get(ctx, b.base+"/raw/"+strings.Join(segs, "/")+"?"+url.Values{"ref": {b.commit}}.Encode(), b.c.g.archive)
	if err != nil {
		return nil, err
	}
	defer drain(resp.Body)
	data, err := io.ReadAll(io.LimitReader(resp.Body, e.size+1))
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, lateError(b.c.op, ctxErr)
		}
		return nil, newError(b.c.op, ErrUnavailable, "forge connection failed")
	}
	if int64(len(data)) != e.size || blobID(e.oid, data) != e.oid {
		return nil, fmt.Errorf("%w: %s is not the listing's blob", errArchive, e.path)
	}
	return data, nil
}

// fetchTree is the gitea kind's Fetch once the call is set up: the
// listing, then normalise over the archive and the raw files.
func (c *giteaCall) fetchTree(ctx context.Context, owner, repo, commit string, lim Limits) (*Tree, error) {
	tr := &treeReader{op: c.op, log: c.log, lim: lim, entries: make(map[string]*entry), dirs: make(map[string]bool)}
	base := repoPath(owner, repo)
	if err := c.listTree(ctx, base, commit, tr); err != nil {
		return nil, err
	}
	t, err := tr.normalise(&giteaBlobs{ctx: ctx, c: c, tr: tr, base: base, repo: repo, commit: commit})
	var tooLarge *TooLargeError
	var oe *opError
	switch {
	case err == nil:
		return t, nil
	case errors.As(err, &tooLarge), errors.As(err, &oe):
		return nil, err
	case ctx.Err() != nil:
		return nil, lateError(c.op, ctx.Err())
	}
	c.log.Warn("forge: unusable archive", "err", redact(err.Error(), c.secrets))
	return nil, newError(c.op, ErrUnavailable, "forge sent an unusable archive")
}
