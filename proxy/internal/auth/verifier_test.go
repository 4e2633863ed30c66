package auth

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

func hmacSecretFile(tb testing.TB) (string, []byte) {
	tb.Helper()
	// The secret as an operator makes one (openssl rand -base64 24): 32 printable bytes. Raw random
	// bytes would end in '\r' one time in 256, which the loader trims with the file's line ending.
	raw := make([]byte, 24)
	if _, err := rand.Read(raw); err != nil {
		tb.Fatal(err)
	}
	secret := []byte(base64.StdEncoding.EncodeToString(raw))
	return writeFile(tb, "hmac.secret", append(slices.Clone(secret), '\n')), secret
}

func hmacToken(tb testing.TB, secret []byte, c jwt.MapClaims, kid string) string {
	tb.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, c)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(secret)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// TestVerifyRefuses is the attack table: every token here must be refused with ErrUnauthenticated, and
// for the stated reason, so a refusal cannot pass by accident for some unrelated cause.
func TestVerifyRefuses(t *testing.T) {
	k := keys(t)
	rsaPEM := pubPEM(t, k.rsa.pub, nil)
	rsaDER, _ := x509.MarshalPKIXPublicKey(k.rsa.pub)
	withHS256 := func(c *Config) {
		c.Algs = []string{"RS256", "ES256", "EdDSA", "HS256"}
		c.HMACSecretFile, _ = hmacSecretFile(t)
	}
	twoRSA := func(c *Config) { c.KeysFile = keysFile(t, k.rsa, k.rsa2) }
	b64 := base64.RawURLEncoding.EncodeToString

	tamperPayload := func() string {
		parts := strings.Split(sign(t, k.ed, claims(nil), nil), ".")
		evil := strings.Split(sign(t, k.ed, claims(func(c jwt.MapClaims) { c["owner"] = "victim" }), nil), ".")
		return parts[0] + "." + evil[1] + "." + parts[2]
	}
	tamperSignature := func(key *testKey) func() string {
		return func() string {
			parts := strings.Split(sign(t, key, claims(nil), nil), ".")
			sig, err := base64.RawURLEncoding.DecodeString(parts[2])
			if err != nil {
				t.Fatal(err)
			}
			sig[len(sig)/2] ^= 0x01
			return parts[0] + "." + parts[1] + "." + b64(sig)
		}
	}
	sized := func(n int) string {
		return sign(t, k.ed, claims(func(c jwt.MapClaims) { c["pad"] = strings.Repeat("x", n) }), nil)
	}

	tests := []struct {
		name   string
		cfg    func(*Config)
		token  func() string
		reason string
	}{
		{"empty", nil, func() string { return "" }, "missing token"},
		{"garbage", nil, func() string { return "not-a-jwt" }, "malformed token"},
		{"two segments", nil, func() string { return "eyJhbGciOiJFZERTQSJ9.e30" }, "malformed token"},
		{"alg none", nil, func() string {
			return rawToken(t, map[string]any{"alg": "none", "typ": "JWT"}, claims(nil), nil)
		}, "algorithm not allowed"},
		{"alg none with kid", nil, func() string {
			return rawToken(t, map[string]any{"alg": "none", "kid": k.rsa.kid}, claims(nil), []byte("x"))
		}, "algorithm not allowed"},
		{"alg None spelled otherwise", nil, func() string {
			return rawToken(t, map[string]any{"alg": "None"}, claims(nil), nil)
		}, "unsupported algorithm"},
		{"alg missing", nil, func() string {
			return rawToken(t, map[string]any{"kid": k.ed.kid}, claims(nil), []byte("x"))
		}, "unsupported algorithm"},
		{"HS256 with the RSA public PEM as secret, HS256 not allowed", nil, func() string {
			return hmacToken(t, rsaPEM, claims(nil), k.rsa.kid)
		}, "algorithm not allowed"},
		{"HS256 with the RSA public DER as secret, no kid, HS256 not allowed", nil, func() string {
			return hmacToken(t, rsaDER, claims(nil), "")
		}, "algorithm not allowed"},
		{"HS256 with the RSA public PEM as secret and its kid, HS256 allowed", withHS256, func() string {
			return hmacToken(t, rsaPEM, claims(nil), k.rsa.kid)
		}, "unknown key"},
		{"HS256 with the RSA public PEM as secret, no kid, HS256 allowed", withHS256, func() string {
			return hmacToken(t, rsaPEM, claims(nil), "")
		}, "invalid signature"},
		{"HS256 with the RSA public PEM as secret, only RSA configured", func(c *Config) {
			withHS256(c)
			c.KeysFile = keysFile(t, k.rsa)
		}, func() string { return hmacToken(t, rsaPEM, claims(nil), "") }, "invalid signature"},
		{"PS256 not in the allow-list", nil, func() string {
			tok := jwt.NewWithClaims(jwt.SigningMethodPS256, claims(nil))
			tok.Header["kid"] = k.rsa.kid
			s, _ := tok.SignedString(k.rsa.priv)
			return s
		}, "algorithm not allowed"},
		{"expired", nil, func() string {
			return sign(t, k.ed, claims(func(c jwt.MapClaims) {
				c["iat"] = time.Now().Add(-time.Hour).Unix()
				c["exp"] = time.Now().Add(-2 * time.Minute).Unix()
			}), nil)
		}, "token expired"},
		{"not yet valid", nil, func() string {
			return sign(t, k.ed, claims(func(c jwt.MapClaims) { c["nbf"] = time.Now().Add(2 * time.Minute).Unix() }), nil)
		}, "token not valid yet"},
		{"issued in the future", nil, func() string {
			return sign(t, k.ed, claims(func(c jwt.MapClaims) { c["iat"] = time.Now().Add(2 * time.Minute).Unix() }), nil)
		}, "token issued in the future"},
		{"no exp", nil, func() string {
			return sign(t, k.ed, claims(func(c jwt.MapClaims) { delete(c, "exp") }), nil)
		}, "missing exp"},
		{"exp not a number", nil, func() string {
			return sign(t, k.ed, claims(func(c jwt.MapClaims) { c["exp"] = "tomorrow" }), nil)
		}, "malformed token"},
		{"wrong issuer", nil, func() string {
			return sign(t, k.ed, claims(func(c jwt.MapClaims) { c["iss"] = "https://evil.example" }), nil)
		}, "wrong issuer"},
		{"missing issuer when configured", nil, func() string {
			return sign(t, k.ed, claims(func(c jwt.MapClaims) { delete(c, "iss") }), nil)
		}, "missing iss"},
		{"wrong audience", nil, func() string {
			return sign(t, k.ed, claims(func(c jwt.MapClaims) { c["aud"] = []string{"forge", "other"} }), nil)
		}, "wrong audience"},
		{"missing aud outside dev mode", nil, func() string {
			return sign(t, k.ed, claims(func(c jwt.MapClaims) { delete(c, "aud") }), nil)
		}, "missing aud"},
		{"lifetime over MaxTTL (exp-iat)", func(c *Config) { c.MaxTTL = time.Hour }, func() string {
			return sign(t, k.ed, claims(func(c jwt.MapClaims) { c["exp"] = time.Now().Add(3 * time.Hour).Unix() }), nil)
		}, "token lifetime too long"},
		{"lifetime over MaxTTL (exp-nbf)", func(c *Config) { c.MaxTTL = time.Hour }, func() string {
			return sign(t, k.ed, claims(func(c jwt.MapClaims) {
				delete(c, "iat")
				c["nbf"] = time.Now().Unix()
				c["exp"] = time.Now().Add(3 * time.Hour).Unix()
			}), nil)
		}, "token lifetime too long"},
		{"lifetime over MaxTTL (exp-now)", func(c *Config) { c.MaxTTL = time.Hour }, func() string {
			return sign(t, k.ed, claims(func(c jwt.MapClaims) {
				delete(c, "iat")
				c["exp"] = time.Now().Add(3 * time.Hour).Unix()
			}), nil)
		}, "token lifetime too long"},
		{"unknown kid", nil, func() string {
			return sign(t, k.ed, claims(nil), map[string]any{"kid": "no-such-key"})
		}, "unknown key"},
		{"key not configured, own kid", nil, func() string { return sign(t, k.edOther, claims(nil), nil) }, "unknown key"},
		{"key not configured, configured kid", nil, func() string {
			return sign(t, k.edOther, claims(nil), map[string]any{"kid": k.ed.kid})
		}, "invalid signature"},
		{"key not configured, no kid", nil, func() string {
			return sign(t, k.rsaOther, claims(nil), map[string]any{"kid": nil})
		}, "invalid signature"},
		{"tampered payload", nil, tamperPayload, "invalid signature"},
		{"tampered signature RS256", nil, tamperSignature(k.rsa), "invalid signature"},
		{"tampered signature ES256", nil, tamperSignature(k.ec), "invalid signature"},
		{"tampered signature EdDSA", nil, tamperSignature(k.ed), "invalid signature"},
		{"signature stripped", nil, func() string {
			parts := strings.Split(sign(t, k.ed, claims(nil), nil), ".")
			return parts[0] + "." + parts[1] + "."
		}, "invalid signature"},
		{"missing sub", nil, func() string {
			return sign(t, k.ed, claims(func(c jwt.MapClaims) { delete(c, "sub") }), nil)
		}, "missing sub"},
		{"sub with control characters", nil, func() string {
			return sign(t, k.ed, claims(func(c jwt.MapClaims) { c["sub"] = "agent\n7" }), nil)
		}, "malformed sub"},
		{"missing owner", nil, func() string {
			return sign(t, k.ed, claims(func(c jwt.MapClaims) { delete(c, "owner") }), nil)
		}, "missing owner"},
		{"owner not a string", nil, func() string {
			return sign(t, k.ed, claims(func(c jwt.MapClaims) { c["owner"] = 42 }), nil)
		}, "malformed token"},
		{"orgs not an array", nil, func() string {
			return sign(t, k.ed, claims(func(c jwt.MapClaims) { c["orgs"] = "acme" }), nil)
		}, "malformed token"},
		{"second key of another family: ES256 under the RSA kid", nil, func() string {
			return sign(t, k.ec, claims(nil), map[string]any{"kid": k.rsa.kid})
		}, "key does not match algorithm"},
		{"second key of another family: RS256 under the Ed25519 kid", nil, func() string {
			return sign(t, k.rsa, claims(nil), map[string]any{"kid": k.ed.kid})
		}, "key does not match algorithm"},
		{"second key of another family: EdDSA under the EC kid", nil, func() string {
			return sign(t, k.ed, claims(nil), map[string]any{"kid": k.ec.kid})
		}, "key does not match algorithm"},
		{"ES384 under the P-256 kid", func(c *Config) { c.Algs = []string{"ES256", "ES384"} }, func() string {
			return sign(t, k.ec384, claims(nil), map[string]any{"kid": k.ec.kid})
		}, "key does not match algorithm"},
		{"no kid with two RSA keys", twoRSA, func() string {
			return sign(t, k.rsa, claims(nil), map[string]any{"kid": nil})
		}, "kid required"},
		{"no kid and no key of the family", func(c *Config) { c.KeysFile = keysFile(t, k.rsa) }, func() string {
			return sign(t, k.ed, claims(nil), map[string]any{"kid": nil})
		}, "no key for algorithm"},
		{"kid not a string", nil, func() string {
			return sign(t, k.ed, claims(nil), map[string]any{"kid": 7})
		}, "malformed kid"},
		{"crit header", nil, func() string {
			return sign(t, k.ed, claims(nil), map[string]any{"crit": []string{"exp"}})
		}, "unsupported critical header"},
		{"oversized garbage", nil, func() string { return strings.Repeat("a", MaxTokenBytes+1) }, "token too large"},
		{"oversized but validly signed", nil, func() string { return sized(MaxTokenBytes) }, "token too large"},
	}
	for _, org := range []string{"Acme", "-acme", ".acme", "ac me", "ac/me", "acme\x00", "ácme", strings.Repeat("a", 65), ""} {
		tests = append(tests,
			struct {
				name   string
				cfg    func(*Config)
				token  func() string
				reason string
			}{"owner " + org, nil, func() string {
				return sign(t, k.ed, claims(func(c jwt.MapClaims) { c["owner"] = org }), nil)
			}, map[bool]string{true: "missing owner", false: "invalid org name"}[org == ""]},
			struct {
				name   string
				cfg    func(*Config)
				token  func() string
				reason string
			}{"orgs " + org, nil, func() string {
				return sign(t, k.ed, claims(func(c jwt.MapClaims) { c["orgs"] = []string{"widgets", org} }), nil)
			}, "invalid org name"},
			struct {
				name   string
				cfg    func(*Config)
				token  func() string
				reason string
			}{"role org " + org, nil, func() string {
				return sign(t, k.ed, claims(func(c jwt.MapClaims) { c["roles"] = []string{"billing:" + org} }), nil)
			}, "invalid role"},
		)
	}
	for _, role := range []string{"billing", ":acme", "billing:", "Billing:acme", "billing:acme:x", "bill ing:acme"} {
		tests = append(tests, struct {
			name   string
			cfg    func(*Config)
			token  func() string
			reason string
		}{"role " + role, nil, func() string {
			return sign(t, k.ed, claims(func(c jwt.MapClaims) { c["roles"] = []string{"billing:acme", role} }), nil)
		}, "invalid role"})
	}

	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := baseConfig(t)
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			v := newTestVerifier(t, cfg)
			p, err := v.Verify(context.Background(), tc.token())
			if !errors.Is(err, ErrUnauthenticated) {
				t.Fatalf("Verify = %+v, %v; want ErrUnauthenticated", p, err)
			}
			if p != nil {
				t.Fatalf("Verify returned a principal with an error: %+v", p)
			}
			if !strings.HasSuffix(err.Error(), ": "+tc.reason) {
				t.Fatalf("Verify error = %q; want reason %q", err, tc.reason)
			}
		})
	}
}

