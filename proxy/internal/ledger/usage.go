package ledger

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Usage is kept apart from money (HIP §5): usage_rows, partitioned by UTC day, one row per operation
// request that reached the daemon, written once and never changed; whole days are dropped after the
// retention, once rolled up into usage_daily (kept).

// usagePartitionsAhead is how many days ahead housekeeping makes usage partitions.
const usagePartitionsAhead = 3

// DefaultUsageSettle is how long after its id is drawn a row has committed or never will: every writer's
// statement is bounded well below it (group commits by batchTimeout, money calls by their 10 s
// contexts). Readers that page on the id and reconcile's watermark stay behind it.
const DefaultUsageSettle = time.Minute

// EnsureUsagePartitions makes the usage partitions of yesterday, today and the next days.
func (l *Ledger) EnsureUsagePartitions(ctx context.Context) error {
	_, err := l.pool.Exec(ctx, `SELECT lsp_usage_partitions($1)`, usagePartitionsAhead)
	return wrap("usage partitions", err)
}

// RetainUsage rolls up every ended day (once it has settled) and drops the usage partitions of days
// older than keep whose rollup is final; it returns how many it dropped. keep ≤ 0 keeps everything
// (days are still rolled up). It also makes the partitions ahead.
//
// Each step is its own short transaction: a DROP locks usage_rows until its transaction ends, and
// held across a rollup (one transaction, before migration 011) it stopped every usage row's INSERT for
// as long as the rollup of a day took — longer than a request's ledger bound. A drop that cannot take
// the lock within usageDropLockTimeout (a long reader holds the table) waits for the next run rather
// than queue every INSERT behind it.
func (l *Ledger) RetainUsage(ctx context.Context, keep time.Duration) (int, error) {
	if err := l.EnsureUsagePartitions(ctx); err != nil {
		return 0, err
	}
	if keep <= 0 {
		keep = 100 * 365 * 24 * time.Hour
	}
	var now time.Time
	if err := l.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
		return 0, wrap("retain usage", err)
	}
	parts, err := l.usagePartitions(ctx)
	if err != nil {
		return 0, err
	}
	today := now.UTC().Truncate(24 * time.Hour)
	settle := DefaultUsageSettle.Seconds()
	var drop []usagePartition
	for _, p := range parts {
		if !p.day.Before(today) {
			continue
		}
		if _, err := l.pool.Exec(ctx, `SELECT lsp_usage_rollup($1::date, make_interval(secs => $2))`, p.day, settle); err != nil {
			return 0, wrap("roll up usage", err)
		}
		if !p.day.Add(24 * time.Hour).After(now.Add(-keep)) {
			drop = append(drop, p)
		}
	}
	n := 0
	for _, p := range drop {
		ok, err := l.dropUsagePartition(ctx, p)
		if err != nil {
			return n, err
		}
		if ok {
			n++
		}
	}
	return n, nil
}

// usageDropLockTimeout bounds how long a partition's DROP waits for its lock on usage_rows; every
// INSERT waits behind a DROP that waits.
const usageDropLockTimeout = time.Second

type usagePartition struct {
	name string
	day  time.Time // UTC midnight
}

// usagePartitions lists the partitions of usage_rows by day, oldest first.
func (l *Ledger) usagePartitions(ctx context.Context) ([]usagePartition, error) {
	rows, err := l.pool.Query(ctx, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'usage_rows'::regclass ORDER BY c.relname`)
	if err != nil {
		return nil, wrap("usage partitions", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, wrap("usage partitions", err)
	}
	var out []usagePartition
	for _, name := range names {
		d, ok := strings.CutPrefix(name, "usage_rows_")
		day, err := time.Parse("20060102", d)
		if !ok || err != nil {
			continue
		}
		out = append(out, usagePartition{name: name, day: day})
	}
	return out, nil
}

// dropUsagePartition drops p if its day's rollup is final, in a transaction of its own under
// usageDropLockTimeout; false when it was not dropped.
func (l *Ledger) dropUsagePartition(ctx context.Context, p usagePartition) (bool, error) {
	tx, err := l.pool.Begin(ctx)
	if err != nil {
		return false, wrap("drop usage partition", err)
	}
	defer tx.Rollback(ctx)
	var final bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM usage_rollup_days WHERE day = $1::date)`, p.day).Scan(&final); err != nil {
		return false, wrap("drop usage partition", err)
	}
	if !final {
		return false, nil
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", usageDropLockTimeout.Milliseconds())); err != nil {
		return false, wrap("drop usage partition", err)
	}
	if _, err := tx.Exec(ctx, "DROP TABLE "+pgx.Identifier{p.name}.Sanitize()); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "55P03" { // lock_not_available
			return false, nil // the next run drops it
		}
		return false, wrap("drop usage partition", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, wrap("drop usage partition", err)
	}
	return true, nil
}

