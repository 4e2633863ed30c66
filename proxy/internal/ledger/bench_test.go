package ledger_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/hanzoai/lsp/proxy/internal/ledger"
)

// In production an org has only its in-flight prepares live, so the benchmarks keep live holds few by
// releasing them in bulk with the timer stopped.
const liveHoldsBound = 8

func releaseAll(b *testing.B, l *ledger.Ledger) {
	b.StopTimer()
	if _, err := l.Pool().Exec(ctx, "UPDATE holds SET state = 'released' WHERE state = 'live'"); err != nil {
		b.Fatal(err)
	}
	b.StartTimer()
}

// BenchmarkHold: one hold, one statement (baseline: 128–142 µs with fsync off).
func BenchmarkHold(b *testing.B) {
	l, _ := open(b)
	if err := l.Credit(ctx, "acme", 1<<40, "bench"); err != nil {
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		if _, err := l.Hold(ctx, hold(fmt.Sprint("p", i), "acme", fmt.Sprint("c", i))); err != nil {
			b.Fatal(err)
		}
		if i++; i%liveHoldsBound == 0 {
			releaseAll(b, l)
		}
	}
}

// BenchmarkPrepareCharge: hold then capture, the ledger's share of a cold prepare.
func BenchmarkPrepareCharge(b *testing.B) {
	l, _ := open(b)
	if err := l.Credit(ctx, "acme", 1<<40, "bench"); err != nil {
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		id, commit := fmt.Sprint("p", i), fmt.Sprint("c", i)
		i++
		if _, err := l.Hold(ctx, hold(id, "acme", commit)); err != nil {
			b.Fatal(err)
		}
		if _, err := l.Capture(ctx, capture(id, "acme", commit)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRecordQuery: the durable row of a warm query (baseline: one row per transaction,
// 87–107 µs with fsync off).
func BenchmarkRecordUsage(b *testing.B) {
	l, _ := open(b)
	q := query("acme", "c1", "prepare-of-the-workspace")
	for b.Loop() {
		if err := l.RecordUsage(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRecordQueryParallel: concurrent warm queries of one org (they serialise on the org's
// account row) and of distinct orgs (they do not).
func BenchmarkRecordQueryParallel(b *testing.B) {
	for _, orgs := range []int{1, 64} {
		b.Run(fmt.Sprintf("orgs=%d", orgs), func(b *testing.B) {
			l, _ := open(b)
			var n atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				q := query(fmt.Sprint("org", n.Add(1)%int64(orgs)), "c1", "")
				for pb.Next() {
					if err := l.RecordUsage(ctx, q); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkBaselineInsertRow is the floor the ledger benchmarks compare to in the same run: one plain
// row inserted per transaction, one round trip, no function, no lock.
func BenchmarkBaselineInsertRow(b *testing.B) {
	l, _ := open(b)
	if _, err := l.Pool().Exec(ctx, "CREATE TABLE bench_rows (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, org text, v text)"); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := l.Pool().Exec(ctx, "INSERT INTO bench_rows (org, v) VALUES ($1, $2)", "acme", "x"); err != nil {
			b.Fatal(err)
		}
	}
}
