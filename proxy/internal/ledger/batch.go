package ledger

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// GroupCommit configures how RecordQuery rows are committed. Warm queries are the bulk of the
// traffic and each needs its 0¢ row durable before its answer; committing them one transaction each
// makes the ledger, not the language server, the limit (and concurrent rows of one org queue on the
// org's lock, one commit after another). Group commit writes the rows of concurrent callers in one
// statement and one transaction; every caller waits for its own batch's commit, so nothing is
// answered before its row is durable.
//
// Rows queue in lanes chosen by org, so rows that would wait for each other on an account lock meet
// in one lane, and orgs in different lanes commit in parallel. There is no committer goroutine: a
// caller that finds no batch of its lane in flight leads, committing the rows queued so far (its own
// among them) in its own goroutine; callers arriving meanwhile queue behind it, and when its batch is
// done it hands the lead to the first of them, whose batch takes everything queued by then. A lone
// caller thus commits its own row at once, and under load batches grow by themselves to what arrives
// during one commit. A batch of one is the single-row statement; a few rows go as single-row
// statements in one round trip and one transaction; more as one array statement
// (lsp_record_queries). Linger adds a short wait for company before a batch is taken, only while
// recent batches had company.
type GroupCommit struct {
	Disabled   bool          // one transaction per row, as RecordQuery without group commit
	MaxRows    int           // rows per batch at most (default 256)
	Linger     time.Duration // wait for more rows while load lasts (default 0: batches form by themselves)
	Lanes      int           // queues, by org (default 8); each commits its own batches
	Committers int           // batches in flight at once per lane (default 1)
	// PipelineMax: batches up to this size are sent as single-row statements in one round trip and
	// one transaction; larger ones as one array statement, whose fixed cost pays off only then
	// (default 4; 1 always uses the array statement).
	PipelineMax int
}

func (g GroupCommit) withDefaults() GroupCommit {
	if g.MaxRows <= 0 {
		g.MaxRows = 256
	}
	if g.Lanes <= 0 {
		g.Lanes = 8
	}
	if g.Committers <= 0 {
		g.Committers = 1
	}
	if g.PipelineMax <= 0 {
		g.PipelineMax = 4
	}
	if g.Linger < 0 {
		g.Linger = 0
	}
	return g
}

// batchTimeout bounds one batch's commit. A batch runs detached from its callers' contexts: a caller
// that stops waiting does not take the other rows of its batch down with it.
const batchTimeout = 15 * time.Second

// errLead is what a queued caller receives when the lead passes to it.
var errLead = errors.New("lead the next batch")

// queued is one caller's row and where its outcome goes.
type queued struct {
	row  Row
	id   int64      // the row's id, set before its outcome is sent on done
	done chan error // errLead (at most once), then the outcome: buffered for both, nobody blocks
	// Under batcher.mu:
	leads bool // this caller leads, or the lead was handed to it
	taken bool // the row is in a batch
}

// batcher spreads rows over lanes by org. Rows of one org always meet in one lane, where they would
// otherwise queue on the org's account lock one commit after another; rows of orgs in different lanes
// commit in parallel, as they would without group commit.
type batcher struct {
	lanes []*lane
}

func newBatcher(l *Ledger, cfg GroupCommit) *batcher {
	b := &batcher{lanes: make([]*lane, cfg.Lanes)}
	for i := range b.lanes {
		b.lanes[i] = newLane(l, cfg)
	}
	return b
}

func (b *batcher) record(ctx context.Context, row Row) (int64, error) {
	h := fnv.New32a()
	h.Write([]byte(row.Org))
	return b.lanes[h.Sum32()%uint32(len(b.lanes))].record(ctx, row)
}

// close stops taking rows and waits until every queued row is committed.
func (b *batcher) close() {
	for _, l := range b.lanes {
		l.close()
	}
}

