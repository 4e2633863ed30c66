// Package ratelimit is the proxy's per-org request limit (CONTRACT §4: 429
// rate_limited with Retry-After, checked after the org is known and before
// the forge is asked): one token bucket per org, in this process's memory.
//
// A bucket holds up to burst tokens and gains rate tokens per second; each
// request takes one. Buckets are created on first use and dropped once full
// again (a full bucket is indistinguishable from a new one), so memory
// follows the orgs active in the last burst/rate seconds.
//
// Each proxy replica keeps its own buckets: with N replicas behind a
// balancer an org may get up to N times the configured rate. The limit is
// protection, not accounting; money never depends on it (HIP.md).
package ratelimit

import (
	"math"
	"sync"
	"time"
)

// sweepEvery is how many new buckets are made between two sweeps of full
// ones.
const sweepEvery = 1024

// Limiter limits requests per key. The nil *Limiter allows everything.
type Limiter struct {
	rate  float64 // tokens per second
	burst float64
	now   func() time.Time

	mu      sync.Mutex
	buckets map[string]*bucket
	made    int
}

type bucket struct {
	tokens float64
	at     time.Time
}

// New returns a limiter of perSecond requests per second per key with
// bursts of burst (at least 1), or nil (no limit) when perSecond <= 0.
func New(perSecond float64, burst int) *Limiter {
	if perSecond <= 0 || math.IsNaN(perSecond) || math.IsInf(perSecond, 0) {
		return nil
	}
	return &Limiter{rate: perSecond, burst: float64(max(burst, 1)), now: time.Now, buckets: make(map[string]*bucket)}
}

// Allow takes a token from key's bucket. When there is none it reports how
// long until there is one.
func (l *Limiter) Allow(key string) (bool, time.Duration) {
	if l == nil {
		return true, 0
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets[key]
	if !ok {
		l.made++
		if l.made%sweepEvery == 0 {
			l.sweep(now)
		}
		b = &bucket{tokens: l.burst, at: now}
		l.buckets[key] = b
	}
	l.refill(b, now)
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	wait := time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
	return false, max(wait, time.Millisecond)
}

func (l *Limiter) refill(b *bucket, now time.Time) {
	if d := now.Sub(b.at); d > 0 {
		b.tokens = min(l.burst, b.tokens+d.Seconds()*l.rate)
		b.at = now
	}
}

// sweep drops the buckets that have refilled; l.mu is held.
func (l *Limiter) sweep(now time.Time) {
	for k, b := range l.buckets {
		l.refill(b, now)
		if b.tokens >= l.burst {
			delete(l.buckets, k)
		}
	}
}

// Len is the number of buckets kept, for tests.
func (l *Limiter) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}
