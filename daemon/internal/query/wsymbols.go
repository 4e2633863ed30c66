package query

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hanzoai/lsp/daemon/internal/jsonrpc"
	"github.com/hanzoai/lsp/daemon/internal/lsp"
	"github.com/hanzoai/lsp/daemon/internal/pool"
	"github.com/hanzoai/lsp/daemon/internal/runtime"
	"github.com/hanzoai/lsp/daemon/internal/sanitize"
	"github.com/hanzoai/lsp/daemon/internal/uri"
	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
)

// Workspace symbols search the whole repository: in a tree of several
// languages every server running for the workspace is asked at once, and
// their answers become one list. This file is the one place that asks
// them (askWorkspaceSymbols, also behind a name without a path) and the
// one place that merges their answers (mergeSymbols).

// maxWorkspaceSymbols bounds the merged list as lsp.Limits.MaxItems
// bounds one server's.
const maxWorkspaceSymbols = 10000

// symbolSource is one server's part of a workspace-symbol search.
type symbolSource struct {
	spec   *pool.Spec
	srv    *runtime.Server
	client *lsp.Client
	gen    uint64
	// offered: the server negotiated workspace symbols; one that did not
	// is left out of the search, not counted as failed.
	offered bool
	list    lsp.List[lsp.Symbol]
	// rpcErr: the server is healthy and said it cannot answer (a JSON-RPC
	// error): it listed nothing, which the answer says.
	rpcErr *jsonrpc.Error
	// failed: the server could not be asked (start, transport, deadline).
	failed *daemonv1.QueryResponse
	// loaded: the server had loaded the project when it was asked
	// (awaitLoad).
	loaded bool
}

// name is how a warning names the source: its language and server.
func (s *symbolSource) name() string { return s.spec.Language + " (" + s.spec.ID + ")" }

// serverShare is the part of a query's remaining time one server of a
// fan-out may take: a server that hangs to the deadline would leave no
// time to answer with what the others listed.
func serverShare(ctx context.Context) (context.Context, context.CancelFunc) {
	dl, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	left := time.Until(dl)
	return context.WithTimeout(ctx, left-min(left/10, 2*time.Second))
}

// askWorkspaceSymbols asks each of specs for the workspace symbols
// matching query, side by side, each within its share of the request's
// time (serverShare): its server started (or running), given a document
// to anchor a project, and waited for a bounded while when it is still
// indexing. The sources are in specs' order.
func (r *Runner) askWorkspaceSymbols(ctx context.Context, w *pool.Workspace, specs []*pool.Spec, pol uri.Policy, query string) []symbolSource {
	out := make([]symbolSource, len(specs))
	var wg sync.WaitGroup
	for i, spec := range specs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sctx, cancel := serverShare(ctx)
			defer cancel()
			out[i] = r.askOne(sctx, w, spec, pol, query)
		}()
	}
	wg.Wait()
	return out
}

func (r *Runner) askOne(ctx context.Context, w *pool.Workspace, spec *pool.Spec, pol uri.Policy, query string) symbolSource {
	s := symbolSource{spec: spec}
	srv, err := w.Server(ctx, spec)
	if err != nil {
		s.failed = serverFailure(ctx, err)
		return s
	}
	s.srv = srv
	if !slices.Contains(srv.Tools(), toolFor[daemonv1.Op_OP_WORKSPACE_SYMBOLS]) {
		return s
	}
	s.offered = true
	if s.client, s.gen, err = srv.Client(ctx); err != nil {
		s.failed = serverFailure(ctx, err)
		return s
	}
	if err := r.anchorDocument(ctx, w, spec, s.client, pol); err != nil {
		s.failed = serverFailure(ctx, err)
		return s
	}
	s.loaded = r.awaitLoad(ctx, w, spec, s.client, pol)
	if _, ok := s.client.Indexing(); ok {
		_ = s.client.WaitIndexed(ctx, IndexWait)
	}
	s.list, err = s.client.WorkspaceSymbols(ctx, query)
	var rpcErr *jsonrpc.Error
	switch {
	case errors.As(err, &rpcErr) && ctx.Err() == nil:
		s.rpcErr = rpcErr
	case err != nil:
		s.failed = serverFailure(ctx, err)
	}
	return s
}

