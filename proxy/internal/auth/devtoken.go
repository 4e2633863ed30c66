package auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// DevClaims describes a development token for SignDevToken.
type DevClaims struct {
	Subject  string
	Owner    string
	Orgs     []string // optional
	Roles    []string // optional, "ROLE:ORG"
	Audience string   // optional; the Verifier requires it outside development mode
	// ExtraAudiences are further aud values (a token for the service and
	// the forge, LSP_FORGE_AUTH=jwt).
	ExtraAudiences []string
	// Claims are further string claims (the forge login of
	// LSP_FORGE_AUTH=sudo); they never replace the ones above.
	Claims map[string]string
	Issuer string // optional
	KID    string // optional; default: the RFC 7638 thumbprint of the signing key
}

// GenerateDevKey writes a fresh Ed25519 key pair into dir for `make run` and tests: a PKCS#8 private
// key (mode 0600) and its "PUBLIC KEY" (mode 0644), suitable as LSP_JWT_KEYS. Each call makes new,
// uniquely named files; no key is ever built into the binary.
func GenerateDevKey(dir string) (privPEMPath, pubPEMPath string, err error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", "", fmt.Errorf("generate dev key: %w", err)
	}
	privDER, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return "", "", fmt.Errorf("generate dev key: %w", err)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", "", fmt.Errorf("generate dev key: %w", err)
	}
	f, err := os.CreateTemp(dir, "dev-jwt-*.key") // CreateTemp opens with 0600
	if err != nil {
		return "", "", fmt.Errorf("generate dev key: %w", err)
	}
	privPEMPath = f.Name()
	err = pem.Encode(f, &pem.Block{Type: "PRIVATE KEY", Bytes: privDER})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(privPEMPath)
		return "", "", fmt.Errorf("generate dev key: %w", err)
	}
	pubPEMPath = strings.TrimSuffix(privPEMPath, ".key") + ".pub"
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})
	if err := writeNew(pubPEMPath, pubPEM, 0o644); err != nil {
		os.Remove(privPEMPath)
		return "", "", fmt.Errorf("generate dev key: %w", err)
	}
	return filepath.Clean(privPEMPath), filepath.Clean(pubPEMPath), nil
}

func writeNew(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// devPayload is the wire form of DevClaims.
type devPayload struct {
	Subject  string           `json:"sub"`
	Owner    string           `json:"owner"`
	Orgs     []string         `json:"orgs,omitempty"`
	Roles    []string         `json:"roles,omitempty"`
	Audience jwt.ClaimStrings `json:"aud,omitempty"`
	Issuer   string           `json:"iss,omitempty"`
	IssuedAt *jwt.NumericDate `json:"iat"`
	Expires  *jwt.NumericDate `json:"exp"`
	extra    map[string]string
}

// MarshalJSON adds the extra claims beside the fixed ones.
func (p devPayload) MarshalJSON() ([]byte, error) {
	type plain devPayload
	b, err := json.Marshal(plain(p))
	if err != nil || len(p.extra) == 0 {
		return b, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	for k, v := range p.extra {
		if _, taken := m[k]; !taken {
			m[k] = v
		}
	}
	return json.Marshal(m)
}

func (p devPayload) GetExpirationTime() (*jwt.NumericDate, error) { return p.Expires, nil }
func (p devPayload) GetIssuedAt() (*jwt.NumericDate, error)       { return p.IssuedAt, nil }
func (p devPayload) GetNotBefore() (*jwt.NumericDate, error)      { return nil, nil }
func (p devPayload) GetIssuer() (string, error)                   { return p.Issuer, nil }
func (p devPayload) GetSubject() (string, error)                  { return p.Subject, nil }
func (p devPayload) GetAudience() (jwt.ClaimStrings, error)       { return p.Audience, nil }

// SignDevToken signs a token valid for ttl from now with the PEM private key at privPEMPath (as written
// by GenerateDevKey; RSA and ECDSA PKCS#8/PKCS#1/SEC 1 keys work too, as RS256 and ES256/384/512).
func SignDevToken(privPEMPath string, claims DevClaims, ttl time.Duration) (string, error) {
	if ttl <= 0 {
		return "", errors.New("sign dev token: ttl must be positive")
	}
	data, err := os.ReadFile(privPEMPath)
	if err != nil {
		return "", fmt.Errorf("sign dev token: %w", err)
	}
	signer, err := parsePrivateKey(data)
	if err != nil {
		return "", fmt.Errorf("sign dev token: %w", err)
	}
	var method jwt.SigningMethod
	switch k := signer.(type) {
	case ed25519.PrivateKey:
		method = jwt.SigningMethodEdDSA
	case *rsa.PrivateKey:
		method = jwt.SigningMethodRS256
	case *ecdsa.PrivateKey:
		switch curveName(k.Curve) {
		case "P-256":
			method = jwt.SigningMethodES256
		case "P-384":
			method = jwt.SigningMethodES384
		case "P-521":
			method = jwt.SigningMethodES512
		default:
			return "", errors.New("sign dev token: unsupported ECDSA curve")
		}
	default:
		return "", fmt.Errorf("sign dev token: unsupported key type %T", signer)
	}
	kid := claims.KID
	if kid == "" {
		if kid, err = Thumbprint(signer.Public()); err != nil {
			return "", fmt.Errorf("sign dev token: %w", err)
		}
	}
	now := time.Now()
	var aud jwt.ClaimStrings
	if claims.Audience != "" {
		aud = append(aud, claims.Audience)
	}
	aud = append(aud, claims.ExtraAudiences...)
	tok := jwt.NewWithClaims(method, devPayload{
		Subject: claims.Subject, Owner: claims.Owner, Orgs: claims.Orgs, Roles: claims.Roles,
		Audience: aud, Issuer: claims.Issuer,
		IssuedAt: jwt.NewNumericDate(now), Expires: jwt.NewNumericDate(now.Add(ttl)),
		extra: claims.Claims,
	})
	tok.Header["kid"] = kid
	s, err := tok.SignedString(signer)
	if err != nil {
		return "", fmt.Errorf("sign dev token: %w", err)
	}
	return s, nil
}

func parsePrivateKey(data []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	var key any
	var err error
	switch block.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("unsupported PEM type %q", block.Type)
	}
	if err != nil {
		return nil, err
	}
	s, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("unsupported key type %T", key)
	}
	return s, nil
}
