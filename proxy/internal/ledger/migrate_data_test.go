package ledger_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hanzoai/lsp/migrations"
	"github.com/hanzoai/lsp/proxy/internal/ledger"
	"github.com/hanzoai/lsp/proxy/internal/pgtest"
)

// Migration 008 moves the existing data: a ledger written by the schema before it (query rows in
// ledger_rows, a prepare row whose status was filled in afterwards) comes out with its query rows in
// usage_rows under the same ids, a usage row for the request that prepared, only money rows left in
// ledger_rows, the same listing and the same balances, and a clean reconcile.
func TestMigrationMovesQueryRows(t *testing.T) {
	t.Parallel()
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
		if m.Version >= 8 {
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
