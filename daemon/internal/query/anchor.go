package query

import (
	"context"
	"errors"
	"io/fs"
	"path"
	"path/filepath"
	"slices"

	"github.com/hanzoai/lsp/daemon/internal/lsp"
	"github.com/hanzoai/lsp/daemon/internal/pool"
	"github.com/hanzoai/lsp/daemon/internal/uri"
)

// maxAnchorScan bounds the directory entries looked at to find an anchor.
const maxAnchorScan = 20000

var errAnchorFound = errors.New("found")

// anchorDocument makes sure the server has a document of its own language
// open before a workspace-wide request. typescript-language-server builds
// its projects only around open documents and, with none open, answers
// workspace/symbol with "No Project"; opening one file (the first, in path
// order, outside node_modules and hidden directories) gives it the
// project. A workspace without such a file needs no anchor.
func (r *Runner) anchorDocument(ctx context.Context, w *pool.Workspace, spec *pool.Spec, client *lsp.Client, pol uri.Policy) error {
	rel := w.Derived(anchorKey{spec.ID}, func() any { return findAnchor(w.Dir, spec.Extensions) }).(string)
	if rel == "" {
		return nil
	}
	u := lsp.DocumentURI(pol.FileURI(rel))
	client.MarkAnchor(u)
	if client.IsOpen(u) {
		return nil
	}
	doc, err := w.Document(rel, r.MaxDocument)
	if err != nil {
		return nil // an unreadable anchor is no anchor
	}
	if err := client.DidOpen(ctx, u, spec.LanguageID(rel), string(doc.Text)); err != nil {
		return err
	}
	client.CountAnchor(u)
	return nil
}

// AwaitLoad opens an anchor document on each running server of w and
// waits until each has finished loading the project (pool.AwaitLoad): a
// server that builds projects only around open documents (tsserver) loads
// now, and the prepare answer can say whether the project loaded. A
// server that reports its load's diagnosis itself (gopls: lsp.
// DiagnosisReports) gets none: an open would cut that report short.
// Failures are left to the answers that follow.
//
// With a focus (a repo-relative file the caller asks about first) it
// waits only for the server of that file, when one runs: a question about
// a shell script does not wait for gopls to load the module beside it.
// The others still get their anchors and load on; notAwaited names them.
// undiagnosed names the awaited servers that report their load's
// diagnosis (gopls) whose report had not ended when the wait did: what it
// finds reaches the answers, not this prepare's. queryFollows (an
// implicit prepare) waits for such a server's load alone, not for that
// diagnosis (pool.Workspace.AwaitLoad). The instances it saw load within
// its bound are recorded: their questions do not wait again (awaitLoad).
func (r *Runner) AwaitLoad(ctx context.Context, w *pool.Workspace, focus string, queryFollows bool) (notAwaited, undiagnosed []string) {
	running := w.Running()
	var only func(*pool.Spec) bool
	if fs, ok := r.Pool.SpecFor(focus); ok && focus != "" && slices.ContainsFunc(running, func(run pool.Running) bool { return run.Spec.ID == fs.ID }) {
		only = func(s *pool.Spec) bool { return s.ID == fs.ID }
	}
	r.anchor(ctx, w, running)
	// The instances awaited: all are recorded as loaded when the wait
	// ended within its bound, none when it did not (pool.LoadWait is the
	// pool's bound too, so it ends lctx).
	type instance struct {
		spec   *pool.Spec
		client *lsp.Client
	}
	var awaited []instance
	for _, run := range running {
		if only != nil && !only(run.Spec) {
			notAwaited = append(notAwaited, run.Spec.ID)
		} else if c, _, err := run.Server.Client(ctx); err == nil {
			awaited = append(awaited, instance{run.Spec, c})
		}
	}
	lctx, cancel := context.WithTimeout(ctx, pool.LoadWait)
	w.AwaitLoad(lctx, only, queryFollows)
	if lctx.Err() == nil {
		for _, a := range awaited {
			markLoaded(w, a.spec, a.client)
		}
	}
	cancel()
	for _, run := range running {
		if only != nil && !only(run.Spec) {
			continue
		}
		if c, _, err := run.Server.Client(ctx); err == nil && c.ReportsLoad() && !c.Diagnosed() {
			undiagnosed = append(undiagnosed, run.Spec.ID)
		}
	}
	return notAwaited, undiagnosed
}

// anchor opens an anchor document on each of running that does not
// report its load itself.
func (r *Runner) anchor(ctx context.Context, w *pool.Workspace, running []pool.Running) {
	pol := uri.Policy{Root: w.Dir}
	for _, run := range running {
		if c, _, err := run.Server.Client(ctx); err == nil && !c.ReportsLoad() {
			_ = r.anchorDocument(ctx, w, run.Spec, c, pol)
		}
	}
}

// StartDeferred starts the servers a focused prepare deferred
// (pool.Workspace.Warm) and gives each its anchor, as AwaitLoad gave the
// others: they load on while the caller asks about the focus.
func (r *Runner) StartDeferred(ctx context.Context, w *pool.Workspace, specs []*pool.Spec) {
	w.StartDeferred(ctx, specs)
	var started []pool.Running
	for _, run := range w.Running() {
		if slices.Contains(specs, run.Spec) {
			started = append(started, run)
		}
	}
	r.anchor(ctx, w, started)
}

// findAnchor is the first file under root, in path order, whose extension
// is one of exts, "" when there is none within the scan bound.
func findAnchor(root string, exts []string) string {
	found, seen := "", 0
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if seen++; seen > maxAnchorScan {
			return filepath.SkipAll
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (name == "node_modules" || name[0] == '.') {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || !slices.Contains(exts, path.Ext(name)) {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return nil
		}
		found = filepath.ToSlash(rel)
		return errAnchorFound
	})
	return found
}
