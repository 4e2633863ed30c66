package ratelimit

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

func TestTokenBucket(t *testing.T) {
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	l := New(2, 3) // 2 per second, bursts of 3
	l.now = c.now
	for i := 0; i < 3; i++ {
		if ok, _ := l.Allow("acme"); !ok {
			t.Fatalf("request %d of the burst refused", i+1)
		}
	}
	ok, wait := l.Allow("acme")
	if ok || wait != 500*time.Millisecond {
		t.Fatalf("fourth request: ok=%v wait=%v; want refused, 500ms", ok, wait)
	}
	// Another org has its own bucket.
	if ok, _ := l.Allow("beta"); !ok {
		t.Fatal("another org was limited")
	}
	c.advance(250 * time.Millisecond)
	if ok, wait := l.Allow("acme"); ok || wait != 250*time.Millisecond {
		t.Fatalf("after 250ms: ok=%v wait=%v; want refused, 250ms", ok, wait)
	}
	c.advance(250 * time.Millisecond)
	if ok, _ := l.Allow("acme"); !ok {
		t.Fatal("after 500ms one token is back")
	}
	// A long pause refills to the burst, not beyond.
	c.advance(time.Hour)
	for i := 0; i < 3; i++ {
		if ok, _ := l.Allow("acme"); !ok {
			t.Fatalf("after a pause, request %d refused", i+1)
		}
	}
	if ok, _ := l.Allow("acme"); ok {
		t.Fatal("the bucket refilled beyond its burst")
	}
}

func TestDisabledAndBounds(t *testing.T) {
	for _, rate := range []float64{0, -1} {
		if l := New(rate, 10); l != nil {
			t.Fatalf("New(%v) = %v, want nil (no limit)", rate, l)
		}
	}
	var l *Limiter
	if ok, _ := l.Allow("x"); !ok {
		t.Fatal("the nil limiter refused")
	}
	// Burst below one still lets one request through.
	if ok, _ := New(1, 0).Allow("x"); !ok {
		t.Fatal("burst 0 refused the first request")
	}
}

func TestFullBucketsAreDropped(t *testing.T) {
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	l := New(100, 1)
	l.now = c.now
	for i := 0; i < sweepEvery-1; i++ {
		l.Allow(fmt.Sprintf("org%d", i))
	}
	c.advance(time.Second) // every bucket refills
	l.Allow("last")        // the sweepEvery-th new bucket sweeps
	if n := l.Len(); n != 1 {
		t.Fatalf("buckets kept = %d, want 1", n)
	}
}

func TestConcurrentAllow(t *testing.T) {
	l := New(0.001, 50)
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := 0
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 20; j++ {
				if ok, _ := l.Allow("acme"); ok {
					mu.Lock()
					allowed++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if allowed != 50 {
		t.Fatalf("allowed %d of 160 concurrent requests, want exactly the burst of 50", allowed)
	}
}
