package auth

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// toJWK renders a public key as a JWK map, written independently of the package's parser.
func toJWK(tb testing.TB, pub crypto.PublicKey, kid string) map[string]any {
	tb.Helper()
	b := base64.RawURLEncoding.EncodeToString
	var m map[string]any
	switch p := pub.(type) {
	case *rsa.PublicKey:
		m = map[string]any{"kty": "RSA", "n": b(p.N.Bytes()), "e": b(big.NewInt(int64(p.E)).Bytes())}
	case *ecdsa.PublicKey:
		raw, err := p.Bytes()
		if err != nil {
			tb.Fatal(err)
		}
		n := (len(raw) - 1) / 2
		m = map[string]any{"kty": "EC", "crv": p.Curve.Params().Name, "x": b(raw[1 : 1+n]), "y": b(raw[1+n:])}
	case ed25519.PublicKey:
		m = map[string]any{"kty": "OKP", "crv": "Ed25519", "x": b(p)}
	default:
		tb.Fatalf("toJWK: %T", pub)
	}
	if kid != "" {
		m["kid"] = kid
	}
	return m
}

// jwksServer is a real HTTP JWKS endpoint whose document and hit count the test controls.
type jwksServer struct {
	*httptest.Server
	hits atomic.Int64
	mu   sync.Mutex
	body []byte
}

func newJWKSServer(tb testing.TB, keys ...map[string]any) *jwksServer {
	tb.Helper()
	s := &jwksServer{}
	s.setKeys(tb, keys...)
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		s.mu.Lock()
		body := s.body
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/jwk-set+json")
		if strings.HasPrefix(string(body), "status:") {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.Write(body)
	}))
	tb.Cleanup(s.Close)
	return s
}

func (s *jwksServer) setKeys(tb testing.TB, keys ...map[string]any) {
	tb.Helper()
	if keys == nil {
		keys = []map[string]any{}
	}
	body, err := json.Marshal(map[string]any{"keys": keys})
	if err != nil {
		tb.Fatal(err)
	}
	s.setBody(body)
}

func (s *jwksServer) setBody(body []byte) {
	s.mu.Lock()
	s.body = body
	s.mu.Unlock()
}

// jwksVerifier builds a verifier on srv with a fake clock and, unless changed, no background refresh
// within the test's lifetime.
func jwksVerifier(tb testing.TB, srv *jwksServer, clock *fakeClock, edit func(*options)) (*Verifier, error) {
	tb.Helper()
	o := defaultOptions()
	o.now = clock.Now
	o.jwksRefreshEvery = time.Hour
	if edit != nil {
		edit(&o)
	}
	v, err := newVerifier(context.Background(), Config{JWKSURL: srv.URL, Audience: testAud}, srv.Client(), nil, o)
	if err == nil {
		tb.Cleanup(v.Close)
	}
	return v, err
}

func mustJWKSVerifier(tb testing.TB, srv *jwksServer, clock *fakeClock) *Verifier {
	tb.Helper()
	v, err := jwksVerifier(tb, srv, clock, nil)
	if err != nil {
		tb.Fatalf("newVerifier: %v", err)
	}
	return v
}

func TestJWKSCached(t *testing.T) {
	k := keys(t)
	srv := newJWKSServer(t, toJWK(t, k.rsa.pub, "r1"), toJWK(t, k.ec.pub, ""), toJWK(t, k.ed.pub, "e1"))
	v := mustJWKSVerifier(t, srv, newFakeClock())
	toks := []string{
		sign(t, k.rsa, claims(nil), map[string]any{"kid": "r1"}),
		sign(t, k.ec, claims(nil), nil), // a JWK without kid is known by its thumbprint
		sign(t, k.ed, claims(nil), map[string]any{"kid": "e1"}),
	}
	for i := range 60 {
		if _, err := v.Verify(context.Background(), toks[i%3]); err != nil {
			t.Fatalf("Verify %d: %v", i, err)
		}
	}
	if got := srv.hits.Load(); got != 1 {
		t.Fatalf("JWKS fetched %d times for 60 verifies; want 1", got)
	}
}

