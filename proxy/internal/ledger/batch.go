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

	"github.com/jackc/pgx/v5/pgconn"
)

// GroupCommit configures how usage rows (RecordUsage) are committed. Every request that reached the
// daemon needs its usage row durable before its answer; committing them one transaction each makes
// the ledger, not the language server, the limit. Group commit writes the rows of concurrent callers
// in one statement and one transaction; every caller waits for its own batch's commit, so nothing is
// answered before its row is durable. Usage rows take no account lock, so batches of any orgs commit
// side by side.
//
// Rows queue in lanes chosen by org, and lanes commit in parallel. There is no committer goroutine: a
// caller that finds no batch of its lane in flight leads, committing the rows queued so far (its own
// among them) in its own goroutine; callers arriving meanwhile queue behind it, and when its batch is
// done it hands the lead to the first of them, whose batch takes everything queued by then. A lone
// caller thus commits its own row at once, and under load batches grow by themselves to what arrives
// during one commit. Every batch is one array statement (lsp_record_usage). Linger adds a short wait
// for company before a batch is taken, only while recent batches had company.
type GroupCommit struct {
	Disabled   bool          // one transaction per row
	MaxRows    int           // rows per batch at most (default 256)
	Linger     time.Duration // wait for more rows while load lasts (default 0: batches form by themselves)
	Lanes      int           // queues, by org (default 8); each commits its own batches
	Committers int           // batches in flight at once per lane (default 1)
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

func (b *batcher) record(ctx context.Context, row Row) error {
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
func (b *lane) record(ctx context.Context, row Row) error {
	q := &queued{row: row, done: make(chan error, 2)}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return fmt.Errorf("record usage: %w (closed)", ErrUnavailable)
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
				return err
			}
			b.lead(q)
		case <-ctx.Done():
			b.mu.Lock()
			if !q.taken {
				// Not in a batch yet: withdrawn. The caller is told the ledger failed, and a row
				// written later would say it was answered (CONTRACT §5: a row records the outcome
				// the caller got). A lead handed to it passes on.
				b.queue = slices.DeleteFunc(b.queue, func(x *queued) bool { return x == q })
				var next *queued
				if q.leads {
					next = b.passLead()
				}
				b.mu.Unlock()
				if next != nil {
					next.done <- errLead
				}
				return wrap("record usage", ctx.Err())
			}
			b.mu.Unlock()
			// In a batch already, which runs to batchTimeout: its commit decides what the
			// caller is told, so that the row and the answer agree.
			for err := range q.done {
				if err != errLead {
					return err
				}
				b.lead(q)
			}
		}
	}
}

// passLead hands the lead to the first queued caller not leading yet, which the caller then tells
// (errLead), or gives it up when there is none. b.mu is held.
func (b *lane) passLead() (next *queued) {
	for _, n := range b.queue {
		if !n.leads {
			n.leads = true
			return n
		}
	}
	b.leaders--
	if b.leaders == 0 {
		b.idle.Broadcast()
	}
	return nil
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
		next := b.passLead()
		b.mu.Unlock()
		if next != nil {
			next.done <- errLead
		}
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
	err := b.l.recordUsage(ctx, rows)
	if err == nil || errors.Is(err, ErrUnavailable) || len(batch) == 1 {
		for _, q := range batch {
			q.done <- err
		}
		return
	}
	b.l.log.Warn("a batch of usage rows failed; writing them one by one", "rows", len(batch), "err", err)
	for _, q := range batch {
		q.done <- b.l.recordUsage(ctx, []Row{q.row})
	}
}

// recordUsage writes the rows with one statement, so in one transaction and one commit. Warm
// rows name a prepare captured long ago, so the first statement (usageFast) writes them all unless
// one names a hold not yet captured, and then writes none; only then does lsp_record_usage run,
// which captures that hold into its prepare row first, under its account lock, and writes the rows
// (no usage row ever names a prepare id without its money row). The function cost ~40 µs a row
// more than the plain statement, which does the same probe and insert without PL/pgSQL: a sixth of
// the row (BenchmarkUsageRowParts). A row whose day has no partition yet (the housekeeping that
// makes them ahead did not run) makes the partitions and is written again.
func (l *Ledger) recordUsage(ctx context.Context, rows []Row) error {
	n := len(rows)
	var stmt string
	var args []any
	switch known := l.captured.all(rows); {
	case known && n == 1:
		r := rows[0]
		stmt, args = usageOne, []any{r.Org, r.TenantKey, r.Subject, r.Repo, r.Commit, r.Op, r.Language, r.RequestID, int32(r.HTTPStatus), r.PrepareID, r.Prepared}
	case known:
		stmt, args = usagePlain, usageArrays(rows)
	default:
		stmt, args = usageFast, usageArrays(rows)
	}
	tag, err := l.withPartitions(ctx, func() (pgconn.CommandTag, error) { return l.pool.Exec(ctx, stmt, args...) })
	if err != nil {
		return wrap("record usage", err)
	}
	if tag.RowsAffected() == int64(n) {
		l.captured.add(rows)
		return nil
	}
	// Only the probing statement writes fewer rows than it was given.
	args = usageArrays(rows)
	var recovered []string
	if _, err := l.withPartitions(ctx, func() (pgconn.CommandTag, error) {
		recovered = recovered[:0]
		res, err := l.pool.Query(ctx, `SELECT lsp_record_usage($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`, args...)
		if err != nil {
			return pgconn.CommandTag{}, err
		}
		defer res.Close()
		for res.Next() {
			var id string
			if err := res.Scan(&id); err != nil {
				return pgconn.CommandTag{}, err
			}
			recovered = append(recovered, id)
		}
		res.Close()
		return res.CommandTag(), res.Err()
	}); err != nil {
		return wrap("record usage", err)
	}
	l.captured.add(rows)
	for _, id := range recovered {
		for _, r := range rows {
			if r.PrepareID == id {
				l.logRecovered(r)
				break
			}
		}
	}
	return nil
}

