package ledger

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Reconciliation is what Reconcile found: counts, and one line per broken rule (none when the ledger
// is consistent).
type Reconciliation struct {
	Accounts int64
	Rows     int64
	Holds    int64
	Problems []string
}

// OK reports whether every rule holds.
func (r *Reconciliation) OK() bool { return len(r.Problems) == 0 }

// maxProblemsPerCheck keeps a badly broken ledger's report readable.
const maxProblemsPerCheck = 20

// reconcileChecks are the ledger's invariants as queries that return one text line per violation.
var reconcileChecks = []struct {
	name, sql string
}{
	{"balance equals the sum of rows", `
		SELECT format('org %s: stored balance %s¢, sum of rows %s¢', o.org, coalesce(a.balance_cents, 0), coalesce(s.total, 0))
		  FROM (SELECT org FROM accounts UNION SELECT DISTINCT payer_org FROM ledger_rows) o
		  LEFT JOIN accounts a ON a.org = o.org
		  LEFT JOIN (SELECT payer_org, sum(amount_cents) AS total FROM ledger_rows GROUP BY payer_org) s
		         ON s.payer_org = o.org
		 WHERE a.org IS NULL OR a.balance_cents <> coalesce(s.total, 0)
		 ORDER BY o.org`},
	{"no balance below zero", `
		SELECT format('org %s: balance %s¢', org, balance_cents) FROM accounts WHERE balance_cents < 0 ORDER BY org`},
	{"live holds within the balance", `
		SELECT format('org %s: live holds %s¢ exceed the balance %s¢', a.org, h.held, a.balance_cents)
		  FROM accounts a
		  JOIN (SELECT org, sum(amount_cents) AS held FROM holds
		         WHERE state = 'live' AND expires_at > now() GROUP BY org) h ON h.org = a.org
		 WHERE h.held > a.balance_cents
		 ORDER BY a.org`},
	{"no orphaned hold", `
		SELECT format('hold %s (org %s): live, expired at %s and never captured or released', prepare_id, org, expires_at)
		  FROM holds
		 WHERE state = 'live' AND expires_at < now() - $1::interval
		UNION ALL
		SELECT format('hold %s (org %s): captured without its prepare row', h.prepare_id, h.org)
		  FROM holds h
		 WHERE h.state = 'captured' AND NOT EXISTS (
		       SELECT 1 FROM ledger_rows r
		        WHERE r.model = 'prepare' AND r.prepare_id = h.prepare_id AND r.id = h.ledger_row_id
		          AND r.payer_org = h.org)
		UNION ALL
		SELECT format('prepare row %s (prepare id %s, org %s): no captured hold points at it', r.id, r.prepare_id, r.payer_org)
		  FROM ledger_rows r
		 WHERE r.model = 'prepare' AND NOT EXISTS (
		       SELECT 1 FROM holds h
		        WHERE h.prepare_id = r.prepare_id AND h.state = 'captured' AND h.ledger_row_id = r.id)`},
	{"every prepare id charged at most once", `
		SELECT format('prepare id %s: %s prepare rows, %s¢ in all', prepare_id, count(*), -sum(amount_cents))
		  FROM ledger_rows
		 WHERE model = 'prepare'
		 GROUP BY prepare_id
		HAVING count(*) > 1
		 ORDER BY prepare_id`},
}

// Reconcile checks the ledger's invariants over every org, from one snapshot: each stored balance
// equals the sum of the org's rows; no balance is below zero and live holds stay within it; no hold
// is orphaned (still live more than margin past its expiry, i.e. nobody learned whether its prepare
// ran, or captured without its prepare row, or a prepare row without its captured hold); and every
// prepare id is charged at most once. It only reads.
func (l *Ledger) Reconcile(ctx context.Context, margin time.Duration) (*Reconciliation, error) {
	if margin < 0 {
		return nil, fmt.Errorf("reconcile: negative margin")
	}
	tx, err := l.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, wrap("reconcile", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	r := &Reconciliation{}
	if err := tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM accounts), (SELECT count(*) FROM ledger_rows),
		(SELECT count(*) FROM holds)`).Scan(&r.Accounts, &r.Rows, &r.Holds); err != nil {
		return nil, wrap("reconcile", err)
	}
	for _, c := range reconcileChecks {
		var args []any
		if c.name == "no orphaned hold" {
			args = append(args, fmt.Sprintf("%d microseconds", margin.Microseconds()))
		}
		rows, err := tx.Query(ctx, c.sql+" LIMIT "+fmt.Sprint(maxProblemsPerCheck+1), args...)
		if err != nil {
			return nil, wrap("reconcile: "+c.name, err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, wrap("reconcile: "+c.name, err)
		}
		for i, line := range lines {
			if i == maxProblemsPerCheck {
				r.Problems = append(r.Problems, c.name+": … and more")
				break
			}
			r.Problems = append(r.Problems, c.name+": "+line)
		}
	}
	return r, nil
}
