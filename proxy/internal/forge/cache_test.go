package forge

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countingForge passes calls to a real Forge and counts them.
type countingForge struct {
	Forge
	resolves atomic.Int64
}

func (c *countingForge) Resolve(ctx context.Context, cred Credential, owner, repo string, rev Rev) (string, error) {
	c.resolves.Add(1)
	return c.Forge.Resolve(ctx, cred, owner, repo, rev)
}

// fakeClock is advanced by hand so expiry is tested without waiting.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func TestCache(t *testing.T) {
	fx := newFixture(t, nil)
	counting := &countingForge{Forge: fx.newForge("")}
	cached := NewCache(counting, 0, 0, []byte("secret"))
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	cached.(*cache).now = clock.now
	ctx := context.Background()
	main := mustRev(t, "main")

	resolve := func(cred Credential, owner, repo string, rev Rev) (string, error) {
		return cached.Resolve(ctx, cred, owner, repo, rev)
	}
	// A miss, then hits within the TTL.
	for i := 0; i < 3; i++ {
		got, err := resolve(bearer(readerToken), "acme", "app", main)
		if err != nil || got != fx.c3 {
			t.Fatalf("Resolve = %q, %v", got, err)
		}
	}
	if n := counting.resolves.Load(); n != 1 {
		t.Fatalf("forge asked %d times within the TTL, want 1", n)
	}
	// Another rev, repo or credential is another key.
	if _, err := resolve(bearer(readerToken), "acme", "app", mustRev(t, "v1")); err != nil {
		t.Fatal(err)
	}
	if n := counting.resolves.Load(); n != 2 {
		t.Fatalf("another rev: forge asked %d times, want 2", n)
	}
	// A token without access re-checks and is refused, although the same
	// (owner, repo, rev) is cached for another token.
	if _, err := resolve(bearer(otherToken), "acme", "app", main); !errors.Is(err, ErrNotFound) {
		t.Fatalf("other token: %v, want ErrNotFound", err)
	}
	if _, err := resolve(Credential{Mode: "basic", Token: readerToken}, "acme", "app", main); err != nil {
		t.Fatalf("same token in basic mode: %v", err)
	}
	if n := counting.resolves.Load(); n != 4 {
		t.Fatalf("other credentials: forge asked %d times, want 4", n)
	}
	// "Not found" is kept, for the shorter negative TTL, and only for that
	// credential.
	for range 3 {
		if _, err := resolve(bearer(otherToken), "acme", "app", main); !errors.Is(err, ErrNotFound) {
			t.Fatal(err)
		}
	}
	if n := counting.resolves.Load(); n != 4 {
		t.Fatalf("a not-found within the negative TTL: forge asked %d times, want 4", n)
	}
	made := mustRev(t, strings.Repeat("ab", 20))
	for range 3 {
		if _, err := resolve(bearer(readerToken), "acme", "app", made); !errors.Is(err, ErrNotFound) {
			t.Fatalf("made-up sha: %v", err)
		}
	}
	if n := counting.resolves.Load(); n != 5 {
		t.Fatalf("a made-up sha asked again within the negative TTL: forge asked %d times, want 5", n)
	}
	if _, err := resolve(Credential{Mode: "basic", Token: readerToken}, "acme", "app", made); !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	if n := counting.resolves.Load(); n != 6 {
		t.Fatalf("a not-found was shared across credentials: forge asked %d times, want 6", n)
	}
	clock.advance(DefaultNegativeCacheTTL)
	if _, err := resolve(bearer(otherToken), "acme", "app", main); !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	if n := counting.resolves.Load(); n != 7 {
		t.Fatalf("after the negative TTL: forge asked %d times, want 7", n)
	}
	// The positive answers, stored before, still stand (their TTL is longer).
	if _, err := resolve(bearer(readerToken), "acme", "app", main); err != nil {
		t.Fatal(err)
	}
	if n := counting.resolves.Load(); n != 7 {
		t.Fatalf("a positive answer within its TTL: forge asked %d times, want 7", n)
	}

	// Revocation takes effect once the TTL has passed.
	fx.forge.Revoke(readerToken)
	if _, err := resolve(bearer(readerToken), "acme", "app", main); err != nil {
		t.Fatalf("within the TTL the cached answer stands: %v", err)
	}
	clock.advance(DefaultCacheTTL)
	if _, err := resolve(bearer(readerToken), "acme", "app", main); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after the TTL a revoked token: %v, want ErrNotFound", err)
	}

	// Fetch passes through.
	fx.forge.Grant(readerToken, "acme/*")
	if _, err := cached.Fetch(ctx, bearer(readerToken), "acme", "app", fx.c3, Limits{}); err != nil {
		t.Fatal(err)
	}
	if n := fx.forge.PackDownloads("acme", "app"); n == 0 {
		t.Fatal("Fetch through the cache downloaded no pack")
	}
}

