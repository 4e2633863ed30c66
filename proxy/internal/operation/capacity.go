package operation

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/apierr"
	"github.com/hanzoai/lsp/proxy/internal/daemonclient"
	"github.com/prometheus/client_golang/prometheus"
)

// prepareRuns is what the Service knows about its prepares as a whole: the
// bound on how many run at once, the ones in flight (for a graceful
// shutdown), and how they ended (for operators).
type prepareRuns struct {
	slots    chan struct{} // nil: unbounded
	perOrg   int           // prepares one org may run at once; 0: unbounded
	mu       sync.Mutex
	orgs     map[string]int // prepares running, by org
	inflight sync.WaitGroup
	prepares *prometheus.CounterVec
	holds    *prometheus.CounterVec
}

// capacityRetryAfter is the wait announced when every prepare slot is taken:
// a small tree prepares in well under that.
const capacityRetryAfter = 5 * time.Second

func newPrepareRuns(total, perOrg int, reg prometheus.Registerer) *prepareRuns {
	r := &prepareRuns{
		perOrg: max(perOrg, 0),
		orgs:   map[string]int{},
		prepares: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lsp_proxy_prepare_outcomes_total",
			Help: "How the prepares this proxy led ended: prepared, already_prepared (the daemon had it), capacity_exhausted, org_busy (429: the org ran its share), refused (402), fetch_failed, push_failed, ledger_unavailable, canceled.",
		}, []string{"outcome"}),
		holds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lsp_proxy_hold_outcomes_total",
			Help: "How holds ended: refused (402), captured, released, or pending (left for the next answer from the workspace to capture, or to expire).",
		}, []string{"outcome"}),
	}
	if total > 0 {
		r.slots = make(chan struct{}, total)
	}
	if reg != nil {
		reg.MustRegister(r.prepares, r.holds)
	}
	return r
}

// boundedPrepare runs one leader's prepare in a slot. With every slot
// taken it answers 503 capacity_exhausted at once, before any hold is
// taken: a proxy holding many trees in memory must shed load rather than
// queue it. An org already running its share of the slots is answered 429
// rate_limited the same way, so that one org's prepares of many commits
// cannot take every slot from the others for as long as they push.
func (s *Service) boundedPrepare(ctx context.Context, c Caller, key daemonclient.Key, meta daemonclient.PushMeta) (*prepared, error) {
	r := s.run
	if !r.takeOrg(c.Org) {
		r.prepares.WithLabelValues("org_busy").Inc()
		e := apierr.New(http.StatusTooManyRequests, apierr.RateLimited, "this org is running as many prepares at once as it may on this proxy; try again shortly")
		e.RetryAfter = capacityRetryAfter
		return nil, e
	}
	defer r.giveOrg(c.Org)
	if r.slots != nil {
		select {
		case r.slots <- struct{}{}:
			defer func() { <-r.slots }()
		default:
			r.prepares.WithLabelValues("capacity_exhausted").Inc()
			e := apierr.New(http.StatusServiceUnavailable, apierr.CapacityExhausted, "this proxy is running as many prepares as it may; try again shortly")
			e.RetryAfter = capacityRetryAfter
			return nil, e
		}
	}
	p, err := s.prepare(ctx, c, key, meta)
	r.count(p, err)
	return p, err
}

// takeOrg counts one more prepare of org, unless it runs perOrg already.
func (r *prepareRuns) takeOrg(org string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.perOrg > 0 && r.orgs[org] >= r.perOrg {
		return false
	}
	r.orgs[org]++
	return true
}

func (r *prepareRuns) giveOrg(org string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.orgs[org]--; r.orgs[org] <= 0 {
		delete(r.orgs, org)
	}
}

// count records how one prepare and its hold ended.
func (r *prepareRuns) count(p *prepared, err error) {
	if err == nil {
		if p.byUs {
			r.prepares.WithLabelValues("prepared").Inc()
			r.holds.WithLabelValues("captured").Inc()
		} else {
			r.prepares.WithLabelValues("already_prepared").Inc()
			r.holds.WithLabelValues("released").Inc()
		}
		return
	}
	if errors.Is(err, context.Canceled) {
		r.prepares.WithLabelValues("canceled").Inc()
		return
	}
	switch apierr.From(err).Code {
	case apierr.InsufficientFunds, apierr.SpendCapExceeded:
		r.prepares.WithLabelValues("refused").Inc()
		r.holds.WithLabelValues("refused").Inc()
	case apierr.LedgerUnavailable:
		r.prepares.WithLabelValues("ledger_unavailable").Inc()
	case apierr.TreeTooLarge, apierr.NotFound, apierr.ForgeUnavailable, apierr.InvalidRequest, apierr.Unauthenticated, apierr.Forbidden:
		r.prepares.WithLabelValues("fetch_failed").Inc()
		r.holds.WithLabelValues("released").Inc()
	default:
		// The push failed: the hold was released, or left for the next
		// answer from the workspace to capture.
		r.prepares.WithLabelValues("push_failed").Inc()
		r.holds.WithLabelValues("pending").Inc()
	}
}

// Wait blocks until every prepare this Service started has ended (captured
// or released), or ctx ends. A graceful shutdown calls it after the HTTP
// server has stopped, so a push whose client went away is still charged
// before the process exits.
func (s *Service) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() { s.run.inflight.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
