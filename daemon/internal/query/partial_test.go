package query

import (
	"strings"
	"testing"
	"time"

	"github.com/hanzoai/lsp/daemon/internal/lsp"
	"github.com/hanzoai/lsp/daemon/internal/runtime"
	"github.com/hanzoai/lsp/daemon/internal/uri"
	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
)

// TestHoverCutIsPartial: a hover cut at a bound — the client's (the
// server's answer over its byte bound) or the sanitiser's — is not the
// server's whole answer: partial, and said so.
func TestHoverCutIsPartial(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    lsp.Hover
	}{
		{"sanitiser", lsp.Hover{Markdown: strings.Repeat("word ", 70<<10/5)}},
		{"client", lsp.Hover{Markdown: "short", Truncated: true}},
	} {
		c := &converter{}
		c.hover(&tc.h)
		e := evidence(runtime.Info{}, "", 0, nil, &daemonv1.QueryRequest{}, c)
		if e.GetState() != daemonv1.EvidenceState_EVIDENCE_STATE_PARTIAL || !strings.Contains(strings.Join(e.GetWarnings(), "\n"), "truncated") {
			t.Errorf("%s: evidence %v %q; want partial, saying it was truncated", tc.name, e.GetState(), e.GetWarnings())
		}
	}
	c := &converter{}
	c.hover(&lsp.Hover{Markdown: "short"})
	if e := evidence(runtime.Info{}, "", 0, nil, &daemonv1.QueryRequest{}, c); e.GetState() != daemonv1.EvidenceState_EVIDENCE_STATE_CURRENT {
		t.Errorf("a whole hover: %v, want current", e.GetState())
	}
}

// TestDroppedLocationsAlwaysSaid: a location the URI policy refused is
// counted in the evidence also when another warning is there (gopls's
// "unchecked" one, for instance); before, the count was said only when no
// other warning was.
func TestDroppedLocationsAlwaysSaid(t *testing.T) {
	root := "/srv/trees/t/app/c/tree"
	c := &converter{pol: uri.Policy{Root: root}}
	c.locations([]lsp.Location{{URI: lsp.DocumentURI("file://" + root + "/a.go")}, {URI: "file:///etc/passwd"}})
	c.warnings = append(c.warnings, "some other warning")
	e := evidence(runtime.Info{}, "", 0, nil, &daemonv1.QueryRequest{}, c)
	if e.GetState() != daemonv1.EvidenceState_EVIDENCE_STATE_PARTIAL || !strings.Contains(strings.Join(e.GetWarnings(), "\n"), "1 result(s) outside the workspace or malformed were dropped") {
		t.Errorf("evidence %v %q; want partial, naming the dropped location", e.GetState(), e.GetWarnings())
	}
}

// TestMatchSymbolsKeepsDistinctLines: two symbols of one name at different
// positions are two, whatever their line numbers (a key made of runes
// folded every surrogate and out-of-range line to U+FFFD).
func TestMatchSymbolsKeepsDistinctLines(t *testing.T) {
	sym := func(line uint32) lsp.Symbol {
		return lsp.Symbol{Name: "Foo", URI: "file:///r/a.go", SelectionRange: lsp.Range{Start: lsp.Position{Line: line, Character: 4}}}
	}
	for _, lines := range [][2]uint32{{0xD800, 0xD801}, {0x110000, 0x110001}} {
		if got := matchSymbols([]lsp.Symbol{sym(lines[0]), sym(lines[1])}, "Foo"); len(got) != 2 {
			t.Errorf("lines %#x and %#x: %d symbols, want 2", lines[0], lines[1], len(got))
		}
	}
	if got := matchSymbols([]lsp.Symbol{sym(3), sym(3)}, "Foo"); len(got) != 1 {
		t.Errorf("the same symbol twice: %d, want 1", len(got))
	}
}

// TestAmbiguousCandidatesScrubbed: a name without a path that several
// symbols have answers with the candidates, their server text scrubbed of
// host paths like every answer's (CONTRACT §4).
func TestAmbiguousCandidatesScrubbed(t *testing.T) {
	r, w := fakeWorkspace(t, fakeSpec(t, "go", "-names=Foo,Foo", "-hostpath"))
	resp := r.Run(ctxFor(t, time.Minute), w, &daemonv1.QueryRequest{Op: daemonv1.Op_OP_DEFINITION, Symbol: "Foo"})
	if resp.GetStatus() != daemonv1.Status_STATUS_AMBIGUOUS_SYMBOL || len(resp.GetCandidates()) != 2 {
		t.Fatalf("status %v, %d candidates; want ambiguous, 2: %v", resp.GetStatus(), len(resp.GetCandidates()), resp)
	}
	for _, c := range resp.GetCandidates() {
		if strings.Contains(c.GetContainer(), w.Dir) || !strings.Contains(c.GetContainer(), "go/x.go") {
			t.Errorf("candidate container %q: want the host path scrubbed, the file kept", c.GetContainer())
		}
	}
}
