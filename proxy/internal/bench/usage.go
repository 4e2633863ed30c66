package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/ledger"
	"github.com/hanzoai/lsp/proxy/internal/pgcluster"
)

// The usage figures (HIP §5): durable usage rows per second at 1, 4 and 16 writers (group commit,
// fsync on), bytes per million usage rows, and reconcile's time over a ledger of ReconcileRows rows
// (a first run from id 0, then an incremental one). They need only Postgres: a cluster of their own.

// DefaultReconcileRows is the size of the reconcile figure's ledger.
const DefaultReconcileRows = 10_000_000

type usageFigures struct {
	writers       []int
	rowsPerSec    []float64
	meanLatency   []time.Duration
	bytesPerMRows float64
	sampleRows    int64
	reconRows     int64
	reconLoad     time.Duration
	reconFull     time.Duration
	reconIncr     time.Duration
	reconIncrRows int64
	reconOK       bool
	problems      []string
}

func runUsage(ctx context.Context, o Options) (*usageFigures, error) {
	c, err := pgcluster.Start(ctx, filepath.Join(o.Dir, "usage-pg"), slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, err
	}
	defer c.Stop(context.WithoutCancel(ctx))
	l, err := ledger.Open(ctx, c.URL("postgres"), nil)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	// The figures are for durable rows: every commit waits for the disk.
	if _, err := l.Pool().Exec(ctx, `ALTER SYSTEM SET fsync = on`); err != nil {
		return nil, err
	}
	if _, err := l.Pool().Exec(ctx, `SELECT pg_reload_conf()`); err != nil {
		return nil, err
	}
	time.Sleep(200 * time.Millisecond)
	f := &usageFigures{writers: []int{1, 4, 16}}
	// A warm workspace: its prepare was captured long ago.
	if err := l.Credit(ctx, "bench0", 100, "bench"); err != nil {
		return nil, err
	}
	tk := "e482f9aa0e9d248b7f6f6197675705f8f4d6724ed6ab2b6256b44c6c3a014ad3"
	commit := "02a2a44ce130835f20e0d6956b5198b08d0aba02"
	if _, err := l.Hold(ctx, ledger.HoldRequest{PrepareID: "98e8b562-1176-43b1-98f5-302b96171ec0", Org: "bench0", TenantKey: tk,
		Repo: "hello", Commit: commit, Price: 2, TTL: time.Hour, Grace: 24 * time.Hour}); err != nil {
		return nil, err
	}
	if _, err := l.Capture(ctx, ledger.Row{PrepareID: "98e8b562-1176-43b1-98f5-302b96171ec0", Org: "bench0"}); err != nil {
		return nil, err
	}
	for _, w := range f.writers {
		var n atomic.Int64
		var lat atomic.Int64
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		var wg sync.WaitGroup
		start := time.Now()
		for i := range w {
			wg.Go(func() {
				row := ledger.Row{PrepareID: "98e8b562-1176-43b1-98f5-302b96171ec0", Org: "bench0", TenantKey: tk, Subject: "agent@bench0",
					Repo: "hello", Commit: commit, Op: "locate", Language: "gopls", HTTPStatus: 200}
				for j := 0; ctx.Err() == nil; j++ {
					row.RequestID = fmt.Sprintf("%012x%012x", i, j)
					t := time.Now()
					if err := l.RecordUsage(context.Background(), row); err != nil {
						return
					}
					lat.Add(int64(time.Since(t)))
					n.Add(1)
				}
			})
		}
		wg.Wait()
		cancel()
		el := time.Since(start)
		f.rowsPerSec = append(f.rowsPerSec, float64(n.Load())/el.Seconds())
		f.meanLatency = append(f.meanLatency, time.Duration(lat.Load()/max(n.Load(), 1)))
	}
	if _, err := l.Pool().Exec(ctx, `ALTER SYSTEM SET fsync = off`); err != nil {
		return nil, err
	}
	if _, err := l.Pool().Exec(ctx, `SELECT pg_reload_conf()`); err != nil {
		return nil, err
	}

	// Bytes: a million rows shaped like the proxy's, with every index, over what the table holds.
	if err := loadUsage(ctx, l, 1_000_000, 1); err != nil {
		return nil, err
	}
	if err := l.Pool().QueryRow(ctx, `SELECT (SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree('usage_rows'))::float8,
		(SELECT count(*) FROM usage_rows)`).Scan(&f.bytesPerMRows, &f.sampleRows); err != nil {
		return nil, err
	}
	f.bytesPerMRows = f.bytesPerMRows / float64(f.sampleRows) * 1e6

	// Reconcile over ReconcileRows rows in all: 9 usage rows for each money row, like a warm service.
	rows := int64(o.ReconcileRows)
	if rows <= 0 {
		rows = DefaultReconcileRows
	}
	t := time.Now()
	if err := loadUsage(ctx, l, rows-f.sampleRows, 10); err != nil {
		return nil, err
	}
	f.reconLoad = time.Since(t)
	t = time.Now()
	r, err := l.ReconcileWith(ctx, ledger.ReconcileOptions{Margin: time.Hour, Settle: time.Nanosecond, Restart: true})
	if err != nil {
		return nil, err
	}
	f.reconFull, f.reconRows, f.reconOK = time.Since(t), r.Rows, r.OK()
	f.problems = r.Problems
	if err := loadUsage(ctx, l, 100_000, 10); err != nil {
		return nil, err
	}
	t = time.Now()
	r, err = l.ReconcileWith(ctx, ledger.ReconcileOptions{Margin: time.Hour, Settle: time.Nanosecond})
	if err != nil {
		return nil, err
	}
	f.reconIncr, f.reconIncrRows = time.Since(t), r.Rows
	f.reconOK = f.reconOK && r.OK()
	f.problems = append(f.problems, r.Problems...)
	return f, nil
}

