// Package ledger is the proxy's money store: balances, holds and the append-only ledger of rows, in
// Postgres (pgx/v5).
//
// The rules it enforces (contract §5):
//
//   - An org's balance is the sum of its rows; accounts.balance_cents caches it and is updated in the
//     same transaction as every row insert. available = balance − live, unexpired holds, computed at
//     the moment of each hold, so an expired hold stops counting without any sweeper.
//   - Only a prepare needs funds. Hold reserves the price before any work; a re-prepare of the same
//     (tenant, repo, commit) within the grace window of its last charge is held at 0¢ and needs none.
//   - A hold becomes exactly one prepare row (a unique key on the prepare id), through Capture, or
//     through RecordQuery when a later answer reveals a prepare whose proxy never captured it.
//   - The balance never goes below zero, under any concurrency.
//
// Each money operation is one call of a SQL function from the migrations module: one statement, one
// round trip, one transaction. Each function locks the org's account row before it reads anything it
// decides on, which makes it correct under READ COMMITTED and also makes an org's row ids commit in
// ascending order (so paging an org's rows by id never skips a late commit).
//
// Query rows of concurrent callers are committed together (GroupCommit): each caller still returns
// only once its row is durable. The package also keeps the Idempotency-Key records of the HTTP API
// (ClaimIdempotencyKey, StoreIdempotentAnswer, ReleaseIdempotencyKey), reads rows for the dashboards
// (QueryRows, CSVWriter) and checks every invariant above for operators (Reconcile).
//
// Errors that mean "the database cannot be reached or is not serving" wrap ErrUnavailable (the HTTP
// layer answers 503 ledger_unavailable); funds and caps surface as ErrInsufficientFunds and
// ErrSpendCapExceeded.
package ledger
