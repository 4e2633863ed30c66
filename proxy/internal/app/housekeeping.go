package app

import (
	"context"
	"log/slog"
	"time"
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
