package ledger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/hanzoai/lsp/migrations"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// migrateLockKey is the transaction-level advisory lock that serialises migration runs on one
// database (advisory locks are per database, so other databases on the server are not blocked).
const migrateLockKey int64 = 0x6c73705f6d696772 // "lsp_migr"

// Migrate applies the embedded migrations that the database has not applied yet, in order, in one
// transaction under an advisory lock, so proxies starting together cannot race; then it makes sure the
// read-only dashboard role exists and can read the views. Running it again is a no-op. A database user
// that may not create roles still migrates: the role step is then skipped with a warning.
func Migrate(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger) error {
	return migrate(ctx, pool, log, migrations.ReadonlyRole)
}

func migrate(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger, role string) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	all, err := migrations.All()
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return wrap("migrate", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))

	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", migrateLockKey); err != nil {
		return wrap("migrate: lock", err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS lsp_schema_migrations (
		version    integer     PRIMARY KEY,
		name       text        NOT NULL,
		checksum   text        NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return wrap("migrate: bookkeeping table", err)
	}
	applied := map[int]string{}
	rows, err := tx.Query(ctx, "SELECT version, checksum FROM lsp_schema_migrations")
	if err != nil {
		return wrap("migrate: read applied", err)
	}
	for rows.Next() {
		var v int
		var sum string
		if err := rows.Scan(&v, &sum); err != nil {
			rows.Close()
			return wrap("migrate: read applied", err)
		}
		applied[v] = sum
	}
	if err := rows.Err(); err != nil {
		return wrap("migrate: read applied", err)
	}
	for _, m := range all {
		if sum, ok := applied[m.Version]; ok {
			if sum != m.Checksum {
				log.Warn("applied migration differs from the embedded file; edits to applied migrations never run",
					"migration", m.Name)
			}
			continue
		}
		// No arguments: pgx uses the simple protocol, which runs a multi-statement file as is.
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return wrap("migrate: "+m.Name, err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO lsp_schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
			m.Version, m.Name, m.Checksum); err != nil {
			return wrap("migrate: record "+m.Name, err)
		}
		log.Info("applied migration", "migration", m.Name)
	}
	if err := readonlyRole(ctx, tx, log, role); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return wrap("migrate: commit", err)
	}
	return nil
}

// readonlyRole creates the NOLOGIN dashboard role if absent and grants it SELECT on the views. Grants
// are repeated on every run, so a role an operator creates later is picked up at the next start.
func readonlyRole(ctx context.Context, tx pgx.Tx, log *slog.Logger, role string) error {
	var exists bool
	if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)", role).Scan(&exists); err != nil {
		return wrap("migrate: look up role", err)
	}
	if !exists {
		err := inSavepoint(ctx, tx, "CREATE ROLE "+pgx.Identifier{role}.Sanitize()+" NOLOGIN")
		switch sqlState(err) {
		case "":
			log.Info("created read-only role", "role", role)
		case "42710", "23505": // duplicate_object, unique_violation: created meanwhile for another database
		case "42501": // insufficient_privilege
			log.Warn("cannot create the read-only role; an operator may create it (NOLOGIN) and restart",
				"role", role, "err", err)
			return nil
		default:
			return wrap("migrate: create role", err)
		}
	}
	var schema string
	if err := tx.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		return wrap("migrate: current schema", err)
	}
	views := make([]string, len(migrations.ReadonlyViews))
	for i, v := range migrations.ReadonlyViews {
		views[i] = pgx.Identifier{schema, v}.Sanitize()
	}
	r := pgx.Identifier{role}.Sanitize()
	grant := "GRANT USAGE ON SCHEMA " + pgx.Identifier{schema}.Sanitize() + " TO " + r + "; " +
		"GRANT SELECT ON " + strings.Join(views, ", ") + " TO " + r
	if err := inSavepoint(ctx, tx, grant); err != nil {
		if sqlState(err) == "42501" {
			log.Warn("cannot grant the read-only role its views", "role", role, "err", err)
			return nil
		}
		return wrap("migrate: grant", err)
	}
	// Apart from the views: a function the runner may not grant on leaves the views granted.
	for _, f := range migrations.ReadonlyFunctions {
		// A signature, from the package's own constant: the name is quoted, the types are SQL.
		name, args, _ := strings.Cut(f, "(")
		err := inSavepoint(ctx, tx, "GRANT EXECUTE ON FUNCTION "+pgx.Identifier{schema, name}.Sanitize()+"("+args+" TO "+r)
		if sqlState(err) == "42501" {
			log.Warn("cannot grant the read-only role a function its views call", "role", role, "function", name, "err", err)
			continue
		}
		if err != nil {
			return wrap("migrate: grant", err)
		}
	}
	return nil
}

func inSavepoint(ctx context.Context, tx pgx.Tx, sql string) error {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return err
	}
	if _, err := sp.Exec(ctx, sql); err != nil {
		_ = sp.Rollback(ctx)
		return err
	}
	return sp.Commit(ctx)
}

func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	if err != nil {
		return "?"
	}
	return ""
}
