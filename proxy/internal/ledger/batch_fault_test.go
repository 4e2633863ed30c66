package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/ledger"
	"github.com/hanzoai/lsp/proxy/internal/pgcluster"
)

// Postgres crashes twice (immediate shutdown: crash recovery on the way up) under a load of grouped
// query rows: every row whose caller was told "written" survives, exactly once; every other caller
// was told the ledger is unavailable; afterwards rows are written again without reopening.
func TestGroupCommitSurvivesCrashes(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp("", "ledger-batch-fault")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	c, err := pgcluster.Start(ctx, dir, nil)
	if err != nil {
		if os.Getenv("TEST_DATABASE_URL") != "" {
			t.Skipf("a private server is needed and cannot be started here: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop(context.Background()) })
	if err := c.CreateDatabase(ctx, "ledger"); err != nil {
		t.Fatal(err)
	}
	url := c.URL("ledger")
	l, err := ledger.Open(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	var (
		mu        sync.Mutex
		acked     = map[string]bool{}
		ackCount  atomic.Int64
		failed    atomic.Int64
		afterLast atomic.Int64 // rows acknowledged after the last crash
		crashes   atomic.Int32
		stop      atomic.Bool
		wg        sync.WaitGroup
	)
	for w := range 8 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				q := query(fmt.Sprint("org", w%2), "c1", "")
				q.RequestID = fmt.Sprintf("w%d-%d", w, i)
				err := l.RecordUsage(ctx, q)
				if err != nil {
					if !errors.Is(err, ledger.ErrUnavailable) {
						t.Errorf("a failure during a crash is not ErrUnavailable: %v", err)
						return
					}
					failed.Add(1)
					continue
				}
				mu.Lock()
				acked[q.RequestID] = true
				mu.Unlock()
				ackCount.Add(1)
				if crashes.Load() == 2 && afterLast.Add(1) >= 100 {
					stop.Store(true)
				}
			}
		})
	}
	for range 2 {
		// Let some rows through before each crash.
		for n := ackCount.Load(); ackCount.Load() < n+50 && !t.Failed(); {
			time.Sleep(time.Millisecond)
		}
		if err := c.Restart(ctx, true); err != nil {
			stop.Store(true)
			wg.Wait()
			t.Fatal(err)
		}
		crashes.Add(1)
	}
	wg.Wait()
	if t.Failed() {
		return
	}

	got := rowsByRequest(t, url)
	for id := range acked {
		if got[id] != 1 {
			t.Errorf("acknowledged row %s is there %d times", id, got[id])
		}
	}
	for id, n := range got {
		if n > 1 {
			t.Errorf("row %s is there %d times", id, n)
		}
	}
	t.Logf("%d rows acknowledged, %d callers told unavailable, %d rows stored", len(acked), failed.Load(), len(got))
	checkInvariants(t, url)
}
