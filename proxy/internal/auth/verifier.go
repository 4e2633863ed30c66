package auth

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/golang-jwt/jwt/v5"
)

// Config is the operator's identity configuration (LSP_JWT_* in CONTRACT §8).
type Config struct {
	// KeysFile is a PEM file with one or more "PUBLIC KEY", "RSA PUBLIC KEY" or "CERTIFICATE" blocks
	// (RSA ≥ 2048 bits, ECDSA P-256/384/521, Ed25519). A block's kid is its `kid: LABEL` PEM header
	// when present; every key is also known by its RFC 7638 thumbprint.
	KeysFile string
	// JWKSURL is a JWKS endpoint, cached and refreshed (see the package doc).
	JWKSURL string
	// HMACSecretFile holds a secret of at least the hash size (32 bytes for HS256); one trailing
	// newline is ignored. It is used only when an HS* algorithm is also in Algs.
	HMACSecretFile string
	// Issuer, when set, must equal the token's iss.
	Issuer string
	// Audience must be one of the token's aud. Required unless DevMode.
	Audience string
	// Algs is the allow-list; empty means RS256, ES256, EdDSA. "none" is always refused.
	Algs []string
	// MaxTTL, when positive, caps exp−iat (or exp−nbf, or exp−now when neither is present).
	MaxTTL time.Duration
	// Leeway absorbs clock skew on exp, nbf and iat; 0 means 30 s, at most 5 min.
	Leeway time.Duration
	// DevMode makes Audience optional and allows a plain-http JWKS URL.
	DevMode bool
	// LoginClaim, when set, names a string claim copied into
	// Principal.Login (see login.go).
	LoginClaim string
}

// defaultAlgs is the allow-list used when Config.Algs is empty.
var defaultAlgs = []string{"RS256", "ES256", "EdDSA"}

const (
	defaultLeeway = 30 * time.Second
	maxLeeway     = 5 * time.Minute
	maxSubjectLen = 256
)