// loadUsage appends n rows shaped like the proxy's: every moneyEvery-th a charged prepare (with its
// captured hold, account and the request that prepared), the rest warm queries naming a prepare id,
// spread over 1,000 orgs and today's partition. moneyEvery 1 writes usage rows only.
func loadUsage(ctx context.Context, l *ledger.Ledger, n int64, moneyEvery int64) error {
	const chunk = 200_000
	if _, err := l.Pool().Exec(ctx, `INSERT INTO accounts (org, balance_cents) SELECT 'org' || o, 0 FROM generate_series(0, 999) o ON CONFLICT DO NOTHING`); err != nil {
		return err
	}
	var base int64
	if err := l.Pool().QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM ledger_rows`).Scan(&base); err != nil {
		return err
	}
	for done := int64(0); done < n; done += chunk {
		k := min(chunk, n-done)
		money := int64(0)
		if moneyEvery > 1 {
			money = k / moneyEvery
		}
		if money > 0 {
			// Prepares: money row, captured hold, balance kept equal to the sum of rows.
			if _, err := l.Pool().Exec(ctx, `
				WITH r AS (
				    INSERT INTO ledger_rows (kind, model, payer_org, tenant_key, subject, repo, commit, op, language, amount_cents, request_id, prepare_id)
				    SELECT 'lsp', 'prepare', 'org' || (i % 1000), repeat('e4', 32), 'agent@bench', 'repo' || (i % 7), md5(i::text) || '01234567',
				           'hover', 'gopls', 0, md5('r' || i)::text, 'bench-' || $1::text || '-' || i
				      FROM generate_series(1, $2::bigint) i
				    RETURNING id, payer_org, tenant_key, repo, commit, prepare_id)
				INSERT INTO holds (prepare_id, org, tenant_key, repo, commit, amount_cents, reprepare, grace, expires_at, state, ledger_row_id)
				SELECT prepare_id, payer_org, tenant_key, repo, commit, 0, false, interval '24 hours', now() + interval '1 hour', 'captured', id FROM r`,
				fmt.Sprint(base+done), money); err != nil {
				return fmt.Errorf("load money rows: %w", err)
			}
		}
		if _, err := l.Pool().Exec(ctx, `
			INSERT INTO usage_rows (payer_org, tenant_key, subject, repo, commit, op, language, http_status, request_id, prepare_id, prepared)
			SELECT 'org' || (j % 1000), repeat('e4', 32), 'agent@bench', 'repo' || (j % 7), md5(j::text) || '01234567',
			       'locate', 'gopls', 200, substr(md5('q' || i), 1, 24),
			       CASE WHEN $2::bigint > 0 THEN 'bench-' || $1::text || '-' || j END, false
			  FROM generate_series(1, $3::bigint) i,
			       LATERAL (SELECT CASE WHEN $2::bigint > 0 THEN i % $2::bigint + 1 ELSE i END AS j) w`, fmt.Sprint(base+done), money, k-money); err != nil {
			return fmt.Errorf("load usage rows: %w", err)
		}
	}
	_, err := l.Pool().Exec(ctx, `ANALYZE`)
	return err
}

func printUsage(w io.Writer, f *usageFigures) {
	fmt.Fprintf(w, "\nDurable usage rows (group commit, fsync on, no account lock):\n")
	for i, n := range f.writers {
		fmt.Fprintf(w, "  %2d writers: %8.0f rows/s, mean %.3f ms per row\n", n, f.rowsPerSec[i], float64(f.meanLatency[i])/1e6)
	}
	fmt.Fprintf(w, "Bytes per million usage rows (heap and indexes, %d rows measured): %.0f MB (%.0f bytes a row)\n",
		f.sampleRows, f.bytesPerMRows/1e6, f.bytesPerMRows/1e6)
	verdict := "clean"
	if !f.reconOK {
		verdict = "PROBLEMS"
	}
	fmt.Fprintf(w, "Reconcile over %d rows (loaded in %v): first run %v; incremental run over %d new rows %v; %s\n",
		f.reconRows, f.reconLoad.Round(time.Second), f.reconFull.Round(time.Millisecond), f.reconIncrRows, f.reconIncr.Round(time.Millisecond), verdict)
	for i, p := range f.problems {
		if i == 5 {
			break
		}
		fmt.Fprintf(w, "  %s\n", p)
	}
}
