package query

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hanzoai/lsp/daemon/internal/pool"
	"github.com/hanzoai/lsp/daemon/internal/runtime"
	"github.com/hanzoai/lsp/daemon/internal/uri"
	"github.com/hanzoai/lsp/daemon/internal/workspace"
	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
)

// fakeSpec is a fake server (fake_test.go) for language lang, serving
// files ending in "."+lang, started with args.
func fakeSpec(t *testing.T, lang string, args ...string) pool.Spec {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ext := "." + lang
	return pool.Spec{
		Spec: runtime.Spec{
			ID: lang + "-server", Language: lang, Extensions: []string{ext},
			Executable: self, Args: append([]string{"-file=" + lang + "/x" + ext}, args...),
			Env: []string{fakeEnv + "=1"}, RequestTimeout: time.Minute,
		},
		Extensions: []string{ext},
		// A fake has no load beyond what it reports: a question's wait
		// for a fresh instance's load (awaitLoad) ends with its progress.
		LoadQuiet: -1,
	}
}

// fakeWorkspace is a workspace with one file per spec's language, its
// servers started as a prepare starts them (Warm), and a runner over it.
func fakeWorkspace(t *testing.T, specs ...pool.Spec) (*Runner, *pool.Workspace) {
	t.Helper()
	r, w, _ := focusedWorkspace(t, "", specs...)
	return r, w
}