// Verifier checks bearer tokens. It is safe for concurrent use; keys are parsed once, at start-up or
// when a JWKS is fetched, never per call.
type Verifier struct {
	log     *slog.Logger
	parser  *jwt.Parser
	allowed map[string]bool
	static  *keyIndex   // from KeysFile; nil when none
	jwks    *jwksSource // nil when no JWKSURL
	hmac    []byte      // nil unless an HS* algorithm is allowed
	issuer  string
	login   string // Config.LoginClaim
	maxTTL  time.Duration
	leeway  time.Duration
	now     func() time.Time

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// options are knobs tests turn; production uses defaultOptions.
type options struct {
	now              func() time.Time
	jwksMinRefetch   time.Duration
	jwksRefreshEvery time.Duration
	jwksFetchTimeout time.Duration
	jwksMaxBytes     int64
}

func defaultOptions() options {
	return options{
		now:              time.Now,
		jwksMinRefetch:   defaultJWKSMinRefetch,
		jwksRefreshEvery: defaultJWKSRefreshEvery,
		jwksFetchTimeout: defaultJWKSFetchTimeout,
		jwksMaxBytes:     defaultJWKSMaxBytes,
	}
}

// NewVerifier validates cfg, loads its keys and, with a JWKS URL, fetches the set once (a failure is
// an error) and refreshes it in the background until ctx is done or Close is called. It refuses a
// configuration with no usable key, a missing Audience outside DevMode, and any unknown algorithm or
// "none". client is used for the JWKS (nil: a default client with a timeout); a nil log discards.
// Call Close when done.
func NewVerifier(ctx context.Context, cfg Config, client *http.Client, log *slog.Logger) (*Verifier, error) {
	return newVerifier(ctx, cfg, client, log, defaultOptions())
}

func newVerifier(ctx context.Context, cfg Config, client *http.Client, log *slog.Logger, o options) (*Verifier, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	v := &Verifier{log: log, issuer: cfg.Issuer, login: cfg.LoginClaim, maxTTL: cfg.MaxTTL, leeway: cfg.Leeway, now: o.now}

	algs, err := checkAlgs(cfg.Algs)
	if err != nil {
		return nil, fmt.Errorf("configure JWT algorithms: %w", err)
	}
	v.allowed = make(map[string]bool, len(algs))
	hmacAlgs := 0
	for _, a := range algs {
		v.allowed[a] = true
		if algFamily[a] == famHMAC {
			hmacAlgs++
		}
	}
	switch {
	case cfg.Leeway < 0 || cfg.Leeway > maxLeeway:
		return nil, fmt.Errorf("configure JWT leeway: must be between 0 and %s", maxLeeway)
	case cfg.Leeway == 0:
		v.leeway = defaultLeeway
	}
	if cfg.MaxTTL < 0 {
		return nil, errors.New("configure JWT max TTL: must not be negative")
	}
	if cfg.Audience == "" && !cfg.DevMode {
		return nil, errors.New("configure JWT audience: an audience is required outside development mode")
	}

	if cfg.KeysFile != "" {
		data, err := os.ReadFile(cfg.KeysFile)
		if err != nil {
			return nil, fmt.Errorf("load JWT keys file: %w", err)
		}
		keys, err := parsePEMKeys(data)
		if err != nil {
			return nil, fmt.Errorf("load JWT keys file %s: %w", cfg.KeysFile, err)
		}
		v.static = newKeyIndex(keys)
		for _, k := range keys {
			log.Info("jwt key loaded", "kid", k.kid, "thumbprint", k.thumbprint, "type", k.fam.String())
		}
	}

	switch {
	case cfg.HMACSecretFile != "" && hmacAlgs > 0:
		secret, err := loadHMACSecret(cfg.HMACSecretFile, algs)
		if err != nil {
			return nil, fmt.Errorf("load JWT HMAC secret: %w", err)
		}
		v.hmac = secret
	case hmacAlgs > 0:
		return nil, errors.New("configure JWT algorithms: an HS* algorithm is allowed but no HMAC secret file is set")
	case cfg.HMACSecretFile != "":
		log.Warn("jwt HMAC secret file ignored: no HS* algorithm is allowed", "file", cfg.HMACSecretFile)
	}

	// Without a JWKS, keys that no allowed algorithm can use are as good as no keys.
	if cfg.JWKSURL == "" && v.hmac == nil && !v.staticUsable(algs) {
		return nil, errors.New("configure JWT keys: no key usable with the allowed algorithms (set LSP_JWT_KEYS or LSP_JWKS_URL)")
	}

	v.parser = jwt.NewParser(v.parserOptions(cfg, algs)...)

	life, cancel := context.WithCancel(ctx)
	v.cancel = cancel
	if cfg.JWKSURL != "" {
		if err := checkJWKSURL(cfg.JWKSURL, cfg.DevMode); err != nil {
			cancel()
			return nil, fmt.Errorf("configure JWKS: %w", err)
		}
		// Redirects are never followed: keys come from the configured URL
		// only, not from wherever it (or someone in its path) points.
		c := http.Client{Timeout: o.jwksFetchTimeout}
		if client != nil {
			c = *client
		}
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		v.jwks = &jwksSource{
			url: cfg.JWKSURL, client: &c, log: log, now: o.now,
			maxAge:     o.jwksRefreshEvery + o.jwksFetchTimeout,
			minRefetch: o.jwksMinRefetch, fetchTimeout: o.jwksFetchTimeout, maxBytes: o.jwksMaxBytes,
			life: life, wg: &v.wg,
		}
		v.jwks.refetch(ctx, true)
		if v.jwks.current() == nil {
			v.Close()
			v.jwks.mu.Lock()
			err := v.jwks.lastErr
			v.jwks.mu.Unlock()
			if err == nil {
				err = ctx.Err()
			}
			return nil, fmt.Errorf("initial JWKS fetch: %w", err)
		}
		v.wg.Add(1)
		go v.jwks.refreshLoop(o.jwksRefreshEvery)
	}
	if cfg.DevMode {
		log.Warn("jwt verifier in development mode: audience optional, plain-http JWKS allowed")
	}
	return v, nil
}

func checkAlgs(in []string) ([]string, error) {
	if len(in) == 0 {
		return slices.Clone(defaultAlgs), nil
	}
	var out []string
	for _, a := range in {
		a = strings.TrimSpace(a)
		switch {
		case a == "":
			continue
		case strings.EqualFold(a, "none"):
			return nil, errors.New(`"none" is never allowed`)
		case algFamily[a] == famNone:
			return nil, fmt.Errorf("unknown algorithm %q", a)
		}
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("the allow-list is empty")
	}
	return out, nil
}

func loadHMACSecret(path string, algs []string) ([]byte, error) {
	secret, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	secret = bytes.TrimSuffix(secret, []byte("\n"))
	secret = bytes.TrimSuffix(secret, []byte("\r"))
	// A public key used as the HMAC secret is the classic key-confusion mistake: refuse it outright.
	if bytes.Contains(secret, []byte("-----BEGIN")) {
		return nil, errors.New("the secret file holds PEM data; an HMAC secret must be private random bytes")
	}
	need := 0
	for _, a := range algs {
		switch a {
		case "HS256":
			need = max(need, 32)
		case "HS384":
			need = max(need, 48)
		case "HS512":
			need = max(need, 64)
		}
	}
	if len(secret) < need {
		return nil, fmt.Errorf("the secret must be at least %d bytes for the allowed HS* algorithms", need)
	}
	return secret, nil
}

func (v *Verifier) staticUsable(algs []string) bool {
	for _, a := range algs {
		if n, _ := v.static.countFor(a); n > 0 {
			return true
		}
	}
	return false
}

func (v *Verifier) parserOptions(cfg Config, algs []string) []jwt.ParserOption {
	opts := []jwt.ParserOption{
		jwt.WithValidMethods(algs),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(v.leeway),
		jwt.WithTimeFunc(v.now),
		// Non-canonical base64 would let one signature have several spellings.
		jwt.WithStrictDecoding(),
	}
	if cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(cfg.Issuer))
	}
	if cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(cfg.Audience))
	}
	return opts
}

