// Package migrations holds the Postgres schema of the ledger as embedded, numbered SQL files.
//
// The files are applied in version order, each once, by the proxy at start (see the proxy's
// internal/ledger package, which owns the runner, the advisory lock and the bookkeeping table).
// A file is named NNN_description.sql; a version, once deployed, is never edited: a change is a new file.
//
// What the schema holds (see the SQL files for the exact columns):
//
//   - accounts: one row per org with balance_cents, kept equal to the sum of the org's ledger rows and
//     updated in the same transaction as every row insert; an optional daily spend cap.
//   - holds: reservations of the prepare price, keyed by prepare id. available = balance − live,
//     unexpired holds; expiry is a timestamp, so correctness never waits for a sweeper.
//   - ledger_rows: the append-only ledger with a monotonic identity id.
//   - lsp_* functions: every money operation is one SQL function call, one round trip, correct under
//     READ COMMITTED because each locks the org's account row before reading anything it decides on.
//     lsp_record_queries (005) writes a batch of query rows in one statement (group commit).
//   - idempotency_keys (004): Idempotency-Key records per (org, key): the hash of route and body, the
//     attempt that holds the key and its lease, and once known the stored answer; kept 24 hours
//     (lsp_idem_begin, lsp_idem_finish, lsp_idem_abandon).
//   - idempotency_bytes (009, 010): per org, the bytes its idempotency_keys rows cost (each answered
//     row: ~256 bytes of overhead, its key, headers and body; lsp_idem_row_bytes), kept by a trigger in the
//     transaction of every change; lsp_idem_claim refuses an org's new key at its bound.
//
// Documented read-only views for dashboards (granted to ReadonlyRole, which sees every org):
//
//   - v_ledger_rows: every ledger row (id, kind, model, payer_org, tenant_key, subject, repo, commit, op,
//     language, amount_cents, http_status, request_id, prepare_id, reason, created_at).
//   - v_balances: per org balance_cents, held_cents, available_cents, daily_cap_cents.
//   - v_holds: every hold with its state (live, captured, released, expired) and expiry.
//
// The role itself is NOLOGIN and created only if absent; its login and password are the operator's.
package migrations
