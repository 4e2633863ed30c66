package auth

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"strings"
)

// family is the kind of key an algorithm needs. It is the second half of key selection: a kid alone
// never picks a key, the kid and the family together do.
type family uint8

const (
	famNone family = iota
	famRSA
	famEC
	famOKP
	famHMAC
)

func (f family) String() string {
	switch f {
	case famRSA:
		return "RSA"
	case famEC:
		return "EC"
	case famOKP:
		return "OKP"
	case famHMAC:
		return "HMAC"
	}
	return "none"
}

// algFamily lists every algorithm an operator may allow. Anything else, "none" included, is refused
// when the Verifier is built.
var algFamily = map[string]family{
	"RS256": famRSA, "RS384": famRSA, "RS512": famRSA,
	"PS256": famRSA, "PS384": famRSA, "PS512": famRSA,
	"ES256": famEC, "ES384": famEC, "ES512": famEC,
	"EdDSA": famOKP,
	"HS256": famHMAC, "HS384": famHMAC, "HS512": famHMAC,
}

// ecAlgCurve pins each ECDSA algorithm to its one curve (RFC 7518 §3.4).
var ecAlgCurve = map[string]string{"ES256": "P-256", "ES384": "P-384", "ES512": "P-521"}

const (
	minRSABits = 2048
	// maxRSABits keeps a hostile or careless key set from making every verify expensive.
	maxRSABits = 8192
	maxKIDLen  = 256
)

// verifyKey is one configured public key, parsed once at load time so Verify never re-parses.
type verifyKey struct {
	kid        string // explicit label, or the thumbprint when there is none
	thumbprint string // RFC 7638, always set
	fam        family
	crv        string // EC and OKP only
	alg        string // a JWK's own "alg" restriction; "" accepts any algorithm of the family
	key        any    // *rsa.PublicKey, *ecdsa.PublicKey or ed25519.PublicKey, as golang-jwt expects
}

// accepts reports whether the key may verify a token signed with alg.
func (k *verifyKey) accepts(alg string) bool {
	if algFamily[alg] != k.fam || k.fam == famNone {
		return false
	}
	if k.alg != "" && k.alg != alg {
		return false
	}
	if k.fam == famEC {
		return ecAlgCurve[alg] == k.crv
	}
	return true
}

// newVerifyKey validates a parsed public key and computes its thumbprint.
func newVerifyKey(pub any, kid string) (*verifyKey, error) {
	k := &verifyKey{}
	switch p := pub.(type) {
	case *rsa.PublicKey:
		if p.N == nil || p.N.BitLen() < minRSABits || p.N.BitLen() > maxRSABits {
			return nil, fmt.Errorf("RSA key must have %d to %d bits", minRSABits, maxRSABits)
		}
		if p.E < 3 || p.E > 1<<31-1 || p.E%2 == 0 {
			return nil, errors.New("RSA key has an invalid public exponent")
		}
		k.fam, k.key = famRSA, p
	case *ecdsa.PublicKey:
		crv := curveName(p.Curve)
		if crv == "" {
			return nil, errors.New("ECDSA key must use P-256, P-384 or P-521")
		}
		if _, err := p.Bytes(); err != nil {
			return nil, fmt.Errorf("ECDSA key: %w", err)
		}
		k.fam, k.crv, k.key = famEC, crv, p
	case ed25519.PublicKey:
		if len(p) != ed25519.PublicKeySize {
			return nil, errors.New("Ed25519 key has the wrong size")
		}
		k.fam, k.crv, k.key = famOKP, "Ed25519", p
	default:
		return nil, fmt.Errorf("unsupported public key type %T", pub)
	}
	tp, err := Thumbprint(k.key)
	if err != nil {
		return nil, err
	}
	k.thumbprint = tp
	k.kid = kid
	if k.kid == "" {
		k.kid = tp
	}
	return k, nil
}

func curveName(c elliptic.Curve) string {
	switch c {
	case elliptic.P256():
		return "P-256"
	case elliptic.P384():
		return "P-384"
	case elliptic.P521():
		return "P-521"
	}
	return ""
}

func curveByName(name string) elliptic.Curve {
	switch name {
	case "P-256":
		return elliptic.P256()
	case "P-384":
		return elliptic.P384()
	case "P-521":
		return elliptic.P521()
	}
	return nil
}

