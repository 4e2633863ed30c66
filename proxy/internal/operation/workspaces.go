package operation

import (
	"context"
	"time"

	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
	"github.com/hanzoai/lsp/proxy/internal/daemonclient"
	"github.com/hanzoai/lsp/proxy/internal/forge"
)

// Probe is the answer of the free "will this cost me?" probe.
type Probe struct {
	Repo, Commit string
	// Warm says the revision is prepared on its shard: operations on it
	// need no prepare and cost nothing.
	Warm bool
	// Languages are the servers that serve (or would serve) the revision
	// and the tools they negotiated.
	Languages []*daemonv1.LanguageTools
}

// Capabilities resolves rev as the caller (the forge's ACL decides, as on
// every request) and asks the revision's shard whether it is prepared and
// what its servers negotiated. It never prepares, never holds funds and
// writes no row.
func (s *Service) Capabilities(ctx context.Context, c Caller, repo string, rev forge.Rev) (*Probe, error) {
	ctx = daemonclient.WithRequestID(ctx, c.RequestID)
	p := &Probe{Repo: repo}
	commit, err := s.Resolve(ctx, c, repo, rev)
	if err != nil {
		return p, err
	}
	p.Commit = commit
	key := daemonclient.Key{TenantKey: c.TenantKey, Repo: repo, Commit: commit}
	caps, err := s.probe(ctx, key)
	if err != nil {
		return p, err
	}
	p.Warm, p.Languages = caps.GetWarm(), caps.GetLanguages()
	return p, nil
}

func (s *Service) probe(ctx context.Context, key daemonclient.Key) (*daemonv1.CapabilitiesResponse, error) {
	caps, err := s.daemons.Pick(key).Capabilities(ctx, key)
	return caps, daemonError(err)
}

// Deleted is the answer of a workspace deletion.
type Deleted struct {
	Repo, Commit string
	Deleted      bool // a workspace existed and is gone
}

// DeleteWorkspace resolves rev as the caller, then deletes the tenant's
// workspace of that commit on its shard now. Other live shards are asked
// too: one may still hold a copy from before a failover, and a tenant who
// deletes a workspace means every copy of it. A failure of the key's own
// shard fails the request; the others are best effort (a copy on a shard
// that is down goes with LSP_WORKSPACE_TTL). Nothing is charged and no row
// is written; the revision's re-prepare grace ends.
func (s *Service) DeleteWorkspace(ctx context.Context, c Caller, repo string, rev forge.Rev) (*Deleted, error) {
	ctx = daemonclient.WithRequestID(ctx, c.RequestID)
	d := &Deleted{Repo: repo}
	commit, err := s.Resolve(ctx, c, repo, rev)
	if err != nil {
		return d, err
	}
	d.Commit = commit
	// The tenant's own deletion ends the revision's re-prepare grace: its
	// next prepare is charged (CONTRACT §5). Otherwise one charge would buy
	// unlimited delete-and-prepare cycles. Ended first: a prepare that met
	// the workspace gone while the deletion still asked the other shards
	// was a free re-prepare.
	gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := s.ledger.EndGrace(gctx, c.Org, repo, commit); err != nil {
		return d, ledgerError(err)
	}
	key := daemonclient.Key{TenantKey: c.TenantKey, Repo: repo, Commit: commit}
	ds, err := daemonclient.DeleteEverywhere(ctx, s.daemons, key)
	if err != nil {
		return d, daemonError(err)
	}
	for _, sd := range ds {
		if sd.Err != nil {
			s.log.Warn("delete a workspace copy", "shard", sd.Addr, "request_id", c.RequestID, "err", sd.Err)
		}
	}
	d.Deleted = ds.Deleted()
	return d, nil
}