func TestVerifyAccepts(t *testing.T) {
	k := keys(t)
	secretFile, secret := hmacSecretFile(t)
	labelled := writeFile(t, "labelled.pem", append(pubPEM(t, k.rsa.pub, map[string]string{"kid": "prod-2026"}),
		pubPEM(t, k.ec.pub, nil)...))
	psAllowed := func(c *Config) { c.Algs = []string{"PS256"} }

	tests := []struct {
		name  string
		cfg   func(*Config)
		token func() string
	}{
		{"RS256", nil, func() string { return sign(t, k.rsa, claims(nil), nil) }},
		{"ES256", nil, func() string { return sign(t, k.ec, claims(nil), nil) }},
		{"EdDSA", nil, func() string { return sign(t, k.ed, claims(nil), nil) }},
		{"RS256 without kid, one RSA key among other families", nil, func() string {
			return sign(t, k.rsa, claims(nil), map[string]any{"kid": nil})
		}},
		{"ES256 without kid", nil, func() string { return sign(t, k.ec, claims(nil), map[string]any{"kid": nil}) }},
		{"EdDSA without kid", nil, func() string { return sign(t, k.ed, claims(nil), map[string]any{"kid": nil}) }},
		{"HS256 when enabled", func(c *Config) {
			c.Algs = []string{"EdDSA", "HS256"}
			c.HMACSecretFile = secretFile
		}, func() string { return hmacToken(t, secret, claims(nil), "") }},
		{"PS256 when allowed", psAllowed, func() string {
			tok := jwt.NewWithClaims(jwt.SigningMethodPS256, claims(nil))
			tok.Header["kid"] = k.rsa.kid
			s, _ := tok.SignedString(k.rsa.priv)
			return s
		}},
		{"ES384 when allowed", func(c *Config) {
			c.Algs = []string{"ES384"}
			c.KeysFile = keysFile(t, k.ec384)
		}, func() string { return sign(t, k.ec384, claims(nil), nil) }},
		{"PEM kid label", func(c *Config) { c.KeysFile = labelled }, func() string {
			return sign(t, k.rsa, claims(nil), map[string]any{"kid": "prod-2026"})
		}},
		{"PEM kid label, key also reachable by thumbprint", func(c *Config) { c.KeysFile = labelled }, func() string {
			return sign(t, k.rsa, claims(nil), nil)
		}},
		{"two RSA keys chosen by kid", func(c *Config) { c.KeysFile = keysFile(t, k.rsa, k.rsa2) }, func() string {
			return sign(t, k.rsa2, claims(nil), nil)
		}},
		{"expired within leeway", nil, func() string {
			return sign(t, k.ed, claims(func(c jwt.MapClaims) {
				c["iat"] = time.Now().Add(-time.Hour).Unix()
				c["exp"] = time.Now().Add(-10 * time.Second).Unix()
			}), nil)
		}},
		{"nbf within leeway", nil, func() string {
			return sign(t, k.ed, claims(func(c jwt.MapClaims) { c["nbf"] = time.Now().Add(10 * time.Second).Unix() }), nil)
		}},
		{"aud array containing ours", nil, func() string {
			return sign(t, k.ed, claims(func(c jwt.MapClaims) { c["aud"] = []string{"forge", testAud} }), nil)
		}},
		{"no aud in dev mode without an audience", func(c *Config) {
			c.DevMode = true
			c.Audience = ""
		}, func() string { return sign(t, k.ed, claims(func(c jwt.MapClaims) { delete(c, "aud") }), nil) }},
		{"no issuer configured, any iss", func(c *Config) { c.Issuer = "" }, func() string {
			return sign(t, k.ed, claims(func(c jwt.MapClaims) { c["iss"] = "https://other.example" }), nil)
		}},
		{"lifetime within MaxTTL", func(c *Config) { c.MaxTTL = time.Hour }, func() string {
			return sign(t, k.ed, claims(nil), nil)
		}},
		{"unknown claims ignored", nil, func() string {
			return sign(t, k.ed, claims(func(c jwt.MapClaims) { c["scope"] = "anything" }), nil)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := baseConfig(t)
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			v := newTestVerifier(t, cfg)
			p, err := v.Verify(context.Background(), tc.token())
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			want := &Principal{
				Subject: "agent-7", Owner: "acme", Orgs: []string{"team.b-2", "widgets"},
				Roles: []Role{{"billing", "acme"}, {"billing", "widgets"}},
			}
			if p.Subject != want.Subject || p.Owner != want.Owner || !slices.Equal(p.Orgs, want.Orgs) ||
				!slices.Equal(p.Roles, want.Roles) {
				t.Fatalf("principal = %+v; want %+v", p, want)
			}
		})
	}
}

