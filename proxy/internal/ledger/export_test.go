package ledger

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
)

// MigrateWithRole runs the migrations with another read-only role name, so a test can exercise the
// "role absent" path on a cluster where lsp_readonly already exists.
func MigrateWithRole(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger, role string) error {
	return migrate(ctx, pool, log, role)
}

// RowsQuery and UsageDaysQuery are the dashboards' statements, for the EXPLAIN checks.
func RowsQuery(f RowFilter) (string, []any)        { return rowsQuery(f) }
func UsageDaysQuery(f UsageFilter) (string, []any) { return usageDaysQuery(f) }

// RecordUsageRows writes rows in one statement, as one batch of the group commit does.
func (l *Ledger) RecordUsageRows(ctx context.Context, rows []Row) error {
	return l.recordUsage(ctx, rows)
}
