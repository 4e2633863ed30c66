package stacks

import (
	"net/http"
	"strings"
	"testing"

	"github.com/hanzoai/lsp/proxy/internal/devstack"
)

// TestMadeUpSHAOnTheFreeProbe: a made-up full sha on GET /capabilities is
// resolved at the forge once per credential per negative TTL, not once per
// request; and the default per-org rate limit answers a flood with 429 and
// Retry-After. Before, every probe made the forge serve the history of
// every branch and tag, and nothing was ever refused.
func TestMadeUpSHAOnTheFreeProbe(t *testing.T) {
	fl := &forgeLog{}
	s := startStack(t, devstack.Options{ForgeWrap: fl.wrap})
	tn := newTenant(t, s, "probe", "hello", 0)
	made := strings.Repeat("ab", 20)
	probe := func() answer {
		return do(t, s, http.MethodGet, "/capabilities?repo=hello&rev="+made, nil,
			"Authorization", "Bearer "+tn.jwt, "X-Forge-Token", tn.forgeToken)
	}
	before := fl.count()
	for range 5 {
		if a := probe(); a.status != http.StatusNotFound {
			t.Fatalf("made-up sha: %d %s; want 404", a.status, a.raw)
		}
	}
	first := fl.count() - before
	t.Logf("5 probes of one made-up sha: %d forge requests", first)
	before = fl.count()
	for range 5 {
		probe()
	}
	if again := fl.count() - before; again != 0 {
		t.Fatalf("the same made-up sha within the negative TTL reached the forge %d more times", again)
	}

	// The default rate limit (20/s, bursts of 40) refuses a flood.
	limited := 0
	for range 60 {
		a := probe()
		if a.status == http.StatusTooManyRequests {
			if a.header.Get("Retry-After") == "" || a.errorCode() != "rate_limited" {
				t.Fatalf("429 without Retry-After or code: %v %s", a.header, a.raw)
			}
			limited++
		}
	}
	t.Logf("60 more probes at once: %d refused with 429", limited)
	if limited == 0 {
		t.Fatal("no default rate limit: a flood of probes was never refused")
	}
}

// TestMadeUpSHAsHistoryBound: made-up shas are not each a free download of
// the repository's history. The forge serves no commit by sha here, so each
// new one's proof falls back to the tips' history, which an org may have the
// proxy download only so often (LSP_FORGE_HISTORY_PROOFS_PER_MINUTE, 6: in
// bursts of 2); past that, 429 with the time until the next.
func TestMadeUpSHAsHistoryBound(t *testing.T) {
	s := startStack(t, devstack.Options{})
	tn := newTenant(t, s, "prober", "hello", 0)
	probe := func(sha string) answer {
		return do(t, s, http.MethodGet, "/capabilities?repo=hello&rev="+sha, nil,
			"Authorization", "Bearer "+tn.jwt, "X-Forge-Token", tn.forgeToken)
	}
	for i, sha := range []string{strings.Repeat("ab", 20), strings.Repeat("cd", 20)} {
		if a := probe(sha); a.status != http.StatusNotFound {
			t.Fatalf("made-up sha %d: %d %s; want 404", i+1, a.status, a.raw)
		}
	}
	a := probe(strings.Repeat("ef", 20))
	if a.status != http.StatusTooManyRequests || a.errorCode() != "rate_limited" || a.header.Get("Retry-After") == "" {
		t.Fatalf("a third made-up sha at once: %d %v %s; want 429 rate_limited with Retry-After", a.status, a.header, a.raw)
	}
}