// Close stops the background JWKS refresh and waits for in-flight fetches. Verify keeps working on the
// keys already loaded.
func (v *Verifier) Close() {
	if v.jwks != nil {
		v.jwks.close()
	}
	v.cancel()
	v.wg.Wait()
}

// tokenClaims is the token payload this service reads; other claims are ignored.
type tokenClaims struct {
	jwt.RegisteredClaims
	Owner string   `json:"owner"`
	Orgs  []string `json:"orgs"`
	Roles []string `json:"roles"`
}

// reason is a short, safe refusal text; it never carries token content.
type reason string

func (r reason) Error() string { return string(r) }

func refuse(r reason) error { return fmt.Errorf("%w: %s", ErrUnauthenticated, r) }

// Verify checks raw (the token without "Bearer ") and returns its principal. Every error wraps
// ErrUnauthenticated. ctx bounds only a JWKS refetch for an unknown kid.
func (v *Verifier) Verify(ctx context.Context, raw string) (*Principal, error) {
	if raw == "" {
		return nil, refuse("missing token")
	}
	if len(raw) > MaxTokenBytes {
		return nil, refuse("token too large")
	}
	var c tokenClaims
	tok, err := v.parser.ParseWithClaims(raw, &c, func(t *jwt.Token) (any, error) { return v.key(ctx, t) })
	if err != nil {
		return nil, refuse(v.reasonFor(tok, &c, err))
	}
	if v.maxTTL > 0 {
		start := v.now()
		switch {
		case c.IssuedAt != nil:
			start = c.IssuedAt.Time
		case c.NotBefore != nil:
			start = c.NotBefore.Time
		}
		if c.ExpiresAt.Sub(start) > v.maxTTL+v.leeway {
			return nil, refuse("token lifetime too long")
		}
	}
	p, r := principalFrom(&c)
	if r != "" {
		return nil, refuse(r)
	}
	p.Audience = c.Audience
	if v.login != "" {
		p.Login = loginClaim(raw, v.login)
	}
	return p, nil
}

