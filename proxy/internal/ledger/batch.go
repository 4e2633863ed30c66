package ledger

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// GroupCommit configures how RecordQuery rows are committed. Warm queries are the bulk of the
// traffic and each needs its 0¢ row durable before its answer; committing them one transaction each
// makes the ledger, not the language server, the limit (and concurrent rows of one org queue on the
// org's lock, one commit after another). A batcher collects the rows of concurrent callers and
// commits them in one statement and one transaction; every caller waits for its own batch's commit,
// so nothing is answered before its row is durable.
//
// Batches form by themselves under load: rows that arrive while a batch commits make up the next.
// Linger adds a short wait for company, taken only while recent batches had company, so a lone
// caller never waits for nobody.
type GroupCommit struct {
	Disabled   bool          // one transaction per row, as RecordQuery without a batcher
	MaxRows    int           // rows per batch at most (default 256)
	Linger     time.Duration // wait for more rows, while load lasts (default 0: natural batching only)
	Committers int           // batches committing at once (default 2)
}

func (g GroupCommit) withDefaults() GroupCommit {
	if g.MaxRows <= 0 {
		g.MaxRows = 256
	}
	if g.Committers <= 0 {
		g.Committers = 2
	}
	if g.Linger < 0 {
		g.Linger = 0
	}
	return g
}

// batchTimeout bounds one batch's commit; callers are detached from it (a caller that stops waiting
// does not take the other rows of its batch down with it).
const batchTimeout = 15 * time.Second

// queued is one caller's row and where its outcome goes.
type queued struct {
	row  Row
	done chan error // buffered: the committer never blocks on a caller that left
}

type batcher struct {
	l   *Ledger
	cfg GroupCommit
	in  chan *queued

	mu     sync.RWMutex // closed and the close of in
	closed bool
	wg     sync.WaitGroup

	busy sync.Mutex // lastSize
	// lastSize is the size of the latest batch: company recently, so lingering pays.
	lastSize int
}

func newBatcher(l *Ledger, cfg GroupCommit) *batcher {
	b := &batcher{l: l, cfg: cfg, in: make(chan *queued, 4*cfg.MaxRows)}
	for range cfg.Committers {
		b.wg.Add(1)
		go b.run()
	}
	return b
}

// record queues row and waits for the commit of its batch.
func (b *batcher) record(ctx context.Context, row Row) error {
	q := &queued{row: row, done: make(chan error, 1)}
	b.mu.RLock()
	if b.closed {
		b.mu.RUnlock()
		return fmt.Errorf("record query: %w (closed)", ErrUnavailable)
	}
	select {
	case b.in <- q:
		b.mu.RUnlock()
	case <-ctx.Done():
		b.mu.RUnlock()
		return wrap("record query", ctx.Err())
	}
	select {
	case err := <-q.done:
		return err
	case <-ctx.Done():
		// The row may still commit with its batch: never lost, possibly unreported.
		return wrap("record query", ctx.Err())
	}
}

// close stops taking rows, commits those queued and waits for the committers.
func (b *batcher) close() {
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		close(b.in)
	}
	b.mu.Unlock()
	b.wg.Wait()
}

func (b *batcher) run() {
	defer b.wg.Done()
	batch := make([]*queued, 0, b.cfg.MaxRows)
	for {
		first, ok := <-b.in
		if !ok {
			return
		}
		batch = append(batch[:0], first)
		open := b.fill(&batch)
		b.commit(batch)
		if !open {
			return
		}
	}
}

// fill adds whatever is queued, and lingers for more while recent batches had company. It reports
// false when the queue is closed (the batch is still committed).
func (b *batcher) fill(batch *[]*queued) bool {
	for len(*batch) < b.cfg.MaxRows {
		select {
		case q, ok := <-b.in:
			if !ok {
				return false
			}
			*batch = append(*batch, q)
			continue
		default:
		}
		break
	}
	b.busy.Lock()
	linger := b.cfg.Linger > 0 && b.lastSize > 1
	b.busy.Unlock()
	if !linger || len(*batch) >= b.cfg.MaxRows {
		return true
	}
	t := time.NewTimer(b.cfg.Linger)
	defer t.Stop()
	for len(*batch) < b.cfg.MaxRows {
		select {
		case q, ok := <-b.in:
			if !ok {
				return false
			}
			*batch = append(*batch, q)
		case <-t.C:
			return true
		}
	}
	return true
}

// commit writes the batch in one statement and tells each caller. When the database is unreachable
// every caller fails with ErrUnavailable; any other failure (one row the database refuses) is not
// allowed to take the others down: each row is then written on its own.
func (b *batcher) commit(batch []*queued) {
	b.busy.Lock()
	b.lastSize = len(batch)
	b.busy.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	rows := make([]Row, len(batch))
	for i, q := range batch {
		rows[i] = q.row
	}
	err := b.l.recordQueries(ctx, rows)
	if err == nil || errors.Is(err, ErrUnavailable) || len(batch) == 1 {
		for _, q := range batch {
			q.done <- err
		}
		return
	}
	b.l.log.Warn("a batch of query rows failed; writing them one by one", "rows", len(batch), "err", err)
	for _, q := range batch {
		q.done <- b.l.recordQueryDirect(ctx, q.row)
	}
}

// recordQueries writes rows in one statement (lsp_record_queries).
func (l *Ledger) recordQueries(ctx context.Context, rows []Row) error {
	n := len(rows)
	org, tk, subject, repo, commit := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	op, lang, reqID, prepareID := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	status := make([]int32, n)
	for i, r := range rows {
		org[i], tk[i], subject[i], repo[i], commit[i] = r.Org, r.TenantKey, r.Subject, r.Repo, r.Commit
		op[i], lang[i], reqID[i], prepareID[i] = r.Op, r.Language, r.RequestID, r.PrepareID
		status[i] = int32(r.HTTPStatus)
	}
	res, err := l.pool.Query(ctx, `SELECT lsp_record_queries($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
		org, tk, subject, repo, commit, op, lang, reqID, status, prepareID)
	if err != nil {
		return wrap("record query", err)
	}
	defer res.Close()
	for res.Next() {
		var id string
		if err := res.Scan(&id); err != nil {
			return wrap("record query", err)
		}
		for _, r := range rows {
			if r.PrepareID == id {
				l.logRecovered(r)
				break
			}
		}
	}
	if err := res.Err(); err != nil {
		return wrap("record query", err)
	}
	return nil
}

func (l *Ledger) logRecovered(row Row) {
	l.log.Info("captured a prepare revealed by a later answer", "prepare_id", row.PrepareID,
		"tenant", row.TenantKey, "repo", row.Repo, "commit", row.Commit, "request_id", row.RequestID)
}
