package ledger_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hanzoai/lsp/migrations"
	"github.com/hanzoai/lsp/proxy/internal/ledger"
	"github.com/hanzoai/lsp/proxy/internal/pgtest"
	"github.com/jackc/pgx/v5"
)

// migratedBefore gives a fresh database with the migrations before version applied and recorded as
// Migrate records them, so that ledger.Open applies the rest; and a connection to it.
func migratedBefore(t *testing.T, version int) (string, *pgx.Conn) {
	t.Helper()
	url := pgtest.NewEmptyDatabase(t)
	conn := connect(t, url)
	all, err := migrations.All()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE lsp_schema_migrations (version integer PRIMARY KEY, name text NOT NULL,
		checksum text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		t.Fatal(err)
	}
	for _, m := range all {
		if m.Version >= version {
			break
		}
		if _, err := conn.Exec(ctx, m.SQL); err != nil {
			t.Fatalf("%s: %v", m.Name, err)
		}
		if _, err := conn.Exec(ctx, `INSERT INTO lsp_schema_migrations (version, name, checksum) VALUES ($1, $2, $3)`,
			m.Version, m.Name, m.Checksum); err != nil {
			t.Fatal(err)
		}
	}
	return url, conn
}

// Migration 008 moves the existing data: a ledger written by the schema before it (query rows in
// ledger_rows, a prepare row whose status was filled in afterwards) comes out with its query rows in
// usage_rows under the same ids, a usage row for the request that prepared, only money rows left in
// ledger_rows, the same listing and the same balances, and a clean reconcile.
func TestMigrationMovesQueryRows(t *testing.T) {
	t.Parallel()
	url, conn := migratedBefore(t, 8)
	// The old writers: a credit, a prepare captured with its status set afterwards, query rows.
	if _, err := conn.Exec(ctx, `
		SELECT lsp_credit('acme', 10, 'ops');
		SELECT lsp_hold('p1', 'acme', 'tk', 'alice', 'repo', 'c1', 'req-p', 2, interval '1 hour', interval '24 hours');
		SELECT lsp_capture('p1', 'acme', 'tk', 'repo', 'c1', 'alice', 'hover', 'go', 'req-p', 0);
		UPDATE ledger_rows SET http_status = 200 WHERE prepare_id = 'p1' AND model = 'prepare';
		SELECT lsp_record_query('acme', 'tk', 'bob', 'repo', 'c1', 'locate', 'go', 'req-q1', 200, 'p1');
		SELECT lsp_record_query('acme', 'tk', 'bob', 'repo', 'c1', 'locate', 'go', 'req-q2', 422, 'p1');
		SELECT lsp_record_query('gamma', 'tk2', 'eve', 'repo', 'c1', 'hover', 'go', 'req-q3', 200, '')`); err != nil {
		t.Fatal(err)
	}
	show := func(rows []ledger.LedgerRow) string {
		var out []string
		for _, r := range rows {
			out = append(out, fmt.Sprintf("%d %s/%s %d¢ %d %s %s", r.ID, r.Kind, r.Model, r.AmountCents, r.HTTPStatus, r.RequestID, r.PrepareID))
		}
		return strings.Join(out, "; ")
	}
	var before []string
	for _, org := range []string{"acme", "gamma"} {
		rows, err := conn.Query(ctx, `SELECT id, kind, coalesce(model, ''), amount_cents, coalesce(http_status, 0),
			coalesce(request_id, ''), coalesce(prepare_id, '') FROM ledger_rows WHERE payer_org = $1 ORDER BY id`, org)
		if err != nil {
			t.Fatal(err)
		}
		var rs []ledger.LedgerRow
		for rows.Next() {
			var r ledger.LedgerRow
			if err := rows.Scan(&r.ID, &r.Kind, &r.Model, &r.AmountCents, &r.HTTPStatus, &r.RequestID, &r.PrepareID); err != nil {
				t.Fatal(err)
			}
			rs = append(rs, r)
		}
		before = append(before, show(rs))
	}

	l, err := ledger.Open(ctx, url, nil) // applies 008
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	var after []string
	for _, org := range []string{"acme", "gamma"} {
		after = append(after, show(allRows(t, l, org)))
	}
	if strings.Join(after, "\n") != strings.Join(before, "\n") {
		t.Fatalf("listing after the migration\n%s\nwant\n%s", strings.Join(after, "\n"), strings.Join(before, "\n"))
	}
	var queries, usage, prepared int
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM ledger_rows WHERE model = 'query'),
		(SELECT count(*) FROM usage_rows), (SELECT count(*) FROM usage_rows WHERE prepared AND prepare_id = 'p1' AND http_status = 200)`).
		Scan(&queries, &usage, &prepared); err != nil {
		t.Fatal(err)
	}
	if queries != 0 || usage != 4 || prepared != 1 {
		t.Fatalf("after the migration: %d query rows in ledger_rows, %d usage rows, %d for the request that prepared", queries, usage, prepared)
	}
	mustBalance(t, l, "acme", 8, 0)
	if r := reconcileNow(t, l, 0); !r.OK() {
		t.Fatalf("reconcile after the migration: %q", r.Problems)
	}
}

// Migration 010 recounts the keys an org already holds, as the trigger of 009 left them (bodies
// only): after it every org's count is its answered rows' cost (headers, key and overhead too; a key
// in flight costs nothing), an org whose keys are all gone has no count, and the new trigger keeps
// the counts from there.
func TestMigrationRecountsIdempotencyBytes(t *testing.T) {
	t.Parallel()
	url, conn := migratedBefore(t, 10)
	const headerText = `{"Content-Type": "application/json"}`
	long := strings.Repeat("x", 255)
	if _, err := conn.Exec(ctx, `
		SELECT lsp_idem_claim('acme', 'k-done', 'h', 'a1', interval '1 day', interval '1 hour', 0);
		SELECT lsp_idem_finish('acme', 'k-done', 'a1', 200, '`+headerText+`', '\x68656c6c6f');
		SELECT lsp_idem_claim('acme', 'k-flight', 'h', 'a2', interval '1 day', interval '1 hour', 0);
		SELECT lsp_idem_claim('acme', 'k-empty', 'h', 'a3', interval '1 day', interval '1 hour', 0);
		SELECT lsp_idem_finish('acme', 'k-empty', 'a3', 204, 'null', '');
		SELECT lsp_idem_claim('beta', '`+long+`', 'h', 'b1', interval '1 day', interval '1 hour', 0);
		SELECT lsp_idem_claim('gone', 'k', 'h', 'g1', interval '1 day', interval '1 hour', 0);
		SELECT lsp_idem_finish('gone', 'k', 'g1', 200, NULL, '\x00');
		DELETE FROM idempotency_keys WHERE org = 'gone'`); err != nil {
		t.Fatal(err)
	}
	counts := func() map[string]int64 {
		t.Helper()
		rows, err := conn.Query(ctx, `SELECT org, bytes FROM idempotency_bytes`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]int64{}
		for rows.Next() {
			var org string
			var n int64
			if err := rows.Scan(&org, &n); err != nil {
				t.Fatal(err)
			}
			out[org] = n
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if got, want := fmt.Sprint(counts()), fmt.Sprint(map[string]int64{"acme": 5, "gone": 0}); got != want {
		t.Fatalf("before the migration (bodies only): %s; want %s", got, want)
	}

	l, err := ledger.Open(ctx, url, nil) // applies 010
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	want := map[string]int64{
		"acme": idemRowBytes("k-done", headerText, 5) + idemRowBytes("k-empty", "null", 0),
		"beta": 0, // its one key is in flight
	}
	if got := counts(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after the migration: %v; want %v", got, want)
	}
	checkIdempotencyBytes(t, conn)

	// From here the trigger counts whole rows: beta's key is answered, and a new org's key in flight
	// counts nothing yet.
	if err := l.StoreIdempotentAnswer(ctx, "beta", long, "b1", ledger.StoredAnswer{Status: 200, Header: map[string]string{"Retry-After": "2"}, Body: []byte("hi")}); err != nil {
		t.Fatal(err)
	}
	if s, _, err := l.ClaimIdempotencyKey(ctx, idem("gone", "k2", "h", "g2")); err != nil || s != ledger.IdempotencyClaimed {
		t.Fatalf("claim: %s %v", s, err)
	}
	want["beta"] = idemRowBytes(long, `{"Retry-After": "2"}`, 2)
	if got := counts(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after an answer and a claim: %v; want %v", got, want)
	}
	checkIdempotencyBytes(t, conn)
}
