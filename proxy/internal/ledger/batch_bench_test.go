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

// BenchmarkUsageRowParts: where one durable usage row's time goes, one writer, one transaction per
// row (the warm path's ledger_row stage, whose floor in make bench is a bare INSERT): a row into a
// table with no index ("bare", the floor), the same row into usage_rows (partition routing, four
// indexes, the shared id sequence), lsp_record_usage with one element (arrays, the holds probe,
// PL/pgSQL: the slow path now, for rows naming a hold not captured), then RecordUsage one
// transaction per call (its one plain statement, arrays and the holds probe) and through the group
// commit (its lane's goroutine and channel hops).
//
//	go test -run '^$' -bench UsageRowParts ./internal/ledger/
func BenchmarkUsageRowParts(b *testing.B) {
	const cols = `payer_org, tenant_key, subject, repo, commit, op, language, http_status, request_id, prepare_id, prepared`
	args := []any{"acme", "tk-acme", "bob", "repo", "c1", "locate", "go", int16(200), "q", "prepare-of-the-workspace", false}
	arr := func(v any) any {
		switch v := v.(type) {
		case string:
			return []string{v}
		case int16:
			return []int32{int32(v)}
		case bool:
			return []bool{v}
		}
		panic(v)
	}
	arrays := make([]any, len(args))
	for i, a := range args {
		arrays[i] = arr(a)
	}
	statements := []struct {
		name, sql string
		args      []any
	}{
		{"bare", `INSERT INTO bench_bare (` + cols + `) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`, args},
		{"usage_rows", `INSERT INTO usage_rows (` + cols + `) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`, args},
		{"lsp_record_usage", `SELECT lsp_record_usage($1, $2, $3, $4, $5, $6, $7, $9, $8, $10, $11)`, arrays},
	}
	for _, s := range statements {
		b.Run(s.name, func(b *testing.B) {
			l, _ := openWith(b, ledger.Options{})
			if _, err := l.Pool().Exec(ctx, `CREATE TABLE bench_bare (LIKE usage_rows INCLUDING DEFAULTS)`); err != nil {
				b.Fatal(err)
			}
			if err := l.EnsureUsagePartitions(ctx); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for b.Loop() {
				if _, err := l.Pool().Exec(ctx, s.sql, s.args...); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	for _, m := range []struct {
		name string
		gc   ledger.GroupCommit
	}{{"RecordUsage-single", ledger.GroupCommit{Disabled: true}}, {"RecordUsage-batched", ledger.GroupCommit{}}} {
		b.Run(m.name, func(b *testing.B) {
			l, _ := openWith(b, ledger.Options{GroupCommit: m.gc})
			q := query("acme", "c1", "prepare-of-the-workspace")
			b.ResetTimer()
			for b.Loop() {
				if err := l.RecordUsage(ctx, q); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
