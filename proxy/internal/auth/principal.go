package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

var (
	// ErrUnauthenticated is wrapped by every refusal of a token or of an Authorization header (HTTP 401).
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrForbidden is wrapped when an authenticated principal asks for an org it does not belong to
	// (HTTP 403).
	ErrForbidden = errors.New("forbidden")
)

// MaxTokenBytes bounds a raw token; anything longer is refused before any decoding.
const MaxTokenBytes = 16 << 10

// Role is one "ROLE:ORG" entry of the roles claim, e.g. {Name: "billing", Org: "acme"}.
type Role struct {
	Name string
	Org  string
}

// Principal is the verified caller.
type Principal struct {
	Subject string   // the person or agent (sub)
	Owner   string   // the principal's home org
	Orgs    []string // further orgs the principal belongs to
	Roles   []Role
	// Audience is the token's aud, for forwarding it to the forge only when
	// it names the forge (LSP_FORGE_AUTH=jwt).
	Audience []string
	// Login is the verified claim Config.LoginClaim names (the forge login
	// of LSP_FORGE_AUTH=sudo); empty when not configured, absent or not a
	// well-formed login.
	Login string
}

// Clone is a copy of p that shares no slice with it.
func (p *Principal) Clone() *Principal {
	c := *p
	c.Orgs = slices.Clone(p.Orgs)
	c.Roles = slices.Clone(p.Roles)
	c.Audience = slices.Clone(p.Audience)
	return &c
}

// SelectOrg returns the org a request acts for: the X-Org-Id header value when present, which must be
// Owner or one of Orgs (else an error wrapping ErrForbidden), and Owner when the header is empty. The
// comparison is exact: no trimming or case folding, so look-alike names never match.
func (p *Principal) SelectOrg(header string) (string, error) {
	if header == "" {
		return p.Owner, nil
	}
	if !ValidOrg(header) {
		return "", fmt.Errorf("%w: invalid org id", ErrForbidden)
	}
	if header == p.Owner || slices.Contains(p.Orgs, header) {
		return header, nil
	}
	return "", fmt.Errorf("%w: not a member of the requested org", ErrForbidden)
}

// HasRole reports whether the principal holds role for org (e.g. HasRole("billing", "acme")).
func (p *Principal) HasRole(role, org string) bool {
	for _, r := range p.Roles {
		if r.Name == role && r.Org == org {
			return true
		}
	}
	return false
}

// repoRE is a repository's name inside an org, as the API takes it and
// the daemon's workspace key holds it.
var repoRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$`)

// ValidRepo reports whether s is a well-formed repository name:
// ^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$, and not "." or "..".
func ValidRepo(s string) bool { return repoRE.MatchString(s) && s != "." && s != ".." }

// ValidOrg reports whether s is a well-formed org name: ^[a-z0-9][a-z0-9._-]{0,63}$. The proxy and the
// daemon agree on this pattern.
func ValidOrg(s string) bool {
	if len(s) == 0 || len(s) > 64 || !isLowerAlnum(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !isLowerAlnum(c) && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

func isLowerAlnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }

// parseRole splits "ROLE:ORG"; both halves follow the org pattern (role names are lowercase too).
func parseRole(s string) (Role, bool) {
	name, org, ok := strings.Cut(s, ":")
	if !ok || !ValidOrg(name) || !ValidOrg(org) {
		return Role{}, false
	}
	return Role{Name: name, Org: org}, true
}

// TenantKey is what the daemon knows of an org: hex(HMAC-SHA256(secret, org)), or hex(SHA-256(org))
// when secret is empty. Every proxy replica must use the same secret.
func TenantKey(secret []byte, org string) string {
	if len(secret) == 0 {
		sum := sha256.Sum256([]byte(org))
		return hex.EncodeToString(sum[:])
	}
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(org))
	return hex.EncodeToString(m.Sum(nil))
}

// BearerToken extracts the token of an Authorization header of the form "Bearer <token>" (scheme
// case-insensitive, RFC 7235). The token must be at most MaxTokenBytes of RFC 6750 b64token
// characters. Errors wrap ErrUnauthenticated.
func BearerToken(header string) (string, error) {
	const scheme = "bearer"
	// Bound first, so nothing below ever walks a huge header.
	if len(header) > MaxTokenBytes+len(scheme)+16 {
		return "", fmt.Errorf("%w: token too large", ErrUnauthenticated)
	}
	header = strings.Trim(header, " \t")
	if header == "" {
		return "", fmt.Errorf("%w: missing bearer token", ErrUnauthenticated)
	}
	if len(header) < len(scheme) || !strings.EqualFold(header[:len(scheme)], scheme) {
		return "", fmt.Errorf("%w: not a bearer token", ErrUnauthenticated)
	}
	rest := header[len(scheme):]
	tok := strings.TrimLeft(rest, " ")
	if tok == "" {
		return "", fmt.Errorf("%w: missing bearer token", ErrUnauthenticated)
	}
	if len(tok) == len(rest) {
		return "", fmt.Errorf("%w: not a bearer token", ErrUnauthenticated)
	}
	if len(tok) > MaxTokenBytes {
		return "", fmt.Errorf("%w: token too large", ErrUnauthenticated)
	}
	pad := false
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		switch {
		case c == '=' && i > 0:
			pad = true
		case pad:
			// b64token allows '=' only as trailing padding.
			return "", fmt.Errorf("%w: malformed bearer token", ErrUnauthenticated)
		case isLowerAlnum(c), c >= 'A' && c <= 'Z', c == '-', c == '.', c == '_', c == '~', c == '+', c == '/':
		default:
			return "", fmt.Errorf("%w: malformed bearer token", ErrUnauthenticated)
		}
	}
	return tok, nil
}
