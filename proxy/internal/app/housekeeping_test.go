package app

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"
)

type countingExpirer struct{ calls atomic.Int32 }

func (c *countingExpirer) ExpireHolds(context.Context) (int, error) {
	if c.calls.Add(1)%2 == 0 {
		return 0, errors.New("ledger unavailable")
	}
	return 1, nil
}

// TestSweepHolds: the sweep keeps running through errors and stops, closing
// done, when its context ends (app.Run waits on done before closing the
// ledger).
func TestSweepHolds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	led := &countingExpirer{}
	done := make(chan struct{})
	go sweepHolds(ctx, led, time.Millisecond, slog.New(slog.NewTextHandler(io.Discard, nil)), done)
	for led.calls.Load() < 4 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	n := led.calls.Load()
	time.Sleep(5 * time.Millisecond)
	if led.calls.Load() != n {
		t.Fatal("the sweep ran after its context ended")
	}
}
