package pgtest_test

import (
	"context"
	"testing"

	"github.com/hanzoai/lsp/proxy/internal/pgtest"
	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func tables(t *testing.T, url string) int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx,
		"SELECT count(*) FROM pg_tables WHERE tablename IN ('accounts', 'holds', 'ledger_rows')").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestDatabases(t *testing.T) {
	t.Parallel()
	a, b := pgtest.NewDatabase(t), pgtest.NewDatabase(t)
	if a == b {
		t.Fatal("two tests share a database")
	}
	if n := tables(t, a); n != 3 {
		t.Errorf("migrated database has %d of the ledger tables", n)
	}
	if n := tables(t, pgtest.NewEmptyDatabase(t)); n != 0 {
		t.Errorf("empty database has %d ledger tables", n)
	}
}

func TestWithDatabase(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"postgres://u@/postgres?host=%2Ftmp%2Fs&sslmode=disable", "postgres://u@/db1?host=%2Ftmp%2Fs&sslmode=disable"},
		{"postgresql://u:p@h:5/x", "postgresql://u:p@h:5/db1"},
		{"host=/tmp/s dbname=postgres", "host=/tmp/s dbname=postgres dbname='db1'"},
	} {
		got, err := pgtest.WithDatabase(tc.in, "db1")
		if err != nil || got != tc.want {
			t.Errorf("withDatabase(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
		cfg, err := pgx.ParseConfig(got)
		if err != nil || cfg.Database != "db1" {
			t.Errorf("%q parses to database %q (%v)", got, cfg.Database, err)
		}
	}
}
