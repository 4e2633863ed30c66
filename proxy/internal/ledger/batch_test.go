package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/ledger"
	"github.com/hanzoai/lsp/proxy/internal/pgtest"
)

// openWith is open with options.
func openWith(t testing.TB, o ledger.Options) (*ledger.Ledger, string) {
	t.Helper()
	url := pgtest.NewDatabase(t)
	l, err := ledger.OpenWith(ctx, url, slog.New(slog.DiscardHandler), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	t.Cleanup(func() { checkInvariants(t, url) })
	return l, url
}

// rowsByRequest counts query rows per request id.
func rowsByRequest(t testing.TB, url string) map[string]int {
	t.Helper()
	conn := connect(t, url)
	rows, err := conn.Query(ctx, `SELECT request_id, count(*) FROM usage_rows GROUP BY request_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		out[id] = n
	}
	return out
}

// Concurrent writers of several orgs: every row that was acknowledged is there exactly once, rows
// share transactions (group commit happened). (Usage rows take no account lock, so their ids need not
// commit in order: readers page behind a settle horizon, see TestPagingNeverSkipsLateCommits.)
func TestGroupCommitConcurrentWriters(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		gc   ledger.GroupCommit
	}{
		{"default", ledger.GroupCommit{}},
		{"linger-small-batches", ledger.GroupCommit{Linger: time.Millisecond, MaxRows: 16, Committers: 1}},
		{"two-committers", ledger.GroupCommit{Committers: 2}},
		{"disabled", ledger.GroupCommit{Disabled: true}},
	} {
		gc := tc.gc
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l, url := openWith(t, ledger.Options{GroupCommit: gc})
			const writers, each = 32, 20
			var wg sync.WaitGroup
			for w := range writers {
				wg.Go(func() {
					for i := range each {
						q := query(fmt.Sprint("org", w%3), "c1", "")
						q.RequestID = fmt.Sprintf("w%d-%d", w, i)
						if err := l.RecordUsage(ctx, q); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			got := rowsByRequest(t, url)
			if len(got) != writers*each {
				t.Fatalf("%d distinct request ids have rows; want %d", len(got), writers*each)
			}
			for id, n := range got {
				if n != 1 {
					t.Errorf("request %s has %d rows", id, n)
				}
			}
			conn := connect(t, url)
			var maxPerTx int
			if err := conn.QueryRow(ctx, `SELECT max(n) FROM (SELECT count(*) AS n FROM usage_rows GROUP BY xmin::text) x`).Scan(&maxPerTx); err != nil {
				t.Fatal(err)
			}
			if gc.Disabled && maxPerTx != 1 {
				t.Fatalf("without group commit a transaction wrote %d rows", maxPerTx)
			}
			if !gc.Disabled && maxPerTx < 2 {
				t.Fatalf("32 concurrent writers never shared a commit")
			}
		})
	}
}

// A caller that stops waiting before its row is in a batch has it withdrawn: it was told the ledger
// failed, so no row may say it was answered (CONTRACT §5). The lane goes on: the batch ahead of it
// commits for its own caller, and a later caller leads and commits.
func TestGroupCommitCallerLeavesBeforeItsBatch(t *testing.T) {
	t.Parallel()
	l, url := openWith(t, ledger.Options{GroupCommit: ledger.GroupCommit{Lanes: 1, Committers: 1}})
	row := func(id string) ledger.Row {
		q := query("org1", "c1", "")
		q.RequestID = id
		return q
	}
	if err := l.RecordUsage(ctx, row("warm")); err != nil {
		t.Fatal(err)
	}
	// Stall every insert: the first caller's batch waits on the lock.
	locker := connect(t, url)
	tx, err := locker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE usage_rows IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() { first <- l.RecordUsage(ctx, row("first")) }()
	watch := connect(t, url)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var waiting int
		if err := watch.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE NOT granted`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first batch never waited on the lock")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The second caller queues behind that batch and stops waiting.
	leaving, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := l.RecordUsage(leaving, row("left")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a caller whose deadline ended in the queue: %v", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Fatalf("the batch ahead: %v", err)
	}
	if err := l.RecordUsage(ctx, row("after")); err != nil {
		t.Fatalf("a caller after: %v", err)
	}
	got := rowsByRequest(t, url)
	if got["first"] != 1 || got["after"] != 1 || got["left"] != 0 {
		t.Fatalf("rows per request: %v; want first and after once, left never", got)
	}
}

// A batch in which several rows reveal the same uncaptured prepare captures it once, into one prepare
// row; a row naming it for another workspace does not. Both ways of sending a batch.
func TestGroupCommitRecoversHoldOnce(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"array"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			l, url := open(t)
			if err := l.Credit(ctx, "acme", 5, "ops"); err != nil {
				t.Fatal(err)
			}
			if _, err := l.Hold(ctx, hold("p1", "acme", "c1")); err != nil {
				t.Fatal(err)
			}
			batch := []ledger.Row{
				query("acme", "c-other", "p1"), // another commit: never captures p1
				query("acme", "c1", "p1"),
				query("beta", "c1", "p1"), // another org: never captures p1
				query("acme", "c1", "p1"),
				query("acme", "c1", ""),
			}
			for i := range batch {
				batch[i].RequestID = fmt.Sprint("r", i)
			}
			for i, err := range ledger.CommitAsOneBatch(l, batch) {
				if err != nil {
					t.Fatalf("row %d: %v", i, err)
				}
			}
			mustBalance(t, l, "acme", 3, 0)
			var prepares int
			for _, r := range allRows(t, l, "acme") {
				if r.Model == "prepare" {
					prepares++
					if r.PrepareID != "p1" || r.AmountCents != -2 || r.Reason != "recovered" {
						t.Errorf("recovered row %+v", r)
					}
				}
			}
			if prepares != 1 {
				t.Fatalf("%d prepare rows; want 1", prepares)
			}
			if got := rowsByRequest(t, url); len(got) != len(batch) {
				t.Fatalf("query rows %v; want one per row of the batch", got)
			}
		})
	}
}

