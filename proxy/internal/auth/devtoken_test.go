package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestGenerateDevKeyAndSign(t *testing.T) {
	dir := t.TempDir()
	priv, pub, err := GenerateDevKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	priv2, pub2, err := GenerateDevKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	if priv == priv2 || pub == pub2 {
		t.Fatal("two calls wrote the same files")
	}
	a, _ := os.ReadFile(pub)
	b, _ := os.ReadFile(pub2)
	if string(a) == string(b) {
		t.Fatal("two calls produced the same key")
	}
	if fi, err := os.Stat(priv); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("private key mode = %v, %v; want 0600", fi.Mode().Perm(), err)
	}

	v := newTestVerifier(t, Config{KeysFile: pub, Audience: "lsp", Issuer: "dev"})
	tok, err := SignDevToken(priv, DevClaims{
		Subject: "dev", Owner: "dev-org", Orgs: []string{"other"}, Roles: []string{"billing:dev-org"},
		Audience: "lsp", Issuer: "dev",
	}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	p, err := v.Verify(context.Background(), tok)
	if err != nil {
		t.Fatalf("Verify(dev token): %v", err)
	}
	if p.Subject != "dev" || p.Owner != "dev-org" || !slices.Equal(p.Orgs, []string{"other"}) || !p.HasRole("billing", "dev-org") {
		t.Fatalf("principal = %+v", p)
	}

	// The other key pair's token is refused by this verifier, with its own (default) kid or ours.
	other, err := SignDevToken(priv2, DevClaims{Subject: "dev", Owner: "dev-org", Audience: "lsp", Issuer: "dev"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(context.Background(), other); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("token of another dev key accepted: %v", err)
	}
	labelled, err := SignDevToken(priv, DevClaims{Subject: "dev", Owner: "dev-org", Audience: "lsp", Issuer: "dev", KID: "custom"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(context.Background(), labelled); err == nil || !strings.HasSuffix(err.Error(), "unknown key") {
		t.Fatalf("custom kid unknown to the keys file: %v", err)
	}
	if _, err := SignDevToken(priv, DevClaims{Subject: "dev", Owner: "dev-org"}, 0); err == nil {
		t.Fatal("zero ttl accepted")
	}
	if _, err := SignDevToken(pub, DevClaims{Subject: "dev", Owner: "dev-org"}, time.Hour); err == nil {
		t.Fatal("signing with a public key file succeeded")
	}
}

func TestSignDevTokenECDSA(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalECPrivateKey(key)
	priv := writeFile(t, "ec.key", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}))
	v := newTestVerifier(t, Config{KeysFile: writeFile(t, "ec.pub", pubPEM(t, key.Public(), nil)), Audience: "lsp"})
	tok, err := SignDevToken(priv, DevClaims{Subject: "dev", Owner: "dev-org", Audience: "lsp"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(context.Background(), tok); err != nil {
		t.Fatal(err)
	}
}
