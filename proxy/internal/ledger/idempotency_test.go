package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/ledger"
)

func idem(org, key, hash, attempt string) ledger.IdempotencyRequest {
	return ledger.IdempotencyRequest{Org: org, Key: key, RequestHash: hash, Attempt: attempt, TTL: 24 * time.Hour, Lease: time.Hour}
}

func claim(t *testing.T, l *ledger.Ledger, r ledger.IdempotencyRequest) (ledger.IdempotencyState, *ledger.StoredAnswer) {
	t.Helper()
	s, a, err := l.ClaimIdempotencyKey(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	return s, a
}

// The life of one key: claimed, in progress for others, stored, replayed exactly; another body is a
// mismatch; keys are scoped to their org.
func TestIdempotencyKeyLifecycle(t *testing.T) {
	t.Parallel()
	l, _ := open(t)
	if s, _ := claim(t, l, idem("acme", "k1", "h1", "a1")); s != ledger.IdempotencyClaimed {
		t.Fatalf("first claim: %s", s)
	}
	if s, _ := claim(t, l, idem("acme", "k1", "h1", "a2")); s != ledger.IdempotencyInProgress {
		t.Fatalf("same request while the first runs: %s", s)
	}
	if s, _ := claim(t, l, idem("acme", "k1", "h2", "a2")); s != ledger.IdempotencyMismatch {
		t.Fatalf("another body while the first runs: %s", s)
	}
	if s, _ := claim(t, l, idem("other", "k1", "h2", "a3")); s != ledger.IdempotencyClaimed {
		t.Fatalf("the same key in another org: %s", s)
	}
	// Only the attempt that holds the key stores its answer.
	if err := l.StoreIdempotentAnswer(ctx, "acme", "k1", "a2", ledger.StoredAnswer{Status: 200, Body: []byte("x")}); !errors.Is(err, ledger.ErrNotClaimed) {
		t.Fatalf("store by another attempt: %v", err)
	}
	body := []byte("{\"hover\":null}\n\x00\xff")
	want := ledger.StoredAnswer{Status: 402, Header: map[string]string{"Content-Type": "application/json", "Retry-After": "2"}, Body: body}
	if err := l.StoreIdempotentAnswer(ctx, "acme", "k1", "a1", want); err != nil {
		t.Fatal(err)
	}
	s, got := claim(t, l, idem("acme", "k1", "h1", "a4"))
	if s != ledger.IdempotencyReplay || got.Status != 402 || string(got.Body) != string(body) ||
		len(got.Header) != 2 || got.Header["Retry-After"] != "2" || got.Header["Content-Type"] != "application/json" {
		t.Fatalf("replay: %s %+v", s, got)
	}
	if s, _ := claim(t, l, idem("acme", "k1", "h2", "a5")); s != ledger.IdempotencyMismatch {
		t.Fatalf("another body after the answer: %s", s)
	}
	// A second store (a late duplicate) changes nothing.
	if err := l.StoreIdempotentAnswer(ctx, "acme", "k1", "a1", ledger.StoredAnswer{Status: 200, Body: []byte("y")}); !errors.Is(err, ledger.ErrNotClaimed) {
		t.Fatalf("second store: %v", err)
	}
}

// An attempt that did nothing gives the key back; the next one runs afresh, also with another body.
func TestIdempotencyKeyReleased(t *testing.T) {
	t.Parallel()
	l, _ := open(t)
	claim(t, l, idem("acme", "k", "h1", "a1"))
	if err := l.ReleaseIdempotencyKey(ctx, "acme", "k", "other-attempt"); err != nil {
		t.Fatal(err)
	}
	if s, _ := claim(t, l, idem("acme", "k", "h1", "a2")); s != ledger.IdempotencyInProgress {
		t.Fatalf("released by a stranger: %s", s)
	}
	if err := l.ReleaseIdempotencyKey(ctx, "acme", "k", "a1"); err != nil {
		t.Fatal(err)
	}
	if s, _ := claim(t, l, idem("acme", "k", "h2", "a2")); s != ledger.IdempotencyClaimed {
		t.Fatalf("after release: %s", s)
	}
}

// A key lives TTL from its first use; an attempt whose proxy died is taken over after its lease by a
// retry of the same request only.
func TestIdempotencyKeyExpiryAndLease(t *testing.T) {
	t.Parallel()
	l, url := open(t)
	conn := connect(t, url)
	claim(t, l, idem("acme", "done", "h1", "a1"))
	if err := l.StoreIdempotentAnswer(ctx, "acme", "done", "a1", ledger.StoredAnswer{Status: 200, Body: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	claim(t, l, idem("acme", "dead", "h1", "b1"))
	if _, err := conn.Exec(ctx, `UPDATE idempotency_keys SET expires_at = now() - interval '1 second' WHERE key = 'done'`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `UPDATE idempotency_keys SET lease_until = now() - interval '1 second' WHERE key = 'dead'`); err != nil {
		t.Fatal(err)
	}
	if s, _ := claim(t, l, idem("acme", "done", "h2", "a2")); s != ledger.IdempotencyClaimed {
		t.Fatalf("an expired key with another body: %s", s)
	}
	if s, _ := claim(t, l, idem("acme", "dead", "h2", "b2")); s != ledger.IdempotencyMismatch {
		t.Fatalf("a lapsed lease, another body: %s", s)
	}
	if s, _ := claim(t, l, idem("acme", "dead", "h1", "b3")); s != ledger.IdempotencyClaimed {
		t.Fatalf("a lapsed lease, same body: %s", s)
	}
	// The dead attempt, were it to come back, can no longer store.
	if err := l.StoreIdempotentAnswer(ctx, "acme", "dead", "b1", ledger.StoredAnswer{Status: 200, Body: nil}); !errors.Is(err, ledger.ErrNotClaimed) {
		t.Fatalf("store by the dead attempt: %v", err)
	}
	if err := l.StoreIdempotentAnswer(ctx, "acme", "dead", "b3", ledger.StoredAnswer{Status: 200, Body: nil}); err != nil {
		t.Fatal(err)
	}
	if s, a := claim(t, l, idem("acme", "dead", "h1", "b4")); s != ledger.IdempotencyReplay || a.Status != 200 || len(a.Body) != 0 {
		t.Fatalf("replay of an empty body: %s %+v", s, a)
	}

	// Claims sweep expired records as they go.
	if _, err := conn.Exec(ctx, `UPDATE idempotency_keys SET expires_at = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	claim(t, l, idem("acme", "fresh", "h", "c1"))
	var left int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys WHERE expires_at <= now()`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Fatalf("%d expired records left after a claim", left)
	}
}

// Many attempts of one key at once: exactly one is claimed, the others see it in progress.
func TestIdempotencyKeyConcurrentClaims(t *testing.T) {
	t.Parallel()
	l, _ := open(t)
	const n = 16
	states := make([]ledger.IdempotencyState, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, _, err := l.ClaimIdempotencyKey(ctx, idem("acme", "k", "h", fmt.Sprint("a", i)))
			if err != nil {
				t.Error(err)
			}
			states[i] = s
		}()
	}
	wg.Wait()
	claimed := 0
	for _, s := range states {
		switch s {
		case ledger.IdempotencyClaimed:
			claimed++
		case ledger.IdempotencyInProgress:
		default:
			t.Errorf("state %q", s)
		}
	}
	if claimed != 1 {
		t.Fatalf("%d attempts claimed the key; want 1", claimed)
	}
}

func TestIdempotencyKeyRefusesBadInput(t *testing.T) {
	t.Parallel()
	l, _ := open(t)
	for _, r := range []ledger.IdempotencyRequest{
		idem("", "k", "h", "a"),
		idem("acme", "", "h", "a"),
		idem("acme", string(make([]byte, 256)), "h", "a"),
		idem("acme", "k", "", "a"),
		idem("acme", "k", "h", ""),
		{Org: "acme", Key: "k", RequestHash: "h", Attempt: "a", TTL: 0, Lease: time.Second},
	} {
		if _, _, err := l.ClaimIdempotencyKey(ctx, r); err == nil {
			t.Errorf("%+v: accepted", r)
		}
	}
	if err := l.StoreIdempotentAnswer(ctx, "acme", "k", "a", ledger.StoredAnswer{Status: 99}); err == nil {
		t.Error("status 99 accepted")
	}
}

// idemRowOverhead is what migration 010 charges an answered idempotency_keys row besides its key,
// headers and body. The tests keep their own copy of the formula, so that a change of the
// migration's shows.
const idemRowOverhead = 256

// idemRowBytes is what one answered row costs its org: headers is the text of the stored jsonb (""
// for none), body its length. A row in flight costs nothing.
func idemRowBytes(key, headers string, body int) int64 {
	return idemRowOverhead + int64(len(key)) + int64(len(headers)) + int64(body)
}

// idemCountSQL sums the rows' cost per org afresh, for comparison with the trigger's idempotency_bytes.
const idemCountSQL = `SELECT org, sum(CASE WHEN body IS NULL THEN 0 ELSE 256 + octet_length(key)
	+ coalesce(octet_length(headers::text), 0) + octet_length(body) END)::bigint FROM idempotency_keys GROUP BY org`

// An org's keys hold at most MaxOrgBytes, each answered row counted whole (its overhead, key,
// headers and answer; a key in flight counts nothing yet): past it a new key is refused ("full") while a key
// the org holds still replays; as its keys expire, or are given back, room comes back. The count
// follows every way a row comes and goes (claim, store, give back, expiry, takeover), and other orgs
// are not touched.
func TestIdempotencyOrgBound(t *testing.T) {
	t.Parallel()
	l, url := open(t)
	conn := connect(t, url)
	header := map[string]string{"Content-Type": "application/json"}
	const headerText = `{"Content-Type": "application/json"}` // as jsonb prints it
	answer := func(key string, n int) int64 { return idemRowBytes(key, headerText, n) }
	// Two answers fill it.
	bound := answer("k1", 600) + answer("k2", 400)
	bounded := func(org, key, hash, attempt string) ledger.IdempotencyRequest {
		r := idem(org, key, hash, attempt)
		r.MaxOrgBytes = bound
		return r
	}
	count := func(org string) int64 {
		t.Helper()
		var n int64
		if err := conn.QueryRow(ctx, `SELECT coalesce((SELECT bytes FROM idempotency_bytes WHERE org = $1), 0)`, org).Scan(&n); err != nil {
			t.Fatal(err)
		}
		var want int64
		if err := conn.QueryRow(ctx, `SELECT coalesce((SELECT c.sum FROM (`+idemCountSQL+`) c WHERE c.org = $1), 0)`, org).Scan(&want); err != nil {
			t.Fatal(err)
		}
		if n != want {
			t.Fatalf("org %s: counted %d bytes, its keys hold %d", org, n, want)
		}
		return n
	}
	expire := func(key string) {
		t.Helper()
		if _, err := conn.Exec(ctx, `UPDATE idempotency_keys SET expires_at = now() - interval '1 second' WHERE org = 'acme' AND key = $1`, key); err != nil {
			t.Fatal(err)
		}
	}
	store := func(key, attempt string, n int, before int64) {
		t.Helper()
		if s, _ := claim(t, l, bounded("acme", key, "h-"+key, attempt)); s != ledger.IdempotencyClaimed {
			t.Fatalf("claim %s: %s", key, s)
		}
		// In flight, the key counts nothing yet.
		if got, want := count("acme"), before; got != want {
			t.Fatalf("%s in flight: %d bytes; want %d", key, got, want)
		}
		if err := l.StoreIdempotentAnswer(ctx, "acme", key, attempt, ledger.StoredAnswer{Status: 200, Header: header, Body: make([]byte, n)}); err != nil {
			t.Fatal(err)
		}
		if got, want := count("acme"), before+answer(key, n); got != want {
			t.Fatalf("%s answered: %d bytes; want %d", key, got, want)
		}
	}
	store("k1", "a1", 600, 0)
	store("k2", "a2", 400, answer("k1", 600))
	if n := count("acme"); n != bound {
		t.Fatalf("after two answers: %d bytes; want %d", n, bound)
	}
	if s, _ := claim(t, l, bounded("acme", "k3", "h-k3", "a3")); s != ledger.IdempotencyFull {
		t.Fatalf("a new key at the bound: %s", s)
	}
	if n := count("acme"); n != bound {
		t.Fatalf("after a refused key: %d bytes; want %d", n, bound)
	}
	if s, a := claim(t, l, bounded("acme", "k1", "h-k1", "a4")); s != ledger.IdempotencyReplay || len(a.Body) != 600 || a.Header["Content-Type"] != "application/json" {
		t.Fatalf("a key the org holds, at the bound: %s %+v", s, a)
	}
	if s, _ := claim(t, l, bounded("other", "k3", "h", "b1")); s != ledger.IdempotencyClaimed {
		t.Fatalf("another org: %s", s)
	}
	// k2 expires: the next new key deletes it and fits.
	expire("k2")
	if s, _ := claim(t, l, bounded("acme", "k3", "h-k3", "a5")); s != ledger.IdempotencyClaimed {
		t.Fatalf("a new key once one expired: %s", s)
	}
	if n, want := count("acme"), answer("k1", 600); n != want {
		t.Fatalf("after the expired key went: %d bytes; want %d", n, want)
	}
	// Given back, a key's row is gone; taken over after its expiry, its old answer and headers go.
	if err := l.ReleaseIdempotencyKey(ctx, "acme", "k3", "a5"); err != nil {
		t.Fatal(err)
	}
	if n, want := count("acme"), answer("k1", 600); n != want {
		t.Fatalf("after a key was given back: %d bytes; want %d", n, want)
	}
	expire("k1")
	if s, _ := claim(t, l, bounded("acme", "k1", "h-k1b", "a6")); s != ledger.IdempotencyClaimed {
		t.Fatalf("an expired key claimed again: %s", s)
	}
	if n := count("acme"); n != 0 {
		t.Fatalf("after the expired key was claimed again: %d bytes", n)
	}
	if err := l.ReleaseIdempotencyKey(ctx, "acme", "k1", "a6"); err != nil {
		t.Fatal(err)
	}
	if n := count("acme"); n != 0 {
		t.Fatalf("with no key left: %d bytes", n)
	}
	if n := count("other"); n != 0 {
		t.Fatalf("the other org, its key in flight: %d bytes", n)
	}
}

// A claim takes no lock on its org's count: keys in flight cost nothing (migration 010), so a claim
// never waits for the count's row, which another claim's sweep may hold while it waits on this
// claim's key — the deadlock 010 would otherwise have brought. A claim goes through while another
// transaction holds the org's count.
func TestIdempotencyClaimTakesNoCountLock(t *testing.T) {
	t.Parallel()
	l, url := open(t)
	conn := connect(t, url)
	r := idem("acme", "k0", "h", "a0")
	if s, _ := claim(t, l, r); s != ledger.IdempotencyClaimed {
		t.Fatalf("claim: %s", s)
	}
	if err := l.StoreIdempotentAnswer(ctx, "acme", "k0", "a0", ledger.StoredAnswer{Status: 200, Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT bytes FROM idempotency_bytes WHERE org = 'acme' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, _, err := l.ClaimIdempotencyKey(cctx, idem("acme", "k1", "h", "a1"))
	if err != nil || s != ledger.IdempotencyClaimed {
		t.Fatalf("a claim while the org's count is locked: %s %v", s, err)
	}
}

// A claim that Postgres aborts to break a deadlock runs again. Org a is at its bound with an
// expired answered key, org b has one too: a's claim deletes a's (locking a's count), then its sweep
// deletes b's and waits for b's count, which another transaction holds while it goes on to a's.
// Postgres aborts the claim (the other side waits 30 s before looking for deadlocks); its retry
// waits for the other side to finish and claims.
func TestIdempotencyClaimRetriedAfterDeadlock(t *testing.T) {
	t.Parallel()
	l, url := open(t)
	conn := connect(t, url)
	for _, org := range []string{"a", "b"} {
		if _, err := conn.Exec(ctx, `INSERT INTO idempotency_keys
			(org, key, request_hash, state, attempt, http_status, headers, body, lease_until, expires_at)
			VALUES ($1, 'old', 'h', 'done', 'x', 200, '{}', 'x', now() - interval '2 days', now() - interval '1 day')`, org); err != nil {
			t.Fatal(err)
		}
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SET LOCAL deadlock_timeout = '30s'`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT bytes FROM idempotency_bytes WHERE org = 'b' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	type result struct {
		s   ledger.IdempotencyState
		err error
	}
	done := make(chan result, 1)
	go func() {
		r := idem("a", "new", "h", "a1")
		r.MaxOrgBytes = 1
		s, _, err := l.ClaimIdempotencyKey(ctx, r)
		done <- result{s, err}
	}()
	// The claim waits for b's count.
	waitForLockWait(t, url, 1)
	if _, err := tx.Exec(ctx, `UPDATE idempotency_bytes SET bytes = bytes WHERE org = 'a'`); err != nil {
		t.Fatalf("the other side of the deadlock was aborted, not the claim: %v", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.err != nil || res.s != ledger.IdempotencyClaimed {
		t.Fatalf("a claim aborted by a deadlock: %s %v", res.s, res.err)
	}
}

// waitForLockWait waits until n sessions of the test's database wait for a lock.
func waitForLockWait(t *testing.T, url string, n int) {
	t.Helper()
	conn := connect(t, url)
	for deadline := time.Now().Add(10 * time.Second); ; {
		var waiting int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions wait for a lock after 10 s, want %d", waiting, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
