package forge

import (
	"container/list"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"sync"
	"time"
)

// Cache defaults.
const (
	DefaultCacheTTL         = 30 * time.Second
	DefaultNegativeCacheTTL = 5 * time.Second
	maxCacheEntries         = 10_000
	credentialKeyLabel      = "lsp-forge-credential-v1"
)

// NewCache wraps f so that Resolve answers are reused: a success for ttl
// (DefaultCacheTTL when ttl <= 0), a "not found" (no such repository or
// revision, or no access to it) for negTTL (DefaultNegativeCacheTTL when
// negTTL <= 0; never longer than ttl). The key is (HMAC-SHA256(secret,
// credential), owner, repo, rev): never the org, never the token itself,
// and a different credential always asks the forge again. A revocation
// takes effect within ttl and a new branch is visible within negTTL. A
// made-up revision costs the forge one resolve per credential per negTTL,
// however often it is asked. So does a commit too costly to prove
// reachable (a *TooLargeError): the proof runs before anyone pays, and its
// download, bounded as it is, is the dearest answer to repeat. Forge
// outages and timeouts are not kept.
// Concurrent identical misses share one call to f. At most 10 000 answers
// are kept, least recently used first out. Fetch passes through. An empty
// secret is replaced by a random one (the cache is per process).
func NewCache(f Forge, ttl, negTTL time.Duration, secret []byte) Forge {
	if ttl <= 0 {
		ttl = DefaultCacheTTL
	}
	if negTTL <= 0 {
		negTTL = DefaultNegativeCacheTTL
	}
	negTTL = min(negTTL, ttl)
	if len(secret) == 0 {
		secret = make([]byte, 32)
		_, _ = rand.Read(secret)
	}
	return &cache{
		next:     f,
		ttl:      ttl,
		negTTL:   negTTL,
		secret:   append([]byte(nil), secret...),
		max:      maxCacheEntries,
		now:      time.Now,
		entries:  make(map[string]*list.Element),
		lru:      list.New(),
		inflight: make(map[string]*call),
	}
}

type cache struct {
	next   Forge
	ttl    time.Duration
	negTTL time.Duration
	secret []byte
	max    int
	now    func() time.Time // replaced in tests

	mu       sync.Mutex
	entries  map[string]*list.Element // key → *cacheEntry in lru
	lru      *list.List               // front is most recently used
	inflight map[string]*call
}

type cacheEntry struct {
	key     string
	commit  string
	err     error // a kept "not found"
	expires time.Time
}

type call struct {
	done   chan struct{}
	commit string
	err    error
}

// key derives the cache key. Each part is length-prefixed so no two
// different tuples can collide.
func (c *cache) key(cred Credential, owner, repo string, rev Rev) string {
	m := hmac.New(sha256.New, c.secret)
	for _, s := range []string{credentialKeyLabel, cred.Mode, cred.User, cred.Token} {
		writeLenPrefixed(m, s)
	}
	k := m.Sum(nil)
	for _, s := range []string{owner, repo, rev.String()} {
		k = binary.AppendUvarint(k, uint64(len(s)))
		k = append(k, s...)
	}
	return string(k)
}

func writeLenPrefixed(w interface{ Write([]byte) (int, error) }, s string) {
	_, _ = w.Write(binary.AppendUvarint(nil, uint64(len(s))))
	_, _ = w.Write([]byte(s))
}

// Resolve implements Forge.
func (c *cache) Resolve(ctx context.Context, cred Credential, owner, repo string, rev Rev) (string, error) {
	if cred.Token == "" {
		return c.next.Resolve(ctx, cred, owner, repo, rev)
	}
	k := c.key(cred, owner, repo, rev)
	for {
		c.mu.Lock()
		if el, ok := c.entries[k]; ok {
			e := el.Value.(*cacheEntry)
			if c.now().Before(e.expires) {
				c.lru.MoveToFront(el)
				c.mu.Unlock()
				return e.commit, e.err
			}
			c.lru.Remove(el)
			delete(c.entries, k)
		}
		if cl, ok := c.inflight[k]; ok {
			c.mu.Unlock()
			select {
			case <-cl.done:
			case <-ctx.Done():
				return "", lateError("resolve", ctx.Err())
			}
			// The leader's own deadline is not ours: try again.
			if errors.Is(cl.err, context.Canceled) || errors.Is(cl.err, context.DeadlineExceeded) {
				if ctx.Err() == nil {
					continue
				}
			}
			return cl.commit, cl.err
		}
		cl := &call{done: make(chan struct{})}
		c.inflight[k] = cl
		c.mu.Unlock()

		cl.commit, cl.err = c.next.Resolve(ctx, cred, owner, repo, rev)

		var tl *TooLargeError
		d, _ := DetailOf(cl.err)
		c.mu.Lock()
		delete(c.inflight, k)
		switch {
		case cl.err == nil:
			c.store(k, cl.commit, nil, c.ttl)
		case errors.Is(cl.err, ErrNotFound) || errors.Is(cl.err, ErrBadRev) || errors.As(cl.err, &tl),
			// A credential the forge refused (the key holds its HMAC):
			// a caller retrying with it must not reach the forge each time.
			errors.Is(cl.err, ErrUnauthenticated) && d.Refused:
			c.store(k, "", cl.err, c.negTTL)
		}
		c.mu.Unlock()
		close(cl.done)
		return cl.commit, cl.err
	}
}

// store adds an answer; c.mu is held.
func (c *cache) store(k, commit string, err error, ttl time.Duration) {
	if el, ok := c.entries[k]; ok {
		c.lru.Remove(el)
	}
	c.entries[k] = c.lru.PushFront(&cacheEntry{key: k, commit: commit, err: err, expires: c.now().Add(ttl)})
	for c.lru.Len() > c.max {
		old := c.lru.Back()
		c.lru.Remove(old)
		delete(c.entries, old.Value.(*cacheEntry).key)
	}
}

// Fetch implements Forge; it is not cached.
func (c *cache) Fetch(ctx context.Context, cred Credential, owner, repo, commit string, lim Limits) (*Tree, error) {
	return c.next.Fetch(ctx, cred, owner, repo, commit, lim)
}
