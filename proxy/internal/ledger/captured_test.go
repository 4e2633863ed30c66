package ledger_test

import (
	"fmt"
	"log/slog"
	"testing"

	"github.com/hanzoai/lsp/proxy/internal/ledger"
)

// TestUsageStatementsWriteTheSameRow: a usage row is the same whichever statement writes it — the
// probing one of a ledger that does not know its hold (usageFast), the plain one of a ledger that
// captured it (usageOne for one row, usagePlain for a batch) — empty fields NULL alike; and a batch
// that mixes a known hold with a live one still captures the live one, once.
func TestUsageStatementsWriteTheSameRow(t *testing.T) {
	t.Parallel()
	l, url := openWith(t, ledger.Options{GroupCommit: ledger.GroupCommit{Disabled: true}})
	const org = "acme"
	if err := l.Credit(ctx, org, 10, "ops"); err != nil {
		t.Fatal(err)
	}
	for id, commit := range map[string]string{"p1": "c1", "p2": "c2"} {
		if _, err := l.Hold(ctx, hold(id, org, commit)); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := l.Capture(ctx, capture("p1", org, "c1")); !ok || err != nil {
		t.Fatalf("capture p1: %v, %v", ok, err)
	}
	fresh, err := ledger.OpenWith(ctx, url, slog.New(slog.DiscardHandler), ledger.Options{GroupCommit: ledger.GroupCommit{Disabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	row := query(org, "c1", "p1")
	row.Subject, row.Language, row.HTTPStatus = "", "", 0
	if err := fresh.RecordUsage(ctx, row); err != nil { // probes: it never saw p1 captured
		t.Fatal(err)
	}
	if err := l.RecordUsage(ctx, row); err != nil { // p1 captured here: one plain row
		t.Fatal(err)
	}
	if err := l.RecordUsageRows(ctx, []ledger.Row{row, row}); err != nil { // a plain batch
		t.Fatal(err)
	}
	// p2 is live: a batch naming it with p1 probes and captures it.
	live := query(org, "c2", "p2")
	if err := l.RecordUsageRows(ctx, []ledger.Row{row, live}); err != nil {
		t.Fatal(err)
	}
	mustBalance(t, l, org, 6, 0)

	rows, err := l.Pool().Query(ctx, `SELECT format('%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s', payer_org, tenant_key, subject, repo,
	                                         commit, op, language, http_status, request_id, prepare_id, prepared)
	                                    FROM usage_rows WHERE payer_org = $1 AND prepare_id = 'p1' ORDER BY id`, org)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		got = append(got, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%s|tk-%s||repo|c1|locate|||q|p1|f", org, org)
	if len(got) != 5 {
		t.Fatalf("%d usage rows of p1, want 5: %q", len(got), got)
	}
	for i, g := range got {
		if g != want {
			t.Errorf("row %d = %q, want %q (the probing statement's)", i, g, want)
		}
	}
}
