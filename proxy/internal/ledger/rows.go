package ledger

import (
	"context"
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
}

// MaxRowsLimit bounds one page of rows.
const MaxRowsLimit = 10000

// Rows returns up to limit of org's rows with id > afterID, in id order. Ids of one org commit in
// ascending order, so a reader that pages by the last id it saw never misses a row.
func (l *Ledger) Rows(ctx context.Context, org string, afterID int64, limit int) ([]LedgerRow, error) {
	return l.QueryRows(ctx, RowFilter{Org: org, AfterID: afterID, Limit: limit})
}

// QueryRows is Rows with filters, for the dashboard API.
func (l *Ledger) QueryRows(ctx context.Context, f RowFilter) ([]LedgerRow, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, MaxRowsLimit)
	var from, to *time.Time
	if !f.From.IsZero() {
		from = &f.From
	}
	if !f.To.IsZero() {
		to = &f.To
	}
	rows, err := l.pool.Query(ctx, `
		SELECT id, kind, coalesce(model, ''), payer_org, coalesce(tenant_key, ''), coalesce(subject, ''),
		       coalesce(repo, ''), coalesce(commit, ''), coalesce(op, ''), coalesce(language, ''),
		       amount_cents, coalesce(http_status, 0), coalesce(request_id, ''), coalesce(prepare_id, ''),
		       coalesce(reason, ''), created_at
		  FROM ledger_rows
		 WHERE payer_org = $1 AND id > $2
		   AND ($3::timestamptz IS NULL OR created_at >= $3)
		   AND ($4::timestamptz IS NULL OR created_at < $4)
		   AND ($5 = '' OR coalesce(model, kind) = $5)
		   AND ($6 = '' OR repo = $6)
		 ORDER BY id
		 LIMIT $7`, f.Org, f.AfterID, from, to, f.Model, f.Repo, limit)
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
