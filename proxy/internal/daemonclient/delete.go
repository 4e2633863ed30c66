package daemonclient

import (
	"context"
	"sync"
)

// ShardSet is what DeleteEverywhere needs of the shards: a *Pool, or a
// caller's view of one (operation.Daemons).
type ShardSet interface {
	Pick(k Key) *Shard
	Shards() []*Shard
}

// Deletion is one shard's part in DeleteEverywhere.
type Deletion struct {
	Addr string
	// Own: the key's shard (Pick). Its failure fails the deletion.
	Own bool
	// Asked: the shard was asked. A shard that is down is not (a copy
	// there goes with the daemon's LSP_WORKSPACE_TTL), nor is any other
	// shard once the own shard failed.
	Asked   bool
	Deleted bool  // a workspace existed there and is gone
	Err     error // the shard's failure; best effort unless Own
}

// Deletions are DeleteEverywhere's answers: the own shard first, then the
// others in configuration order.
type Deletions []Deletion

// Deleted reports whether a workspace existed on a shard asked and is gone.
func (ds Deletions) Deleted() bool {
	for _, d := range ds {
		if d.Deleted {
			return true
		}
	}
	return false
}

// DeleteEverywhere deletes k's workspace on its own shard, then on every
// other live shard: one may still hold a copy from before a failover, and
// whoever deletes a workspace means every copy of it. The own shard's
// failure is returned (with nothing else asked); the others' are best
// effort, reported in their Deletion for the caller to log or print.
func DeleteEverywhere(ctx context.Context, shards ShardSet, k Key) (Deletions, error) {
	own := shards.Pick(k)
	all := shards.Shards()
	ds := make(Deletions, 0, len(all))
	gone, err := own.Delete(ctx, k)
	ds = append(ds, Deletion{Addr: own.Addr, Own: true, Asked: true, Deleted: gone, Err: err})
	for _, sh := range all {
		if sh == own {
			continue
		}
		d := Deletion{Addr: sh.Addr}
		if err == nil && sh.Up() {
			d.Asked = true
			d.Deleted, d.Err = sh.Delete(ctx, k)
		}
		ds = append(ds, d)
	}
	return ds, err
}

// CheckAll asks every shard Hello now and records its health, as the
// health checks do. A short-lived pool (lspctl) calls it before Pick:
// until a shard's first check the pool takes it as live, and would pick a
// dead shard where the proxy, which has checked, picks the next live one.
func (p *Pool) CheckAll(ctx context.Context) {
	var wg sync.WaitGroup
	for _, s := range p.shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = s.check(ctx) // a failure marks the shard down
		}()
	}
	wg.Wait()
}
