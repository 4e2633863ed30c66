package forge

import (
	"context"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// maxContainingRefs bounds how many refs containing a commit are considered
// when choosing the shallowest one to fetch it through.
const maxContainingRefs = 16

// tips are the refspecs of a "fetch by the refs" fallback.
var tips = []string{"+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"}

// Fetch implements Forge.
func (g *gitForge) Fetch(ctx context.Context, cred Credential, owner, repo, commit string, lim Limits) (*Tree, error) {
	const op = "fetch"
	if !isFullSHA(commit) {
		return nil, newError(op, ErrBadRev, "commit must be a full lowercase sha")
	}
	auth, err := g.check(op, cred, owner, repo)
	if err != nil {
		return nil, err
	}
	lim = lim.withDefaults()
	log := g.log.With("op", op, "owner", owner, "repo", repo, "commit", commit)
	f := &fetcher{g: g, op: op, log: log, secrets: cred.secrets(), auth: auth, url: g.repoURL(owner, repo), commit: commit, lim: lim, maxPack: packBound(lim)}
	if f.home, err = os.MkdirTemp("", "lsp-forge-"); err != nil {
		log.Error("forge: temp dir", "err", err)
		return nil, newError(op, ErrNoRoom, "no room to fetch")
	}
	// A streamed tree reads its blobs from the fetch after Fetch returns:
	// it removes the fetch when it is closed.
	kept := false
	defer func() {
		if !kept {
			os.RemoveAll(f.home)
		}
	}()
	keep := func(t *Tree, err error) (*Tree, error) {
		if err == nil && t.read != nil {
			kept = true
			home := f.home
			t.release = func() { os.RemoveAll(home) }
		}
		return t, err
	}

	// One cheap round trip first: it answers "not found" without starting
	// git, and says which hash and which fetch options the forge has.
	adv, err := g.advertise(ctx, op, log, f.secrets, auth, f.url, noRefs)
	if err != nil {
		return nil, err
	}
	if !matchesFormat(commit, adv.objectFormat()) {
		return nil, newError(op, ErrNotFound, revNotFound)
	}

	// What this caller's proof of the commit downloaded (reachable): the
	// tree, or history holding it.
	if h := held.take(heldKey(auth, f.url, commit)); h != nil {
		os.RemoveAll(f.home)
		f.home = h.home
		log.Debug("forge: the tree comes from the proof's download")
		return keep(g.readTree(ctx, op, log, f.home, h.dir, commit, lim))
	}

	// By commit, over protocol v0 so the forge checks reachability; a tip is
	// always served, an older commit when the forge allows it.
	// One commit, no history: its pack can only be larger than packBound if
	// the tree is over lim, so passing it is the tree's bytes bound.
	dir, ferr := f.fetch(ctx, "bycommit", 0, overTree, "--depth=1", f.url, commit)
	switch {
	case ferr == nil:
		return keep(g.readTree(ctx, op, log, f.home, dir, commit, lim))
	case ferr != errRefused:
		return nil, ferr
	}

	// By the refs: find a ref that contains the commit, then fetch that ref
	// just deep enough to hold it. Both downloads carry history, which no
	// tree bound limits: they stop at the same packBound (see fetcher).
	var extra []string
	if adv.filter() {
		extra = []string{"--filter=tree:0"} // commits only: enough to find the path
	}
	dir, err = f.fetch(ctx, "tips", 2, overHistory, append(extra, f.url, tips[0], tips[1])...)
	if err != nil {
		return nil, f.notRefused(err)
	}
	refs, err := f.containing(ctx, dir)
	if err != nil {
		return nil, err
	}
	if !adv.filter() {
		// The forge sent everything: the tree is already here.
		return keep(g.readTree(ctx, op, log, f.home, dir, commit, lim))
	}
	best, bestDepth := "", int64(-1)
	for _, r := range refs {
		out, _, err := g.output(ctx, dir, f.home, 64, "rev-list", "--count", "--ancestry-path", commit+".."+r)
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
		if err == nil && (bestDepth < 0 || n < bestDepth) {
			best, bestDepth = r, n
		}
	}
	if ctx.Err() != nil {
		return nil, lateError(op, ctx.Err())
	}
	if best == "" {
		return nil, newError(op, ErrNotFound, revNotFound)
	}
	// The tips' commits are no longer needed: one download on disk at a time.
	_ = os.RemoveAll(dir)
	// Shallow depth counts the tip as 1, and the path from best to commit
	// is at most bestDepth commits long.
	depth := "--depth=" + strconv.FormatInt(bestDepth+1, 10)
	dir, err = f.fetch(ctx, "byref", 2, overHistory, depth, f.url, best)
	if err != nil {
		return nil, f.notRefused(err)
	}
	return keep(g.readTree(ctx, op, log, f.home, dir, commit, lim))
}

// reachable confirms that sha, which is no ref tip, is reachable from the
// forge's refs with the caller's credential, downloading as little as the
// forge allows: one commit object when it serves reachable commits by sha,
// else the history of the tips without trees or blobs when it filters.
//
// It runs before the payment gate, for any caller who can see the
// repository, so every download stops at packBound(g.lim), the most a
// tree the service accepts can weigh: a proof never costs more than the
// prepare it may lead to. Where the forge filters, a proof is commits only
// (a few hundred bytes each: millions of commits fit); where it does not,
// a fetch by sha brings the commit's tree (over the bound only when the
// tree is over lim: "total_bytes"), and the tips' fallback brings every
// branch's whole history, which the bound cuts short ("history"). Such
// a commit stays reachable by a branch or tag, and by sha on a forge that
// serves commits by sha.
func (g *gitForge) reachable(ctx context.Context, log *slog.Logger, cred Credential, auth, repoURL, sha string, filter bool) error {
	const op = "resolve"
	release, err := takeProofSlot(ctx)
	if err != nil {
		return err
	}
	defer release()
	f := &fetcher{g: g, op: op, log: log, secrets: cred.secrets(), auth: auth, url: repoURL, commit: sha, lim: g.lim, maxPack: packBound(g.lim)}
	if f.home, err = os.MkdirTemp("", "lsp-forge-"); err != nil {
		log.Error("forge: temp dir", "err", err)
		return newError(op, ErrUnavailable, "no room to check the commit")
	}
	// Unfiltered, a proof downloads what the fetch after the payment gate
	// needs: it is held for that fetch (heldDownloads) rather than removed.
	kept := ""
	defer func() {
		if kept != "" {
			held.put(heldKey(auth, repoURL, sha), f.home, kept)
		} else {
			os.RemoveAll(f.home)
		}
	}()

	var extra []string
	if filter {
		extra = []string{"--filter=tree:0"}
	}
	dir, err := f.fetch(ctx, "bycommit", 0, overTree, append(extra, "--depth=1", repoURL, sha)...)
	switch {
	case err == nil:
		out, _, terr := g.output(ctx, dir, f.home, 64, "cat-file", "-t", sha)
		if ctx.Err() != nil {
			// Cut short, not absent: a not-found would be cached.
			return lateError(op, ctx.Err())
		}
		if terr != nil || strings.TrimSpace(out) != "commit" {
			return newError(op, ErrNotFound, revNotFound)
		}
		if !filter {
			kept = dir
		}
		return nil
	case err != errRefused:
		return err
	}
	// Refused: the forge serves no commit by sha, or this one is none.
	// Only the tips' history can say which, and it is the dearest download
	// a caller can ask for before paying.
	if err := allowHistory(ctx); err != nil {
		return err
	}
	dir, err = f.fetch(ctx, "tips", 2, overHistory, append(extra, repoURL, tips[0], tips[1])...)
	if err != nil {
		return f.notRefused(err)
	}
	if _, err = f.containing(ctx, dir); err == nil && !filter {
		kept = dir
	}
	return err
}

// fetcher runs the git fetches of one operation in its own temporary home.
type fetcher struct {
	g       *gitForge
	op      string
	log     *slog.Logger
	secrets []string
	auth    string
	url     string
	commit  string
	home    string // temporary; holds the repositories and is git's HOME
	// maxPack bounds every fetch: git is killed once the objects on disk
	// pass it, and the fetch is a TooLargeError. Every operation sets it to
	// packBound of the limits in force (positive, as lim has its defaults).
	maxPack int64
	lim     Limits
}

// packBound is the most a depth-1 pack of a tree within lim can weigh: the
// files' bytes (zlib never grows data by more than a fraction), the tree
// objects of MaxFiles entries, and slack.
//
// It is also the bound of every other download of this package, those
// that carry history (a reachability proof, the tips, a ref deep enough to
// hold a commit): no tree bound limits history, and the largest tree the
// service accepts is what the operator has agreed one request may make it
// download and hold on disk (once: a fetch's earlier download is removed).
func packBound(lim Limits) int64 {
	return lim.MaxTotalBytes + lim.MaxTotalBytes/32 + int64(lim.MaxFiles)*128 + 1<<20
}

// overBound says what passing maxPack means for one fetch.
type overBound uint8

const (
	// overTree: a depth-1 fetch of one commit without a filter; its pack
	// is its tree, so the tree is over lim's total bytes.
	overTree overBound = iota
	// overHistory: a fetch that carries history; reaching the commit
	// would take more than maxPack.
	overHistory
)

// tooLarge is the error of a fetch that passed maxPack.
func (f *fetcher) tooLarge(over overBound) error {
	if over == overTree {
		return &TooLargeError{Bound: "total_bytes", Limit: f.lim.MaxTotalBytes}
	}
	return &TooLargeError{Bound: "history", Limit: f.maxPack}
}

// fetchSize is the disk a fetch's repository takes: its objects' bytes,
// and the allocated blocks of every other file under dir. Not only its
// objects: a fetch of the tips writes one file per branch and tag under
// refs/ (a loose ref takes a block), and a repository of a million tags
// on one commit sends a pack of a few kilobytes. Objects count by size, as
// a pack being written may have blocks allocated ahead of it (XFS).
func fetchSize(dir string) int64 {
	objects := filepath.Join(dir, "objects") + string(filepath.Separator)
	var n int64
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && !strings.HasPrefix(p, objects) {
			n += st.Blocks * 512
		} else {
			n += fi.Size()
		}
		return nil
	})
	return n
}