func TestJWKSUnknownKidRefetchIsRateLimited(t *testing.T) {
	k := keys(t)
	srv := newJWKSServer(t, toJWK(t, k.ed.pub, "e1"))
	clock := newFakeClock()
	v := mustJWKSVerifier(t, srv, clock)

	unknown := func(i int) string {
		return sign(t, k.edOther, claims(nil), map[string]any{"kid": "made-up-" + string(rune('a'+i%26))})
	}
	// Within the first interval after start-up, the start-up fetch is recent: no refetch at all.
	for i := range 10 {
		if _, err := v.Verify(context.Background(), unknown(i)); !errors.Is(err, ErrUnauthenticated) {
			t.Fatalf("unknown kid accepted: %v", err)
		}
	}
	if got := srv.hits.Load(); got != 1 {
		t.Fatalf("hits = %d after unknown kids inside the interval; want 1", got)
	}

	// After the interval, a burst of unknown kids from many goroutines causes exactly one refetch.
	clock.Advance(defaultJWKSMinRefetch + time.Second)
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			if _, err := v.Verify(context.Background(), unknown(i)); !errors.Is(err, ErrUnauthenticated) {
				t.Errorf("unknown kid accepted: %v", err)
			}
		})
	}
	wg.Wait()
	if got := srv.hits.Load(); got != 2 {
		t.Fatalf("hits = %d after a burst of unknown kids; want 2", got)
	}

	// Known kids never refetch.
	for range 10 {
		if _, err := v.Verify(context.Background(), sign(t, k.ed, claims(nil), map[string]any{"kid": "e1"})); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(defaultJWKSMinRefetch + time.Second)
	v.Verify(context.Background(), unknown(0))
	if got := srv.hits.Load(); got != 3 {
		t.Fatalf("hits = %d after the next interval; want 3", got)
	}
}

func TestJWKSRotation(t *testing.T) {
	k := keys(t)
	srv := newJWKSServer(t, toJWK(t, k.ed.pub, "old"))
	clock := newFakeClock()
	v := mustJWKSVerifier(t, srv, clock)
	oldTok := sign(t, k.ed, claims(nil), map[string]any{"kid": "old"})
	newTok := sign(t, k.edOther, claims(nil), map[string]any{"kid": "new"})
	ctx := context.Background()

	if _, err := v.Verify(ctx, oldTok); err != nil {
		t.Fatal(err)
	}
	srv.setKeys(t, toJWK(t, k.edOther.pub, "new"))

	// Right after a fetch the new kid is not looked for yet (rate limit)…
	if _, err := v.Verify(ctx, newTok); err == nil || !strings.HasSuffix(err.Error(), "unknown key") {
		t.Fatalf("new kid inside the interval: %v", err)
	}
	// …and once the interval has passed it is picked up, and the retired key stops working.
	clock.Advance(defaultJWKSMinRefetch + time.Second)
	if _, err := v.Verify(ctx, newTok); err != nil {
		t.Fatalf("new kid after rotation: %v", err)
	}
	if _, err := v.Verify(ctx, oldTok); err == nil || !strings.HasSuffix(err.Error(), "unknown key") {
		t.Fatalf("retired kid after rotation: %v", err)
	}
}