// Thumbprint returns the RFC 7638 JWK thumbprint (SHA-256, base64url without padding) of an RSA,
// ECDSA or Ed25519 public key: the default kid of a key loaded from a PEM file.
func Thumbprint(pub any) (string, error) {
	b64 := base64.RawURLEncoding.EncodeToString
	var canon string
	// The members are in lexicographic order with no whitespace, as RFC 7638 §3.2 requires.
	switch p := pub.(type) {
	case *rsa.PublicKey:
		e := big.NewInt(int64(p.E)).Bytes()
		canon = `{"e":"` + b64(e) + `","kty":"RSA","n":"` + b64(p.N.Bytes()) + `"}`
	case *ecdsa.PublicKey:
		crv := curveName(p.Curve)
		raw, err := p.Bytes()
		if crv == "" || err != nil {
			return "", errors.New("thumbprint: unsupported ECDSA key")
		}
		n := (len(raw) - 1) / 2
		canon = `{"crv":"` + crv + `","kty":"EC","x":"` + b64(raw[1:1+n]) + `","y":"` + b64(raw[1+n:]) + `"}`
	case ed25519.PublicKey:
		canon = `{"crv":"Ed25519","kty":"OKP","x":"` + b64(p) + `"}`
	default:
		return "", fmt.Errorf("thumbprint: unsupported key type %T", pub)
	}
	sum := sha256.Sum256([]byte(canon))
	return b64(sum[:]), nil
}

// validKID bounds a kid to printable ASCII without spaces; it is logged and compared, nothing more.
func validKID(s string) bool {
	if s == "" || len(s) > maxKIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// parsePEMKeys reads every block of an operator's keys file. Anything that is not a public key or a
// certificate is an error rather than skipped: a private key in this file means the operator pointed at
// the wrong file, and silently ignoring it would hide that.
func parsePEMKeys(data []byte) ([]*verifyKey, error) {
	var keys []*verifyKey
	labels := map[string]bool{}
	seen := map[string]bool{}
	for i := 1; ; i++ {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		var pub any
		var err error
		switch block.Type {
		case "PUBLIC KEY":
			pub, err = x509.ParsePKIXPublicKey(block.Bytes)
		case "RSA PUBLIC KEY":
			pub, err = x509.ParsePKCS1PublicKey(block.Bytes)
		case "CERTIFICATE":
			// The certificate is only a container for its key: the operator's file is the trust
			// decision, so neither chain nor validity period is consulted.
			var cert *x509.Certificate
			if cert, err = x509.ParseCertificate(block.Bytes); err == nil {
				pub = cert.PublicKey
			}
		default:
			if strings.Contains(block.Type, "PRIVATE") {
				return nil, fmt.Errorf("block %d is a private key: the keys file must hold public keys only", i)
			}
			return nil, fmt.Errorf("block %d: unsupported PEM type %q", i, block.Type)
		}
		if err != nil {
			return nil, fmt.Errorf("block %d: %w", i, err)
		}
		label, hasLabel := block.Headers["kid"]
		if hasLabel && !validKID(label) {
			return nil, fmt.Errorf("block %d: kid label must be 1-%d printable characters without spaces", i, maxKIDLen)
		}
		k, err := newVerifyKey(pub, label)
		if err != nil {
			return nil, fmt.Errorf("block %d: %w", i, err)
		}
		if hasLabel {
			if labels[label] {
				return nil, fmt.Errorf("block %d: kid %q is used twice", i, label)
			}
			labels[label] = true
		}
		if seen[k.thumbprint] {
			return nil, fmt.Errorf("block %d: the same key appears twice", i)
		}
		seen[k.thumbprint] = true
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, errors.New("no PEM public key found")
	}
	return keys, nil
}

// keyIndex is an immutable set of keys, looked up without locks on the Verify path.
type keyIndex struct {
	byKID map[string][]*verifyKey
	all   []*verifyKey
}

func newKeyIndex(keys []*verifyKey) *keyIndex {
	ix := &keyIndex{byKID: make(map[string][]*verifyKey, 2*len(keys)), all: keys}
	for _, k := range keys {
		ix.byKID[k.kid] = append(ix.byKID[k.kid], k)
		if k.thumbprint != k.kid {
			ix.byKID[k.thumbprint] = append(ix.byKID[k.thumbprint], k)
		}
	}
	return ix
}

// lookup appends to dst the keys named kid that accept alg, and reports whether kid names any key at
// all (so a caller can tell "unknown kid" from "kid of the wrong family").
func (ix *keyIndex) lookup(kid, alg string, dst []*verifyKey) ([]*verifyKey, bool) {
	if ix == nil {
		return dst, false
	}
	named, known := ix.byKID[kid]
	for _, k := range named {
		if k.accepts(alg) {
			dst = append(dst, k)
		}
	}
	return dst, known
}

// countFor returns how many keys accept alg, and the last of them.
func (ix *keyIndex) countFor(alg string) (int, *verifyKey) {
	if ix == nil {
		return 0, nil
	}
	n, last := 0, (*verifyKey)(nil)
	for _, k := range ix.all {
		if k.accepts(alg) {
			n, last = n+1, k
		}
	}
	return n, last
}