// watchPack polls the disk dir takes while a fetch runs and calls over
// once it passes bound. It returns when stop is closed. The poll waits
// four times as long as its last walk took, so that walking many refs
// does not become the work, within 20 ms and 1 s.
func watchPack(dir string, bound int64, over func(), stop <-chan struct{}) {
	wait := 20 * time.Millisecond
	for {
		select {
		case <-stop:
			return
		case <-time.After(wait):
		}
		start := time.Now()
		if fetchSize(dir) > bound {
			over()
			return
		}
		wait = min(max(20*time.Millisecond, 4*time.Since(start)), time.Second)
	}
}

// errRefused is internal: the forge will not serve the commit by sha.
var errRefused = newError("fetch", ErrNotFound, revNotFound)

// fetch creates a bare repository name under home and runs
// `git fetch args` in it over protocol version proto, stopping it once
// its objects pass f.maxPack (what that means: over).
func (f *fetcher) fetch(ctx context.Context, name string, proto int, over overBound, args ...string) (string, error) {
	dir := filepath.Join(f.home, name)
	initArgs := []string{"init", "--quiet", "--bare", "--template="}
	if len(f.commit) == 64 {
		initArgs = append(initArgs, "--object-format=sha256")
	}
	if stderr, err := f.g.run(ctx, f.home, f.home, nil, nil, append(initArgs, dir)...); err != nil {
		f.log.Error("forge: git init failed", "err", err, "stderr", stderr)
		return "", newError(f.op, ErrUnavailable, "git is not usable")
	}
	full := append([]string{"fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--no-auto-gc"}, args...)
	runCtx, kill := context.WithCancel(ctx)
	defer kill()
	var tooLarge atomic.Bool
	stop := make(chan struct{})
	watched := make(chan struct{})
	if f.maxPack > 0 {
		go func() {
			defer close(watched)
			watchPack(dir, f.maxPack, func() { tooLarge.Store(true); kill() }, stop)
		}()
	} else {
		close(watched)
	}
	stderr, err := f.g.run(runCtx, dir, f.home, &remote{auth: f.auth, protocol: proto}, nil, full...)
	close(stop)
	<-watched
	// A fast forge can finish between two polls: what it left counts too,
	// so the bound does not depend on timing.
	if err == nil && f.maxPack > 0 && fetchSize(dir) > f.maxPack {
		tooLarge.Store(true)
	}
	if tooLarge.Load() {
		f.log.Info("forge: fetch stopped: its objects passed the download bound", "step", name, "bound", f.maxPack)
		return "", f.tooLarge(over)
	}
	if err == nil {
		return dir, nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return "", lateError(f.op, ctxErr)
	}
	stderr = redact(stderr, f.secrets)
	switch classify(stderr) {
	case failRefused:
		f.log.Debug("forge: fetch refused", "step", name, "stderr", stderr)
		return "", errRefused
	case failNotFound:
		f.log.Debug("forge: repository not visible to git", "step", name)
		return "", newError(f.op, ErrNotFound, repoNotFound)
	}
	if m := httpStatus.FindStringSubmatch(stderr); m != nil && m[1] == "429" {
		// git does not tell the forge's Retry-After.
		f.log.Warn("forge: git fetch rate limited", "step", name)
		return "", httpError(f.op, http.StatusTooManyRequests, nil)
	}
	f.log.Warn("forge: git fetch failed", "step", name, "err", err, "stderr", stderr)
	return "", newError(f.op, ErrUnavailable, "fetching from the forge failed")
}

// notRefused turns a refusal of a fetch by the refs (which only happens
// when the refs moved under us) into "revision not found".
func (f *fetcher) notRefused(err error) error {
	if err == errRefused {
		return newError(f.op, ErrNotFound, revNotFound)
	}
	return err
}

// containing lists (some of) the fetched refs whose history contains the
// commit, or answers "revision not found". It runs offline: a commit that is
// not in the fetched history is simply missing.
func (f *fetcher) containing(ctx context.Context, dir string) ([]string, error) {
	out, _, err := f.g.output(ctx, dir, f.home, 64<<10, "for-each-ref",
		"--count="+strconv.Itoa(maxContainingRefs), "--contains", f.commit,
		"--format=%(refname)", "refs/heads", "refs/tags")
	if ctxErr := ctx.Err(); ctxErr != nil {
		return nil, lateError(f.op, ctxErr)
	}
	refs := strings.Fields(out)
	if err != nil || len(refs) == 0 {
		return nil, newError(f.op, ErrNotFound, revNotFound)
	}
	return refs, nil
}