// symbolSpecs are the servers a workspace-symbol request asks: the path's
// file's server when it names one, the server of language when given,
// else every server running for w.
func (r *Runner) symbolSpecs(w *pool.Workspace, req *daemonv1.QueryRequest) ([]*pool.Spec, *daemonv1.QueryResponse) {
	rel, lang := req.GetPath(), req.GetLanguage()
	switch {
	case lang != "" && rel != "":
		return nil, fail(daemonv1.Status_STATUS_INVALID_REQUEST, "give path or language, not both: a path's file names its server")
	case lang != "" && !daemonv1.ValidLanguageID(lang):
		return nil, fail(daemonv1.Status_STATUS_INVALID_REQUEST, "language must be an LSP languageId such as go or python")
	case lang != "":
		specs := r.Pool.Specs()
		for i := range specs {
			if !slices.Contains(specs[i].Languages(), lang) {
				continue
			}
			if !w.Needs(&specs[i]) {
				// Not started for nothing: the answer is known.
				return nil, fail(daemonv1.Status_STATUS_UNSUPPORTED_LANGUAGE, fmt.Sprintf("this revision has no %s files", lang))
			}
			return []*pool.Spec{&specs[i]}, nil
		}
		return nil, fail(daemonv1.Status_STATUS_INVALID_REQUEST, fmt.Sprintf("no configured language server serves language %q", lang))
	case rel != "":
		if s, ok := r.Pool.SpecFor(rel); ok {
			return []*pool.Spec{s}, nil
		}
	}
	specs := r.workspaceSpecs(w)
	if len(specs) == 0 {
		return nil, fail(daemonv1.Status_STATUS_UNSUPPORTED_LANGUAGE, "no language server is configured")
	}
	return specs, nil
}

// searchSymbols answers OP_WORKSPACE_SYMBOLS: one list from every server
// symbolSpecs names, paged. A server that failed leaves the answer
// partial, with a warning naming its language; only when every server
// failed does the answer fail, with the first failure's status.
func (r *Runner) searchSymbols(ctx context.Context, w *pool.Workspace, req *daemonv1.QueryRequest) *daemonv1.QueryResponse {
	specs, st := r.symbolSpecs(w, req)
	if st != nil {
		return st
	}
	c := r.converter(w)
	pol := c.pol
	srcs := r.askWorkspaceSymbols(ctx, w, specs, pol, req.GetQuery())
	// In an answer of several servers each warning says whose it is.
	label := func(s *symbolSource, msg string) string {
		if len(specs) == 1 {
			return msg
		}
		return s.name() + ": " + msg
	}
	var lists [][]*daemonv1.Symbol
	var used []*symbolSource
	var failure *daemonv1.QueryResponse
	var offers []string
	for i := range srcs {
		s := &srcs[i]
		if s.failed != nil {
			failure = cmp.Or(failure, s.failed)
			c.warnings = append(c.warnings, fmt.Sprintf("%s: %s, so its symbols are missing", s.name(), s.failed.GetMessage()))
			c.incomplete = true
			continue
		}
		if !s.offered {
			offers = append(offers, s.spec.ID)
			continue
		}
		used = append(used, s)
		sc := &converter{pol: pol, scrub: c.scrub}
		if s.rpcErr != nil {
			sc.warnings = append(sc.warnings, fmt.Sprintf("the language server could not answer this request (code %d)", s.rpcErr.Code))
			sc.dropped++
		}
		sc.truncated(s.list.Truncated, s.list.Dropped)
		lists = append(lists, sc.symbols(s.list.Items, s.spec))
		if title, ok := s.client.Indexing(); ok {
			sc.warnings = append(sc.warnings, fmt.Sprintf("%s was still working on the project (%q) when it answered; results may be incomplete", s.spec.ID, sanitize.Line(sc.clean(title), 128)))
			sc.incomplete = true
		}
		sc.warnings = append(sc.warnings, unchecked(s.spec, s.client)...)
		for _, m := range sc.warnings {
			c.warnings = append(c.warnings, label(s, m))
		}
		c.dropped += sc.dropped
		c.unexplained += sc.unexplained
		c.incomplete = c.incomplete || sc.incomplete
		for _, m := range w.LoadWarnings(s.spec, s.srv) {
			c.load = append(c.load, label(s, m))
		}
		if !s.loaded {
			c.load = append(c.load, label(s, notLoaded(s.spec)))
		}
	}
	switch {
	case len(used) == 0 && failure != nil:
		return failure
	case len(used) == 0:
		return fail(daemonv1.Status_STATUS_CAPABILITY_UNAVAILABLE, fmt.Sprintf("%s does not offer workspace_symbols", strings.Join(offers, ", ")))
	}
	info, fingerprint, gen := combined(used)
	if g := req.GetGeneration(); g != 0 && g != gen {
		return fail(daemonv1.Status_STATUS_CURSOR_EXPIRED, "a language server restarted, or the servers answering changed, since the cursor was issued")
	}
	all, cut := mergeSymbols(lists, maxWorkspaceSymbols)
	if cut {
		c.warnings = append(c.warnings, fmt.Sprintf("the servers' answers were cut at the daemon's bound (%d symbols)", maxWorkspaceSymbols))
		c.dropped++
	}
	items, total, next := page(all, req.GetOffset(), req.GetLimit())
	resp := &daemonv1.QueryResponse{Status: daemonv1.Status_STATUS_OK, Total: total, NextOffset: next,
		Result: &daemonv1.QueryResponse_Symbols{Symbols: &daemonv1.Symbols{Items: items}}}
	if req.ContextLines != nil || req.GetIncludeBody() {
		cd := r.newCoder(w, req.GetContextLines())
		attachCode(cd, c, resp, req.GetIncludeBody(), false)
		c.warnings = append(c.warnings, cd.warnings()...)
	}
	c.empty = emptyAnswer(resp)
	resp.Evidence = evidence(info, fingerprint, gen, nil, req, c)
	return resp
}