func TestJWKSOversizeRefused(t *testing.T) {
	k := keys(t)
	good, _ := json.Marshal(map[string]any{"keys": []any{toJWK(t, k.ed.pub, "e1")}})
	// Valid JSON made huge with whitespace: only the size bound can refuse it.
	huge := append(append([]byte(`{"keys":[`), []byte(strings.Repeat(" ", defaultJWKSMaxBytes))...), good[len(`{"keys":[`):]...)

	t.Run("at start-up", func(t *testing.T) {
		srv := newJWKSServer(t)
		srv.setBody(huge)
		_, err := jwksVerifier(t, srv, newFakeClock(), nil)
		if err == nil || !strings.Contains(err.Error(), "exceeds") {
			t.Fatalf("newVerifier error = %v; want a size refusal", err)
		}
	})
	t.Run("without Content-Length", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			for i := 0; i < len(huge); i += 64 << 10 {
				w.Write(huge[i:min(i+64<<10, len(huge))])
				w.(http.Flusher).Flush()
			}
		}))
		defer srv.Close()
		_, err := NewVerifier(context.Background(), Config{JWKSURL: srv.URL, Audience: testAud}, srv.Client(), nil)
		if err == nil || !strings.Contains(err.Error(), "exceeds") {
			t.Fatalf("NewVerifier error = %v; want a size refusal", err)
		}
	})
	t.Run("on refetch, previous keys kept", func(t *testing.T) {
		srv := newJWKSServer(t)
		srv.setBody(good)
		clock := newFakeClock()
		v := mustJWKSVerifier(t, srv, clock)
		srv.setBody(huge)
		clock.Advance(defaultJWKSMinRefetch + time.Second)
		if _, err := v.Verify(context.Background(), sign(t, k.edOther, claims(nil), map[string]any{"kid": "x"})); err == nil {
			t.Fatal("unknown kid accepted")
		}
		if got := srv.hits.Load(); got != 2 {
			t.Fatalf("hits = %d; want 2 (the refused refetch happened)", got)
		}
		if _, err := v.Verify(context.Background(), sign(t, k.ed, claims(nil), map[string]any{"kid": "e1"})); err != nil {
			t.Fatalf("previous key lost after an oversize refetch: %v", err)
		}
	})
}

func TestJWKSStartupFailures(t *testing.T) {
	k := keys(t)
	tests := []struct {
		name string
		body string
		want string
	}{
		{"server error", "status:500", "status 500"},
		{"not JSON", "<html>", "decode JWKS"},
		{"no usable key", `{"keys":[{"kty":"oct","k":"c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0"}]}`, "no usable signing key"},
		{"empty set", `{"keys":[]}`, "no usable signing key"},
		{"too many keys", `{"keys":[` + strings.Repeat(`{},`, maxJWKSKeys) + `{}]}`, "more than"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := newJWKSServer(t)
			srv.setBody([]byte(tc.body))
			if _, err := jwksVerifier(t, srv, newFakeClock(), nil); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v; want %q", err, tc.want)
			}
		})
	}
	t.Run("plain http outside loopback", func(t *testing.T) {
		_, err := NewVerifier(context.Background(), Config{JWKSURL: "http://jwks.example/keys", Audience: testAud}, nil, nil)
		if err == nil || !strings.Contains(err.Error(), "https") {
			t.Fatalf("error = %v; want an https requirement", err)
		}
	})
	t.Run("cancelled ctx", func(t *testing.T) {
		srv := newJWKSServer(t, toJWK(t, k.ed.pub, ""))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := NewVerifier(ctx, Config{JWKSURL: srv.URL, Audience: testAud}, srv.Client(), nil); err == nil {
			t.Fatal("NewVerifier succeeded with a cancelled ctx")
		}
	})
}

