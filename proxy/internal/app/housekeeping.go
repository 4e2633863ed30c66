package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/operation"
)

// holdSweepInterval is how often live holds past their expiry are marked
// expired. Correctness never waits for it (an expired hold stops counting
// against available funds at its expiry); it keeps the holds table and the
// billing views honest about which holds are still live.
const holdSweepInterval = time.Minute

// holdExpirer is the ledger's housekeeping call.
type holdExpirer interface {
	ExpireHolds(ctx context.Context) (int, error)
}

// sweepHolds runs ExpireHolds every interval until ctx ends, then closes
// done, so the caller can wait for it before closing the ledger.
func sweepHolds(ctx context.Context, led holdExpirer, interval time.Duration, log *slog.Logger, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := led.ExpireHolds(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			log.Warn("expiring holds", "err", err)
		case n > 0:
			log.Info("holds expired", "count", n)
		}
	}
}

// usageInterval is how often usage partitions are made ahead, ended days
// rolled up and days past the retention dropped.
const usageInterval = time.Hour

// usageKeeper is the ledger's usage housekeeping call.
type usageKeeper interface {
	RetainUsage(ctx context.Context, keep time.Duration) (int, error)
}

// keepUsage runs RetainUsage at start and every interval until ctx ends,
// then closes done. Rows never wait for it: a row whose day has no partition
// yet makes it (ledger.RecordUsage).
func keepUsage(ctx context.Context, led usageKeeper, keep, interval time.Duration, log *slog.Logger, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		n, err := led.RetainUsage(ctx, keep)
		switch {
		case err != nil && ctx.Err() == nil:
			log.Warn("usage retention", "err", err)
		case n > 0:
			log.Info("usage partitions dropped", "count", n, "retention", keep)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// idMarker is the ledger's marking of its id sequence (ledger.MarkIDs).
type idMarker interface {
	MarkIDs(ctx context.Context) error
}

// markIDs marks the ledger's id sequence at start and every interval until
// ctx ends, then closes done: the ledger's readers list rows up to the
// newest mark a settle old (GET /ledger's pages, reconcile).
func markIDs(ctx context.Context, led idMarker, interval time.Duration, log *slog.Logger, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := led.MarkIDs(ctx); err != nil && ctx.Err() == nil {
			log.Warn("mark ledger ids", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// holdSettler settles the holds prepares left unsettled (operation.Service).
type holdSettler interface {
	SettleHolds(ctx context.Context, led operation.HoldLedger, after time.Duration) (captured, released int, err error)
}

// settleHolds runs SettleHolds every interval until ctx ends, then closes
// done.
func settleHolds(ctx context.Context, ops holdSettler, led operation.HoldLedger, interval, after time.Duration, log *slog.Logger, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c, r, err := ops.SettleHolds(ctx, led, after)
		switch {
		case err != nil && ctx.Err() == nil:
			log.Warn("settling holds", "err", err)
		case c+r > 0:
			log.Info("holds settled", "captured", c, "released", r)
		}
	}
}
