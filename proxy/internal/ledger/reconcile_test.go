package ledger_test

import (
	"bytes"
	"encoding/csv"
	"strings"
	"testing"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/ledger"
	"github.com/hanzoai/lsp/proxy/internal/pgtest"
)

// seed gives a ledger every kind of row and hold: credits, a charged prepare, a re-prepare, a
// released hold, a recovered prepare, a live hold in progress and query rows.
func seed(t *testing.T, l *ledger.Ledger) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(l.Credit(ctx, "acme", 10, "ops"))
	must(l.Credit(ctx, "beta", 4, "ops"))
	_, err := l.Hold(ctx, hold("p1", "acme", "c1"))
	must(err)
	_, err = l.Capture(ctx, capture("p1", "acme", "c1"))
	must(err)
	_, err = l.Hold(ctx, hold("p2", "acme", "c1")) // a re-prepare within grace: 0¢
	must(err)
	_, err = l.Capture(ctx, capture("p2", "acme", "c1"))
	must(err)
	_, err = l.Hold(ctx, hold("p3", "acme", "c2"))
	must(err)
	must(l.Release(ctx, "p3"))
	_, err = l.Hold(ctx, hold("p4", "beta", "c1"))
	must(err)
	must(l.RecordQuery(ctx, query("beta", "c1", "p4"))) // recovers p4
	_, err = l.Hold(ctx, hold("p5", "beta", "c9"))      // in progress
	must(err)
	must(l.RecordQuery(ctx, query("acme", "c1", "p1")))
	must(l.RecordQuery(ctx, query("gamma", "c1", "")))
}