// lane is one group committer: a queue of rows and the callers leading its batches.
type lane struct {
	l   *Ledger
	cfg GroupCommit

	mu       sync.Mutex
	queue    []*queued
	leaders  int  // batches in flight, or about to be
	lastSize int  // rows in the latest batch: company recently, so lingering pays
	closed   bool // no more rows
	more     chan struct{}
	idle     sync.Cond // signalled when leaders drops to 0, for close
}

func newLane(l *Ledger, cfg GroupCommit) *lane {
	b := &lane{l: l, cfg: cfg, more: make(chan struct{}, 1)}
	b.idle.L = &b.mu
	return b
}

// record queues row and waits until its batch has committed, leading a batch when it is its turn.
func (b *lane) record(ctx context.Context, row Row) (int64, error) {
	q := &queued{row: row, done: make(chan error, 2)}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return 0, fmt.Errorf("record query: %w (closed)", ErrUnavailable)
	}
	b.queue = append(b.queue, q)
	lead := b.leaders < b.cfg.Committers
	if lead {
		b.leaders++
		q.leads = true
	}
	b.mu.Unlock()
	select {
	case b.more <- struct{}{}:
	default:
	}
	if lead {
		b.lead(q)
	}
	for {
		select {
		case err := <-q.done:
			if err != errLead {
				if err != nil {
					return 0, err
				}
				return q.id, nil
			}
			b.lead(q)
		case <-ctx.Done():
			// The row stays queued and will be committed (never lost, possibly unreported); the lead,
			// should it come to this caller, is still taken.
			go b.follow(q)
			return 0, wrap("record query", ctx.Err())
		}
	}
}

// follow waits in place of a caller that left.
func (b *lane) follow(q *queued) {
	for err := range q.done {
		if err != errLead {
			return
		}
		b.lead(q)
	}
}

// lead commits batches from the head of the queue until q's row is in one (this or another leader's),
// then hands the lead to the first queued caller not leading yet, or gives it up.
func (b *lane) lead(q *queued) {
	for {
		b.commit(b.take())
		b.mu.Lock()
		if !q.taken && len(b.queue) > 0 {
			b.mu.Unlock()
			continue
		}
		for _, next := range b.queue {
			if !next.leads {
				next.leads = true
				b.mu.Unlock()
				next.done <- errLead
				return
			}
		}
		b.leaders--
		if b.leaders == 0 {
			b.idle.Broadcast()
		}
		b.mu.Unlock()
		return
	}
}

