package rpc

import (
	"context"
	"sync"
)

// slots bound the Prepare calls handled at once: total in all, and
// perTenant for one tenant, so that one org pushing through many proxy
// replicas cannot hold every slot while the others wait.
type slots struct {
	total, perTenant int

	mu       sync.Mutex
	used     int
	byTenant map[string]int
	freed    chan struct{} // closed, and made again, when a slot is released
}

func newSlots(total int) *slots {
	return &slots{total: total, perTenant: max(1, total/4), byTenant: map[string]int{}, freed: make(chan struct{})}
}

// acquire waits for a slot tenant may take ("" when unknown: the total
// alone binds it), until ctx ends.
func (s *slots) acquire(ctx context.Context, tenant string) (release func(), err error) {
	for {
		s.mu.Lock()
		if s.used < s.total && (tenant == "" || s.byTenant[tenant] < s.perTenant) {
			s.used++
			if tenant != "" {
				s.byTenant[tenant]++
			}
			s.mu.Unlock()
			return func() { s.release(tenant) }, nil
		}
		freed := s.freed
		s.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (s *slots) release(tenant string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.used--
	if tenant != "" {
		if s.byTenant[tenant]--; s.byTenant[tenant] == 0 {
			delete(s.byTenant, tenant)
		}
	}
	close(s.freed)
	s.freed = make(chan struct{})
}
