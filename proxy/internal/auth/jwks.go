package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// defaultJWKSMaxBytes bounds one JWKS response; real sets are a few KiB.
	defaultJWKSMaxBytes = 1 << 20
	// maxJWKSKeys bounds how many keys one response may carry.
	maxJWKSKeys = 100
	// defaultJWKSMinRefetch is the least time between two fetches triggered by unknown kids, so a
	// stream of tokens with made-up kids cannot turn the proxy into a load generator for the IdP.
	defaultJWKSMinRefetch = 30 * time.Second
	// defaultJWKSRefreshEvery is the background refresh period: rotation and revocation are seen
	// within it even when no token names a new kid.
	defaultJWKSRefreshEvery = 5 * time.Minute
	defaultJWKSFetchTimeout = 10 * time.Second
)

// checkJWKSURL refuses a URL over which keys could be swapped in transit, unless it is loopback or the
// operator runs in development mode.
func checkJWKSURL(raw string, devMode bool) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("parse JWKS URL: %w", err)
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		if devMode || isLoopback(u.Hostname()) {
			return nil
		}
		return errors.New("JWKS URL must use https (http only for loopback or in development mode)")
	}
	return fmt.Errorf("JWKS URL has unsupported scheme %q", u.Scheme)
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// jwksSource is the cached key set of one JWKS endpoint.
type jwksSource struct {
	url          string
	client       *http.Client
	log          *slog.Logger
	now          func() time.Time
	minRefetch   time.Duration
	fetchTimeout time.Duration
	maxBytes     int64
	life         context.Context // ends when the Verifier is closed or its ctx is done
	wg           *sync.WaitGroup

	// maxAge is how long a fetched set is trusted without a successful
	// refetch: a key the IdP removed stops verifying within it even while
	// every refresh fails (fail closed rather than trust a stale set).
	maxAge time.Duration
	keys   atomic.Pointer[fetchedKeys]

	mu          sync.Mutex
	closed      bool
	lastAttempt time.Time
	lastErr     error
	inflight    chan struct{} // non-nil while a fetch runs; closed when it ends
}

// fetchedKeys is one good key set and when it was fetched.
type fetchedKeys struct {
	ix *keyIndex
	at time.Time
}

// current returns the last good key set, or nil before the first one and
// once it is older than maxAge.
func (s *jwksSource) current() *keyIndex {
	f := s.keys.Load()
	if f == nil || (s.maxAge > 0 && s.now().Sub(f.at) > s.maxAge) {
		return nil
	}
	return f.ix
}

// refetch fetches the set unless a fetch is already running (then it waits for that one) or, when not
// forced, the previous attempt is younger than minRefetch. It reports whether a fetch finished while it
// waited, i.e. whether a second lookup can find something new. ctx only bounds the caller's wait: the
// fetch itself runs on the source's own lifetime so one impatient caller cannot abort it for the others.
func (s *jwksSource) refetch(ctx context.Context, force bool) bool {
	s.mu.Lock()
	ch := s.inflight
	if ch == nil {
		if s.closed || (!force && !s.lastAttempt.IsZero() && s.now().Sub(s.lastAttempt) < s.minRefetch) {
			s.mu.Unlock()
			return false
		}
		ch = make(chan struct{})
		s.inflight = ch
		s.lastAttempt = s.now()
		s.wg.Add(1) // under mu, so it never races with Close's Wait
		go s.run(ch)
	}
	s.mu.Unlock()
	select {
	case <-ch:
		return true
	case <-ctx.Done():
		return false
	}
}

func (s *jwksSource) run(done chan struct{}) {
	defer s.wg.Done()
	ctx, cancel := context.WithTimeout(s.life, s.fetchTimeout)
	n, err := s.fetch(ctx)
	cancel()
	if err != nil {
		s.log.Warn("jwks fetch failed; keeping the previous keys", "url", s.url, "err", err)
	} else {
		s.log.Debug("jwks fetched", "url", s.url, "keys", n)
	}
	s.mu.Lock()
	s.lastErr = err
	s.inflight = nil
	s.mu.Unlock()
	close(done)
}

func (s *jwksSource) fetch(ctx context.Context) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return 0, fmt.Errorf("fetch jwks: %w", err)
	}
	req.Header.Set("Accept", "application/jwk-set+json, application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("fetch jwks: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("fetch jwks: status %d", resp.StatusCode)
	}
	if resp.ContentLength > s.maxBytes {
		return 0, fmt.Errorf("fetch jwks: response exceeds %d bytes", s.maxBytes)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, s.maxBytes+1))
	if err != nil {
		return 0, fmt.Errorf("fetch jwks: %w", err)
	}
	if int64(len(body)) > s.maxBytes {
		return 0, fmt.Errorf("fetch jwks: response exceeds %d bytes", s.maxBytes)
	}
	keys, skipped, err := parseJWKS(body)
	for _, why := range skipped {
		s.log.Warn("jwks key ignored", "url", s.url, "reason", why)
	}
	if err != nil {
		return 0, fmt.Errorf("fetch jwks: %w", err)
	}
	s.keys.Store(&fetchedKeys{ix: newKeyIndex(keys), at: s.now()})
	return len(keys), nil
}