// take removes the next batch from the head of the queue, lingering first for company while recent
// batches had some.
func (b *lane) take() []*queued {
	b.mu.Lock()
	linger := b.cfg.Linger > 0 && b.lastSize > 1 && len(b.queue) < b.cfg.MaxRows && !b.closed
	b.mu.Unlock()
	if linger {
		t := time.NewTimer(b.cfg.Linger)
	wait:
		for {
			select {
			case <-t.C:
				break wait
			case <-b.more:
				b.mu.Lock()
				full := len(b.queue) >= b.cfg.MaxRows
				b.mu.Unlock()
				if full {
					t.Stop()
					break wait
				}
			}
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	n := min(len(b.queue), b.cfg.MaxRows)
	batch := make([]*queued, n)
	copy(batch, b.queue)
	for _, x := range batch {
		x.taken = true
	}
	b.queue = append(b.queue[:0:0], b.queue[n:]...)
	b.lastSize = n
	return batch
}

// close stops taking rows and waits until every queued row is committed.
func (b *lane) close() {
	b.mu.Lock()
	b.closed = true
	for b.leaders > 0 {
		b.idle.Wait()
	}
	b.mu.Unlock()
}

// commit writes the batch in one statement and tells each caller. When the database is unreachable
// every caller fails with ErrUnavailable; any other failure (one row the database refuses) is not
// allowed to take the others down: each row is then written on its own.
func (b *lane) commit(batch []*queued) {
	if len(batch) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	rows := make([]Row, len(batch))
	for i, q := range batch {
		rows[i] = q.row
	}
	var err error
	var ids []int64
	switch {
	case len(rows) == 1:
		ids = make([]int64, 1)
		ids[0], err = b.l.recordQueryDirect(ctx, rows[0])
	case len(rows) <= b.cfg.PipelineMax:
		ids, err = b.l.recordPipelined(ctx, rows)
	default:
		ids, err = b.l.recordQueries(ctx, rows)
	}
	if err == nil || errors.Is(err, ErrUnavailable) || len(batch) == 1 {
		for i, q := range batch {
			if err == nil {
				q.id = ids[i]
			}
			q.done <- err
		}
		return
	}
	b.l.log.Warn("a batch of query rows failed; writing them one by one", "rows", len(batch), "err", err)
	for _, q := range batch {
		var err error
		q.id, err = b.l.recordQueryDirect(ctx, q.row)
		q.done <- err
	}
}

// recordPipelined writes a few rows as single-row statements sent together: one round trip and one
// implicit transaction, so one commit. Rows go in org order, the lock order of every batch. It returns
// the rows' ids in the order of rows.
func (l *Ledger) recordPipelined(ctx context.Context, rows []Row) ([]int64, error) {
	order := make([]int, len(rows))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(rows[a].Org, rows[b].Org) })
	batch := &pgx.Batch{}
	for _, i := range order {
		r := rows[i]
		batch.Queue(`SELECT o_id, o_recovered FROM lsp_record_query_id($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
			r.Org, r.TenantKey, r.Subject, r.Repo, r.Commit, r.Op, r.Language, r.RequestID, r.HTTPStatus, r.PrepareID)
	}
	res := l.pool.SendBatch(ctx, batch)
	ids := make([]int64, len(rows))
	for _, i := range order {
		var recovered bool
		if err := res.QueryRow().Scan(&ids[i], &recovered); err != nil {
			res.Close()
			return nil, wrap("record query", err)
		}
		if recovered {
			l.logRecovered(rows[i])
		}
	}
	if err := res.Close(); err != nil {
		return nil, wrap("record query", err)
	}
	return ids, nil
}

// recordQueries writes rows in one statement (lsp_record_queries_ids) and returns their ids in the
// order of rows.
func (l *Ledger) recordQueries(ctx context.Context, rows []Row) ([]int64, error) {
	n := len(rows)
	org, tk, subject, repo, commit := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	op, lang, reqID, prepareID := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	status := make([]int32, n)
	for i, r := range rows {
		org[i], tk[i], subject[i], repo[i], commit[i] = r.Org, r.TenantKey, r.Subject, r.Repo, r.Commit
		op[i], lang[i], reqID[i], prepareID[i] = r.Op, r.Language, r.RequestID, r.PrepareID
		status[i] = int32(r.HTTPStatus)
	}
	res, err := l.pool.Query(ctx, `SELECT o_ord, o_id, o_recovered FROM lsp_record_queries_ids($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
		org, tk, subject, repo, commit, op, lang, reqID, status, prepareID)
	if err != nil {
		return nil, wrap("record query", err)
	}
	defer res.Close()
	ids := make([]int64, n)
	got := 0
	for res.Next() {
		var ord *int32
		var id *int64
		var recovered *string
		if err := res.Scan(&ord, &id, &recovered); err != nil {
			return nil, wrap("record query", err)
		}
		if recovered != nil {
			for _, r := range rows {
				if r.PrepareID == *recovered {
					l.logRecovered(r)
					break
				}
			}
			continue
		}
		if ord == nil || id == nil || *ord < 1 || int(*ord) > n {
			return nil, errors.New("record query: lsp_record_queries_ids returned a malformed row")
		}
		ids[*ord-1] = *id
		got++
	}
	if err := res.Err(); err != nil {
		return nil, wrap("record query", err)
	}
	if got != n {
		return nil, fmt.Errorf("record query: %d ids for %d rows", got, n)
	}
	return ids, nil
}

func (l *Ledger) logRecovered(row Row) {
	l.log.Info("captured a prepare revealed by a later answer", "prepare_id", row.PrepareID,
		"tenant", row.TenantKey, "repo", row.Repo, "commit", row.Commit, "request_id", row.RequestID)
}
