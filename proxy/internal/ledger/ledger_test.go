package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hanzoai/lsp/migrations"
	"github.com/hanzoai/lsp/proxy/internal/ledger"
	"github.com/hanzoai/lsp/proxy/internal/pgtest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestMain(m *testing.M) { pgtest.MainLeakChecked(m) }

var ctx = context.Background()

// open gives the test its own migrated database and a ledger on it, and checks the ledger's
// invariants when the test ends.
func open(t testing.TB) (*ledger.Ledger, string) {
	t.Helper()
	url := pgtest.NewDatabase(t)
	l, err := ledger.Open(ctx, url, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	t.Cleanup(func() { checkInvariants(t, url) })
	return l, url
}

func connect(t testing.TB, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	return conn
}

// checkInvariants: every balance equals the sum of its org's rows and is not negative; live holds
// never exceed the balance; every captured hold points at its one prepare row; every org's
// idempotency_bytes is the sum of its keys' rows.
func checkInvariants(t testing.TB, url string) {
	t.Helper()
	conn := connect(t, url)
	rows, err := conn.Query(ctx, `
		SELECT a.org, a.balance_cents,
		       coalesce((SELECT sum(r.amount_cents) FROM ledger_rows r WHERE r.payer_org = a.org), 0)::bigint,
		       coalesce((SELECT sum(h.amount_cents) FROM holds h
		                  WHERE h.org = a.org AND h.state = 'live' AND h.expires_at > now()), 0)::bigint
		  FROM accounts a`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var org string
		var bal, sum, held int64
		if err := rows.Scan(&org, &bal, &sum, &held); err != nil {
			t.Fatal(err)
		}
		if bal != sum {
			t.Errorf("%s: balance %d, sum of rows %d", org, bal, sum)
		}
		if bal < 0 || held > bal {
			t.Errorf("%s: balance %d, live holds %d", org, bal, held)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var bad int
	if err := conn.QueryRow(ctx, `
		SELECT count(*) FROM holds h
		 WHERE (h.state = 'captured') <> EXISTS (
		       SELECT 1 FROM ledger_rows r
		        WHERE r.model = 'prepare' AND r.prepare_id = h.prepare_id AND r.id = h.ledger_row_id)`).Scan(&bad); err != nil {
		t.Fatal(err)
	}
	if bad != 0 {
		t.Errorf("%d holds disagree with the prepare rows", bad)
	}
	checkIdempotencyBytes(t, conn)
}

// checkIdempotencyBytes compares every org's idempotency_bytes, kept by the trigger, with a fresh sum
// over its keys' rows (idemCountSQL); an org without a count or without rows stands for 0.
func checkIdempotencyBytes(t testing.TB, conn *pgx.Conn) {
	t.Helper()
	rows, err := conn.Query(ctx, `SELECT coalesce(b.org, c.org), coalesce(b.bytes, 0), coalesce(c.sum, 0)
		  FROM idempotency_bytes b FULL JOIN (`+idemCountSQL+`) c ON c.org = b.org
		 WHERE coalesce(b.bytes, 0) <> coalesce(c.sum, 0)`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var org string
		var counted, sum int64
		if err := rows.Scan(&org, &counted, &sum); err != nil {
			t.Fatal(err)
		}
		t.Errorf("org %s: idempotency_bytes %d, its keys' rows %d", org, counted, sum)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

func hold(id, org, commit string) ledger.HoldRequest {
	return ledger.HoldRequest{
		PrepareID: id, Org: org, TenantKey: "tk-" + org, Subject: "alice", Repo: "repo", Commit: commit,
		RequestID: "req-" + id, Price: 2, TTL: 10 * time.Minute, Grace: 24 * time.Hour,
	}
}

func capture(id, org, commit string) ledger.Row {
	return ledger.Row{
		PrepareID: id, Org: org, TenantKey: "tk-" + org, Subject: "alice", Repo: "repo", Commit: commit,
		Op: "hover", Language: "go", RequestID: "req-" + id, HTTPStatus: 200,
	}
}

func query(org, commit, prepareID string) ledger.Row {
	return ledger.Row{
		PrepareID: prepareID, Org: org, TenantKey: "tk-" + org, Subject: "bob", Repo: "repo", Commit: commit,
		Op: "locate", Language: "go", RequestID: "q", HTTPStatus: 200,
	}
}

func mustBalance(t testing.TB, l *ledger.Ledger, org string, bal, held int64) {
	t.Helper()
	b, err := l.Balance(ctx, org)
	if err != nil {
		t.Fatal(err)
	}
	want := ledger.Balance{Org: org, BalanceCents: bal, HeldCents: held, AvailableCents: bal - held}
	if b != want {
		t.Fatalf("balance %+v, want %+v", b, want)
	}
}

func allRows(t testing.TB, l *ledger.Ledger, org string) []ledger.LedgerRow {
	t.Helper()
	rows, err := l.Rows(ctx, org, 0, ledger.MaxRowsLimit)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

func TestHoldCaptureRelease(t *testing.T) {
	t.Parallel()
	l, _ := open(t)
	const org = "acme"
	mustBalance(t, l, org, 0, 0) // unknown org: zeros, no error
	if err := l.Credit(ctx, org, 10, "ops"); err != nil {
		t.Fatal(err)
	}
	amount, err := l.Hold(ctx, hold("p1", org, "c1"))
	if err != nil || amount != 2 {
		t.Fatalf("hold = %d, %v", amount, err)
	}
	mustBalance(t, l, org, 10, 2)

	row := capture("p1", org, "c1")
	row.HTTPStatus = 0 // not known yet
	if ok, err := l.Capture(ctx, row); !ok || err != nil {
		t.Fatalf("capture = %v, %v", ok, err)
	}
	mustBalance(t, l, org, 8, 0)
	// The request that prepared writes its usage row once its answer is known: the prepare row is
	// listed with that request's status (the money row itself never changes).
	prepared := capture("p1", org, "c1")
	prepared.Prepared, prepared.HTTPStatus = true, 201
	if err := l.RecordUsage(ctx, prepared); err != nil {
		t.Fatal(err)
	}

	// Second capture of the same prepare id: nothing written.
	if ok, err := l.Capture(ctx, capture("p1", org, "c1")); ok || err != nil {
		t.Fatalf("second capture = %v, %v", ok, err)
	}
	// Release of a captured hold does nothing.
	if err := l.Release(ctx, "p1"); err != nil {
		t.Fatal(err)
	}
	mustBalance(t, l, org, 8, 0)

	// A released hold returns its funds and cannot be captured afterwards.
	if _, err := l.Hold(ctx, hold("p2", org, "c2")); err != nil {
		t.Fatal(err)
	}
	mustBalance(t, l, org, 8, 2)
	if err := l.Release(ctx, "p2"); err != nil {
		t.Fatal(err)
	}
	mustBalance(t, l, org, 8, 0)

	for name, r := range map[string]ledger.Row{
		"unknown id":    capture("nope", org, "c1"),
		"other org":     capture("p1", "other", "c1"),
		"other commit":  capture("p3", org, "elsewhere"),
		"status of nil": {PrepareID: "nope", Org: org},
	} {
		if name == "other commit" {
			if _, err := l.Hold(ctx, hold("p3", org, "c3")); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := l.Capture(ctx, r); !errors.Is(err, ledger.ErrUnknownHold) {
			t.Errorf("%s: capture = %v, want ErrUnknownHold", name, err)
		}
	}
	if err := l.Release(ctx, "p3"); err != nil {
		t.Fatal(err)
	}

	rows := allRows(t, l, org)
	if len(rows) != 2 {
		t.Fatalf("rows: %+v", rows)
	}
	c, p := rows[0], rows[1]
	if c.Kind != "credit" || c.Model != "" || c.AmountCents != 10 || c.Subject != "ops" {
		t.Errorf("credit row %+v", c)
	}
	want := ledger.LedgerRow{
		ID: p.ID, Kind: "lsp", Model: "prepare", PayerOrg: org, TenantKey: "tk-" + org, Subject: "alice",
		Repo: "repo", Commit: "c1", Op: "hover", Language: "go", AmountCents: -2, HTTPStatus: 201,
		RequestID: "req-p1", PrepareID: "p1", CreatedAt: p.CreatedAt,
	}
	if p != want || p.ID <= c.ID {
		t.Errorf("prepare row\n got %+v\nwant %+v", p, want)
	}
}

func TestInsufficientFunds(t *testing.T) {
	t.Parallel()
	l, _ := open(t)
	if _, err := l.Hold(ctx, hold("p0", "newcomer", "c")); !errors.Is(err, ledger.ErrInsufficientFunds) {
		t.Fatalf("hold for an org without an account: %v", err)
	}
	if err := l.Credit(ctx, "acme", 3, "ops"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Hold(ctx, hold("p1", "acme", "c1")); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Hold(ctx, hold("p2", "acme", "c2")); !errors.Is(err, ledger.ErrInsufficientFunds) {
		t.Fatalf("hold beyond available: %v", err)
	}
	// A debit may not eat held funds.
	if err := l.Credit(ctx, "acme", -2, "ops"); !errors.Is(err, ledger.ErrInsufficientFunds) {
		t.Fatalf("debit into held funds: %v", err)
	}
	if err := l.Credit(ctx, "acme", -1, "ops"); err != nil {
		t.Fatal(err)
	}
	mustBalance(t, l, "acme", 2, 2)
	// A failed hold leaves no trace.
	var holds int
	if err := connect(t, l.Pool().Config().ConnString()).QueryRow(ctx, "SELECT count(*) FROM holds").Scan(&holds); err != nil {
		t.Fatal(err)
	}
	if holds != 1 {
		t.Errorf("%d holds, want 1", holds)
	}
	// Repeating a hold returns it rather than holding twice.
	if a, err := l.Hold(ctx, hold("p1", "acme", "c1")); a != 2 || err != nil {
		t.Fatalf("repeated hold = %d, %v", a, err)
	}
	if _, err := l.Hold(ctx, hold("p1", "acme", "other")); err == nil {
		t.Fatal("a prepare id was reused for another workspace")
	}
	mustBalance(t, l, "acme", 2, 2)
}

func TestReprepareWithinGrace(t *testing.T) {
	t.Parallel()
	l, url := open(t)
	const org = "acme"
	if err := l.Credit(ctx, org, 2, "ops"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Hold(ctx, hold("p1", org, "c1")); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Capture(ctx, capture("p1", org, "c1")); err != nil {
		t.Fatal(err)
	}
	mustBalance(t, l, org, 0, 0)

	// Evicted and prepared again: free, with no funds left.
	amount, err := l.Hold(ctx, hold("p2", org, "c1"))
	if err != nil || amount != 0 {
		t.Fatalf("re-prepare hold = %d, %v", amount, err)
	}
	if ok, err := l.Capture(ctx, capture("p2", org, "c1")); !ok || err != nil {
		t.Fatalf("capture = %v, %v", ok, err)
	}
	// Another commit is a new revision: it needs funds.
	if _, err := l.Hold(ctx, hold("p3", org, "c2")); !errors.Is(err, ledger.ErrInsufficientFunds) {
		t.Fatalf("hold for another commit: %v", err)
	}
	// No grace window: pays again.
	noGrace := hold("p4", org, "c1")
	noGrace.Grace = 0
	if _, err := l.Hold(ctx, noGrace); !errors.Is(err, ledger.ErrInsufficientFunds) {
		t.Fatalf("hold without grace: %v", err)
	}

	rows := allRows(t, l, org)
	last := rows[len(rows)-1]
	if last.Model != "prepare" || last.AmountCents != 0 || last.Reason != "reprepare" || last.PrepareID != "p2" {
		t.Fatalf("re-prepare row %+v", last)
	}

	// Once the last charge is older than the window, the key pays again.
	// Time passes (rows are immutable: the test bypasses the trigger).
	if _, err := connect(t, url).Exec(ctx,
		"SET session_replication_role = replica; UPDATE ledger_rows SET created_at = created_at - interval '25 hours' WHERE model = 'prepare'"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Hold(ctx, hold("p5", org, "c1")); !errors.Is(err, ledger.ErrInsufficientFunds) {
		t.Fatalf("hold after the grace window: %v", err)
	}
}

// Two pushes of the same revision raced (say, on two shards) and both held 2¢: the customer still
// pays once.
func TestConcurrentPreparesOfOneRevisionPayOnce(t *testing.T) {
	t.Parallel()
	l, _ := open(t)
	if err := l.Credit(ctx, "acme", 4, "ops"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		if a, err := l.Hold(ctx, hold(id, "acme", "c1")); a != 2 || err != nil {
			t.Fatalf("hold %s = %d, %v", id, a, err)
		}
	}
	for _, id := range []string{"a", "b"} {
		if ok, err := l.Capture(ctx, capture(id, "acme", "c1")); !ok || err != nil {
			t.Fatalf("capture %s = %v, %v", id, ok, err)
		}
	}
	mustBalance(t, l, "acme", 2, 0)
	rows := allRows(t, l, "acme")
	if r := rows[len(rows)-1]; r.AmountCents != 0 || r.Reason != "reprepare" {
		t.Fatalf("second prepare row %+v", r)
	}
}

func TestQueryRowsAreWritten(t *testing.T) {
	t.Parallel()
	l, _ := open(t)
	// Warm queries succeed at a zero balance, for an org that never had an account.
	q := query("fresh", "c1", "")
	q.HTTPStatus = 422
	if err := l.RecordUsage(ctx, q); err != nil {
		t.Fatal(err)
	}
	q.HTTPStatus = 0
	q.Op, q.RequestID = "hover", "q2"
	if err := l.RecordUsage(ctx, q); err != nil {
		t.Fatal(err)
	}
	rows := allRows(t, l, "fresh")
	if len(rows) != 2 {
		t.Fatalf("rows %+v", rows)
	}
	for i, r := range rows {
		if r.Kind != "lsp" || r.Model != "query" || r.AmountCents != 0 || r.Repo != "repo" ||
			r.TenantKey != "tk-fresh" || r.Subject != "bob" || r.Language != "go" || r.PrepareID != "" {
			t.Errorf("row %d: %+v", i, r)
		}
	}
	if rows[0].HTTPStatus != 422 || rows[0].Op != "locate" || rows[1].HTTPStatus != 0 || rows[1].Op != "hover" {
		t.Errorf("rows %+v", rows)
	}
	mustBalance(t, l, "fresh", 0, 0)
}

func TestRecordQueryRecoversLiveHoldOnce(t *testing.T) {
	t.Parallel()
	l, _ := open(t)
	const org = "acme"
	if err := l.Credit(ctx, org, 5, "ops"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Hold(ctx, hold("p1", org, "c1")); err != nil {
		t.Fatal(err)
	}
	// A hold of another workspace is not touched by an answer that names its id.
	other := query(org, "c-other", "p1")
	if err := l.RecordUsage(ctx, other); err != nil {
		t.Fatal(err)
	}
	mustBalance(t, l, org, 5, 2)

	// The proxy that pushed died; the next answers from the workspace reveal p1.
	for range 3 {
		if err := l.RecordUsage(ctx, query(org, "c1", "p1")); err != nil {
			t.Fatal(err)
		}
	}
	mustBalance(t, l, org, 3, 0)
	if ok, err := l.Capture(ctx, capture("p1", org, "c1")); ok || err != nil {
		t.Fatalf("capture after recovery = %v, %v", ok, err)
	}
	var prepares, queries int
	for _, r := range allRows(t, l, org) {
		switch r.Model {
		case "prepare":
			prepares++
			if r.PrepareID != "p1" || r.AmountCents != -2 || r.Reason != "recovered" ||
				r.RequestID != "req-p1" || r.Subject != "alice" || r.HTTPStatus != 0 {
				t.Errorf("recovered row %+v", r)
			}
		case "query":
			queries++
		}
	}
	if prepares != 1 || queries != 4 {
		t.Fatalf("%d prepare rows and %d query rows, want 1 and 4", prepares, queries)
	}
}

// Many answers reveal the same uncaptured prepare while its proxy captures it: exactly one prepare row.
func TestCaptureRacesRecovery(t *testing.T) {
	t.Parallel()
	l, _ := open(t)
	if err := l.Credit(ctx, "acme", 2, "ops"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Hold(ctx, hold("p1", "acme", "c1")); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var captured atomic.Int32
	for i := range 12 {
		wg.Go(func() {
			if i%3 == 0 {
				ok, err := l.Capture(ctx, capture("p1", "acme", "c1"))
				if err != nil {
					t.Error(err)
				}
				if ok {
					captured.Add(1)
				}
				return
			}
			if err := l.RecordUsage(ctx, query("acme", "c1", "p1")); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if captured.Load() > 1 {
		t.Fatalf("captured %d times", captured.Load())
	}
	n := 0
	for _, r := range allRows(t, l, "acme") {
		if r.Model == "prepare" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d prepare rows", n)
	}
	mustBalance(t, l, "acme", 0, 0)
}

func TestConcurrentHoldsNeverOverdraw(t *testing.T) {
	t.Parallel()
	l, _ := open(t)
	const org, k, n = "acme", 7, 40
	if err := l.Credit(ctx, org, 2*k+1, "ops"); err != nil { // one cent short of k+1
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var ok, short atomic.Int32
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			_, err := l.Hold(ctx, hold(fmt.Sprintf("p%d", i), org, fmt.Sprintf("c%d", i)))
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, ledger.ErrInsufficientFunds):
				short.Add(1)
			default:
				t.Error(err)
			}
			b, err := l.Balance(ctx, org)
			if err != nil {
				t.Error(err)
			} else if b.AvailableCents < 0 || b.BalanceCents < 0 {
				t.Errorf("balance went negative: %+v", b)
			}
		})
	}
	close(start)
	wg.Wait()
	if ok.Load() != k || short.Load() != n-k {
		t.Fatalf("%d holds succeeded and %d were refused; want %d and %d", ok.Load(), short.Load(), k, n-k)
	}
	mustBalance(t, l, org, 2*k+1, 2*k)

	// Capture the winners concurrently (and some twice): each pays once.
	held, err := connect(t, l.Pool().Config().ConnString()).Query(ctx, "SELECT prepare_id, commit FROM holds")
	if err != nil {
		t.Fatal(err)
	}
	type key struct{ ID, Commit string }
	keys, err := pgx.CollectRows(held, pgx.RowToStructByPos[key])
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range append(keys, keys...) {
		wg.Go(func() {
			if _, err := l.Capture(ctx, capture(k.ID, org, k.Commit)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	mustBalance(t, l, org, 1, 0)
}

func TestExpiredHoldDoesNotCount(t *testing.T) {
	t.Parallel()
	l, url := open(t)
	const org = "acme"
	if err := l.Credit(ctx, org, 3, "ops"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Hold(ctx, hold("old", org, "c1")); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Hold(ctx, hold("p2", org, "c2")); !errors.Is(err, ledger.ErrInsufficientFunds) {
		t.Fatalf("second hold: %v", err)
	}
	// Its expiry passes; no sweeper has run.
	if _, err := connect(t, url).Exec(ctx, "UPDATE holds SET expires_at = now() - interval '1 second' WHERE prepare_id = 'old'"); err != nil {
		t.Fatal(err)
	}
	mustBalance(t, l, org, 3, 0)
	if err := l.Extend(ctx, "old", time.Hour); !errors.Is(err, ledger.ErrUnknownHold) {
		t.Fatalf("extend an expired hold: %v", err)
	}
	if _, err := l.Hold(ctx, hold("p2", org, "c2")); err != nil {
		t.Fatalf("hold after expiry: %v", err)
	}
	if err := l.Extend(ctx, "p2", time.Hour); err != nil {
		t.Fatal(err)
	}
	if n, err := l.ExpireHolds(ctx); n != 1 || err != nil {
		t.Fatalf("expire = %d, %v", n, err)
	}
	if n, err := l.ExpireHolds(ctx); n != 0 || err != nil {
		t.Fatalf("second expire = %d, %v", n, err)
	}
	if ok, err := l.Capture(ctx, capture("p2", org, "c2")); !ok || err != nil {
		t.Fatalf("capture = %v, %v", ok, err)
	}
	// The expired prepare did run after all: it is charged, but only what is left (1¢ of 2¢).
	if ok, err := l.Capture(ctx, capture("old", org, "c1")); !ok || err != nil {
		t.Fatalf("late capture = %v, %v", ok, err)
	}
	mustBalance(t, l, org, 0, 0)
	rows := allRows(t, l, org)
	if r := rows[len(rows)-1]; r.PrepareID != "old" || r.AmountCents != -1 || r.Reason != "shortfall" {
		t.Fatalf("late capture row %+v", r)
	}
}

func TestSpendCap(t *testing.T) {
	t.Parallel()
	l, _ := open(t)
	const org = "acme"
	if err := l.Credit(ctx, org, 100, "ops"); err != nil {
		t.Fatal(err)
	}
	if err := l.SetDailyCap(ctx, org, 5); err != nil {
		t.Fatal(err)
	}
	for i, c := range []string{"c1", "c2"} {
		id := fmt.Sprint("p", i)
		if _, err := l.Hold(ctx, hold(id, org, c)); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if _, err := l.Capture(ctx, capture(id, org, c)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// 2 spent + 2 held + 2 > 5.
	if _, err := l.Hold(ctx, hold("p3", org, "c3")); !errors.Is(err, ledger.ErrSpendCapExceeded) {
		t.Fatalf("hold over the cap: %v", err)
	}
	// Re-prepares are free, so the cap does not apply.
	if a, err := l.Hold(ctx, hold("p4", org, "c1")); a != 0 || err != nil {
		t.Fatalf("re-prepare under the cap = %d, %v", a, err)
	}
	if err := l.SetDailyCap(ctx, org, -1); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Hold(ctx, hold("p3", org, "c3")); err != nil {
		t.Fatalf("hold without a cap: %v", err)
	}
}

func TestRowsPagination(t *testing.T) {
	t.Parallel()
	l, _ := open(t)
	if err := l.Credit(ctx, "acme", 10, "ops"); err != nil {
		t.Fatal(err)
	}
	if err := l.Credit(ctx, "other", 10, "ops"); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := l.RecordUsage(ctx, query("acme", fmt.Sprint("c", i), "")); err != nil {
			t.Fatal(err)
		}
	}
	var got []ledger.LedgerRow
	for after := int64(0); ; {
		page, err := l.Rows(ctx, "acme", after, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		got = append(got, page...)
		after = page[len(page)-1].ID
	}
	if len(got) != 6 {
		t.Fatalf("paged %d rows, want 6", len(got))
	}
	for i, r := range got {
		if r.PayerOrg != "acme" || i > 0 && r.ID <= got[i-1].ID {
			t.Fatalf("row %d: %+v", i, r)
		}
	}
	for _, tc := range []struct {
		f    ledger.RowFilter
		want int
	}{
		{ledger.RowFilter{Org: "acme", Model: "query"}, 5},
		{ledger.RowFilter{Org: "acme", Model: "credit"}, 1},
		{ledger.RowFilter{Org: "acme", Model: "prepare"}, 0},
		{ledger.RowFilter{Org: "acme", Repo: "repo"}, 5},
		{ledger.RowFilter{Org: "acme", From: time.Now().Add(time.Hour)}, 0},
		{ledger.RowFilter{Org: "acme", To: time.Now().Add(time.Hour)}, 6},
		{ledger.RowFilter{Org: "nobody"}, 0},
	} {
		rows, err := l.QueryRows(ctx, tc.f)
		if err != nil || len(rows) != tc.want {
			t.Errorf("%+v: %d rows, %v; want %d", tc.f, len(rows), err, tc.want)
		}
	}
}

// A mixed concurrent workload over a few orgs; the invariants are checked when the test ends.
func TestMixedWorkloadKeepsBalanceEqualToRows(t *testing.T) {
	t.Parallel()
	l, _ := open(t)
	orgs := []string{"a", "b", "c"}
	for _, o := range orgs {
		if err := l.Credit(ctx, o, 9, "ops"); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 25 {
				org := orgs[(w+i)%len(orgs)]
				id := fmt.Sprintf("w%d-%d", w, i)
				commit := fmt.Sprint("c", i%4)
				_, err := l.Hold(ctx, hold(id, org, commit))
				if errors.Is(err, ledger.ErrInsufficientFunds) {
					if err := l.Credit(ctx, org, 3, "ops"); err != nil {
						t.Error(err)
					}
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				switch i % 4 {
				case 0:
					err = l.Release(ctx, id)
				case 1:
					err = l.RecordUsage(ctx, query(org, commit, id))
				default:
					_, err = l.Capture(ctx, capture(id, org, commit))
				}
				if err != nil {
					t.Error(err)
				}
				if err := l.RecordUsage(ctx, query(org, commit, "")); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
}

func TestMigrateIsIdempotentAndSafeConcurrently(t *testing.T) {
	t.Parallel()
	url := pgtest.NewEmptyDatabase(t)
	var wg sync.WaitGroup
	var ledgers [4]*ledger.Ledger
	for i := range ledgers {
		wg.Go(func() {
			l, err := ledger.Open(ctx, url, nil) // each Open is its own pool and migrates
			if err != nil {
				t.Error(err)
				return
			}
			ledgers[i] = l
		})
	}
	wg.Wait()
	for _, l := range ledgers {
		if l == nil {
			t.FailNow()
		}
		defer l.Close()
	}
	for range 2 {
		if err := ledger.Migrate(ctx, ledgers[0].Pool(), nil); err != nil {
			t.Fatal(err)
		}
	}
	var applied, distinct int
	if err := connect(t, url).QueryRow(ctx,
		"SELECT count(*), count(DISTINCT version) FROM lsp_schema_migrations").Scan(&applied, &distinct); err != nil {
		t.Fatal(err)
	}
	if applied == 0 || applied != distinct {
		t.Fatalf("%d migrations recorded, %d distinct", applied, distinct)
	}
	if err := ledgers[1].Credit(ctx, "acme", 1, "ops"); err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, url)
}

func TestReadonlyRole(t *testing.T) {
	t.Parallel()
	_, url := open(t)
	conn := connect(t, url)
	var canLogin bool
	if err := conn.QueryRow(ctx, "SELECT rolcanlogin FROM pg_roles WHERE rolname = 'lsp_readonly'").Scan(&canLogin); err != nil {
		t.Fatal(err)
	}
	if canLogin {
		t.Error("lsp_readonly can log in")
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SET LOCAL ROLE lsp_readonly"); err != nil {
		t.Fatal(err)
	}
	// The function v_usage_daily calls runs with its owner's rights, so its search path is fixed,
	// pg_temp last: unlisted, pg_temp is searched first, and a reader's temporary usage_rows would be
	// the one read.
	var config []string
	if err := conn.QueryRow(ctx, "SELECT proconfig FROM pg_proc WHERE proname = 'lsp_usage_rollup_rows'").Scan(&config); err != nil {
		t.Fatal(err)
	}
	if len(config) != 1 || !strings.HasPrefix(config[0], "search_path=") || !strings.HasSuffix(config[0], ", pg_catalog, pg_temp") {
		t.Errorf("lsp_usage_rollup_rows's settings %q; want its schema, pg_catalog, then pg_temp", config)
	}
	// Every documented view, v_usage_daily among them (its live part is a function, which ran with
	// the reader's rights and so could not read usage_rows).
	for _, v := range migrations.ReadonlyViews {
		if _, err := tx.Exec(ctx, "SELECT * FROM "+v); err != nil {
			t.Fatalf("read %s: %v", v, err)
		}
	}
	for _, sql := range []string{
		"SELECT * FROM ledger_rows",
		"SELECT * FROM usage_rows",
		"INSERT INTO v_ledger_rows (kind, payer_org, amount_cents) VALUES ('credit', 'x', 1)",
		"SELECT lsp_credit('x', 1, 'y')",
	} {
		if _, err := tx.Exec(ctx, "SAVEPOINT s"); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, sql); err == nil {
			t.Errorf("lsp_readonly may run %q", sql)
		}
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT s"); err != nil {
			t.Fatal(err)
		}
	}
}

// A database user that may not create roles still migrates; the role step is skipped.
func TestMigrateWithoutCreateRolePrivilege(t *testing.T) {
	t.Parallel()
	if pgtest.Cluster(t) == nil {
		t.Skip("needs the local test cluster to log in as another role")
	}
	admin := connect(t, pgtest.AdminURL(t))
	suffix := fmt.Sprint(time.Now().UnixNano())
	app, db, role := "app_"+suffix, "appdb_"+suffix, "ro_"+suffix
	for _, sql := range []string{
		"CREATE ROLE " + app + " LOGIN NOCREATEROLE NOSUPERUSER",
		"CREATE DATABASE " + db + " OWNER " + app,
	} {
		if _, err := admin.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := pgxpool.ParseConfig(pgtest.Cluster(t).URL(db))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.User = app
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := ledger.MigrateWithRole(ctx, pool, nil, role); err != nil {
		t.Fatalf("migrate as a user without CREATEROLE: %v", err)
	}
	var exists bool
	if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)", role).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Fatal("the role was created anyway")
	}
	// The real role exists on this cluster: the unprivileged owner can still grant it the views.
	if err := ledger.Migrate(ctx, pool, nil); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM information_schema.role_table_grants
		WHERE grantee = 'lsp_readonly' AND privilege_type = 'SELECT'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != len(migrations.ReadonlyViews) {
		t.Fatalf("lsp_readonly has SELECT on %d views, want %d", n, len(migrations.ReadonlyViews))
	}
}

// A hold released because the daemon said nothing was written or in flight, whose tree was published
// after all (a race the daemon cannot rule out): the first answer naming its id captures it, and the
// shortfall rule bounds the charge by what the org can still pay.
func TestReleasedHoldCapturedByALaterAnswer(t *testing.T) {
	t.Parallel()
	l, _ := open(t)
	const org = "acme"
	if err := l.Credit(ctx, org, 4, "ops"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Hold(ctx, hold("p1", org, "c1")); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx, "p1"); err != nil {
		t.Fatal(err)
	}
	mustBalance(t, l, org, 4, 0)
	if err := l.RecordUsage(ctx, query(org, "c1", "p1")); err != nil {
		t.Fatal(err)
	}
	mustBalance(t, l, org, 2, 0)
	// Captured once: the next answer naming it, and a late Capture, write nothing.
	if err := l.RecordUsage(ctx, query(org, "c1", "p1")); err != nil {
		t.Fatal(err)
	}
	if ok, err := l.Capture(ctx, capture("p1", org, "c1")); ok || err != nil {
		t.Fatalf("capture after recovery = %v, %v", ok, err)
	}
	mustBalance(t, l, org, 2, 0)

	// Released, then the funds went to another live hold: the late capture charges what is left (0¢).
	if _, err := l.Hold(ctx, hold("p2", org, "c2")); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx, "p2"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Hold(ctx, hold("p3", org, "c3")); err != nil {
		t.Fatal(err)
	}
	if ok, err := l.Capture(ctx, capture("p2", org, "c2")); !ok || err != nil {
		t.Fatalf("capture of a released hold = %v, %v", ok, err)
	}
	mustBalance(t, l, org, 2, 2)
	var reasons []string
	for _, r := range allRows(t, l, org) {
		if r.Model == "prepare" {
			reasons = append(reasons, fmt.Sprintf("%s:%d:%s", r.PrepareID, r.AmountCents, r.Reason))
		}
	}
	if got, want := strings.Join(reasons, " "), "p1:-2:recovered p2:0:shortfall"; got != want {
		t.Fatalf("prepare rows %q, want %q", got, want)
	}
}

// The grace is keyed by (org, repo, commit): a rotated LSP_TENANT_KEY_SECRET gives the org a new
// tenant key, and its revisions prepared within the window stay free.
func TestGraceSurvivesATenantKeyRotation(t *testing.T) {
	t.Parallel()
	l, _ := open(t)
	const org = "acme"
	if err := l.Credit(ctx, org, 2, "ops"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Hold(ctx, hold("p1", org, "c1")); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Capture(ctx, capture("p1", org, "c1")); err != nil {
		t.Fatal(err)
	}
	rotated := hold("p2", org, "c1")
	rotated.TenantKey = "tk-rotated"
	if amount, err := l.Hold(ctx, rotated); amount != 0 || err != nil {
		t.Fatalf("hold under a rotated tenant key = %d, %v; want a free re-prepare", amount, err)
	}
	// Another org's charge of the same repo and commit makes nothing free.
	if err := l.Credit(ctx, "other", 1, "ops"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Hold(ctx, hold("p3", "other", "c1")); !errors.Is(err, ledger.ErrInsufficientFunds) {
		t.Fatalf("another org's hold: %v", err)
	}
}

// The tenant's own DELETE /workspaces ends the revision's grace: the next prepare is charged, so one
// charge does not buy unlimited delete-and-prepare cycles.
func TestEndGraceChargesTheNextPrepare(t *testing.T) {
	t.Parallel()
	l, _ := open(t)
	const org = "acme"
	if err := l.Credit(ctx, org, 4, "ops"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Hold(ctx, hold("p1", org, "c1")); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Capture(ctx, capture("p1", org, "c1")); err != nil {
		t.Fatal(err)
	}
	if err := l.EndGrace(ctx, org, "repo", "c1"); err != nil {
		t.Fatal(err)
	}
	if amount, err := l.Hold(ctx, hold("p2", org, "c1")); amount != 2 || err != nil {
		t.Fatalf("hold after the grace ended = %d, %v; want 2", amount, err)
	}
	if _, err := l.Capture(ctx, capture("p2", org, "c1")); err != nil {
		t.Fatal(err)
	}
	mustBalance(t, l, org, 0, 0)
	// That charge opens a new window.
	if amount, err := l.Hold(ctx, hold("p3", org, "c1")); amount != 0 || err != nil {
		t.Fatalf("re-prepare after the new charge = %d, %v; want 0", amount, err)
	}
	// Other revisions keep their grace.
	if err := l.EndGrace(ctx, org, "repo", "c9"); err != nil {
		t.Fatal(err)
	}
	if amount, err := l.Hold(ctx, hold("p4", org, "c1")); amount != 0 || err != nil {
		t.Fatalf("re-prepare of c1 after ending c9's grace = %d, %v", amount, err)
	}
}

// TestPendingHolds: the settler is shown every live or expired hold taken
// before its cutoff, oldest first, with what a capture needs — never a
// captured or released one, nor one whose prepare may still run.
func TestPendingHolds(t *testing.T) {
	t.Parallel()
	l, url := open(t)
	const org = "acme"
	if err := l.Credit(ctx, org, 10, "ops"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"live", "expired", "captured", "released", "young"} {
		if _, err := l.Hold(ctx, hold(id, org, "c-"+id)); err != nil {
			t.Fatal(err)
		}
	}
	db := connect(t, url)
	for _, q := range []string{
		"UPDATE holds SET created_at = now() - interval '2 hours' WHERE prepare_id IN ('live', 'captured', 'released')",
		"UPDATE holds SET created_at = now() - interval '3 hours', expires_at = now() - interval '1 hour' WHERE prepare_id = 'expired'",
	} {
		if _, err := db.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.ExpireHolds(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Capture(ctx, capture("captured", org, "c-captured")); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx, "released"); err != nil {
		t.Fatal(err)
	}
	got, err := l.PendingHolds(ctx, time.Now().Add(-time.Hour), 10)
	if err != nil {
		t.Fatal(err)
	}
	want := []ledger.PendingHold{
		{PrepareID: "expired", Org: org, TenantKey: "tk-" + org, Subject: "alice", Repo: "repo", Commit: "c-expired", RequestID: "req-expired"},
		{PrepareID: "live", Org: org, TenantKey: "tk-" + org, Subject: "alice", Repo: "repo", Commit: "c-live", RequestID: "req-live"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("pending holds %+v, want %+v", got, want)
	}
	if got, err := l.PendingHolds(ctx, time.Now().Add(-time.Hour), 1); err != nil || len(got) != 1 || got[0].PrepareID != "expired" {
		t.Fatalf("limit 1: %+v, %v", got, err)
	}
}
