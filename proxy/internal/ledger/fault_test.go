package ledger_test

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/hanzoai/lsp/proxy/internal/ledger"
	"github.com/hanzoai/lsp/proxy/internal/pgcluster"
)

func TestUnreachableDatabaseIsUnavailable(t *testing.T) {
	t.Parallel()
	_, err := ledger.Open(ctx, "postgres://postgres@/x?host=/nonexistent-lsp-socket-dir&sslmode=disable", nil)
	if !errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("open against no server: %v", err)
	}
	if _, err := ledger.Open(ctx, "postgres://x@/y?pool_max_conns=many", nil); err == nil || errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("a malformed URL must fail, and not as unavailable: %v", err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := ledger.Open(canceled, "postgres://postgres@/x?host=/nonexistent-lsp-socket-dir&sslmode=disable", nil); errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("a canceled caller is not an unavailable ledger: %v", err)
	}
}

// The server crashes and comes back, then goes away: calls fail with ErrUnavailable meanwhile and the
// ledger recovers without being reopened; nothing committed is lost.
func TestServerRestartAndStop(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp("", "ledger-fault")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	c, err := pgcluster.Start(ctx, dir, nil)
	if err != nil {
		if os.Getenv("TEST_DATABASE_URL") != "" {
			t.Skipf("a private server is needed and cannot be started here: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop(context.Background()) })
	if err := c.CreateDatabase(ctx, "ledger"); err != nil {
		t.Fatal(err)
	}
	l, err := ledger.Open(ctx, c.URL("ledger"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Credit(ctx, "acme", 7, "ops"); err != nil {
		t.Fatal(err)
	}

	if err := c.Restart(ctx, true); err != nil {
		t.Fatal(err)
	}
	// Pooled connections died with the server; each failure must say unavailable, and the pool
	// reconnects by itself.
	recovered := false
	for range 50 {
		b, err := l.Balance(ctx, "acme")
		if err == nil {
			if b.BalanceCents != 7 {
				t.Fatalf("after a crash the balance is %+v", b)
			}
			recovered = true
			break
		}
		if !errors.Is(err, ledger.ErrUnavailable) {
			t.Fatalf("error after a crash is not ErrUnavailable: %v", err)
		}
	}
	if !recovered {
		t.Fatal("the ledger did not recover after the server came back")
	}

	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Ping(ctx); !errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("ping with the server down: %v", err)
	}
	if _, err := l.Hold(ctx, hold("p", "acme", "c")); !errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("hold with the server down: %v", err)
	}
	l.Close()
	if err := l.RecordUsage(ctx, query("acme", "c", "")); !errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("record after Close: %v", err)
	}
}