func TestVerifyOptionalClaimsAbsent(t *testing.T) {
	k := keys(t)
	v := newTestVerifier(t, baseConfig(t))
	p, err := v.Verify(context.Background(), sign(t, k.ed, claims(func(c jwt.MapClaims) {
		delete(c, "orgs")
		delete(c, "roles")
	}), nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Orgs) != 0 || len(p.Roles) != 0 || p.Owner != "acme" {
		t.Fatalf("principal = %+v", p)
	}
	if org, err := p.SelectOrg(""); err != nil || org != "acme" {
		t.Fatalf("SelectOrg = %q, %v", org, err)
	}
}

func TestNewVerifierRefuses(t *testing.T) {
	k := keys(t)
	secretFile, _ := hmacSecretFile(t)
	short := writeFile(t, "short.secret", []byte("too-short\n"))
	pemAsSecret := writeFile(t, "pem.secret", pubPEM(t, k.rsa.pub, nil))

	privDER, _ := x509.MarshalPKCS8PrivateKey(k.ed.priv)
	privFile := writeFile(t, "priv.pem", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: privDER}))
	weakKey, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	weak := writeFile(t, "weak.pem", pubPEM(t, weakKey.Public(), nil))
	dupLabel := writeFile(t, "dup.pem", append(pubPEM(t, k.rsa.pub, map[string]string{"kid": "a"}),
		pubPEM(t, k.ec.pub, map[string]string{"kid": "a"})...))
	dupKey := writeFile(t, "dupkey.pem", append(pubPEM(t, k.rsa.pub, nil), pubPEM(t, k.rsa.pub, nil)...))
	badLabel := writeFile(t, "badlabel.pem", pubPEM(t, k.rsa.pub, map[string]string{"kid": "has space"}))
	empty := writeFile(t, "empty.pem", []byte("no pem here\n"))

	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no key at all", Config{Audience: testAud}, "no key usable"},
		{"missing audience outside dev mode", Config{KeysFile: keysFile(t, k.ed)}, "audience is required"},
		{"alg none", Config{KeysFile: keysFile(t, k.ed), Audience: testAud, Algs: []string{"EdDSA", "none"}}, `"none"`},
		{"alg NONE", Config{KeysFile: keysFile(t, k.ed), Audience: testAud, Algs: []string{"NONE"}}, `"none"`},
		{"unknown alg", Config{KeysFile: keysFile(t, k.ed), Audience: testAud, Algs: []string{"XS256"}}, "unknown algorithm"},
		{"empty alg list after trimming", Config{KeysFile: keysFile(t, k.ed), Audience: testAud, Algs: []string{" "}}, "empty"},
		{"HS256 allowed without secret", Config{KeysFile: keysFile(t, k.ed), Audience: testAud, Algs: []string{"HS256"}}, "no HMAC secret"},
		{"HMAC secret too short", Config{HMACSecretFile: short, Audience: testAud, Algs: []string{"HS256"}}, "at least 32 bytes"},
		{"HMAC secret too short for HS512", Config{HMACSecretFile: secretFile, Audience: testAud, Algs: []string{"HS512"}}, "at least 64 bytes"},
		{"HMAC secret is a public key", Config{HMACSecretFile: pemAsSecret, Audience: testAud, Algs: []string{"HS256"}}, "PEM"},
		{"HMAC secret set but HS256 not allowed, no other key", Config{HMACSecretFile: secretFile, Audience: testAud}, "no key usable"},
		{"keys only of a family not allowed", Config{KeysFile: keysFile(t, k.rsa), Audience: testAud, Algs: []string{"EdDSA"}}, "no key usable"},
		{"keys file missing", Config{KeysFile: "/nonexistent/keys.pem", Audience: testAud}, "no such file"},
		{"keys file with a private key", Config{KeysFile: privFile, Audience: testAud}, "private key"},
		{"keys file without PEM", Config{KeysFile: empty, Audience: testAud}, "no PEM public key"},
		{"RSA key under 2048 bits", Config{KeysFile: weak, Audience: testAud}, "2048"},
		{"duplicate kid label", Config{KeysFile: dupLabel, Audience: testAud}, "used twice"},
		{"duplicate key", Config{KeysFile: dupKey, Audience: testAud}, "appears twice"},
		{"bad kid label", Config{KeysFile: badLabel, Audience: testAud}, "kid label"},
		{"negative leeway", Config{KeysFile: keysFile(t, k.ed), Audience: testAud, Leeway: -time.Second}, "leeway"},
		{"huge leeway", Config{KeysFile: keysFile(t, k.ed), Audience: testAud, Leeway: time.Hour}, "leeway"},
		{"negative max TTL", Config{KeysFile: keysFile(t, k.ed), Audience: testAud, MaxTTL: -time.Second}, "max TTL"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, err := NewVerifier(context.Background(), tc.cfg, nil, nil)
			if err == nil {
				v.Close()
				t.Fatal("NewVerifier succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewVerifier error = %q; want it to mention %q", err, tc.want)
			}
		})
	}
}