func TestCacheBounded(t *testing.T) {
	fx := newFixture(t, nil)
	counting := &countingForge{Forge: fx.newForge("")}
	c := NewCache(counting, time.Hour, 0, nil).(*cache)
	c.max = 2
	ctx := context.Background()
	for _, rev := range []string{"main", "v1", "v2", "main"} {
		if _, err := c.Resolve(ctx, bearer(readerToken), "acme", "app", mustRev(t, rev)); err != nil {
			t.Fatal(err)
		}
	}
	if c.lru.Len() != 2 || len(c.entries) != 2 {
		t.Fatalf("cache holds %d/%d entries, want 2", c.lru.Len(), len(c.entries))
	}
	// "main" was evicted by v1 and v2, so it was asked again.
	if n := counting.resolves.Load(); n != 4 {
		t.Fatalf("forge asked %d times, want 4", n)
	}
}

func TestCacheSharesConcurrentMisses(t *testing.T) {
	fx := newFixture(t, nil)
	counting := &countingForge{Forge: fx.newForge("")}
	c := NewCache(counting, time.Hour, 0, []byte("k"))
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := c.Resolve(context.Background(), bearer(readerToken), "acme", "app", Rev{})
			if err == nil && got != fx.c3 {
				err = errors.New("wrong commit " + got)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := counting.resolves.Load(); n < 1 || n > 8 {
		t.Fatalf("forge asked %d times", n)
	}
}

// TestCacheKeepsRefusals: a credential the forge refused is kept as
// refused for the negative TTL, for that credential only, so a client
// retrying with a bad token does not reach the forge every time.
func TestCacheKeepsRefusals(t *testing.T) {
	fx := newFixture(t, nil)
	fx.addUsers()
	counting := &countingForge{Forge: fx.newGitea()}
	cached := NewCache(counting, 0, 0, []byte("secret"))
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	cached.(*cache).now = clock.now
	ctx := context.Background()
	for range 3 {
		if _, err := cached.Resolve(ctx, bearer("tok-unknown"), "acme", "app", Rev{}); !errors.Is(err, ErrUnauthenticated) {
			t.Fatalf("unknown token: %v, want the forge's refusal", err)
		}
	}
	if n := counting.resolves.Load(); n != 1 {
		t.Fatalf("a refused credential: forge asked %d times within the negative TTL, want 1", n)
	}
	if _, err := cached.Resolve(ctx, bearer(aliceToken), "acme", "app", Rev{}); err != nil {
		t.Fatalf("another credential: %v", err)
	}
	clock.advance(DefaultNegativeCacheTTL)
	if _, err := cached.Resolve(ctx, bearer("tok-unknown"), "acme", "app", Rev{}); !errors.Is(err, ErrUnauthenticated) {
		t.Fatal(err)
	}
	if n := counting.resolves.Load(); n != 3 {
		t.Fatalf("after the negative TTL: forge asked %d times in all, want 3", n)
	}
}