// usageRows are lsp_record_usage's arrays ($1…$11, its parameters' order) as rows; usageInsert
// writes them into usage_rows.
const (
	usageRows = `
WITH q AS (
  SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
                       $8::text[], $9::integer[], $10::text[], $11::boolean[])
           AS q(org, tenant_key, subject, repo, commit, op, language, request_id, http_status, prepare_id, prepared)
)`
	usageInsert = `
INSERT INTO usage_rows (payer_org, tenant_key, subject, repo, commit, op, language, http_status,
                        request_id, prepare_id, prepared)
SELECT q.org, nullif(q.tenant_key, ''), nullif(q.subject, ''), nullif(q.repo, ''), nullif(q.commit, ''),
       nullif(q.op, ''), nullif(q.language, ''), nullif(q.http_status, 0), nullif(q.request_id, ''),
       nullif(q.prepare_id, ''), q.prepared
  FROM q`
)

// usageFast writes every row when none names a hold that is not captured (the function's own
// probe), and none otherwise. usagePlain writes them without the probe, for rows whose holds are
// known captured (Ledger.captured), and usageOne a lone such row without arrays: a quarter of a
// row's time less than usageFast, about 40 µs (BenchmarkUsageRowParts, HIP §5).
const (
	usageFast = usageRows + `, pending AS (
  SELECT 1 FROM holds x
    JOIN q ON q.prepare_id = x.prepare_id AND q.org = x.org AND q.tenant_key = x.tenant_key
          AND q.repo = x.repo AND q.commit = x.commit
   WHERE x.state <> 'captured'
   LIMIT 1
)` + usageInsert + `
 WHERE NOT EXISTS (SELECT 1 FROM pending)`
	usagePlain = usageRows + usageInsert
	usageOne   = `
INSERT INTO usage_rows (payer_org, tenant_key, subject, repo, commit, op, language, http_status,
                        request_id, prepare_id, prepared)
VALUES ($1, nullif($2, ''), nullif($3, ''), nullif($4, ''), nullif($5, ''), nullif($6, ''), nullif($7, ''),
        nullif($9::integer, 0), nullif($8, ''), nullif($10, ''), $11)`
)

// usageArrays are the rows as lsp_record_usage's arrays, in its parameters' order ($1…$11).
func usageArrays(rows []Row) []any {
	n := len(rows)
	org, tk, subject, repo, commit := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	op, lang, reqID, prepareID := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	status := make([]int32, n)
	prepared := make([]bool, n)
	for i, r := range rows {
		org[i], tk[i], subject[i], repo[i], commit[i] = r.Org, r.TenantKey, r.Subject, r.Repo, r.Commit
		op[i], lang[i], reqID[i], prepareID[i] = r.Op, r.Language, r.RequestID, r.PrepareID
		status[i] = int32(r.HTTPStatus)
		prepared[i] = r.Prepared
	}
	return []any{org, tk, subject, repo, commit, op, lang, reqID, status, prepareID, prepared}
}

// withPartitions runs a usage statement, and once more after making the partitions when a row's
// day had none.
func (l *Ledger) withPartitions(ctx context.Context, run func() (pgconn.CommandTag, error)) (pgconn.CommandTag, error) {
	tag, err := run()
	if err != nil && noPartition(err) {
		if perr := l.EnsureUsagePartitions(ctx); perr != nil {
			return tag, perr
		}
		tag, err = run()
	}
	return tag, err
}

// noPartition reports a row for which usage_rows has no partition (check_violation 23514 "no
// partition of relation … found for row").
func noPartition(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23514" && strings.Contains(pe.Message, "no partition")
}

func (l *Ledger) logRecovered(row Row) {
	l.log.Info("captured a prepare revealed by a later answer", "prepare_id", row.PrepareID,
		"tenant", row.TenantKey, "repo", row.Repo, "commit", row.Commit, "request_id", row.RequestID)
}
