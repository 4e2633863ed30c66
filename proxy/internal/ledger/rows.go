package ledger

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// LedgerRow is one row of the ledger. Empty strings and HTTPStatus 0 stand for NULL (not applicable
// or not known).
type LedgerRow struct {
	ID          int64     `json:"id"`
	Kind        string    `json:"kind"`  // "lsp" or "credit"
	Model       string    `json:"model"` // "prepare" or "query" for kind "lsp"; empty for credits
	PayerOrg    string    `json:"payer_org"`
	TenantKey   string    `json:"tenant_key"`
	Subject     string    `json:"subject"`
	Repo        string    `json:"repo"`
	Commit      string    `json:"commit"`
	Op          string    `json:"op"`
	Language    string    `json:"language"`
	AmountCents int64     `json:"amount_cents"` // credit +, prepare −price (0 for a re-prepare), query 0
	HTTPStatus  int       `json:"http_status"`
	RequestID   string    `json:"request_id"`
	PrepareID   string    `json:"prepare_id"`
	Reason      string    `json:"reason"` // "", "reprepare", "recovered" or "shortfall"
	CreatedAt   time.Time `json:"created_at"`
}

// RowFilter selects an org's rows, in ascending id order, after AfterID.
type RowFilter struct {
	Org     string
	AfterID int64
	Limit   int       // ≤ 0: 100; at most MaxRowsLimit
	From    time.Time // zero: unbounded; inclusive
	To      time.Time // zero: unbounded; exclusive
	Model   string    // "", "prepare", "query" or "credit"
	Repo    string    // "": any
	// Settle leaves out the rows whose ids were drawn less than it ago. Usage rows are written
	// without the account lock, so their ids do not commit in order; ids drawn more than
	// DefaultUsageSettle ago have committed or never will, so a reader that pages on the last id it
	// saw with Settle ≥ DefaultUsageSettle never misses one. The bound is an id (settledID: the id
	// sequence as marked at least Settle ago), not each row's time: a row's id and its created_at
	// are drawn apart, and under load a lower id can carry a later time, which a per-row time bound
	// listed after the higher id, skipped for good. Zero lists every committed row.
	Settle time.Duration
	// settledID is Settle's bound, set by QueryRows.
	settledID int64
}

// MarkIDs notes the id sequence's value now (a mark in reconcile_state): every id up to it has been
// drawn, so once a settle has passed since, every row up to it has committed or never will (settledID).
// Housekeeping marks every MarkInterval; marks older than a day go, but for the newest of them.
func (l *Ledger) MarkIDs(ctx context.Context) error {
	// pg_sequence_last_value is NULL for a sequence never drawn from: no id yet.
	if _, err := l.pool.Exec(ctx, `INSERT INTO reconcile_state (name, through_id, updated_at)
		VALUES ('mark:' || to_char(clock_timestamp(), 'YYYYMMDDHH24MISSUS'),
		        coalesce(pg_sequence_last_value(pg_get_serial_sequence('ledger_rows', 'id')::regclass), 0),
		        clock_timestamp())
		ON CONFLICT (name) DO NOTHING`); err != nil {
		return wrap("mark ids", err)
	}
	_, err := l.pool.Exec(ctx, `DELETE FROM reconcile_state WHERE name LIKE 'mark:%' AND updated_at < now() - interval '1 day'
		AND through_id < (SELECT max(through_id) FROM reconcile_state WHERE name LIKE 'mark:%' AND updated_at < now() - interval '1 day')`)
	return wrap("mark ids", err)
}

// MarkInterval is how often housekeeping marks the id sequence (MarkIDs): how far behind its settle a
// reader that pages on the id may lag.
const MarkInterval = 10 * time.Second

// settledID is the highest id below which every row has committed or never will, settle being longer
// than any writer's statement: the newest mark at least settle old. Without one (a new database's first
// settle) it is the newest row older than settle, which a row whose id was drawn before another's but
// whose clock was read after it (milliseconds apart, under load) can pass.
func (l *Ledger) settledID(ctx context.Context, settle time.Duration) (int64, error) {
	var id int64
	err := l.pool.QueryRow(ctx, `
		SELECT coalesce(
		    (SELECT max(through_id) FROM reconcile_state
		      WHERE name LIKE 'mark:%' AND updated_at <= clock_timestamp() - make_interval(secs => $1)),
		    (SELECT max(id) FROM (SELECT id FROM ledger_rows
		      WHERE created_at < clock_timestamp() - make_interval(secs => $1)
		      ORDER BY created_at DESC LIMIT 1) x),
		    0)`, settle.Seconds()).Scan(&id)
	return id, wrap("settled id", err)
}

