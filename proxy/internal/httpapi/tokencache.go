package httpapi

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"strings"
	"sync"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/auth"
)

// Verified tokens are remembered for a short while. A client sends the same
// bearer token with every request, and checking its signature again each
// time was the largest share of the proxy's own CPU per warm request
// (EdDSA ≈ 0.1 ms here). A remembered verification of the exact same bytes
// is reused until the token's exp, and never longer than tokenCacheTTL, so
// a key withdrawn from the JWKS stops being honoured within that TTL — the
// same bound as the forge's access cache (HIP §2). Failures are never
// remembered: a bad token costs a verification every time.

// tokenCacheTTL bounds how long one verification is reused.
const tokenCacheTTL = 30 * time.Second

// maxCachedTokens bounds the memory: past it the cache starts afresh.
const maxCachedTokens = 4096

type cachedToken struct {
	p     *auth.Principal // never handed out: Verify returns clones
	until time.Time
}

// tokenCache wraps a Verifier.
type tokenCache struct {
	v   Verifier
	now func() time.Time

	mu sync.Mutex
	m  map[[sha256.Size]byte]cachedToken
}

func newTokenCache(v Verifier) *tokenCache {
	return &tokenCache{v: v, now: time.Now, m: map[[sha256.Size]byte]cachedToken{}}
}

// Verify returns the principal of raw, from a verification of the same bytes
// made at most tokenCacheTTL ago and before the token's exp, or verifies it.
// Each caller gets its own copy of the principal.
func (t *tokenCache) Verify(ctx context.Context, raw string) (*auth.Principal, error) {
	key := sha256.Sum256([]byte(raw))
	now := t.now()
	t.mu.Lock()
	e, ok := t.m[key]
	t.mu.Unlock()
	if ok && now.Before(e.until) {
		return e.p.Clone(), nil
	}
	p, err := t.v.Verify(ctx, raw)
	if err != nil {
		return nil, err
	}
	until := now.Add(tokenCacheTTL)
	if exp, ok := tokenExpiry(raw); !ok {
		return p, nil // cannot bound it by exp: not remembered
	} else if exp.Before(until) {
		until = exp
	}
	t.mu.Lock()
	if len(t.m) >= maxCachedTokens {
		t.m = make(map[[sha256.Size]byte]cachedToken)
	}
	t.m[key] = cachedToken{p: p.Clone(), until: until}
	t.mu.Unlock()
	return p, nil
}

// tokenExpiry reads exp from a token the verifier has just accepted (so its
// payload is well-formed and exp present; anything else is not cached).
func tokenExpiry(raw string) (time.Time, bool) {
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, false
	}
	var c struct {
		Exp *json.Number `json:"exp"`
	}
	if json.Unmarshal(payload, &c) != nil || c.Exp == nil {
		return time.Time{}, false
	}
	f, err := c.Exp.Float64()
	if err != nil || f <= 0 {
		return time.Time{}, false
	}
	return time.Unix(int64(f), 0), true
}
