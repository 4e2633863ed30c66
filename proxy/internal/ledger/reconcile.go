package ledger

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Reconciliation is what Reconcile found: counts of what this run checked, and one line per broken
// rule (none when the ledger is consistent).
type Reconciliation struct {
	Accounts int64 // accounts whose balance was checked
	Rows     int64 // money and usage rows checked (those past the watermark)
	Holds    int64 // holds checked for orphans
	// ThroughID is the watermark after this run: every row with an id up to it has been checked.
	ThroughID int64
	Problems  []string
}

// OK reports whether every rule holds.
func (r *Reconciliation) OK() bool { return len(r.Problems) == 0 }

// ReconcileOptions tune a run; the zero value is what `lspctl ledger reconcile` runs.
type ReconcileOptions struct {
	// Margin: a live or expired hold is an orphan once it expired more than this long ago.
	Margin time.Duration
	// Settle: rows are checked once older than this (DefaultUsageSettle when zero): younger ids may
	// still commit. Tests that check what they just wrote set a tiny one.
	Settle time.Duration
	// Restart checks every row again from id 0, not from the watermark.
	Restart bool
	// ChunkIDs is how many ids one transaction checks (default 200000).
	ChunkIDs int64
}

// maxProblemsPerCheck keeps a badly broken ledger's report readable.
const maxProblemsPerCheck = 20

// orgsPerSnapshot is how many accounts one transaction of the balance rule checks.
const orgsPerSnapshot = 500

// chunkChecks are the rules over rows, each run over one id range ($1, $2] of the rows past the
// watermark, returning one text line per violation.
var chunkChecks = []struct{ name, sql string }{
	{"money rows of a known account", `
		SELECT format('row %s: payer %s has no account', r.id, r.payer_org)
		  FROM ledger_rows r
		 WHERE r.id > $1 AND r.id <= $2 AND NOT EXISTS (SELECT 1 FROM accounts a WHERE a.org = r.payer_org)
		 ORDER BY r.id`},
	{"every prepare row captured from its hold", `
		SELECT format('prepare row %s (prepare id %s, org %s): no captured hold points at it', r.id, r.prepare_id, r.payer_org)
		  FROM ledger_rows r
		 WHERE r.id > $1 AND r.id <= $2 AND r.model = 'prepare' AND NOT EXISTS (
		       SELECT 1 FROM holds h
		        WHERE h.prepare_id = r.prepare_id AND h.state = 'captured' AND h.ledger_row_id = r.id
		          AND h.org = r.payer_org)
		UNION ALL
		SELECT format('hold %s (org %s): captured into row %s, which is not its prepare row', h.prepare_id, h.org, h.ledger_row_id)
		  FROM holds h
		 WHERE h.ledger_row_id > $1 AND h.ledger_row_id <= $2 AND NOT EXISTS (
		       SELECT 1 FROM ledger_rows r
		        WHERE r.id = h.ledger_row_id AND r.model = 'prepare' AND r.prepare_id = h.prepare_id
		          AND r.payer_org = h.org)`},
	{"each prepare charged as its hold says", `
		SELECT format('prepare row %s (prepare id %s, org %s): %s¢ for a hold of %s¢ with reason %s',
		              r.id, r.prepare_id, r.payer_org, r.amount_cents, h.amount_cents, coalesce(r.reason, 'none'))
		  FROM ledger_rows r
		  JOIN holds h ON h.prepare_id = r.prepare_id
		 WHERE r.id > $1 AND r.id <= $2 AND r.model = 'prepare'
		   AND NOT CASE coalesce(r.reason, '')
		       WHEN '' THEN r.amount_cents = -h.amount_cents
		       WHEN 'recovered' THEN r.amount_cents = -h.amount_cents
		       WHEN 'reprepare' THEN r.amount_cents = 0
		       WHEN 'shortfall' THEN r.amount_cents <= 0 AND r.amount_cents > -h.amount_cents
		       ELSE false END
		UNION ALL
		SELECT format('prepare row %s (prepare id %s, org %s): free as a re-prepare, but %s/%s was not charged within its grace',
		              r.id, r.prepare_id, r.payer_org, r.repo, r.commit)
		  FROM ledger_rows r
		  JOIN holds h ON h.prepare_id = r.prepare_id
		 WHERE r.id > $1 AND r.id <= $2 AND r.model = 'prepare' AND r.reason = 'reprepare'
		   AND NOT EXISTS (
		       SELECT 1 FROM ledger_rows c
		        WHERE c.model = 'prepare' AND c.amount_cents < 0 AND c.payer_org = r.payer_org
		          AND c.repo = r.repo AND c.commit = r.commit
		          AND c.created_at > h.created_at - h.grace AND c.created_at <= r.created_at)`},
	{"no two charges of one revision inside the grace window", `
		SELECT format('org %s, %s/%s: charged by prepare rows %s and %s, %s apart, grace %s',
		              r.payer_org, r.repo, r.commit, c.id, r.id, r.created_at - c.created_at, h.grace)
		  FROM ledger_rows r
		  JOIN holds h ON h.prepare_id = r.prepare_id
		  JOIN ledger_rows c
		    ON c.model = 'prepare' AND c.amount_cents < 0 AND c.payer_org = r.payer_org
		   AND c.repo = r.repo AND c.commit = r.commit AND c.id <> r.id
		   AND c.created_at <= r.created_at AND c.created_at > r.created_at - h.grace
		 WHERE r.id > $1 AND r.id <= $2 AND r.model = 'prepare' AND r.amount_cents < 0
		   AND NOT EXISTS (
		       SELECT 1 FROM grace_ends g
		        WHERE g.org = r.payer_org AND g.repo = r.repo AND g.commit = r.commit
		          AND g.ended_at > c.created_at AND g.ended_at <= r.created_at)`},
	{"no usage row names a prepare id without its money row", `
		SELECT format('usage row %s (org %s, request %s): prepare id %s has no prepare row', u.id, u.payer_org, coalesce(u.request_id, ''), u.prepare_id)
		  FROM usage_rows u
		 WHERE u.id > $1 AND u.id <= $2 AND u.prepare_id IS NOT NULL AND NOT EXISTS (
		       SELECT 1 FROM ledger_rows r WHERE r.model = 'prepare' AND r.prepare_id = u.prepare_id
		          AND r.payer_org = u.payer_org)
		 ORDER BY u.id`},
}

