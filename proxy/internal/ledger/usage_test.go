package ledger_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/ledger"
)

// Money rows and usage rows never change once written: an UPDATE or DELETE of either is refused.
func TestRowsAreImmutable(t *testing.T) {
	t.Parallel()
	l, url := open(t)
	if err := l.Credit(ctx, "acme", 5, "ops"); err != nil {
		t.Fatal(err)
	}
	if err := l.RecordUsage(ctx, query("acme", "c1", "")); err != nil {
		t.Fatal(err)
	}
	conn := connect(t, url)
	for _, sql := range []string{
		`UPDATE ledger_rows SET amount_cents = 6`,
		`DELETE FROM ledger_rows`,
		`UPDATE usage_rows SET http_status = 500`,
		`DELETE FROM usage_rows`,
	} {
		if _, err := conn.Exec(ctx, sql); err == nil || !strings.Contains(err.Error(), "immutable") {
			t.Errorf("%s: %v; want it refused", sql, err)
		}
	}
}

// Usage rows: one per request, in the day's partition, with no account made for an org that only
// queried; the request that prepared has its usage row (prepared) and the prepare row shows its
// status; the listing merges both tables in id order and filters by model and repo.
func TestUsageRowsAndListing(t *testing.T) {
	t.Parallel()
	l, url := open(t)
	if err := l.Credit(ctx, "acme", 4, "ops"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Hold(ctx, hold("p1", "acme", "c1")); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Capture(ctx, capture("p1", "acme", "c1")); err != nil {
		t.Fatal(err)
	}
	prep := capture("p1", "acme", "c1")
	prep.Prepared, prep.HTTPStatus, prep.Op = true, 200, "prepare"
	for _, r := range []ledger.Row{prep, query("acme", "c1", "p1"), query("gamma", "c1", "")} {
		if err := l.RecordUsage(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	other := query("acme", "c1", "p1")
	other.Repo = "other"
	if err := l.RecordUsage(ctx, other); err != nil {
		t.Fatal(err)
	}
	var accounts, parts int
	conn := connect(t, url)
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM accounts`).Scan(&accounts); err != nil {
		t.Fatal(err)
	}
	if accounts != 1 {
		t.Fatalf("%d accounts; a usage row makes none", accounts)
	}
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_inherits WHERE inhparent = 'usage_rows'::regclass`).Scan(&parts); err != nil {
		t.Fatal(err)
	}
	if parts < 3 {
		t.Fatalf("%d usage partitions; want yesterday, today and days ahead", parts)
	}
	var kinds []string
	for _, r := range allRows(t, l, "acme") {
		kinds = append(kinds, fmt.Sprintf("%s/%s:%d:%d", r.Kind, r.Model, r.AmountCents, r.HTTPStatus))
	}
	if got, want := strings.Join(kinds, " "), "credit/:4:0 lsp/prepare:-2:200 lsp/query:0:200 lsp/query:0:200"; got != want {
		t.Fatalf("listing %q, want %q", got, want)
	}
	for _, tc := range []struct {
		f    ledger.RowFilter
		want int
	}{
		{ledger.RowFilter{Org: "acme", Model: "query"}, 2},
		{ledger.RowFilter{Org: "acme", Model: "prepare"}, 1},
		{ledger.RowFilter{Org: "acme", Model: "credit"}, 1},
		{ledger.RowFilter{Org: "acme", Repo: "other"}, 1},
		{ledger.RowFilter{Org: "acme", Repo: "repo", Model: "query"}, 1},
		{ledger.RowFilter{Org: "acme", Settle: time.Hour}, 0},
		{ledger.RowFilter{Org: "gamma"}, 1},
	} {
		rows, err := l.QueryRows(ctx, tc.f)
		if err != nil || len(rows) != tc.want {
			t.Errorf("%+v: %d rows, %v; want %d", tc.f, len(rows), err, tc.want)
		}
	}
}

// Daily rollups: today's computed from the rows, a finished day rolled up once into usage_daily (kept
// when its partition is dropped by retention), and GET /usage's reader sees both.
func TestUsageRollupsAndRetention(t *testing.T) {
	t.Parallel()
	l, url := open(t)
	if err := l.Credit(ctx, "acme", 4, "ops"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Hold(ctx, hold("p1", "acme", "c1")); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Capture(ctx, capture("p1", "acme", "c1")); err != nil {
		t.Fatal(err)
	}
	prep := capture("p1", "acme", "c1")
	prep.Prepared, prep.HTTPStatus, prep.Op = true, 200, "prepare"
	if err := l.RecordUsage(ctx, prep); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := l.RecordUsage(ctx, query("acme", "c1", "p1")); err != nil {
			t.Fatal(err)
		}
	}
	failed := query("acme", "c1", "p1")
	failed.HTTPStatus = 422
	if err := l.RecordUsage(ctx, failed); err != nil {
		t.Fatal(err)
	}
	show := func(days []ledger.UsageDay) string {
		var out []string
		for _, d := range days {
			out = append(out, fmt.Sprintf("%s %s %d req=%d prep=%d %d¢", d.Repo, d.Op, d.Status, d.Requests, d.Prepares, d.Cents))
		}
		return strings.Join(out, "; ")
	}
	days, err := l.UsageDays(ctx, ledger.UsageFilter{Org: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	const want = "repo locate 200 req=3 prep=0 0¢; repo locate 422 req=1 prep=0 0¢; repo prepare 200 req=1 prep=1 2¢"
	if got := show(days); got != want {
		t.Fatalf("today's usage %q, want %q", got, want)
	}

	// Move everything three days back (behind the ledger's back), then let retention of one day run:
	// the day is rolled up, its partition dropped, its rollup kept.
	conn := connect(t, url)
	if _, err := conn.Exec(ctx, `SET session_replication_role = replica;
		SELECT lsp_usage_partition((now() AT TIME ZONE 'UTC')::date - 3);
		WITH moved AS (DELETE FROM usage_rows RETURNING *)
		INSERT INTO usage_rows SELECT id, created_at - interval '3 days', payer_org, tenant_key, subject, repo, commit, op,
		       language, http_status, request_id, prepare_id, prepared FROM moved;
		UPDATE ledger_rows SET created_at = created_at - interval '3 days'`); err != nil {
		t.Fatal(err)
	}
	dropped, err := l.RetainUsage(ctx, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if dropped < 1 {
		t.Fatalf("retention dropped %d partitions", dropped)
	}
	if n, err := l.UsageRowsCount(ctx); err != nil || n != 0 {
		t.Fatalf("%d usage rows after retention, %v", n, err)
	}
	days, err = l.UsageDays(ctx, ledger.UsageFilter{Org: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if got := show(days); got != want || days[0].Day != time.Now().UTC().AddDate(0, 0, -3).Format(time.DateOnly) {
		t.Fatalf("rolled-up usage %q on %v, want %q three days ago", got, days, want)
	}
	// Rolled up once: running retention again adds nothing.
	if _, err := l.RetainUsage(ctx, 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	if again, _ := l.UsageDays(ctx, ledger.UsageFilter{Org: "acme"}); show(again) != want {
		t.Fatalf("after a second retention run %q", show(again))
	}
	// Money rows are kept forever: the balance still reconciles.
	mustBalance(t, l, "acme", 2, 0)
}

// Retention never holds usage_rows's lock across a rollup: with a day past the retention to drop and
// yesterday's rollup waiting (another session's uncommitted rollup of the same day), a usage row is
// still written. Before, one transaction dropped the old partition and then rolled up yesterday under
// the drop's lock, and every INSERT waited for the whole rollup.
func TestRetentionDoesNotBlockUsageRows(t *testing.T) {
	t.Parallel()
	l, url := open(t)
	conn := connect(t, url)
	// The day before yesterday, not yesterday: a day is rolled up only once its end and the settle
	// (a minute) have passed, so in the first minute after midnight UTC yesterday's was not, nothing
	// waited, and this test failed (CI, 2026-12-08 00:00).
	if _, err := conn.Exec(ctx, `SELECT lsp_usage_partition((now() AT TIME ZONE 'UTC')::date - 3),
		lsp_usage_partition((now() AT TIME ZONE 'UTC')::date - 2)`); err != nil {
		t.Fatal(err)
	}
	// Another session's rollup of that day, not committed: a rollup of the same day waits for it.
	other := connect(t, url)
	tx, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `INSERT INTO usage_rollup_days (day) VALUES ((now() AT TIME ZONE 'UTC')::date - 2)`); err != nil {
		t.Fatal(err)
	}
	retained := make(chan error, 1)
	go func() { _, err := l.RetainUsage(ctx, 24*time.Hour); retained <- err }()
	// Retention is now at that day's rollup, waiting; in the old order it held the drop's lock.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%lsp_usage_r%')`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("retention never waited for the other session's rollup")
		}
		time.Sleep(10 * time.Millisecond)
	}
	wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := l.RecordUsage(wctx, query("acme", "c1", "")); err != nil {
		t.Fatalf("a usage row during retention: %v", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-retained; err != nil {
		t.Fatal(err)
	}
}

// A page never lists a row whose id is above one it leaves out: the bound is the id sequence as marked
// at least Settle ago, not each row's time. Two rows whose ids and clocks were drawn in opposite orders
// (row N's time after row N+1's, as under load) straddle the time bound: listing by time showed N+1
// and not N, and a cursor at N+1 then skipped N for good.
func TestPagesNeverSkipAnId(t *testing.T) {
	t.Parallel()
	l, url := open(t)
	conn := connect(t, url)
	if err := l.MarkIDs(ctx); err != nil { // the sequence before both rows
		t.Fatal(err)
	}
	var n int64
	if err := conn.QueryRow(ctx, `SELECT nextval(pg_get_serial_sequence('ledger_rows', 'id'))`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `SELECT nextval(pg_get_serial_sequence('ledger_rows', 'id'));
		SELECT lsp_usage_partition((now() AT TIME ZONE 'UTC')::date - 1);
		UPDATE reconcile_state SET updated_at = now() - interval '61 seconds' WHERE name LIKE 'mark:%'`); err != nil {
		t.Fatal(err)
	}
	if err := l.MarkIDs(ctx); err != nil { // after both: not a settle old yet
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO usage_rows (id, created_at, payer_org, op, http_status, prepared)
		VALUES ($1, now() - interval '59.9 seconds', 'acme', 'locate', 200, false),
		       ($1 + 1, now() - interval '61 seconds', 'acme', 'locate', 200, false)`, n); err != nil {
		t.Fatal(err)
	}
	rows, err := l.QueryRows(ctx, ledger.RowFilter{Org: "acme", Settle: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 0 {
		t.Fatalf("listed %v before the ids were a settle old; a cursor past %d would skip %d", rows, rows[len(rows)-1].ID, n)
	}
	// A settle later (the newest mark's time moved back) both are listed, in id order.
	if _, err := conn.Exec(ctx, `UPDATE reconcile_state SET updated_at = now() - interval '61 seconds' WHERE name LIKE 'mark:%'`); err != nil {
		t.Fatal(err)
	}
	rows, err = l.QueryRows(ctx, ledger.RowFilter{Org: "acme", Settle: time.Minute})
	if err != nil || len(rows) != 2 || rows[0].ID != n || rows[1].ID != n+1 {
		t.Fatalf("a settle later: %v, %v; want ids %d and %d", rows, err, n, n+1)
	}
}