// A row the database refuses fails alone: the rest of its batch is written. Both ways of sending a
// batch.
func TestGroupCommitBadRowFailsAlone(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"array"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			l, url := open(t)
			good, bad := query("acme", "c1", ""), query("acme", "c1", "")
			good.RequestID, bad.RequestID = "good", "bad"
			bad.Repo = "nul\x00byte" // text cannot hold NUL: the statement fails
			other := query("beta", "c1", "")
			other.RequestID = "other"
			errs := ledger.CommitAsOneBatch(l, []ledger.Row{good, bad, other})
			if errs[0] != nil || errs[2] != nil {
				t.Fatalf("good rows failed: %v", errs)
			}
			if errs[1] == nil || errors.Is(errs[1], ledger.ErrUnavailable) {
				t.Fatalf("bad row: %v", errs[1])
			}
			if got := rowsByRequest(t, url); got["good"] != 1 || got["other"] != 1 || len(got) != 2 {
				t.Fatalf("rows %v", got)
			}
		})
	}
}

// Close commits what is queued; callers after it get ErrUnavailable; every acknowledged row is there.
func TestGroupCommitClose(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	l, err := ledger.OpenWith(ctx, url, slog.New(slog.DiscardHandler), ledger.Options{GroupCommit: ledger.GroupCommit{Linger: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	acked := map[string]bool{}
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := 0; ; i++ {
				q := query("acme", "c1", "")
				q.RequestID = fmt.Sprintf("w%d-%d", w, i)
				err := l.RecordUsage(ctx, q)
				if errors.Is(err, ledger.ErrUnavailable) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				acked[q.RequestID] = true
				n := len(acked)
				mu.Unlock()
				if n == 200 {
					go l.Close()
				}
			}
		})
	}
	wg.Wait()
	l.Close()
	got := rowsByRequest(t, url)
	for id := range acked {
		if got[id] != 1 {
			t.Errorf("acknowledged %s has %d rows", id, got[id])
		}
	}
	for id, n := range got {
		if n != 1 {
			t.Errorf("%s has %d rows", id, n)
		}
	}
	checkInvariants(t, url)
}

// A reader paging an org's rows by id while rows of every kind commit (grouped usage rows, credits,
// prepares) sees every row exactly once when it reads behind the settle horizon: the ids up to a mark
// of the id sequence a settle old have all committed or never will.
func TestPagingNeverSkipsLateCommits(t *testing.T) {
	t.Parallel()
	// Far above any statement of this test (the proxy reads behind ledger.DefaultUsageSettle).
	const settle = 3 * time.Second
	l, _ := open(t)
	const org = "acme"
	if err := l.Credit(ctx, org, 1000, "ops"); err != nil {
		t.Fatal(err)
	}
	var writers sync.WaitGroup
	for w := range 8 {
		writers.Go(func() {
			for i := range 40 {
				var err error
				switch {
				case w == 0 && i%4 == 0:
					err = l.Credit(ctx, org, 1, "ops")
				case w == 1 && i%4 == 0:
					id := fmt.Sprintf("p%d", i)
					if _, err = l.Hold(ctx, hold(id, org, "c"+id)); err == nil {
						_, err = l.Capture(ctx, capture(id, org, "c"+id))
					}
				default:
					q := query(org, "c1", "")
					q.RequestID = fmt.Sprintf("w%d-%d", w, i)
					err = l.RecordUsage(ctx, q)
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { writers.Wait(); close(done) }()
	seen := map[int64]bool{}
	var after int64
	read := func() int {
		page, err := l.QueryRows(ctx, ledger.RowFilter{Org: org, AfterID: after, Limit: 7, Settle: settle})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page {
			if seen[r.ID] {
				t.Fatalf("row %d read twice", r.ID)
			}
			seen[r.ID] = true
			after = r.ID
		}
		return len(page)
	}
	// The proxy marks the id sequence every ledger.MarkInterval; pages list ids up to a mark a settle old.
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		if err := l.MarkIDs(ctx); err != nil {
			t.Fatal(err)
		}
		read()
	}
	if err := l.MarkIDs(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(settle)
	for read() > 0 {
	}
	all := allRows(t, l, org)
	if len(all) != len(seen) {
		for _, r := range all {
			if !seen[r.ID] {
				t.Errorf("row %d (%s) was skipped", r.ID, r.Model)
			}
		}
		t.Fatalf("read %d rows of %d", len(seen), len(all))
	}
}
