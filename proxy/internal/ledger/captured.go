package ledger

import "sync"

// capturedKeys bounds the prepares a ledger remembers as captured.
const capturedKeys = 8192

// holdKey is what the holds probe of usageFast matches a row on.
type holdKey struct{ org, tenantKey, repo, commit, prepareID string }

func holdKeyOf(r Row) holdKey {
	return holdKey{r.Org, r.TenantKey, r.Repo, r.Commit, r.PrepareID}
}

// captured remembers the rows' hold keys that no hold waits on any more: a statement saw the hold
// captured (Capture, the recovery of lsp_record_usage), or found no hold of that key that is not
// (usageFast wrote the row). Captured is a hold's last state, and a hold exists from before its
// prepare id is ever sent, so the probe would find nothing for such a key again: a batch whose every
// row has one, or no prepare id, is written without it (usagePlain). A key forgotten (the set is
// bounded, first in first out) only costs the probe again.
type captured struct {
	mu    sync.Mutex
	set   map[holdKey]struct{}
	order []holdKey // insertion order, a ring of capturedKeys
	next  int
}

func newCaptured() *captured { return &captured{set: map[holdKey]struct{}{}} }

// all reports whether no row of rows needs the probe.
func (c *captured) all(rows []Row) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range rows {
		if r.PrepareID == "" {
			continue
		}
		if _, ok := c.set[holdKeyOf(r)]; !ok {
			return false
		}
	}
	return true
}

func (c *captured) add(rows []Row) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range rows {
		k := holdKeyOf(r)
		if _, ok := c.set[k]; ok || r.PrepareID == "" {
			continue
		}
		if len(c.order) < capturedKeys {
			c.order = append(c.order, k)
		} else {
			delete(c.set, c.order[c.next])
			c.order[c.next] = k
			c.next = (c.next + 1) % capturedKeys
		}
		c.set[k] = struct{}{}
	}
}
