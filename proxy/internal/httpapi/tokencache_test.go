package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/auth"
)

// countingVerifier is the real verifier, counted.
type countingVerifier struct {
	v     Verifier
	calls atomic.Int64
}

func (c *countingVerifier) Verify(ctx context.Context, raw string) (*auth.Principal, error) {
	c.calls.Add(1)
	return c.v.Verify(ctx, raw)
}

func TestTokenCache(t *testing.T) {
	dir := t.TempDir()
	priv, pub, err := auth.GenerateDevKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	otherPriv, _, err := auth.GenerateDevKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	v, err := auth.NewVerifier(context.Background(), auth.Config{KeysFile: pub, Audience: testAudience, Leeway: time.Second},
		&http.Client{Timeout: time.Second}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Close)
	sign := func(key, owner string, ttl time.Duration) string {
		t.Helper()
		tok, err := auth.SignDevToken(key, auth.DevClaims{Subject: "agent-1", Owner: owner, Audience: testAudience}, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	good, other := sign(priv, "acme", time.Hour), sign(priv, "beta", time.Hour)
	short := sign(priv, "acme", 2*time.Second)
	stranger := sign(otherPriv, "acme", time.Hour)

	clock := time.Now()
	cv := &countingVerifier{v: v}
	c := newTokenCache(cv)
	c.now = func() time.Time { return clock }
	verify := func(tok string) (*auth.Principal, error) { return c.Verify(context.Background(), tok) }

	for _, tc := range []struct {
		name      string
		tok       string
		advance   time.Duration
		wantOwner string // "" means refused
		wantCalls int64  // verifications so far
	}{
		{"first use verifies", good, 0, "acme", 1},
		{"same bytes again are remembered", good, 0, "acme", 1},
		{"another token is its own entry", other, 0, "beta", 2},
		{"a bad signature is refused", stranger, 0, "", 3},
		{"and refused again, never remembered", stranger, 0, "", 4},
		{"a short token verifies", short, 0, "acme", 5},
		{"within the TTL, still remembered", good, tokenCacheTTL - time.Second, "acme", 5},
		{"past the TTL, verified again", good, 2 * time.Second, "acme", 6},
	} {
		clock = clock.Add(tc.advance)
		p, err := verify(tc.tok)
		switch {
		case tc.wantOwner == "" && err == nil:
			t.Errorf("%s: accepted", tc.name)
		case tc.wantOwner != "" && (err != nil || p.Owner != tc.wantOwner):
			t.Errorf("%s: %+v, %v; want owner %s", tc.name, p, err, tc.wantOwner)
		}
		if got := cv.calls.Load(); got != tc.wantCalls {
			t.Errorf("%s: %d verifications, want %d", tc.name, got, tc.wantCalls)
		}
	}
	// The short token's entry ends at its exp, not after the TTL: past exp
	// it is verified again (and the real verifier refuses it once its
	// leeway has passed too).
	time.Sleep(3500 * time.Millisecond)
	clock = time.Now()
	before := cv.calls.Load()
	if _, err := verify(short); err == nil {
		t.Error("an expired token was accepted")
	}
	if cv.calls.Load() != before+1 {
		t.Error("an expired token's entry was used")
	}

	// Callers get their own copies, slices too (they shared the cached
	// principal's Orgs, Roles and Audience).
	p1, _ := verify(good)
	p1.Owner = "mutated"
	if len(p1.Audience) == 0 {
		t.Fatal("the token's principal has no audience to mutate")
	}
	p1.Audience[0] = "mutated"
	if p2, _ := verify(good); p2.Owner != "acme" || p2.Audience[0] == "mutated" {
		t.Errorf("a caller's change leaked into the cache: %+v", p2)
	}
}

func TestTokenExpiry(t *testing.T) {
	for _, tc := range []struct {
		raw string
		ok  bool
	}{
		{"a.eyJleHAiOjE3MDAwMDAwMDB9.c", true}, // {"exp":1700000000}
		{"a.eyJzdWIiOiJ4In0.c", false},         // no exp
		{"a.!!!.c", false},
		{"a.b", false},
		{"a.eyJleHAiOiJzb29uIn0.c", false}, // exp not a number
	} {
		exp, ok := tokenExpiry(tc.raw)
		if ok != tc.ok || ok && exp.Unix() != 1700000000 {
			t.Errorf("tokenExpiry(%q) = %v, %v", tc.raw, exp, ok)
		}
	}
}
