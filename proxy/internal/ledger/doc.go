// Package ledger is the proxy's money and usage store, in Postgres (pgx/v5): balances, holds, the
// immutable money rows (credits, prepares) and the append-only usage rows (one per operation request
// that reached the daemon, partitioned by day, rolled up daily, dropped after the retention).
//
// The rules it enforces (contract §5):
//
//   - An org's balance is the sum of its money rows; accounts.balance_cents caches it and is updated
//     in the same transaction as every money row insert. available = balance − live, unexpired holds,
//     computed at the moment of each hold, so an expired hold stops counting without any sweeper.
//   - Only a prepare needs funds. Hold reserves the price before any work; a re-prepare of the same
//     (payer org, repo, commit) within the grace window of its last charge — and after the revision's
//     last EndGrace (the tenant's DELETE /workspaces) — is held at 0¢ and needs none. The daily spend
//     cap reads a per-day counter.
//   - A hold becomes exactly one prepare row (a unique key on the prepare id), through Capture, or
//     through RecordUsage when a later answer reveals a prepare whose proxy never captured it — a
//     live, expired or released hold alike: a published tree is always charged.
//   - The balance never goes below zero, under any concurrency.
//   - No row changes once written (a trigger refuses UPDATE and DELETE of both kinds).
//
// Each money operation is one call of a SQL function from the migrations module: one statement, one
// round trip, one transaction. Each function locks the org's account row before it reads anything it
// decides on, which makes it correct under READ COMMITTED and also makes an org's money row ids commit
// in ascending order. Usage rows take no lock (only one that names an uncaptured hold takes its org's,
// to capture it first), so their ids may commit out of order: readers that page on the id stay behind
// DefaultUsageSettle (RowFilter.Settle).
//
// Usage rows of concurrent callers are committed together (GroupCommit): each caller still returns
// only once its row is durable. The package also keeps the Idempotency-Key records of the HTTP API
// (ClaimIdempotencyKey, StoreIdempotentAnswer, ReleaseIdempotencyKey), reads rows and rollups for the
// dashboards (QueryRows, UsageDays, CSVWriter), keeps the usage partitions (RetainUsage) and checks
// every invariant above for operators, incrementally (ReconcileWith).
//
// Errors that mean "the database cannot be reached or is not serving" wrap ErrUnavailable (the HTTP
// layer answers 503 ledger_unavailable); funds and caps surface as ErrInsufficientFunds and
// ErrSpendCapExceeded.
package ledger