// key is the keyfunc: it returns only a key whose family matches the token's algorithm.
func (v *Verifier) key(ctx context.Context, t *jwt.Token) (any, error) {
	// We implement no JWS extension, so a critical one must fail (RFC 7515 §4.1.11).
	if _, ok := t.Header["crit"]; ok {
		return nil, reason("unsupported critical header")
	}
	alg := t.Method.Alg()
	kid, hasKID := "", false
	if raw, ok := t.Header["kid"]; ok {
		s, isString := raw.(string)
		if !isString || !validKID(s) {
			return nil, reason("malformed kid")
		}
		kid, hasKID = s, true
	}

	if algFamily[alg] == famHMAC {
		if v.hmac == nil || !v.allowed[alg] {
			return nil, reason("no key for algorithm")
		}
		// The HMAC secret has no kid; a kid would name some other (public) key.
		if hasKID {
			return nil, reason("unknown key")
		}
		return v.hmac, nil
	}

	if !hasKID {
		n, k := v.static.countFor(alg)
		if v.jwks != nil {
			m, jk := v.jwks.current().countFor(alg)
			if m > 0 {
				n, k = n+m, jk
			}
		}
		switch {
		case n == 0:
			return nil, reason("no key for algorithm")
		case n > 1:
			return nil, reason("kid required")
		}
		return k.key, nil
	}

	var buf [4]*verifyKey
	keys, known := v.lookup(kid, alg, buf[:0])
	if !known && v.jwks != nil && v.jwks.refetch(ctx, false) {
		keys, known = v.lookup(kid, alg, buf[:0])
	}
	switch {
	case len(keys) == 1:
		return keys[0].key, nil
	case len(keys) > 1:
		set := jwt.VerificationKeySet{Keys: make([]jwt.VerificationKey, len(keys))}
		for i, k := range keys {
			set.Keys[i] = k.key
		}
		return set, nil
	case known:
		return nil, reason("key does not match algorithm")
	}
	return nil, reason("unknown key")
}

func (v *Verifier) lookup(kid, alg string, dst []*verifyKey) ([]*verifyKey, bool) {
	dst, known := v.static.lookup(kid, alg, dst)
	if v.jwks != nil {
		var k bool
		dst, k = v.jwks.current().lookup(kid, alg, dst)
		known = known || k
	}
	return dst, known
}

// reasonFor maps a golang-jwt error to a short reason.
func (v *Verifier) reasonFor(tok *jwt.Token, c *tokenClaims, err error) reason {
	var r reason
	switch {
	case errors.As(err, &r):
		return r
	case errors.Is(err, jwt.ErrTokenMalformed):
		return "malformed token"
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		return "unsupported algorithm"
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		if tok != nil && tok.Method != nil && !v.allowed[tok.Method.Alg()] {
			return "algorithm not allowed"
		}
		return "invalid signature"
	case errors.Is(err, jwt.ErrTokenExpired):
		return "token expired"
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return "token not valid yet"
	case errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return "token issued in the future"
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return "wrong issuer"
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return "wrong audience"
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		switch {
		case c.ExpiresAt == nil:
			return "missing exp"
		case v.issuer != "" && c.Issuer == "":
			return "missing iss"
		}
		return "missing aud"
	}
	return "invalid claims"
}

// principalFrom checks the service's own claims; it returns a non-empty reason on refusal.
func principalFrom(c *tokenClaims) (*Principal, reason) {
	switch {
	case c.Subject == "":
		return nil, "missing sub"
	case !validSubject(c.Subject):
		return nil, "malformed sub"
	case c.Owner == "":
		return nil, "missing owner"
	case !ValidOrg(c.Owner):
		return nil, "invalid org name"
	}
	for _, o := range c.Orgs {
		if !ValidOrg(o) {
			return nil, "invalid org name"
		}
	}
	p := &Principal{Subject: c.Subject, Owner: c.Owner, Orgs: c.Orgs}
	if len(c.Roles) > 0 {
		p.Roles = make([]Role, 0, len(c.Roles))
		for _, s := range c.Roles {
			r, ok := parseRole(s)
			if !ok {
				return nil, "invalid role"
			}
			p.Roles = append(p.Roles, r)
		}
	}
	return p, ""
}

// validSubject keeps sub safe to store in ledger rows and logs: bounded, UTF-8, no control characters.
func validSubject(s string) bool {
	if len(s) > maxSubjectLen || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}