func TestReconcileClean(t *testing.T) {
	t.Parallel()
	l, _ := open(t)
	seed(t, l)
	r, err := l.Reconcile(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() || r.Accounts != 3 || r.Holds != 5 || r.Rows != 8 {
		t.Fatalf("reconciliation of a sound ledger: %+v", r)
	}
}

// Each broken rule is found and named. The tests break the database behind the ledger's back,
// dropping the constraints that would otherwise stop them.
func TestReconcileFindsEachProblem(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		sql   string
		wants []string
	}{
		{"balance differs from rows", `UPDATE accounts SET balance_cents = balance_cents + 1 WHERE org = 'acme'`,
			[]string{"balance equals the sum of rows: org acme: stored balance 9¢, sum of rows 8¢"}},
		{"rows without an account", `INSERT INTO ledger_rows (kind, payer_org, amount_cents) VALUES ('credit', 'ghost', 5)`,
			[]string{"org ghost: stored balance 0¢, sum of rows 5¢"}},
		{"negative balance", `ALTER TABLE accounts DROP CONSTRAINT accounts_balance_cents_check;
			INSERT INTO ledger_rows (kind, payer_org, amount_cents) VALUES ('credit', 'beta', -10);
			UPDATE accounts SET balance_cents = balance_cents - 10 WHERE org = 'beta'`,
			[]string{"no balance below zero: org beta: balance -8¢", "live holds within the balance: org beta"}},
		{"orphaned live hold", `UPDATE holds SET created_at = now() - interval '3 hours', expires_at = now() - interval '2 hours' WHERE prepare_id = 'p5'`,
			[]string{"no orphaned hold: hold p5 (org beta): live, expired at"}},
		{"captured without a row", `UPDATE holds SET state = 'captured', ledger_row_id = NULL WHERE prepare_id = 'p3'`,
			[]string{"no orphaned hold: hold p3 (org acme): captured without its prepare row"}},
		{"prepare row without its hold", `DELETE FROM holds WHERE prepare_id = 'p1'`,
			[]string{"no captured hold points at it"}},
		{"prepare id charged twice", `DROP INDEX ledger_rows_prepare_id;
			INSERT INTO ledger_rows (kind, model, payer_org, amount_cents, prepare_id) VALUES ('lsp', 'prepare', 'acme', -2, 'p1');
			UPDATE accounts SET balance_cents = balance_cents - 2 WHERE org = 'acme'`,
			[]string{"every prepare id charged at most once: prepare id p1: 2 prepare rows, 4¢ in all"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l, url := openUnchecked(t)
			seed(t, l)
			if _, err := connect(t, url).Exec(ctx, tc.sql); err != nil {
				t.Fatal(err)
			}
			r, err := l.Reconcile(ctx, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			all := strings.Join(r.Problems, "\n")
			for _, want := range tc.wants {
				if !strings.Contains(all, want) {
					t.Errorf("problems %q do not say %q", r.Problems, want)
				}
			}
		})
	}
}

// The margin decides when a live hold past its expiry is orphaned.
func TestReconcileMargin(t *testing.T) {
	t.Parallel()
	l, url := openUnchecked(t)
	if err := l.Credit(ctx, "acme", 2, "ops"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Hold(ctx, hold("p", "acme", "c")); err != nil {
		t.Fatal(err)
	}
	if _, err := connect(t, url).Exec(ctx, `UPDATE holds SET expires_at = now() - interval '10 minutes'`); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		margin time.Duration
		ok     bool
	}{{time.Hour, true}, {time.Minute, false}} {
		r, err := l.Reconcile(ctx, tc.margin)
		if err != nil {
			t.Fatal(err)
		}
		if r.OK() != tc.ok {
			t.Errorf("margin %v: %q", tc.margin, r.Problems)
		}
	}
}

// openUnchecked is open without the invariant check at the end, for tests that break the ledger.
func openUnchecked(t *testing.T) (*ledger.Ledger, string) {
	t.Helper()
	url := pgtest.NewDatabase(t)
	l, err := ledger.Open(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l, url
}

func TestFormulaSafe(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"":              "",
		"hello":         "hello",
		"=HYPERLINK(x)": "'=HYPERLINK(x)",
		"+1":            "'+1",
		"-2":            "'-2",
		"@SUM(A1)":      "'@SUM(A1)",
		"\tx":           "'\tx",
		"\rx":           "'\rx",
		"a=b":           "a=b",
		"'quoted":       "'quoted",
	} {
		if got := ledger.FormulaSafe(in); got != want {
			t.Errorf("FormulaSafe(%q) = %q; want %q", in, got, want)
		}
	}
}

// A CSV export has the documented header, inert text cells and plain numbers.
func TestCSVWriter(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	w, err := ledger.NewCSVWriter(&buf, true)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.FixedZone("x", 3600))
	if err := w.Write([]ledger.LedgerRow{
		{ID: 7, Kind: "lsp", Model: "prepare", PayerOrg: "acme", Subject: "=cmd|' /C calc'!A0", Repo: "r", Commit: "c",
			Op: "hover", Language: "go", AmountCents: -2, HTTPStatus: 200, RequestID: "@x", PrepareID: "p", CreatedAt: at},
		{ID: 8, Kind: "credit", PayerOrg: "acme", AmountCents: 5, Subject: "+1, \"quoted\"\nline", CreatedAt: at},
	}); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(recs[0], ",") != strings.Join(ledger.CSVColumns, ",") {
		t.Fatalf("header %q", recs[0])
	}
	want := [][]string{
		{"7", "2026-01-02T02:04:05.000006Z", "lsp", "prepare", "acme", "'=cmd|' /C calc'!A0", "r", "c", "hover", "go", "-2", "200", "'@x", "p", "", ""},
		{"8", "2026-01-02T02:04:05.000006Z", "credit", "", "acme", "'+1, \"quoted\"\nline", "", "", "", "", "5", "", "", "", "", ""},
	}
	for i, w := range want {
		if strings.Join(recs[i+1], "|") != strings.Join(w, "|") {
			t.Errorf("row %d = %q; want %q", i, recs[i+1], w)
		}
	}
}
