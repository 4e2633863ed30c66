package forge

import (
	"fmt"
	"slices"
	"testing"

	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
)

// TestCapWarnings: a tree's warnings stay within what the daemon keeps
// (daemonv1.MaxTreeWarnings): all of them up to the bound; past it, the
// first ones and a last line counting the rest.
func TestCapWarnings(t *testing.T) {
	lines := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("dropped submodule: s%06d", i)
		}
		return out
	}
	max := daemonv1.MaxTreeWarnings
	if got := capWarnings(lines(max)); !slices.Equal(got, lines(max)) {
		t.Fatalf("at the bound: %d lines, want all %d", len(got), max)
	}
	all := lines(max + 500)
	got := capWarnings(slices.Clone(all))
	if len(got) != max || !slices.Equal(got[:max-1], all[:max-1]) {
		t.Fatalf("over the bound: %d lines, want the first %d and a count", len(got), max-1)
	}
	if want := "dropped 501 more entries (not listed)"; got[max-1] != want {
		t.Fatalf("last line %q, want %q", got[max-1], want)
	}
}