// Reconcile checks the ledger's invariants with the default options and margin.
func (l *Ledger) Reconcile(ctx context.Context, margin time.Duration) (*Reconciliation, error) {
	return l.ReconcileWith(ctx, ReconcileOptions{Margin: margin})
}

// ReconcileWith checks the ledger's invariants, incrementally and never from one snapshot over
// everything:
//
//   - each stored balance equals the sum of the org's money rows (per org, from a running sum kept
//     at the last id checked; a few hundred orgs per transaction); no balance is below zero and live
//     holds stay within it;
//   - no hold is an orphan: live or expired more than Margin past its expiry, so that nobody learned
//     whether its prepare ran (the one-minute sweep marks such holds expired, so both states count);
//   - over the rows past the watermark, one id range per transaction: every prepare row is captured
//     from its hold and every captured hold points at its prepare row; each prepare is charged minus
//     its hold unless its reason says otherwise (0¢ 'reprepare' only after a charge inside its grace;
//     'shortfall' less than the hold); no two charges of one (org, repo, commit) fall inside the
//     grace window without a DELETE /workspaces between them; no usage row names a prepare id
//     without its money row.
//
// The watermark (reconcile_state) advances to the last id checked, but not past an id range that
// broke a rule, so a broken ledger keeps failing until it is corrected; ids are checked only once
// settled (Settle), since younger ones may still commit. It writes only its own bookkeeping.
func (l *Ledger) ReconcileWith(ctx context.Context, o ReconcileOptions) (*Reconciliation, error) {
	if o.Margin < 0 {
		return nil, fmt.Errorf("reconcile: negative margin")
	}
	if o.Settle <= 0 {
		o.Settle = DefaultUsageSettle
	}
	if o.ChunkIDs <= 0 {
		o.ChunkIDs = 200000
	}
	r := &Reconciliation{}
	if err := l.reconcileBalances(ctx, r, o.Restart); err != nil {
		return nil, err
	}
	if err := l.reconcileHolds(ctx, r, o.Margin); err != nil {
		return nil, err
	}
	if err := l.reconcileRows(ctx, r, o); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *Reconciliation) add(check string, lines []string) {
	for i, line := range lines {
		if i == maxProblemsPerCheck {
			r.Problems = append(r.Problems, check+": … and more")
			return
		}
		r.Problems = append(r.Problems, check+": "+line)
	}
}

