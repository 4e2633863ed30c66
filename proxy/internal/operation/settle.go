package operation

import (
	"context"
	"time"

	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
	"github.com/hanzoai/lsp/proxy/internal/daemonclient"
	"github.com/hanzoai/lsp/proxy/internal/ledger"
)

// HoldLedger is what settling holds needs of the ledger.
type HoldLedger interface {
	PendingHolds(ctx context.Context, before time.Time, limit int) ([]ledger.PendingHold, error)
	Capture(ctx context.Context, r ledger.Row) (bool, error)
	Release(ctx context.Context, prepareID string) error
}

// settleBatch bounds the holds one SettleHolds call looks at.
const settleBatch = 100

// SettleHolds decides the holds a prepare left unsettled: its push broke
// and the daemon could not be asked (it was down, or still writing at the
// prepare's deadline), so the hold was neither captured nor released
// (CONTRACT §5: never released while the daemon may still publish under
// its id). Once after has passed since the hold (its prepare is over: the
// request's deadline for the fetch, then the prepare's own), every shard is
// asked, not only the key's: the push went to the shard the pool picked
// then, which is another one if its own was down or has come back since,
// and the hold records no shard. A workspace published under the hold's id
// on any shard is captured (the work was done); the hold is released only
// when every shard answered, with no write of the key in flight and another
// id or none. A shard that is down or cannot be asked leaves the hold for
// the next call, or for the first answer naming the id. It returns how many
// it captured and released.
func (s *Service) SettleHolds(ctx context.Context, led HoldLedger, after time.Duration) (captured, released int, err error) {
	holds, err := led.PendingHolds(ctx, time.Now().Add(-after), settleBatch)
	if err != nil {
		return 0, 0, err
	}
	for _, h := range holds {
		if ctx.Err() != nil {
			break
		}
		key := daemonclient.Key{TenantKey: h.TenantKey, Repo: h.Repo, Commit: h.Commit}
		published, asked := s.publishedAnywhere(ctx, key, h.PrepareID)
		switch {
		case published != nil:
			lang := ""
			if l := published.GetLanguages(); len(l) > 0 {
				lang = l[0].GetLanguage()
			}
			done, err := led.Capture(ctx, ledger.Row{
				PrepareID: h.PrepareID, Org: h.Org, TenantKey: h.TenantKey, Subject: h.Subject,
				Repo: h.Repo, Commit: h.Commit, Op: "prepare", Language: lang, RequestID: h.RequestID,
			})
			if err != nil {
				s.log.Warn("settle hold: capture", "prepare_id", h.PrepareID, "err", err)
				continue
			}
			if done {
				captured++
				s.log.Info("settle hold: the daemon had published it; captured", "prepare_id", h.PrepareID, "org", h.Org, "repo", h.Repo)
			}
		case asked:
			if err := led.Release(ctx, h.PrepareID); err != nil {
				s.log.Warn("settle hold: release", "prepare_id", h.PrepareID, "err", err)
				continue
			}
			released++
		}
	}
	return captured, released, nil
}

// publishedAnywhere asks every shard about key until one says it published
// the workspace under prepareID, and returns that shard's capabilities.
// asked is true when every shard answered (none of them down, none with a
// write of the key in flight).
func (s *Service) publishedAnywhere(ctx context.Context, key daemonclient.Key, prepareID string) (published *daemonv1.CapabilitiesResponse, asked bool) {
	asked = true
	for _, sh := range s.daemons.Shards() {
		if !sh.Up() {
			asked = false
			continue
		}
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		caps, ok := s.settledCapabilities(actx, sh, key)
		cancel()
		if !ok {
			asked = false
			continue
		}
		if caps.GetWarm() && caps.GetPrepareId() == prepareID {
			return caps, true
		}
	}
	return nil, asked
}
