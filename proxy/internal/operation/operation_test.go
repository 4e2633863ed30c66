package operation

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/daemonclient"
	"github.com/hanzoai/lsp/proxy/internal/forge"
	"github.com/hanzoai/lsp/proxy/internal/ledger"
	"github.com/hanzoai/lsp/proxy/internal/pgtest"
)

// cancelAfterHold is the ledger of a client that goes away once its hold
// has committed, before the hold's reply is read: Hold commits, cancels the
// request, and then fails as pgx does when it reads a reply on a cancelled
// context.
type cancelAfterHold struct {
	*ledger.Ledger
	cancel context.CancelFunc
}

func (l cancelAfterHold) Hold(ctx context.Context, h ledger.HoldRequest) (int64, error) {
	n, err := l.Ledger.Hold(ctx, h)
	l.cancel()
	if err == nil && ctx.Err() != nil {
		return 0, ctx.Err()
	}
	return n, err
}

// goneForge is the forge of a client that has gone: its fetch ends with
// the request's context.
type goneForge struct{ forge.Forge }

func (goneForge) Fetch(ctx context.Context, _ forge.Credential, _, _, _ string, _ forge.Limits) (*forge.Tree, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return nil, errors.New("fetch: the client is still there")
}

// A client that goes away between its hold's commit and the hold's reply
// does not leave the org's funds held until the hold expires: the hold is
// detached from the request, so it is known, and released when the fetch
// sees the client gone.
func TestPrepareReleasesAHoldItsClientLeft(t *testing.T) {
	bg := context.Background()
	l, err := ledger.Open(bg, pgtest.NewDatabase(t), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	if err := l.Credit(bg, "o", 10, "test"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	s := New(goneForge{}, cancelAfterHold{l, cancel}, nil, Config{PrepareCents: 2, PrepareTimeout: time.Minute}, slog.New(slog.DiscardHandler), nil)
	c := Caller{Org: "o", TenantKey: "t1", Subject: "s"}
	if _, err := s.prepare(ctx, c, daemonclient.Key{TenantKey: "t1", Repo: "r", Commit: "c0ffee"}, daemonclient.PushMeta{}); err == nil {
		t.Fatal("a prepare whose client left succeeded")
	}
	var state string
	if err := l.Pool().QueryRow(bg, `SELECT state FROM holds WHERE org = 'o'`).Scan(&state); err != nil {
		t.Fatal(err)
	}
	b, err := l.Balance(bg, "o")
	if err != nil {
		t.Fatal(err)
	}
	if state != "released" || b.HeldCents != 0 || b.AvailableCents != 10 {
		t.Fatalf("hold %s, %d¢ held, %d¢ available; want it released, 10¢ available", state, b.HeldCents, b.AvailableCents)
	}
}