// UsageDay is one daily rollup row: an org's requests of one repository, operation and status on one
// UTC day, how many of them prepared, and what the day's prepares charged.
type UsageDay struct {
	Day      string `json:"day"` // YYYY-MM-DD
	Repo     string `json:"repo"`
	Op       string `json:"op"`
	Status   int    `json:"status"`
	Requests int64  `json:"requests"`
	Prepares int64  `json:"prepares"`
	Cents    int64  `json:"cents"`
}

// UsageFilter selects an org's daily rollups over [From, To) (UTC days; zero: unbounded).
type UsageFilter struct {
	Org      string
	From, To time.Time
	Repo     string
}

// maxUsageDays bounds one answer of UsageDays.
const maxUsageDays = 50000

// UsageDays returns an org's daily rollups, by day then repository, operation and status: the final
// rollups (usage_daily) for the days rolled up, and for the days not rolled up yet (today, and days
// still settling) the same sums computed from the rows.
func (l *Ledger) UsageDays(ctx context.Context, f UsageFilter) ([]UsageDay, error) {
	if f.Org == "" {
		return nil, errors.New("usage days: org is required")
	}
	sql, args := usageDaysQuery(f)
	rows, err := l.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, wrap("usage days", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (UsageDay, error) {
		var d UsageDay
		err := r.Scan(&d.Day, &d.Repo, &d.Op, &d.Status, &d.Requests, &d.Prepares, &d.Cents)
		return d, err
	})
	if err != nil {
		return nil, wrap("usage days", err)
	}
	return out, nil
}

// UsageRowsCount is the number of usage rows kept (all orgs), for tests and the bench.
func (l *Ledger) UsageRowsCount(ctx context.Context) (int64, error) {
	var n int64
	if err := l.pool.QueryRow(ctx, `SELECT count(*) FROM usage_rows`).Scan(&n); err != nil {
		return 0, wrap("count usage rows", err)
	}
	return n, nil
}

// usageDaysQuery is UsageDays' statement: the final rollups of the days rolled up, and the same sums
// computed from the rows for the days after them.
func usageDaysQuery(f UsageFilter) (string, []any) {
	from, to := f.From, f.To
	if from.IsZero() {
		from = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	if to.IsZero() {
		to = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	var repo *string
	if f.Repo != "" {
		repo = &f.Repo
	}
	return `
		WITH rolled AS (SELECT coalesce(max(day) + 1, '1970-01-01'::date) AS since FROM usage_rollup_days)
		SELECT to_char(d.day, 'YYYY-MM-DD'), d.repo, d.op, d.status, d.requests, d.prepares, d.cents
		  FROM usage_daily d
		 WHERE d.org = $1 AND d.day >= $2::date AND d.day < $3::date AND ($4::text IS NULL OR d.repo = $4)
		UNION ALL
		SELECT to_char(r.day, 'YYYY-MM-DD'), r.repo, r.op, r.status, r.requests, r.prepares, r.cents
		  FROM rolled,
		       LATERAL lsp_usage_rollup_rows($1, greatest(rolled.since, $2::date)::timestamp AT TIME ZONE 'UTC',
		                                     $3::date::timestamp AT TIME ZONE 'UTC', $4) r
		 ORDER BY 1, 2, 3, 4
		 LIMIT $5`, []any{f.Org, from.UTC().Format(time.DateOnly), to.UTC().Format(time.DateOnly), repo, maxUsageDays}
}
