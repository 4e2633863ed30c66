package ledger_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/ledger"
)

// BenchmarkGroupCommit: durable query rows per second, one transaction per row ("single") against
// group commit (the default, and variants: one lane for all orgs, the array statement for every
// batch, lingering), with 1, 4 and 16 concurrent writers, all of one org (they queue on its lock) or
// each of its own. Every writer waits for its row's commit, as a request does.
//
//	go test -run '^$' -bench GroupCommit ./internal/ledger/
func BenchmarkGroupCommit(b *testing.B) {
	modes := []struct {
		name string
		gc   ledger.GroupCommit
	}{
		{"single", ledger.GroupCommit{Disabled: true}},
		{"batched", ledger.GroupCommit{}},
		{"batched-1lane", ledger.GroupCommit{Lanes: 1}},
		{"batched-linger200us", ledger.GroupCommit{Linger: 200 * time.Microsecond}},
	}
	for _, orgs := range []string{"one-org", "org-per-writer"} {
		for _, writers := range []int{1, 4, 16} {
			for _, m := range modes {
				b.Run(fmt.Sprintf("%s/writers=%d/%s", orgs, writers, m.name), func(b *testing.B) {
					l, _ := openWith(b, ledger.Options{GroupCommit: m.gc})
					var next atomic.Int64
					b.ResetTimer()
					var wg sync.WaitGroup
					for w := range writers {
						org := "acme"
						if orgs == "org-per-writer" {
							org = fmt.Sprint("org", w)
						}
						wg.Go(func() {
							q := query(org, "c1", "prepare-of-the-workspace")
							for next.Add(1) <= int64(b.N) {
								if err := l.RecordUsage(ctx, q); err != nil {
									b.Error(err)
									return
								}
							}
						})
					}
					wg.Wait()
					b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rows/s")
				})
			}
		}
	}
}
