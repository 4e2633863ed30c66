package auth

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testKey is a key pair the tests sign with.
type testKey struct {
	method jwt.SigningMethod
	priv   crypto.Signer
	pub    crypto.PublicKey
	kid    string // RFC 7638 thumbprint
}

var (
	fixtureOnce sync.Once
	fx          struct {
		rsa, rsa2, ec, ec384, ed, edOther, rsaOther *testKey
	}
)

func newTestKey(tb testing.TB, method jwt.SigningMethod, priv crypto.Signer) *testKey {
	tb.Helper()
	kid, err := Thumbprint(priv.Public())
	if err != nil {
		tb.Fatal(err)
	}
	return &testKey{method: method, priv: priv, pub: priv.Public(), kid: kid}
}

// keys returns key pairs generated once per test binary (RSA generation is slow).
func keys(tb testing.TB) *struct{ rsa, rsa2, ec, ec384, ed, edOther, rsaOther *testKey } {
	tb.Helper()
	fixtureOnce.Do(func() {
		must := func(k crypto.Signer, err error) crypto.Signer {
			if err != nil {
				panic(err)
			}
			return k
		}
		r1 := must(rsa.GenerateKey(rand.Reader, 2048))
		r2 := must(rsa.GenerateKey(rand.Reader, 2048))
		r3 := must(rsa.GenerateKey(rand.Reader, 2048))
		e1 := must(ecdsa.GenerateKey(elliptic.P256(), rand.Reader))
		e2 := must(ecdsa.GenerateKey(elliptic.P384(), rand.Reader))
		_, d1, _ := ed25519.GenerateKey(rand.Reader)
		_, d2, _ := ed25519.GenerateKey(rand.Reader)
		fx.rsa = newTestKey(tb, jwt.SigningMethodRS256, r1)
		fx.rsa2 = newTestKey(tb, jwt.SigningMethodRS256, r2)
		fx.rsaOther = newTestKey(tb, jwt.SigningMethodRS256, r3)
		fx.ec = newTestKey(tb, jwt.SigningMethodES256, e1)
		fx.ec384 = newTestKey(tb, jwt.SigningMethodES384, e2)
		fx.ed = newTestKey(tb, jwt.SigningMethodEdDSA, d1)
		fx.edOther = newTestKey(tb, jwt.SigningMethodEdDSA, d2)
	})
	return &fx
}

const (
	testAud = "lsp"
	testIss = "https://id.example"
)

// claims returns a valid payload; edit lets a case change or delete members.
func claims(edit func(jwt.MapClaims)) jwt.MapClaims {
	now := time.Now()
	c := jwt.MapClaims{
		"sub":   "agent-7",
		"owner": "acme",
		"orgs":  []string{"team.b-2", "widgets"},
		"roles": []string{"billing:acme", "billing:widgets"},
		"aud":   testAud,
		"iss":   testIss,
		"iat":   now.Unix(),
		"exp":   now.Add(10 * time.Minute).Unix(),
	}
	if edit != nil {
		edit(c)
	}
	return c
}

// sign signs c with k; the kid header is k's unless hdr says otherwise (a nil value deletes it).
func sign(tb testing.TB, k *testKey, c jwt.MapClaims, hdr map[string]any) string {
	tb.Helper()
	tok := jwt.NewWithClaims(k.method, c)
	tok.Header["kid"] = k.kid
	for name, val := range hdr {
		if val == nil {
			delete(tok.Header, name)
		} else {
			tok.Header[name] = val
		}
	}
	s, err := tok.SignedString(k.priv)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// rawToken assembles a token from arbitrary header, payload and signature bytes.
func rawToken(tb testing.TB, hdr map[string]any, payload any, sig []byte) string {
	tb.Helper()
	h, err := json.Marshal(hdr)
	if err != nil {
		tb.Fatal(err)
	}
	p, err := json.Marshal(payload)
	if err != nil {
		tb.Fatal(err)
	}
	b := base64.RawURLEncoding.EncodeToString
	return b(h) + "." + b(p) + "." + b(sig)
}

func pubPEM(tb testing.TB, pub crypto.PublicKey, headers map[string]string) []byte {
	tb.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		tb.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Headers: maps.Clone(headers), Bytes: der})
}

func writeFile(tb testing.TB, name string, data []byte) string {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		tb.Fatal(err)
	}
	return path
}

// keysFile writes the public halves of ks into one PEM file.
func keysFile(tb testing.TB, ks ...*testKey) string {
	tb.Helper()
	var data []byte
	for _, k := range ks {
		data = append(data, pubPEM(tb, k.pub, nil)...)
	}
	return writeFile(tb, "keys.pem", data)
}

// baseConfig trusts one key of each asymmetric family.
func baseConfig(tb testing.TB) Config {
	k := keys(tb)
	return Config{KeysFile: keysFile(tb, k.rsa, k.ec, k.ed), Audience: testAud, Issuer: testIss}
}

func newTestVerifier(tb testing.TB, cfg Config) *Verifier {
	tb.Helper()
	v, err := NewVerifier(context.Background(), cfg, nil, nil)
	if err != nil {
		tb.Fatalf("NewVerifier: %v", err)
	}
	tb.Cleanup(v.Close)
	return v
}

// fakeClock lets JWKS tests step past the refetch interval without sleeping.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Now()} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}