func TestJWKSKeySelection(t *testing.T) {
	k := keys(t)
	b := base64.RawURLEncoding.EncodeToString
	weak, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	withPriv := toJWK(t, k.edOther.pub, "leaky")
	withPriv["d"] = b(k.edOther.priv.(ed25519.PrivateKey).Seed())
	enc := toJWK(t, k.rsa2.pub, "enc")
	enc["use"] = "enc"
	ecAsRS := toJWK(t, k.ec384.pub, "mislabelled")
	ecAsRS["alg"] = "RS256"
	rsaPS := toJWK(t, k.rsa.pub, "ps-only")
	rsaPS["alg"] = "PS256"
	offCurve := toJWK(t, k.ec.pub, "off-curve")
	offCurve["y"] = b(make([]byte, 32))

	srv := newJWKSServer(t,
		map[string]any{"kty": "oct", "kid": "hs", "k": b([]byte("0123456789abcdef0123456789abcdef"))},
		withPriv, enc, ecAsRS, rsaPS, offCurve,
		toJWK(t, weak.Public(), "weak"),
		map[string]any{"kty": "OKP", "crv": "X25519", "kid": "x", "x": b(make([]byte, 32))},
		toJWK(t, k.ed.pub, "good"),
	)
	o := defaultOptions()
	o.jwksRefreshEvery = time.Hour
	v, err := newVerifier(context.Background(), Config{
		JWKSURL: srv.URL, Audience: testAud, Algs: []string{"RS256", "PS256", "ES256", "ES384", "EdDSA"},
	}, srv.Client(), nil, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Close)

	ctx := context.Background()
	if _, err := v.Verify(ctx, sign(t, k.ed, claims(nil), map[string]any{"kid": "good"})); err != nil {
		t.Fatalf("good key: %v", err)
	}
	ps := jwt.NewWithClaims(jwt.SigningMethodPS256, claims(nil))
	ps.Header["kid"] = "ps-only"
	psTok, _ := ps.SignedString(k.rsa.priv)
	if _, err := v.Verify(ctx, psTok); err != nil {
		t.Fatalf("PS256 under a JWK with alg PS256: %v", err)
	}
	weakTok := jwt.NewWithClaims(jwt.SigningMethodRS256, claims(nil))
	weakTok.Header["kid"] = "weak"
	weakSigned, _ := weakTok.SignedString(weak)
	refused := []struct{ name, token, reason string }{
		{"RS256 under a JWK restricted to PS256", sign(t, k.rsa, claims(nil), map[string]any{"kid": "ps-only"}), "key does not match algorithm"},
		{"JWK publishing private material", sign(t, k.edOther, claims(nil), map[string]any{"kid": "leaky"}), "unknown key"},
		{"JWK with use enc", sign(t, k.rsa2, claims(nil), map[string]any{"kid": "enc"}), "unknown key"},
		{"JWK whose alg contradicts its type", sign(t, k.ec384, claims(nil), map[string]any{"kid": "mislabelled"}), "unknown key"},
		{"EC JWK off its curve", sign(t, k.ec, claims(nil), map[string]any{"kid": "off-curve"}), "unknown key"},
		{"weak RSA JWK", weakSigned, "unknown key"},
		{"HS256 signed with an oct JWK", hmacToken(t, []byte("0123456789abcdef0123456789abcdef"), claims(nil), "hs"), "algorithm not allowed"},
	}
	for _, tc := range refused {
		_, err := v.Verify(ctx, tc.token)
		if !errors.Is(err, ErrUnauthenticated) || !strings.HasSuffix(err.Error(), ": "+tc.reason) {
			t.Errorf("%s: error = %v; want reason %q", tc.name, err, tc.reason)
		}
	}
}

