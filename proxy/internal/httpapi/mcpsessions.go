package httpapi

import (
	"net/http"
	"sync"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/apierr"
	"github.com/hanzoai/lsp/proxy/internal/ratelimit"
)

// MCP sessions are bounded. Each one holds a server, its tools and a
// goroutine for as long as the SDK keeps it (until DELETE or idle), and
// opening one costs a client nothing: one token with no forge credential
// and no money could open thousands a second. So, before a new session's
// binding is resolved at the forge:
//
//   - its creation takes a token from the principal's bucket
//     (MCPSessionRate per second, bursts of MCPSessionBurst): over it, 429
//     rate_limited with Retry-After;
//   - a principal (owner and subject, whatever org it selects) holds at
//     most MCPSessionsPerPrincipal live sessions: over it, 429
//     rate_limited;
//   - an org (the one a session selects: its tenant and payer) holds at
//     most PerOrg live sessions, whoever opened them: over it, 429
//     rate_limited. Without it one org with many principals (agents,
//     tokens minted per job) could hold the whole proxy's sessions;
//   - the proxy holds at most MCPSessions in total: over it, 503
//     capacity_exhausted.
//
// A slot is freed when the session ends (DELETE, idle timeout, a failed
// initialize), so a client that closes its sessions never meets the bound.

// MCPLimits bound MCP sessions; zero fields take DefaultMCPLimits.
type MCPLimits struct {
	PerPrincipal int           // live sessions per principal
	PerOrg       int           // live sessions per selected org, all its principals together
	Total        int           // live sessions per proxy
	Rate         float64       // new sessions per second per principal
	Burst        int           // new sessions at once per principal
	Idle         time.Duration // a session nobody used for this long is closed
}

// DefaultMCPLimits: a few agents per principal, each reconnecting now and
// then, are far inside them. An org may hold an eighth of the proxy's
// sessions (16 principals at their bound), so it takes at least eight
// orgs to fill a proxy.
func DefaultMCPLimits() MCPLimits {
	return MCPLimits{PerPrincipal: 32, PerOrg: 512, Total: 4096, Rate: 2, Burst: 20, Idle: 30 * time.Minute}
}

func (l MCPLimits) withDefaults() MCPLimits {
	d := DefaultMCPLimits()
	if l.PerPrincipal <= 0 {
		l.PerPrincipal = d.PerPrincipal
	}
	if l.PerOrg <= 0 {
		l.PerOrg = d.PerOrg
	}
	if l.Total <= 0 {
		l.Total = d.Total
	}
	if l.Rate <= 0 {
		l.Rate = d.Rate
	}
	if l.Burst <= 0 {
		l.Burst = d.Burst
	}
	if l.Idle <= 0 {
		l.Idle = d.Idle
	}
	return l
}

// mcpSessions counts live sessions per principal, per org and in total.
type mcpSessions struct {
	lim  MCPLimits
	rate *ratelimit.Limiter

	mu     sync.Mutex
	per    map[string]int // by principalKey
	perOrg map[string]int // by selected org
	total  int
}

func newMCPSessions(l MCPLimits) *mcpSessions {
	l = l.withDefaults()
	return &mcpSessions{lim: l, rate: ratelimit.New(l.Rate, l.Burst), per: map[string]int{}, perOrg: map[string]int{}}
}

// reserve takes a slot for a new session of principal in org, or says why
// not. release gives it back; it is safe to call more than once.
func (m *mcpSessions) reserve(principal, org string) (release func(), err error) {
	if ok, wait := m.rate.Allow(principal); !ok {
		return nil, retryAfter(apierr.New(http.StatusTooManyRequests, apierr.RateLimited, "too many new MCP sessions; retry after the time in Retry-After"), wait)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.per[principal] >= m.lim.PerPrincipal {
		return nil, retryAfter(apierr.New(http.StatusTooManyRequests, apierr.RateLimited, "too many open MCP sessions for this principal; close one (DELETE) or retry later"), defaultRetryAfter)
	}
	if m.perOrg[org] >= m.lim.PerOrg {
		return nil, retryAfter(apierr.New(http.StatusTooManyRequests, apierr.RateLimited, "too many open MCP sessions for this org; close one (DELETE) or retry later"), defaultRetryAfter)
	}
	if m.total >= m.lim.Total {
		return nil, retryAfter(apierr.New(http.StatusServiceUnavailable, apierr.CapacityExhausted, "the proxy holds as many MCP sessions as it may; retry later"), defaultRetryAfter)
	}
	m.per[principal]++
	m.perOrg[org]++
	m.total++
	var once sync.Once
	return func() {
		once.Do(func() {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.total--
			if m.per[principal]--; m.per[principal] <= 0 {
				delete(m.per, principal)
			}
			if m.perOrg[org]--; m.perOrg[org] <= 0 {
				delete(m.perOrg, org)
			}
		})
	}, nil
}

func retryAfter(e *apierr.Error, d time.Duration) *apierr.Error {
	e.RetryAfter = d
	return e
}

// live reports the sessions held, for tests.
func (m *mcpSessions) live() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.total
}