// focusedWorkspace is fakeWorkspace prepared with a focus: it also
// returns the servers Warm deferred.
func focusedWorkspace(t *testing.T, focus string, specs ...pool.Spec) (*Runner, *pool.Workspace, []*pool.Spec) {
	t.Helper()
	store, err := workspace.NewStore(t.TempDir(), workspace.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	p := pool.New(store, specs, runtime.Unjailed(log), log)
	t.Cleanup(func() { p.Close(context.Background()) })
	var entries []*daemonv1.FileEntry
	var data []byte
	for _, s := range specs {
		if slices.Contains(s.Args, "-nofile") {
			continue
		}
		b := []byte(strings.Repeat("symbol line\n", 8))
		sum := sha256.Sum256(b)
		entries = append(entries, &daemonv1.FileEntry{Path: s.Language + "/x" + s.Extensions[0], Size: uint64(len(b)), Sha256: hex.EncodeToString(sum[:])})
		data = append(data, b...)
	}
	sum := sha256.Sum256([]byte(t.Name()))
	k := workspace.Key{TenantKey: strings.Repeat("ab", 32), Repo: "poly", Commit: hex.EncodeToString(sum[:20])}
	if _, err := store.Write(k, "00000000-0000-4000-8000-000000000001", entries, bytes.NewReader(data), nil); err != nil {
		t.Fatal(err)
	}
	w, release, ok := p.Acquire(k)
	if !ok {
		t.Fatal("the workspace was not acquired")
	}
	t.Cleanup(release)
	_, _, deferred := w.Warm(context.Background(), entries, focus)
	return &Runner{Pool: p, Externals: func(*pool.Workspace) []uri.External { return nil }, MaxDocument: 1 << 20}, w, deferred
}

func symbolsQuery(ctx context.Context, t *testing.T, r *Runner, w *pool.Workspace, req *daemonv1.QueryRequest) *daemonv1.QueryResponse {
	t.Helper()
	req.Op = daemonv1.Op_OP_WORKSPACE_SYMBOLS
	return r.Run(ctx, w, req)
}

// names lists an answer's symbols as language:name.
func names(resp *daemonv1.QueryResponse) []string {
	var out []string
	for _, s := range resp.GetSymbols().GetItems() {
		out = append(out, s.GetLanguage()+":"+s.GetName())
	}
	return out
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Without a path or a language, every server with workspace symbols is
// asked; their lists interleave in the workspace's language order, each
// server's own order kept, duplicates once, each symbol with its language;
// one cursor pages the merged list. A language asks that one server.
func TestWorkspaceSymbolsFanOut(t *testing.T) {
	r, w := fakeWorkspace(t,
		fakeSpec(t, "alpha", "-names=Foo,FooBar,FooBaz", "-dup"),
		fakeSpec(t, "beta", "-names=BarFoo,Other,Food"),
		fakeSpec(t, "gamma", "-names=Foo", "-nows"),
		fakeSpec(t, "delta", "-names=Foo", "-nofile"))
	ctx := ctxFor(t, time.Minute)
	resp := symbolsQuery(ctx, t, r, w, &daemonv1.QueryRequest{Query: "foo"})
	want := []string{"alpha:Foo", "beta:BarFoo", "alpha:FooBar", "beta:Food", "alpha:FooBaz"}
	if resp.GetStatus() != daemonv1.Status_STATUS_OK || !slices.Equal(names(resp), want) {
		t.Fatalf("merged answer %v %v (%s); want %v", resp.GetStatus(), names(resp), resp.GetMessage(), want)
	}
	ev := resp.GetEvidence()
	if ev.GetState() != daemonv1.EvidenceState_EVIDENCE_STATE_CURRENT || ev.GetServer().GetId() != "alpha-server+beta-server" || len(ev.GetWarnings()) != 0 {
		t.Fatalf("evidence %v", ev)
	}
	if p := resp.GetSymbols().GetItems()[1].GetPath(); p != "beta/x.beta" {
		t.Fatalf("beta's symbol at %q", p)
	}
	// Pages of the merged list, under one combined generation.
	gen := ev.GetServer().GetGeneration()
	var paged []string
	for off := uint32(0); ; {
		p := symbolsQuery(ctx, t, r, w, &daemonv1.QueryRequest{Query: "foo", Limit: 2, Offset: off, Generation: gen})
		if p.GetStatus() != daemonv1.Status_STATUS_OK || p.GetTotal() != 5 {
			t.Fatalf("page at %d: %v %s total %d", off, p.GetStatus(), p.GetMessage(), p.GetTotal())
		}
		paged = append(paged, names(p)...)
		if p.NextOffset == nil {
			break
		}
		off = p.GetNextOffset()
	}
	if !slices.Equal(paged, want) {
		t.Fatalf("pages %v; want %v", paged, want)
	}
	one := symbolsQuery(ctx, t, r, w, &daemonv1.QueryRequest{Query: "foo", Language: "beta"})
	if !slices.Equal(names(one), []string{"beta:BarFoo", "beta:Food"}) || one.GetEvidence().GetServer().GetId() != "beta-server" {
		t.Fatalf("language beta: %v %v", names(one), one.GetEvidence().GetServer())
	}
	if g := one.GetEvidence().GetServer().GetGeneration(); g == gen || g == 0 {
		t.Fatalf("one server's generation %d is the combined one %d", g, gen)
	}
	for _, tc := range []struct {
		req  *daemonv1.QueryRequest
		want daemonv1.Status
	}{
		{&daemonv1.QueryRequest{Query: "foo", Language: "cobol"}, daemonv1.Status_STATUS_INVALID_REQUEST},
		{&daemonv1.QueryRequest{Query: "foo", Language: "Bad Id"}, daemonv1.Status_STATUS_INVALID_REQUEST},
		{&daemonv1.QueryRequest{Query: "foo", Language: "beta", Path: "beta/x.beta"}, daemonv1.Status_STATUS_INVALID_REQUEST},
		{&daemonv1.QueryRequest{Query: "foo", Language: "gamma"}, daemonv1.Status_STATUS_CAPABILITY_UNAVAILABLE},
		// Configured, but the tree has none of its files: not started.
		{&daemonv1.QueryRequest{Query: "foo", Language: "delta"}, daemonv1.Status_STATUS_UNSUPPORTED_LANGUAGE},
	} {
		if got := symbolsQuery(ctx, t, r, w, tc.req); got.GetStatus() != tc.want {
			t.Errorf("%v: %v %s; want %v", tc.req, got.GetStatus(), got.GetMessage(), tc.want)
		}
	}
	// A path still selects its file's server.
	if p := symbolsQuery(ctx, t, r, w, &daemonv1.QueryRequest{Query: "foo", Path: "alpha/x.alpha"}); !slices.Equal(names(p), []string{"alpha:Foo", "alpha:FooBar", "alpha:FooBaz"}) {
		t.Fatalf("path alpha: %v", names(p))
	}
	// The filter belongs to workspace symbols.
	if d := r.Run(ctx, w, &daemonv1.QueryRequest{Op: daemonv1.Op_OP_DOCUMENT_SYMBOLS, Path: "alpha/x.alpha", Language: "alpha"}); d.GetStatus() != daemonv1.Status_STATUS_INVALID_REQUEST {
		t.Fatalf("document symbols with a language: %v", d.GetStatus())
	}
}

// A server that errors or hangs leaves the answer partial, with what the
// others listed and a warning naming its language, within the request's
// deadline; only when every server fails does the answer fail.
func TestWorkspaceSymbolsServerFaults(t *testing.T) {
	for _, tc := range []struct {
		mode, warning string
	}{
		{"error", "beta (beta-server): the language server could not answer this request (code -32603)"},
		// A reply with neither result nor error is no answer, not an
		// empty one.
		{"noresult", "beta (beta-server): the language server could not answer this request (code -32603)"},
		{"hang", "beta (beta-server): the language server did not answer in time, so its symbols are missing"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			r, w := fakeWorkspace(t, fakeSpec(t, "alpha", "-names=Foo"), fakeSpec(t, "beta", "-names=Foo", "-mode="+tc.mode))
			start := time.Now()
			resp := symbolsQuery(ctxFor(t, 3*time.Second), t, r, w, &daemonv1.QueryRequest{Query: "foo"})
			ev := resp.GetEvidence()
			if resp.GetStatus() != daemonv1.Status_STATUS_OK || !slices.Equal(names(resp), []string{"alpha:Foo"}) ||
				ev.GetState() != daemonv1.EvidenceState_EVIDENCE_STATE_PARTIAL || !slices.Contains(ev.GetWarnings(), tc.warning) {
				t.Fatalf("answer %v %s %v, evidence %v", resp.GetStatus(), resp.GetMessage(), names(resp), ev)
			}
			if d := time.Since(start); d >= 3*time.Second {
				t.Fatalf("answered after %v, past the request's deadline", d)
			}
		})
	}
	t.Run("start", func(t *testing.T) {
		t.Parallel()
		broken := fakeSpec(t, "beta")
		broken.Executable = filepath.Join(t.TempDir(), "missing")
		r, w := fakeWorkspace(t, fakeSpec(t, "alpha", "-names=Foo"), broken)
		resp := symbolsQuery(ctxFor(t, time.Minute), t, r, w, &daemonv1.QueryRequest{Query: "foo"})
		ev := resp.GetEvidence()
		want := "beta (beta-server): the language server is unavailable, so its symbols are missing"
		if resp.GetStatus() != daemonv1.Status_STATUS_OK || !slices.Equal(names(resp), []string{"alpha:Foo"}) ||
			ev.GetState() != daemonv1.EvidenceState_EVIDENCE_STATE_PARTIAL || !slices.Contains(ev.GetWarnings(), want) {
			t.Fatalf("answer %v %s %v, evidence %v", resp.GetStatus(), resp.GetMessage(), names(resp), ev)
		}
	})
	t.Run("all", func(t *testing.T) {
		t.Parallel()
		r, w := fakeWorkspace(t, fakeSpec(t, "alpha", "-names=Foo", "-mode=hang"), fakeSpec(t, "beta", "-names=Foo", "-mode=hang"))
		if resp := symbolsQuery(ctxFor(t, 2*time.Second), t, r, w, &daemonv1.QueryRequest{Query: "foo"}); resp.GetStatus() != daemonv1.Status_STATUS_TIMEOUT {
			t.Fatalf("every server hung: %v %s", resp.GetStatus(), resp.GetMessage())
		}
	})
}

// A cursor of a merged answer is valid while the same servers answer in
// the same generations: a restart of any one expires it, as does a
// server's failure changing which servers the list came from.
func TestWorkspaceSymbolsCursorExpires(t *testing.T) {
	r, w := fakeWorkspace(t, fakeSpec(t, "alpha", "-names=Foo,Food"), fakeSpec(t, "beta", "-names=Foo,Food"))
	ctx := ctxFor(t, time.Minute)
	first := symbolsQuery(ctx, t, r, w, &daemonv1.QueryRequest{Query: "foo", Limit: 1})
	gen := first.GetEvidence().GetServer().GetGeneration()
	one := symbolsQuery(ctx, t, r, w, &daemonv1.QueryRequest{Query: "foo", Language: "beta", Limit: 1})
	betaGen := one.GetEvidence().GetServer().GetGeneration()
	if first.GetNextOffset() != 1 || gen == 0 || betaGen == 0 {
		t.Fatalf("first page: %v next %d gen %d, beta gen %d", names(first), first.GetNextOffset(), gen, betaGen)
	}
	if p := symbolsQuery(ctx, t, r, w, &daemonv1.QueryRequest{Query: "foo", Limit: 1, Offset: 1, Generation: gen}); p.GetStatus() != daemonv1.Status_STATUS_OK {
		t.Fatalf("second page before any restart: %v %s", p.GetStatus(), p.GetMessage())
	}
	// beta exits on this query: alpha alone answers it.
	crash := symbolsQuery(ctx, t, r, w, &daemonv1.QueryRequest{Query: "crash", Language: "beta"})
	if crash.GetStatus() == daemonv1.Status_STATUS_OK {
		t.Fatalf("the crashing query answered %v", crash)
	}
	for _, req := range []*daemonv1.QueryRequest{
		{Query: "foo", Limit: 1, Offset: 1, Generation: gen},
		{Query: "foo", Language: "beta", Limit: 1, Offset: 1, Generation: betaGen},
	} {
		if p := symbolsQuery(ctx, t, r, w, req); p.GetStatus() != daemonv1.Status_STATUS_CURSOR_EXPIRED {
			t.Errorf("%v after beta restarted: %v %s; want CURSOR_EXPIRED", req, p.GetStatus(), p.GetMessage())
		}
	}
	// The restarted beta answers again, under a new combined generation.
	again := symbolsQuery(ctx, t, r, w, &daemonv1.QueryRequest{Query: "foo"})
	if g := again.GetEvidence().GetServer().GetGeneration(); again.GetStatus() != daemonv1.Status_STATUS_OK || g == gen || len(names(again)) != 4 {
		t.Fatalf("after the restart: %v %v gen %d (was %d)", again.GetStatus(), names(again), g, gen)
	}
}

func TestMergeSymbolsBound(t *testing.T) {
	mk := func(lang string, n int) []*daemonv1.Symbol {
		var out []*daemonv1.Symbol
		for i := range n {
			out = append(out, &daemonv1.Symbol{Name: fmt.Sprint(lang, i), Path: lang, Range: &daemonv1.Range{Start: &daemonv1.Position{Line: uint32(i)}}})
		}
		return out
	}
	all, cut := mergeSymbols([][]*daemonv1.Symbol{mk("a", 3), mk("b", 1)}, 3)
	if !cut || len(all) != 3 || all[0].Name != "a0" || all[1].Name != "b0" || all[2].Name != "a1" {
		t.Fatalf("merge %v cut %v", all, cut)
	}
	if all, cut := mergeSymbols([][]*daemonv1.Symbol{mk("a", 3), mk("b", 1)}, 4); cut || len(all) != 4 {
		t.Fatalf("merge at the bound exactly: %d cut %v", len(all), cut)
	}
}

// TestWorkspaceSymbolsQueryBounded: the daemon refuses a query over
// daemonv1.MaxQueryBytes itself, as an invalid request, before any
// server sees it; one at the bound is answered.
func TestWorkspaceSymbolsQueryBounded(t *testing.T) {
	r, w := fakeWorkspace(t, fakeSpec(t, "alpha", "-names=Foo"))
	ctx := ctxFor(t, time.Minute)
	long := symbolsQuery(ctx, t, r, w, &daemonv1.QueryRequest{Query: strings.Repeat("f", 5<<10)})
	if long.GetStatus() != daemonv1.Status_STATUS_INVALID_REQUEST || !strings.Contains(long.GetMessage(), "longer than 256 bytes") {
		t.Fatalf("a 5 KiB query: %v %q; want INVALID_REQUEST", long.GetStatus(), long.GetMessage())
	}
	if at := symbolsQuery(ctx, t, r, w, &daemonv1.QueryRequest{Query: strings.Repeat("f", daemonv1.MaxQueryBytes)}); at.GetStatus() != daemonv1.Status_STATUS_OK {
		t.Fatalf("a query of %d bytes: %v %q", daemonv1.MaxQueryBytes, at.GetStatus(), at.GetMessage())
	}
}
