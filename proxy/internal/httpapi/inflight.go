package httpapi

import (
	"net/http"
	"sync"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/apierr"
)

// orgSlots bounds the operation requests one org has in flight on this
// proxy (LSP_MAX_INFLIGHT_PER_ORG): the rate bucket bounds how fast an org
// starts them, not how many it holds — at 20/s, answers that wait a minute
// each (cold prepares, a loading server) would hold 1,200 connections and
// daemon calls, most of the proxy's. Over the bound the request is 429
// rate_limited, before the forge or the daemon is asked.
type orgSlots struct {
	limit int // 0: no bound
	mu    sync.Mutex
	n     map[string]int
}

func newOrgSlots(limit int) *orgSlots { return &orgSlots{limit: limit, n: map[string]int{}} }

// take holds one of org's slots until the returned release is called.
func (o *orgSlots) take(org string) (release func(), err error) {
	if o == nil || o.limit <= 0 {
		return func() {}, nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.n[org] >= o.limit {
		e := apierr.New(http.StatusTooManyRequests, apierr.RateLimited, "too many requests of this org in flight; retry after the time in Retry-After")
		e.RetryAfter = time.Second
		return nil, e
	}
	o.n[org]++
	var once sync.Once
	return func() {
		once.Do(func() {
			o.mu.Lock()
			if o.n[org]--; o.n[org] == 0 {
				delete(o.n, org)
			}
			o.mu.Unlock()
		})
	}, nil
}