func TestKeysFileFormats(t *testing.T) {
	k := keys(t)
	// A self-signed certificate and a PKCS#1 "RSA PUBLIC KEY" both carry usable keys.
	certDER := selfSignedCert(t, k.ec)
	pkcs1 := x509.MarshalPKCS1PublicKey(k.rsa.pub.(*rsa.PublicKey))
	data := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: certDER}),
		pem.EncodeToMemory(&pem.Block{Type: "RSA PUBLIC KEY", Bytes: pkcs1})...)
	cfg := Config{KeysFile: writeFile(t, "mixed.pem", data), Audience: testAud}
	v := newTestVerifier(t, cfg)
	for _, key := range []*testKey{k.ec, k.rsa} {
		if _, err := v.Verify(context.Background(), sign(t, key, claims(nil), nil)); err != nil {
			t.Fatalf("%s: %v", key.method.Alg(), err)
		}
	}
}

func TestThumbprintRFC7638(t *testing.T) {
	// RFC 7638 §3.1.
	n, _ := base64.RawURLEncoding.DecodeString("0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw")
	keys, _, err := parseJWKS([]byte(`{"keys":[{"kty":"RSA","e":"AQAB","alg":"RS256","n":"` +
		base64.RawURLEncoding.EncodeToString(n) + `"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	const want = "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs"
	if keys[0].thumbprint != want || keys[0].kid != want {
		t.Fatalf("thumbprint = %q, kid = %q; want %q", keys[0].thumbprint, keys[0].kid, want)
	}
}

func selfSignedCert(tb testing.TB, k *testKey) []byte {
	tb.Helper()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "jwt signing"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, k.pub, k.priv)
	if err != nil {
		tb.Fatal(err)
	}
	return der
}

func TestVerifyConcurrent(t *testing.T) {
	k := keys(t)
	v := newTestVerifier(t, baseConfig(t))
	toks := []string{sign(t, k.rsa, claims(nil), nil), sign(t, k.ec, claims(nil), nil), sign(t, k.ed, claims(nil), nil)}
	done := make(chan error)
	for i := range 8 {
		go func() {
			var err error
			for j := range 20 {
				if _, e := v.Verify(context.Background(), toks[(i+j)%len(toks)]); e != nil {
					err = e
				}
			}
			done <- err
		}()
	}
	for range 8 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

func TestKeysFileIsReadOnce(t *testing.T) {
	// Keys are parsed at construction: removing the file afterwards changes nothing.
	k := keys(t)
	cfg := baseConfig(t)
	v := newTestVerifier(t, cfg)
	if err := os.Remove(cfg.KeysFile); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(context.Background(), sign(t, k.ed, claims(nil), nil)); err != nil {
		t.Fatal(err)
	}
}