// mergeSymbols is one list of the servers' lists, in their order (the
// workspace's language order, which is the configuration's), interleaved
// round-robin: first every server's first symbol, then every server's
// second, and so on. Each server's own ranking is kept, and no ranking is
// compared with another's (their scores are not comparable), so the first
// page of a search in a polyglot repository holds every language's best
// matches rather than one server's hundred fuzzy ones. The same servers'
// same answers merge to the same list, which keeps pages stable. A symbol
// listed twice (same path, name, kind and place; two servers of one file
// type, or one server repeating itself) is kept once, where it first
// occurs. Past bound the list is cut, and cut says so.
func mergeSymbols(lists [][]*daemonv1.Symbol, bound int) (out []*daemonv1.Symbol, cut bool) {
	seen := map[string]bool{}
	for i := 0; ; i++ {
		more := false
		for _, l := range lists {
			if i >= len(l) {
				continue
			}
			more = true
			s := l[i]
			k := s.GetPath() + "\x00" + s.GetName() + "\x00" + s.GetKind() + "\x00" + rangeKey(s.GetSelectionRange()) + "\x00" + rangeKey(s.GetRange())
			if seen[k] {
				continue
			}
			if len(out) == bound {
				return out, true
			}
			seen[k] = true
			out = append(out, s)
		}
		if !more {
			return out, false
		}
	}
}

func rangeKey(r *daemonv1.Range) string {
	return fmt.Sprint(r.GetStart().GetLine(), r.GetStart().GetCharacter(), r.GetEnd().GetLine(), r.GetEnd().GetCharacter())
}

// combined is what produced an answer of the used servers: for one, that
// server as it is; for several, their ids and versions joined by "+", a
// fingerprint of their capability fingerprints, and a combined
// generation. A cursor carries the generation, so it stays valid only
// while the same servers in the same generations answer: a restart of
// any, or a server that answered the first page failing on the next (or
// the other way round), expires it. The combined generation is a hash of
// (server id, generation) pairs, cut to 53 bits so that JSON readers keep
// it exact, and never 0 (which asks for no check).
func combined(used []*symbolSource) (runtime.Info, string, uint64) {
	if len(used) == 1 {
		return used[0].srv.Info(), used[0].srv.CapabilityFingerprint(), used[0].gen
	}
	var ids, versions []string
	h, fp := sha256.New(), sha256.New()
	for _, s := range used {
		info := s.srv.Info()
		ids, versions = append(ids, info.ID), append(versions, info.Version)
		h.Write([]byte(info.ID + "\x00" + strconv.FormatUint(s.gen, 10) + "\x00"))
		fp.Write([]byte(info.ID + "\x00" + s.srv.CapabilityFingerprint() + "\x00"))
	}
	gen := binary.BigEndian.Uint64(h.Sum(nil)[:8])&(1<<53-1) | 1
	return runtime.Info{ID: strings.Join(ids, "+"), Version: strings.Join(versions, "+"), Generation: gen},
		fmt.Sprintf("%x", fp.Sum(nil)), gen
}
