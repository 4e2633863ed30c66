package bench

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/app"
	"github.com/hanzoai/lsp/proxy/internal/devstack"
	"github.com/hanzoai/lsp/proxy/internal/ledger"
	"github.com/hanzoai/lsp/proxy/internal/operation"
)

// noLedger writes nothing: the baseline of "what does the ledger cost".
// It exists only in the bench.
type noLedger struct{}

func (noLedger) Hold(_ context.Context, h ledger.HoldRequest) (int64, error) { return h.Price, nil }
func (noLedger) Capture(context.Context, ledger.Row) (bool, error)           { return true, nil }
func (noLedger) Release(context.Context, string) error                       { return nil }
func (noLedger) EndGrace(context.Context, string, string, string) error      { return nil }
func (noLedger) RecordUsage(context.Context, ledger.Row) error               { return nil }

// ledgerFigures compares warm throughput through a replica writing real,
// durable rows with one writing none, same daemon and workspace, 4 clients.
type ledgerFigures struct {
	real, none float64 // queries (and, for real, rows) per second
}

func runLedger(ctx context.Context, o Options, s *devstack.Stack, c *proxyClient) (*ledgerFigures, error) {
	r, err := s.StartReplicaWith(ctx, map[string]string{}, app.Options{
		WrapLedger: func(operation.Ledger) operation.Ledger { return noLedger{} },
	})
	if err != nil {
		return nil, err
	}
	defer r.Stop()
	none := *c
	none.url = r.URL
	def := func(pc *proxyClient) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := pc.do(ctx, "/locate", hoverBody)
			return err
		}
	}
	// Both replicas warm (the no-op one has just started: its token,
	// access and connection caches are empty).
	for i := 0; i < max(o.Warmup, 50); i++ {
		_ = def(c)(ctx)
		_ = def(&none)(ctx)
	}
	f := &ledgerFigures{}
	// Alternate, so that load on the machine hits both alike.
	for i := 0; i < 3; i++ {
		settle(ctx, "the real ledger")
		stop := o.measured(fmt.Sprintf("ledger-real-%d", i), time.Second)
		f.real += throughput(ctx, 4, time.Second, def(c)) / 3
		stop()
		settle(ctx, "the no-op ledger")
		f.none += throughput(ctx, 4, time.Second, def(&none)) / 3
	}
	return f, nil
}

// ledgerTarget is BASELINES.md's target for the real ledger against a
// no-op one (the ledger's own issue had asked 95 %; issue 19 and the
// baselines say 90).
const ledgerTarget = 0.90

func printLedger(w io.Writer, f *ledgerFigures) {
	verdict := "met"
	if f.real < ledgerTarget*f.none {
		verdict = "MISSED"
	}
	fmt.Fprintf(w, "\nWarm queries/s with the real ledger vs. a no-op ledger, 4 clients, definition: %.0f/s (%.0f durable rows/s) vs %.0f/s, ratio %.0f %% (target ≥ %.0f %%) %s\n",
		f.real, f.real, f.none, 100*f.real/f.none, 100*ledgerTarget, verdict)
}