// refreshLoop keeps the set fresh until the source's lifetime ends.
func (s *jwksSource) refreshLoop(every time.Duration) {
	defer s.wg.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.life.Done():
			return
		case <-t.C:
			s.refetch(s.life, true)
			// A failed refresh is retried at the unknown-kid pace, so one
			// failure does not let the set age out before the next tick.
			for s.failed() && s.life.Err() == nil {
				select {
				case <-s.life.Done():
					return
				case <-time.After(min(s.minRefetch, every)):
				}
				s.refetch(s.life, true)
			}
		}
	}
}

// failed reports whether the last fetch failed.
func (s *jwksSource) failed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastErr != nil && !s.closed
}

func (s *jwksSource) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}

// jwk holds the members of RFC 7517/7518 keys this package reads.
type jwk struct {
	Kty string          `json:"kty"`
	Kid string          `json:"kid"`
	Use string          `json:"use"`
	Alg string          `json:"alg"`
	Crv string          `json:"crv"`
	N   string          `json:"n"`
	E   string          `json:"e"`
	X   string          `json:"x"`
	Y   string          `json:"y"`
	D   json.RawMessage `json:"d"`
}

// parseJWKS turns a JWKS document into verification keys. A document that is not a key set, or that
// yields no usable key, is an error (the caller keeps its previous keys). Individual keys that cannot
// be used are skipped and described in skipped, so one odd key at the IdP does not lock everybody out.
func parseJWKS(data []byte) (keys []*verifyKey, skipped []string, err error) {
	var doc struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, nil, fmt.Errorf("decode JWKS: %w", err)
	}
	if len(doc.Keys) > maxJWKSKeys {
		return nil, nil, fmt.Errorf("JWKS holds more than %d keys", maxJWKSKeys)
	}
	seen := map[string]bool{}
	for i, raw := range doc.Keys {
		var j jwk
		if err := json.Unmarshal(raw, &j); err != nil {
			skipped = append(skipped, fmt.Sprintf("key %d: not a JWK", i))
			continue
		}
		k, err := j.verifyKey()
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("key %d: %v", i, err))
			continue
		}
		if seen[k.thumbprint+"\x00"+k.kid] {
			continue
		}
		seen[k.thumbprint+"\x00"+k.kid] = true
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, skipped, errors.New("JWKS holds no usable signing key")
	}
	return keys, skipped, nil
}

func (j *jwk) verifyKey() (*verifyKey, error) {
	if j.Use != "" && j.Use != "sig" {
		return nil, fmt.Errorf("use %q is not sig", j.Use)
	}
	if len(j.D) > 0 {
		return nil, errors.New("publishes private key material")
	}
	if j.Kid != "" && !validKID(j.Kid) {
		return nil, errors.New("kid is not printable or too long")
	}
	var pub any
	switch j.Kty {
	case "RSA":
		n, err := b64Field("n", j.N)
		if err != nil {
			return nil, err
		}
		e, err := b64Field("e", j.E)
		if err != nil {
			return nil, err
		}
		if len(e) > 4 || n[0] == 0 {
			return nil, errors.New("RSA modulus or exponent is not minimal")
		}
		exp := int(new(big.Int).SetBytes(e).Int64())
		pub = &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: exp}
	case "EC":
		curve := curveByName(j.Crv)
		if curve == nil {
			return nil, fmt.Errorf("unsupported curve %q", j.Crv)
		}
		x, err := b64Field("x", j.X)
		if err != nil {
			return nil, err
		}
		y, err := b64Field("y", j.Y)
		if err != nil {
			return nil, err
		}
		size := (curve.Params().BitSize + 7) / 8
		if len(x) != size || len(y) != size {
			return nil, errors.New("EC coordinates have the wrong length")
		}
		point := make([]byte, 0, 1+2*size)
		point = append(append(append(point, 4), x...), y...)
		p, err := ecdsa.ParseUncompressedPublicKey(curve, point)
		if err != nil {
			return nil, errors.New("EC point is not on the curve")
		}
		pub = p
	case "OKP":
		if j.Crv != "Ed25519" {
			return nil, fmt.Errorf("unsupported OKP curve %q", j.Crv)
		}
		x, err := b64Field("x", j.X)
		if err != nil {
			return nil, err
		}
		pub = ed25519.PublicKey(x)
	default:
		// "oct" lands here on purpose: a symmetric key published in a JWKS is a public secret.
		return nil, fmt.Errorf("unsupported kty %q", j.Kty)
	}
	k, err := newVerifyKey(pub, j.Kid)
	if err != nil {
		return nil, err
	}
	if j.Alg != "" {
		if !k.accepts(j.Alg) {
			return nil, fmt.Errorf("alg %q does not fit a %s key", j.Alg, k.fam)
		}
		k.alg = j.Alg
	}
	return k, nil
}

// b64Field decodes a base64url member, tolerating the padding some IdPs add.
func b64Field(name, s string) ([]byte, error) {
	b, err := base64.RawURLEncoding.Strict().DecodeString(strings.TrimRight(s, "="))
	if err != nil || len(b) == 0 {
		return nil, fmt.Errorf("member %q is not base64url", name)
	}
	return b, nil
}