func collectLines(ctx context.Context, tx pgx.Tx, sql string, args ...any) ([]string, error) {
	rows, err := tx.Query(ctx, sql+" LIMIT "+fmt.Sprint(maxProblemsPerCheck+1), args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// reconcileBalances checks each account against its running sum plus the rows since, a few hundred
// orgs per snapshot, and moves the running sums forward.
func (l *Ledger) reconcileBalances(ctx context.Context, r *Reconciliation, restart bool) error {
	if restart {
		if _, err := l.pool.Exec(ctx, `TRUNCATE reconcile_sums`); err != nil {
			return wrap("reconcile: balances", err)
		}
	}
	after := ""
	for {
		tx, err := l.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
		if err != nil {
			return wrap("reconcile: balances", err)
		}
		type acct struct {
			org                   string
			balance, total, newer int64
			through, last         int64
		}
		rows, err := tx.Query(ctx, `
			SELECT a.org, a.balance_cents, coalesce(s.total, 0), coalesce(s.through_id, 0), n.sum, n.last
			  FROM (SELECT * FROM accounts WHERE org > $1 ORDER BY org LIMIT $2) a
			  LEFT JOIN reconcile_sums s ON s.org = a.org
			  CROSS JOIN LATERAL (SELECT coalesce(sum(x.amount_cents), 0)::bigint AS sum,
			                             coalesce(max(x.id), 0) AS last
			                        FROM ledger_rows x
			                       WHERE x.payer_org = a.org AND x.id > coalesce(s.through_id, 0)) n
			 ORDER BY a.org`, after, orgsPerSnapshot)
		if err != nil {
			tx.Rollback(ctx)
			return wrap("reconcile: balances", err)
		}
		var batch []acct
		for rows.Next() {
			var a acct
			if err := rows.Scan(&a.org, &a.balance, &a.total, &a.through, &a.newer, &a.last); err != nil {
				rows.Close()
				tx.Rollback(ctx)
				return wrap("reconcile: balances", err)
			}
			batch = append(batch, a)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			tx.Rollback(ctx)
			return wrap("reconcile: balances", err)
		}
		var bad, negative []string
		for _, a := range batch {
			r.Accounts++
			sum := a.total + a.newer
			if a.balance < 0 {
				negative = append(negative, fmt.Sprintf("org %s: balance %d¢", a.org, a.balance))
			}
			switch {
			case a.balance != sum:
				bad = append(bad, fmt.Sprintf("org %s: stored balance %d¢, sum of rows %d¢", a.org, a.balance, sum))
			case a.last > a.through:
				// Money ids of one org commit in ascending order (they are drawn under its lock), so
				// nothing at or below last can appear later.
				if _, err := tx.Exec(ctx, `INSERT INTO reconcile_sums (org, through_id, total) VALUES ($1, $2, $3)
					ON CONFLICT (org) DO UPDATE SET through_id = excluded.through_id, total = excluded.total`,
					a.org, a.last, sum); err != nil {
					tx.Rollback(ctx)
					return wrap("reconcile: balances", err)
				}
			}
		}
		over, err := collectLines(ctx, tx, `
			SELECT format('org %s: live holds %s¢ exceed the balance %s¢', a.org, h.held, a.balance_cents)
			  FROM (SELECT * FROM accounts WHERE org > $1 ORDER BY org LIMIT $2) a
			  JOIN LATERAL (SELECT sum(amount_cents) AS held FROM holds
			                 WHERE org = a.org AND state = 'live' AND expires_at > now()) h ON true
			 WHERE h.held > a.balance_cents
			 ORDER BY a.org`, after, orgsPerSnapshot)
		if err != nil {
			tx.Rollback(ctx)
			return wrap("reconcile: balances", err)
		}
		if err := tx.Commit(ctx); err != nil {
			return wrap("reconcile: balances", err)
		}
		r.add("balance equals the sum of rows", bad)
		r.add("no balance below zero", negative)
		r.add("live holds within the balance", over)
		if len(batch) < orgsPerSnapshot {
			return nil
		}
		after = batch[len(batch)-1].org
	}
}

// reconcileHolds reports orphans among live and expired holds (an index range: holds that expired
// more than margin ago and were never captured or released).
func (l *Ledger) reconcileHolds(ctx context.Context, r *Reconciliation, margin time.Duration) error {
	tx, err := l.pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return wrap("reconcile: holds", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	lines, err := collectLines(ctx, tx, `
		SELECT format('hold %s (org %s, %s/%s): %s, expired at %s and never captured or released',
		              prepare_id, org, repo, commit, state, expires_at)
		  FROM holds
		 WHERE state IN ('live', 'expired') AND expires_at < now() - make_interval(secs => $1)
		 ORDER BY expires_at`, margin.Seconds())
	if err != nil {
		return wrap("reconcile: holds", err)
	}
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM holds WHERE state IN ('live', 'expired')`).Scan(&r.Holds); err != nil {
		return wrap("reconcile: holds", err)
	}
	r.add("no orphaned hold", lines)
	return nil
}

// reconcileRows runs the row rules over the settled ids past the watermark, one id range per
// transaction.
func (l *Ledger) reconcileRows(ctx context.Context, r *Reconciliation, o ReconcileOptions) error {
	if err := l.MarkIDs(ctx); err != nil {
		return wrap("reconcile: rows", err)
	}
	settled, err := l.settledID(ctx, o.Settle)
	if err != nil {
		return wrap("reconcile: rows", err)
	}
	var through int64
	if !o.Restart {
		if err := l.pool.QueryRow(ctx, `SELECT coalesce((SELECT through_id FROM reconcile_state WHERE name = 'rows'), 0)`).Scan(&through); err != nil {
			return wrap("reconcile: rows", err)
		}
	}
	r.ThroughID = through
	for from := through; from < settled; {
		to := min(from+o.ChunkIDs, settled)
		n, lines, err := l.reconcileChunk(ctx, from, to)
		if err != nil {
			return err
		}
		r.Rows += n
		failed := false
		for _, c := range lines {
			if len(c.lines) > 0 {
				failed = true
				r.add(c.name, c.lines)
			}
		}
		if failed {
			break // keep the watermark before the broken range
		}
		if _, err := l.pool.Exec(ctx, `INSERT INTO reconcile_state (name, through_id) VALUES ('rows', $1)
			ON CONFLICT (name) DO UPDATE SET through_id = excluded.through_id, updated_at = now()`, to); err != nil {
			return wrap("reconcile: rows", err)
		}
		r.ThroughID = to
		from = to
	}
	return nil
}

type checkLines struct {
	name  string
	lines []string
}

func (l *Ledger) reconcileChunk(ctx context.Context, from, to int64) (int64, []checkLines, error) {
	tx, err := l.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return 0, nil, wrap("reconcile: rows", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	var n int64
	if err := tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM ledger_rows WHERE id > $1 AND id <= $2)
		+ (SELECT count(*) FROM usage_rows WHERE id > $1 AND id <= $2)`, from, to).Scan(&n); err != nil {
		return 0, nil, wrap("reconcile: rows", err)
	}
	var out []checkLines
	for _, c := range chunkChecks {
		lines, err := collectLines(ctx, tx, c.sql, from, to)
		if err != nil {
			return 0, nil, wrap("reconcile: "+c.name, err)
		}
		out = append(out, checkLines{c.name, lines})
	}
	return n, out, nil
}
