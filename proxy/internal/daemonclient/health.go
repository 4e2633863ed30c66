package daemonclient

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// watch checks one shard every interval until ctx ends.
func (p *Pool) watch(ctx context.Context, s *Shard) {
	defer p.wg.Done()
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		// A Hello is tiny: a shard that cannot answer it within a few
		// seconds cannot serve queries either.
		hctx, cancel := context.WithTimeout(ctx, max(p.interval, 3*time.Second))
		if err := s.hello(hctx); err == nil {
			s.checked.Store(true)
			s.markUp()
		} else if ctx.Err() == nil {
			s.markDown(err)
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// markDown records that the shard failed; the first failure is logged.
func (s *Shard) markDown(err error) {
	if errors.Is(err, context.Canceled) || status.Code(err) == codes.Canceled {
		return // the pool is closing, or the caller left: says nothing of the shard
	}
	s.mu.Lock()
	s.lastErr = err
	s.mu.Unlock()
	if s.up.Swap(false) {
		if errors.Is(err, ErrProtocol) {
			s.pool.log.Error("daemon shard speaks another protocol version: marked down", "shard", s.Addr, "err", err)
		} else {
			s.pool.log.Warn("daemon shard down", "shard", s.Addr, "err", err)
		}
		s.pool.gauge.WithLabelValues(s.Addr).Set(0)
	}
}

// markUp records that the shard answered; a recovery is logged.
func (s *Shard) markUp() {
	s.mu.Lock()
	s.lastErr = nil
	s.mu.Unlock()
	if !s.up.Swap(true) {
		s.pool.log.Info("daemon shard up", "shard", s.Addr)
	}
	s.pool.gauge.WithLabelValues(s.Addr).Set(1)
}
