package auth

import (
	"context"
	"slices"
	"testing"
	"time"
)

func TestLoginClaimAndAudience(t *testing.T) {
	priv, pub, err := GenerateDevKey(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	v, err := NewVerifier(context.Background(), Config{KeysFile: pub, Audience: "lsp", LoginClaim: "forge_login"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	for _, tc := range []struct {
		name   string
		claims map[string]string
		want   string
	}{
		{"login", map[string]string{"forge_login": "alice.b-c_d"}, "alice.b-c_d"},
		{"absent", nil, ""},
		{"other claim", map[string]string{"preferred_username": "alice"}, ""},
		{"not a login", map[string]string{"forge_login": "alice\r\nSudo: root"}, ""},
		{"too long", map[string]string{"forge_login": "a123456789012345678901234567890123456789x"}, ""},
		{"leading dash", map[string]string{"forge_login": "-alice"}, ""},
		// A claim cannot replace a fixed one: "sub" stays the subject.
		{"sub", map[string]string{"sub": "mallory"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok, err := SignDevToken(priv, DevClaims{Subject: "alice@acme", Owner: "acme", Audience: "lsp",
				ExtraAudiences: []string{"forge"}, Claims: tc.claims}, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			p, err := v.Verify(context.Background(), tok)
			if err != nil {
				t.Fatal(err)
			}
			if p.Login != tc.want || p.Subject != "alice@acme" {
				t.Errorf("Login = %q, Subject = %q; want %q, alice@acme", p.Login, p.Subject, tc.want)
			}
			if !slices.Equal(p.Audience, []string{"lsp", "forge"}) {
				t.Errorf("Audience = %q", p.Audience)
			}
		})
	}
	// A tampered login never verifies: the claim is read only from a
	// verified token.
	if got := loginClaim("not.a.token", "forge_login"); got != "" {
		t.Errorf("loginClaim(garbage) = %q", got)
	}
}

func FuzzLoginClaim(f *testing.F) {
	f.Add("eyJhbGciOiJFZERTQSJ9.eyJmb3JnZV9sb2dpbiI6ImFsaWNlIn0.sig", "forge_login")
	f.Add("a.b.c", "x")
	f.Fuzz(func(t *testing.T, raw, name string) {
		if l := loginClaim(raw, name); l != "" && !loginRE.MatchString(l) {
			t.Fatalf("loginClaim returned %q", l)
		}
	})
}
