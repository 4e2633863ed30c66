package ledger_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/hanzoai/lsp/proxy/internal/ledger"
)

// Every way a row is committed (alone, a few in one round trip, many in one array statement) tells
// each caller the id of its own row, whatever the order of orgs in the batch.
func TestRecordQueryIDNamesTheCallersRow(t *testing.T) {
	t.Parallel()
	l, _ := open(t)
	for _, tc := range []struct {
		name      string
		n         int
		pipelined bool
	}{
		{"one", 1, true},
		{"pipelined", 4, true},
		{"array", 9, false},
	} {
		rows := make([]ledger.Row, tc.n)
		for i := range rows {
			// Orgs out of order, so the statements' lock order differs from the callers' order.
			rows[i] = query(fmt.Sprintf("org-%d", (tc.n-i)%3), "c1", "")
			rows[i].RequestID = fmt.Sprintf("%s-%d", tc.name, i)
		}
		ids, errs := ledger.CommitAsOneBatchIDs(l, rows, tc.pipelined)
		for i, err := range errs {
			if err != nil {
				t.Fatalf("%s: row %d: %v", tc.name, i, err)
			}
		}
		for i, r := range rows {
			got := rowByID(t, l, r.Org, ids[i])
			if got == nil || got.RequestID != r.RequestID {
				t.Errorf("%s: row %d: id %d is %+v, want request %s", tc.name, i, ids[i], got, r.RequestID)
			}
		}
	}
	id, err := l.RecordQueryID(ctx, query("solo", "c1", ""))
	if err != nil || rowByID(t, l, "solo", id) == nil {
		t.Fatalf("RecordQueryID = %d, %v; row not found", id, err)
	}
}

// A row written before the answer is amended to the real outcome, or voided; nothing else moves,
// and a wrong org or request id changes nothing.
func TestAmendAndVoidQuery(t *testing.T) {
	t.Parallel()
	l, _ := open(t)
	const org = "acme"
	if err := l.Credit(ctx, org, 5, "ops"); err != nil {
		t.Fatal(err)
	}
	q := query(org, "c1", "")
	id, err := l.RecordQueryID(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	other, err := l.RecordQueryID(ctx, query(org, "c1", ""))
	if err != nil {
		t.Fatal(err)
	}

	// Wrong org, wrong request id, an id that is not a query row: refused, nothing changed.
	for _, bad := range []struct {
		id  int64
		row ledger.Row
	}{
		{id, ledger.Row{Org: "evil", RequestID: q.RequestID, HTTPStatus: 504}},
		{id, ledger.Row{Org: org, RequestID: "someone-else", HTTPStatus: 504}},
		{id + 1000, ledger.Row{Org: org, RequestID: q.RequestID, HTTPStatus: 504}},
	} {
		if err := l.AmendQuery(ctx, bad.id, bad.row); err == nil {
			t.Errorf("AmendQuery(%d, %+v) succeeded", bad.id, bad.row)
		}
		if err := l.VoidQuery(ctx, bad.id, bad.row.Org, bad.row.RequestID); err == nil {
			t.Errorf("VoidQuery(%d, %+v) succeeded", bad.id, bad.row)
		}
	}
	if r := rowByID(t, l, org, id); r == nil || r.HTTPStatus != 200 {
		t.Fatalf("row after refused amends: %+v", r)
	}

	amended := q
	amended.HTTPStatus, amended.Language = 504, ""
	if err := l.AmendQuery(ctx, id, amended); err != nil {
		t.Fatal(err)
	}
	r := rowByID(t, l, org, id)
	if r == nil || r.HTTPStatus != 504 || r.Language != "" || r.AmountCents != 0 || r.RequestID != q.RequestID {
		t.Fatalf("amended row %+v", r)
	}
	if err := l.VoidQuery(ctx, other, org, q.RequestID); err != nil {
		t.Fatal(err)
	}
	if r := rowByID(t, l, org, other); r != nil {
		t.Fatalf("voided row still there: %+v", r)
	}
	if err := l.VoidQuery(ctx, other, org, q.RequestID); err == nil {
		t.Fatal("voiding twice succeeded")
	}
	mustBalance(t, l, org, 5, 0)
}

// An amend that reveals a prepare id whose proxy never captured it captures it, once, as
// RecordQuery would have.
func TestAmendQueryRecoversLiveHold(t *testing.T) {
	t.Parallel()
	l, _ := open(t)
	const org = "acme"
	if err := l.Credit(ctx, org, 5, "ops"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Hold(ctx, hold("p1", org, "c1")); err != nil {
		t.Fatal(err)
	}
	// Written with the prepare id the proxy expected; the answer named p1.
	q := query(org, "c1", "p0")
	id, err := l.RecordQueryID(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	q.PrepareID = "p1"
	for range 2 {
		if err := l.AmendQuery(ctx, id, q); err != nil {
			t.Fatal(err)
		}
	}
	mustBalance(t, l, org, 3, 0)
	if ok, err := l.Capture(ctx, capture("p1", org, "c1")); ok || err != nil {
		t.Fatalf("capture after recovery = %v, %v", ok, err)
	}
	if r := rowByID(t, l, org, id); r == nil || r.PrepareID != "p1" {
		t.Fatalf("amended row %+v", r)
	}
}

// The ledger being unreachable is ErrUnavailable for amends and voids too.
func TestAmendQueryUnavailable(t *testing.T) {
	t.Parallel()
	l, _ := open(t)
	id, err := l.RecordQueryID(ctx, query("acme", "c1", ""))
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if err := l.AmendQuery(ctx, id, query("acme", "c1", "")); !errors.Is(err, ledger.ErrUnavailable) {
		t.Errorf("AmendQuery after Close: %v", err)
	}
	if err := l.VoidQuery(ctx, id, "acme", "q"); !errors.Is(err, ledger.ErrUnavailable) {
		t.Errorf("VoidQuery after Close: %v", err)
	}
}

func rowByID(t testing.TB, l *ledger.Ledger, org string, id int64) *ledger.LedgerRow {
	t.Helper()
	for _, r := range allRows(t, l, org) {
		if r.ID == id {
			return &r
		}
	}
	return nil
}