func TestJWKSAndKeysFileTogether(t *testing.T) {
	k := keys(t)
	srv := newJWKSServer(t, toJWK(t, k.ed.pub, "remote"))
	cfg := Config{KeysFile: keysFile(t, k.rsa), JWKSURL: srv.URL, Audience: testAud}
	v, err := NewVerifier(context.Background(), cfg, srv.Client(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	for _, tok := range []string{
		sign(t, k.rsa, claims(nil), nil),
		sign(t, k.rsa, claims(nil), map[string]any{"kid": nil}),
		sign(t, k.ed, claims(nil), map[string]any{"kid": "remote"}),
		sign(t, k.ed, claims(nil), map[string]any{"kid": nil}),
	} {
		if _, err := v.Verify(context.Background(), tok); err != nil {
			t.Fatal(err)
		}
	}
}

func TestJWKSBackgroundRefresh(t *testing.T) {
	k := keys(t)
	srv := newJWKSServer(t, toJWK(t, k.ed.pub, "old"))
	clock := newFakeClock()
	v, err := jwksVerifier(t, srv, clock, func(o *options) { o.jwksRefreshEvery = 5 * time.Millisecond })
	if err != nil {
		t.Fatal(err)
	}
	srv.setKeys(t, toJWK(t, k.edOther.pub, "new"))
	// No clock advance and no unknown-kid trigger: only the background refresh can bring "new" in.
	deadline := time.Now().Add(20 * time.Second)
	for {
		if ix := v.jwks.current(); ix != nil {
			if _, known := ix.lookup("new", "EdDSA", nil); known {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("background refresh never picked up the new key")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := v.Verify(context.Background(), sign(t, k.edOther, claims(nil), map[string]any{"kid": "new"})); err != nil {
		t.Fatal(err)
	}
	v.Close() // goleak in TestMain proves the refresh goroutine ended
}

func TestJWKSStopsWithCtx(t *testing.T) {
	k := keys(t)
	srv := newJWKSServer(t, toJWK(t, k.ed.pub, ""))
	ctx, cancel := context.WithCancel(context.Background())
	o := defaultOptions()
	o.jwksRefreshEvery = time.Millisecond
	v, err := newVerifier(ctx, Config{JWKSURL: srv.URL, Audience: testAud}, srv.Client(), nil, o)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	v.wg.Wait() // returns only once the refresh loop has seen ctx end
	// Verification still works on the cached keys.
	if _, err := v.Verify(context.Background(), sign(t, k.ed, claims(nil), nil)); err != nil {
		t.Fatal(err)
	}
	v.Close()
}

// TestJWKSStaleSetStopsVerifying: the IdP removed a key, and every refresh
// since fails (the endpoint is down, or someone keeps it from answering).
// The removed key must not verify forever on the last good set: past the
// refresh interval (plus a fetch timeout) the set is no longer trusted.
func TestJWKSStaleSetStopsVerifying(t *testing.T) {
	k := keys(t)
	srv := newJWKSServer(t, toJWK(t, k.ed.pub, "old"))
	clock := newFakeClock()
	v, err := jwksVerifier(t, srv, clock, func(o *options) { o.jwksRefreshEvery = 5 * time.Minute })
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tok := func() string {
		return sign(t, k.ed, claims(func(c jwt.MapClaims) {
			c["iat"], c["exp"] = clock.Now().Unix(), clock.Now().Add(10*time.Minute).Unix()
		}), map[string]any{"kid": "old"})
	}
	if _, err := v.Verify(ctx, tok()); err != nil {
		t.Fatal(err)
	}
	srv.setBody([]byte("status:500")) // the key is gone and refreshes fail
	clock.Advance(4 * time.Minute)
	if _, err := v.Verify(ctx, tok()); err != nil {
		t.Fatalf("within the refresh interval the last good set still verifies: %v", err)
	}
	clock.Advance(2*time.Minute + defaultJWKSFetchTimeout)
	if _, err := v.Verify(ctx, tok()); err == nil {
		t.Fatal("a key the JWKS no longer vouches for still verifies past the refresh interval")
	}
	// A successful fetch trusts the set again.
	srv.setKeys(t, toJWK(t, k.ed.pub, "old"))
	clock.Advance(defaultJWKSMinRefetch + time.Second)
	if _, err := v.Verify(ctx, tok()); err != nil {
		t.Fatalf("after a good fetch: %v", err)
	}
}

// TestJWKSRedirectNotFollowed: keys come from the configured URL only.
func TestJWKSRedirectNotFollowed(t *testing.T) {
	k := keys(t)
	other := newJWKSServer(t, toJWK(t, k.ed.pub, "evil"))
	redir := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL, http.StatusFound)
	}))
	defer redir.Close()
	_, err := NewVerifier(context.Background(), Config{JWKSURL: redir.URL, Audience: testAud}, redir.Client(), nil)
	if err == nil {
		t.Fatal("a JWKS behind a redirect was fetched")
	}
	if other.hits.Load() != 0 {
		t.Fatalf("the redirect target was asked %d times", other.hits.Load())
	}
}
