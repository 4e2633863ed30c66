package ctl_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/ctl"
	"github.com/hanzoai/lsp/proxy/internal/ledger"
	"github.com/hanzoai/lsp/proxy/internal/pgtest"
	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { pgtest.MainLeakChecked(m) }

var ctx = context.Background()

// lspctl runs Main against the database at url (LSP_DATABASE_URL: these tests are not parallel).
func lspctl(t *testing.T, url string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	t.Setenv("LSP_DATABASE_URL", url)
	var out, errOut bytes.Buffer
	code = ctl.Main(ctx, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// ledgerOn opens the test's own view of the database.
func ledgerOn(t *testing.T, url string) *ledger.Ledger {
	t.Helper()
	l, err := ledger.Open(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l
}

func TestLedgerCreditAndBalance(t *testing.T) {
	url := pgtest.NewDatabase(t)
	code, out, errOut := lspctl(t, url, "ledger", "credit", "--org", "acme", "--cents", "500")
	if code != 0 || out != "org=acme balance_cents=500 held_cents=0 available_cents=500\n" {
		t.Fatalf("credit: %d %q %q", code, out, errOut)
	}
	code, out, _ = lspctl(t, url, "ledger", "balance", "--org", "acme")
	if code != 0 || out != "org=acme balance_cents=500 held_cents=0 available_cents=500\n" {
		t.Fatalf("balance: %d %q", code, out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"ledger", "credit", "--org", "acme", "--cents", "-5"}, "--cents must be positive"},
		{[]string{"ledger", "credit", "--cents", "5"}, "--org is required"},
		{[]string{"ledger", "balance"}, "--org is required"},
		{[]string{"ledger", "rows", "--org", "acme", "--model", "bogus"}, "--model"},
		{[]string{"ledger", "rows", "--org", "acme", "--from", "yesterday"}, "--from must be an RFC 3339 time"},
		{[]string{"ledger", "balance", "--org", "acme", "extra"}, "unexpected argument"},
		{[]string{"ledger", "balance", "--nope"}, "flag provided but not defined"},
		{[]string{"ledger", "frobnicate"}, "unknown subcommand"},
		{[]string{"ledger"}, "want credit, balance, cap, rows or reconcile"},
	} {
		code, _, errOut := lspctl(t, url, tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: exit %d, %q; want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
	t.Setenv("LSP_DATABASE_URL", "")
	var errOut2 bytes.Buffer
	if code := ctl.Main(ctx, []string{"ledger", "balance", "--org", "acme"}, &bytes.Buffer{}, &errOut2); code != 2 ||
		!strings.Contains(errOut2.String(), "LSP_DATABASE_URL is required") {
		t.Fatalf("without a database: %d %q", code, errOut2.String())
	}
}

// cap sets the org's daily prepare cap, which the next hold past it meets, and none removes it.
func TestLedgerCap(t *testing.T) {
	url := pgtest.NewDatabase(t)
	l := ledgerOn(t, url)
	if err := l.Credit(ctx, "acme", 100, "ops"); err != nil {
		t.Fatal(err)
	}
	hold := func(id, commit string) error {
		_, err := l.Hold(ctx, ledger.HoldRequest{PrepareID: id, Org: "acme", TenantKey: "tk", Repo: "web", Commit: commit,
			Price: 2, TTL: time.Hour, Grace: time.Hour})
		return err
	}
	code, out, errOut := lspctl(t, url, "ledger", "cap", "--org", "acme", "--cents", "3")
	if code != 0 || out != "org=acme daily_cap_cents=3\n" {
		t.Fatalf("cap 3: %d %q %q", code, out, errOut)
	}
	if err := hold("p1", "c1"); err != nil {
		t.Fatalf("a hold under the cap: %v", err)
	}
	// 2 held + 2 > 3.
	if err := hold("p2", "c2"); !errors.Is(err, ledger.ErrSpendCapExceeded) {
		t.Fatalf("a hold past the cap: %v", err)
	}
	code, out, errOut = lspctl(t, url, "ledger", "cap", "--org", "acme", "--cents", "none")
	if code != 0 || out != "org=acme daily_cap_cents=none\n" {
		t.Fatalf("cap none: %d %q %q", code, out, errOut)
	}
	if err := hold("p2", "c2"); err != nil {
		t.Fatalf("a hold with the cap removed: %v", err)
	}
	// An org with no account yet gets one, with its cap and no money.
	if code, out, errOut = lspctl(t, url, "ledger", "cap", "--org", "newco", "--cents", "0"); code != 0 || out != "org=newco daily_cap_cents=0\n" {
		t.Fatalf("cap 0 for a new org: %d %q %q", code, out, errOut)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"ledger", "cap", "--cents", "5"}, "--org is required"},
		{[]string{"ledger", "cap", "--org", "acme"}, "--cents is required"},
		{[]string{"ledger", "cap", "--org", "acme", "--cents", "-1"}, "--cents must be a count of cents"},
		{[]string{"ledger", "cap", "--org", "acme", "--cents", "1.5"}, "--cents must be a count of cents"},
		{[]string{"ledger", "cap", "--org", "acme", "--cents", "off"}, "--cents must be a count of cents"},
		{[]string{"ledger", "cap", "acme", "5"}, "unexpected argument"},
	} {
		code, _, errOut := lspctl(t, url, tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: exit %d, %q; want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}

// rows prints what the ledger holds, filtered, as a table or as CSV with inert cells, paging through
// everything.
func TestLedgerRows(t *testing.T) {
	url := pgtest.NewDatabase(t)
	l := ledgerOn(t, url)
	if err := l.Credit(ctx, "acme", 10, "=HYPERLINK(\"http://x\")"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Hold(ctx, ledger.HoldRequest{PrepareID: "p1", Org: "acme", TenantKey: "tk", Repo: "web", Commit: "c1",
		Price: 2, TTL: time.Hour, Grace: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Capture(ctx, ledger.Row{PrepareID: "p1", Org: "acme", Op: "hover", HTTPStatus: 200}); err != nil {
		t.Fatal(err)
	}
	const queries = 2100 // more than one page of 1000
	for i := range queries {
		if err := l.RecordUsage(ctx, ledger.Row{Org: "acme", TenantKey: "tk", Repo: "web", Commit: "c1", Op: "hover",
			RequestID: fmt.Sprint("r", i), HTTPStatus: 200, PrepareID: "p1"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.RecordUsage(ctx, ledger.Row{Org: "other", Repo: "web", Op: "hover", HTTPStatus: 200}); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := lspctl(t, url, "ledger", "rows", "--org", "acme", "--csv")
	if code != 0 {
		t.Fatalf("rows --csv: %d %s", code, errOut)
	}
	recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1+2+queries || strings.Join(recs[0], ",") != strings.Join(ledger.CSVColumns, ",") {
		t.Fatalf("CSV has %d records, header %q", len(recs), recs[0])
	}
	col := map[string]int{}
	for i, c := range recs[0] {
		col[c] = i
	}
	credit, prepare := recs[1], recs[2]
	if credit[col["kind"]] != "credit" || credit[col["subject"]] != `'=HYPERLINK("http://x")` || credit[col["amount_cents"]] != "10" {
		t.Fatalf("credit record %q", credit)
	}
	if prepare[col["model"]] != "prepare" || prepare[col["amount_cents"]] != "-2" || prepare[col["prepare_id"]] != "p1" {
		t.Fatalf("prepare record %q", prepare)
	}
	seen := map[string]bool{}
	for _, r := range recs[3:] {
		if r[col["payer_org"]] != "acme" || seen[r[col["request_id"]]] {
			t.Fatalf("record %q", r)
		}
		seen[r[col["request_id"]]] = true
	}

	code, out, _ = lspctl(t, url, "ledger", "rows", "--org", "acme", "--model", "prepare")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], "ID") || !strings.Contains(lines[1], "prepare") ||
		!strings.Contains(lines[1], "-2") {
		t.Fatalf("rows --model prepare: %d %q", code, out)
	}
	code, out, _ = lspctl(t, url, "ledger", "rows", "--org", "acme", "--model", "query", "--limit", "1500")
	if n := len(strings.Split(strings.TrimSpace(out), "\n")); code != 0 || n != 1+1500 {
		t.Fatalf("rows --limit 1500: %d, %d lines", code, n)
	}
	code, out, _ = lspctl(t, url, "ledger", "rows", "--org", "acme", "--from", time.Now().Add(time.Hour).Format(time.RFC3339))
	if n := len(strings.Split(strings.TrimSpace(out), "\n")); code != 0 || n != 1 {
		t.Fatalf("rows from the future: %d %q", code, out)
	}
}

// reconcile is clean on a sound ledger and exits 1 naming the problem on a broken one.
func TestLedgerReconcile(t *testing.T) {
	url := pgtest.NewDatabase(t)
	l := ledgerOn(t, url)
	if err := l.Credit(ctx, "acme", 10, "ops"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Hold(ctx, ledger.HoldRequest{PrepareID: "p1", Org: "acme", TenantKey: "tk", Repo: "web", Commit: "c1",
		Price: 2, TTL: time.Hour, Grace: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := l.RecordUsage(ctx, ledger.Row{Org: "acme", TenantKey: "tk", Repo: "web", Commit: "c1", PrepareID: "p1", HTTPStatus: 200}); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := lspctl(t, url, "ledger", "reconcile", "--settle", "1ns")
	if code != 0 || !strings.Contains(out, "accounts=1 rows=3 holds=0") || !strings.HasPrefix(strings.Split(out, "\n")[1], "ok:") {
		t.Fatalf("reconcile of a sound ledger: %d %q %q", code, out, errOut)
	}

	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `UPDATE accounts SET balance_cents = 11 WHERE org = 'acme'`); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = lspctl(t, url, "ledger", "reconcile")
	if code != 1 || !strings.Contains(out, "FAIL balance equals the sum of rows: org acme: stored balance 11¢, sum of rows 8¢") ||
		!strings.Contains(errOut, "does not reconcile: 1 problem(s)") {
		t.Fatalf("reconcile of a broken ledger: %d %q %q", code, out, errOut)
	}

	// A live hold past its expiry is orphaned only beyond the margin.
	if _, err := conn.Exec(ctx, `UPDATE accounts SET balance_cents = 8 WHERE org = 'acme'`); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Hold(ctx, ledger.HoldRequest{PrepareID: "p2", Org: "acme", TenantKey: "tk", Repo: "web", Commit: "c2",
		Price: 2, TTL: time.Hour, Grace: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `UPDATE holds SET expires_at = now() - interval '30 minutes' WHERE prepare_id = 'p2'`); err != nil {
		t.Fatal(err)
	}
	if code, out, _ := lspctl(t, url, "ledger", "reconcile"); code != 0 {
		t.Fatalf("a hold 30 minutes past expiry with the default margin of 1h: %d %q", code, out)
	}
	code, out, _ = lspctl(t, url, "ledger", "reconcile", "--margin", "10m")
	if code != 1 || !strings.Contains(out, "FAIL no orphaned hold: hold p2 (org acme, web/c2): live, expired at") {
		t.Fatalf("margin 10m: %d %q", code, out)
	}
}