// MaxRowsLimit bounds one page of rows.
const MaxRowsLimit = 10000

// Rows returns up to limit of org's rows with id > afterID, in id order.
func (l *Ledger) Rows(ctx context.Context, org string, afterID int64, limit int) ([]LedgerRow, error) {
	return l.QueryRows(ctx, RowFilter{Org: org, AfterID: afterID, Limit: limit})
}

// QueryRows is Rows with filters, for the dashboard API. It reads money rows (ledger_rows: credits
// and prepares, a prepare row carrying the HTTP status of the request that prepared) and, unless
// Model selects money only, the usage rows of requests that did not prepare (usage_rows, presented
// as model "query", 0¢), merged in id order (one sequence numbers both). Each part is one index
// range scan: (payer_org, model, id), (payer_org, repo, id) or (payer_org, id).
func (l *Ledger) QueryRows(ctx context.Context, f RowFilter) ([]LedgerRow, error) {
	if f.Settle > 0 {
		id, err := l.settledID(ctx, f.Settle)
		if err != nil {
			return nil, wrap("read ledger rows", err)
		}
		f.settledID = id
	}
	sql, args := rowsQuery(f)
	rows, err := l.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, wrap("read ledger rows", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (LedgerRow, error) {
		var x LedgerRow
		err := r.Scan(&x.ID, &x.Kind, &x.Model, &x.PayerOrg, &x.TenantKey, &x.Subject, &x.Repo, &x.Commit,
			&x.Op, &x.Language, &x.AmountCents, &x.HTTPStatus, &x.RequestID, &x.PrepareID, &x.Reason,
			&x.CreatedAt)
		return x, err
	})
	if err != nil {
		return nil, wrap("read ledger rows", err)
	}
	return out, nil
}

// rowsQuery builds QueryRows' statement with only the conditions f uses, so that the planner picks
// the matching index for every filter (a generic "$5 = ” OR …" would hide them).
func rowsQuery(f RowFilter) (string, []any) {
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, MaxRowsLimit)
	args := []any{f.Org, f.AfterID, limit}
	common := ""
	add := func(cond string, v any) {
		args = append(args, v)
		common += fmt.Sprintf(" AND %s $%d", cond, len(args))
	}
	if !f.From.IsZero() {
		add("x.created_at >=", f.From)
	}
	if !f.To.IsZero() {
		add("x.created_at <", f.To)
	}
	if f.Settle > 0 {
		add("x.id <=", f.settledID)
	}
	if f.Repo != "" {
		add("x.repo =", f.Repo)
	}
	var parts []string
	if f.Model != "query" {
		money := common
		if f.Model != "" {
			args = append(args, f.Model)
			money += fmt.Sprintf(" AND coalesce(x.model, x.kind) = $%d", len(args))
		}
		parts = append(parts, `(SELECT x.id, x.kind, coalesce(x.model, ''), x.payer_org, coalesce(x.tenant_key, ''),
		       coalesce(x.subject, ''), coalesce(x.repo, ''), coalesce(x.commit, ''), coalesce(x.op, ''),
		       coalesce(x.language, ''), x.amount_cents, coalesce(x.http_status, p.http_status, 0)::integer,
		       coalesce(x.request_id, ''), coalesce(x.prepare_id, ''), coalesce(x.reason, ''), x.created_at
		  FROM ledger_rows x
		  LEFT JOIN LATERAL (SELECT u.http_status FROM usage_rows u
		                      WHERE u.prepared AND u.prepare_id = x.prepare_id
		                        AND u.created_at >= x.created_at - interval '1 minute'
		                        AND u.created_at < x.created_at + interval '1 hour'
		                      LIMIT 1) p ON x.model = 'prepare'
		 WHERE x.payer_org = $1 AND x.id > $2`+money+`
		 ORDER BY x.id LIMIT $3)`)
	}
	if f.Model == "" || f.Model == "query" {
		parts = append(parts, `(SELECT x.id, 'lsp', 'query', x.payer_org, coalesce(x.tenant_key, ''), coalesce(x.subject, ''),
		       coalesce(x.repo, ''), coalesce(x.commit, ''), coalesce(x.op, ''), coalesce(x.language, ''),
		       0::bigint, coalesce(x.http_status, 0)::integer, coalesce(x.request_id, ''),
		       coalesce(x.prepare_id, ''), '', x.created_at
		  FROM usage_rows x
		 WHERE x.payer_org = $1 AND x.id > $2 AND NOT x.prepared`+common+`
		 ORDER BY x.id LIMIT $3)`)
	}
	return "SELECT * FROM (" + strings.Join(parts, "\nUNION ALL\n") + ") r ORDER BY 1 LIMIT $3", args
}
