package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// checkOutcome holds for every Verify result: either a refusal wrapping ErrUnauthenticated, or a
// principal whose every org name is well formed.
func checkOutcome(t *testing.T, p *Principal, err error) {
	t.Helper()
	if err != nil {
		if !errors.Is(err, ErrUnauthenticated) || p != nil {
			t.Fatalf("Verify = %v, %v; want nil and ErrUnauthenticated", p, err)
		}
		return
	}
	if p == nil || p.Subject == "" || !ValidOrg(p.Owner) {
		t.Fatalf("accepted principal is malformed: %+v", p)
	}
	for _, o := range p.Orgs {
		if !ValidOrg(o) {
			t.Fatalf("accepted org %q", o)
		}
	}
	for _, r := range p.Roles {
		if !ValidOrg(r.Name) || !ValidOrg(r.Org) {
			t.Fatalf("accepted role %+v", r)
		}
	}
}

func FuzzVerify(f *testing.F) {
	k := keys(f)
	secretFile, secret := hmacSecretFile(f)
	cfg := baseConfig(f)
	cfg.Algs = []string{"RS256", "ES256", "EdDSA", "HS256"}
	cfg.HMACSecretFile = secretFile
	v := newTestVerifier(f, cfg)

	for _, key := range []*testKey{k.rsa, k.ec, k.ed} {
		f.Add(sign(f, key, claims(nil), nil))
		f.Add(sign(f, key, claims(nil), map[string]any{"kid": nil}))
	}
	f.Add(hmacToken(f, secret, claims(nil), ""))
	f.Add(rawToken(f, map[string]any{"alg": "none"}, claims(nil), nil))
	f.Add(rawToken(f, map[string]any{"alg": "HS256", "kid": k.rsa.kid}, claims(nil), []byte("sig")))
	f.Add("")
	f.Add("..")
	f.Add("a.b.c.d")
	f.Add("eyJhbGciOiJFZERTQSJ9.e30.")

	f.Fuzz(func(t *testing.T, raw string) {
		p, err := v.Verify(context.Background(), raw)
		checkOutcome(t, p, err)
	})
}

// FuzzClaims drives the claims decoding behind a valid signature: whatever JSON an issuer signs, Verify
// never panics and never accepts a malformed principal.
func FuzzClaims(f *testing.F) {
	k := keys(f)
	v := newTestVerifier(f, Config{KeysFile: keysFile(f, k.ed), Audience: testAud, MaxTTL: 24 * time.Hour})
	hdr, _ := json.Marshal(map[string]any{"alg": "EdDSA", "typ": "JWT", "kid": k.ed.kid})
	hdr64 := base64.RawURLEncoding.EncodeToString(hdr)
	priv := k.ed.priv.(ed25519.PrivateKey)

	good, _ := json.Marshal(claims(nil))
	f.Add(good)
	exp := time.Now().Add(time.Hour).Unix()
	for _, s := range []string{
		`{}`, `null`, `[]`, `"x"`, `{"sub":"a","owner":"acme","aud":"lsp","exp":1e308}`,
		`{"sub":"a","owner":"acme","aud":"lsp","exp":-1e308,"iat":1e308,"nbf":"x"}`,
		`{"sub":"a","owner":"acme","aud":["lsp",1],"exp":` + jsonInt(exp) + `}`,
		`{"sub":"a","owner":"acme","aud":"lsp","exp":` + jsonInt(exp) + `,"orgs":null,"roles":[null]}`,
		`{"sub":"a","owner":"acme","aud":"lsp","exp":` + jsonInt(exp) + `,"roles":["billing:acme","x:y:z"]}`,
		`{"sub":"a","owner":"acme","owner":"Evil","aud":"lsp","exp":` + jsonInt(exp) + `}`,
		`{"sub":"\u0000","owner":"acme","aud":"lsp","exp":` + jsonInt(exp) + `}`,
	} {
		f.Add([]byte(s))
	}

	f.Fuzz(func(t *testing.T, payload []byte) {
		input := hdr64 + "." + base64.RawURLEncoding.EncodeToString(payload)
		tok := input + "." + base64.RawURLEncoding.EncodeToString(ed25519.Sign(priv, []byte(input)))
		p, err := v.Verify(context.Background(), tok)
		checkOutcome(t, p, err)
	})
}

func jsonInt(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func FuzzBearerToken(f *testing.F) {
	for _, s := range []string{"Bearer abc.def.ghi", "bearer x", "Basic x", "", "Bearer ", "Bearer a=b", "Bearer  x=="} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		tok, err := BearerToken(header)
		if err != nil {
			if !errors.Is(err, ErrUnauthenticated) || tok != "" {
				t.Fatalf("BearerToken = %q, %v", tok, err)
			}
			return
		}
		if tok == "" || len(tok) > MaxTokenBytes || strings.ContainsAny(tok, " \t\r\n,") || !strings.Contains(header, tok) {
			t.Fatalf("BearerToken(%q) = %q", header, tok)
		}
	})
}

func FuzzParseJWKS(f *testing.F) {
	k := keys(f)
	for _, pub := range []any{k.rsa.pub, k.ec.pub, k.ec384.pub, k.ed.pub} {
		doc, _ := json.Marshal(map[string]any{"keys": []any{toJWK(f, pub, "k")}})
		f.Add(doc)
	}
	f.Add([]byte(`{"keys":[{"kty":"EC","crv":"P-256","x":"AA","y":"AA"}]}`))
	f.Add([]byte(`{"keys":[{"kty":"RSA","n":"AA","e":"AQAB"}]}`))
	f.Add([]byte(`{"keys":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		keys, _, err := parseJWKS(data)
		if err == nil && len(keys) == 0 {
			t.Fatal("no error and no keys")
		}
		for _, key := range keys {
			if key.fam == famNone || key.key == nil || key.thumbprint == "" || !validKID(key.kid) {
				t.Fatalf("malformed key %+v", key)
			}
		}
	})
}

func FuzzParsePEMKeys(f *testing.F) {
	k := keys(f)
	f.Add(pubPEM(f, k.rsa.pub, nil))
	f.Add(pubPEM(f, k.ed.pub, map[string]string{"kid": "label"}))
	f.Add(append(pubPEM(f, k.ec.pub, nil), "trailing junk"...))
	f.Add([]byte("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		keys, err := parsePEMKeys(data)
		if err == nil && len(keys) == 0 {
			t.Fatal("no error and no keys")
		}
	})
}

// TestKeyfuncFamilies is a direct check of the keyfunc: whatever alg and kid a token
// names, the key it returns is of that alg's family.
func TestKeyfuncFamilies(t *testing.T) {
	k := keys(t)
	secretFile, _ := hmacSecretFile(t)
	cfg := baseConfig(t)
	cfg.Algs = []string{"RS256", "PS256", "ES256", "EdDSA", "HS256"}
	cfg.HMACSecretFile = secretFile
	v := newTestVerifier(t, cfg)
	kids := []any{nil, k.rsa.kid, k.ec.kid, k.ed.kid, "unknown"}
	returned := 0
	for _, alg := range cfg.Algs {
		for _, kid := range kids {
			tok := &jwt.Token{Method: jwt.GetSigningMethod(alg), Header: map[string]any{"alg": alg}}
			if kid != nil {
				tok.Header["kid"] = kid
			}
			key, err := v.key(context.Background(), tok)
			if err != nil {
				continue
			}
			returned++
			var fam family
			switch key.(type) {
			case []byte:
				fam = famHMAC
			case ed25519.PublicKey:
				fam = famOKP
			case *rsa.PublicKey:
				fam = famRSA
			case *ecdsa.PublicKey:
				fam = famEC
			}
			if fam != algFamily[alg] {
				t.Errorf("alg %s kid %v: keyfunc returned %T (family %v)", alg, kid, key, fam)
			}
		}
	}
	// RS256/PS256/ES256/EdDSA each with no kid and with their own kid, plus HS256 without kid.
	if returned != 9 {
		t.Errorf("keyfunc returned %d keys; want 9", returned)
	}
}
