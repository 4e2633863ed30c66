package ledger

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/puddle/v2"
)

var (
	// ErrInsufficientFunds: the org's available funds are below the price (or a debit would eat held funds).
	ErrInsufficientFunds = errors.New("insufficient funds")
	// ErrSpendCapExceeded: the hold would take the org's prepare spending for the UTC day past its cap.
	ErrSpendCapExceeded = errors.New("daily spend cap exceeded")
	// ErrUnavailable wraps failures to reach or use the database (connection refused or lost, server
	// shutting down or overloaded, deadline passed while waiting for it).
	ErrUnavailable = errors.New("ledger unavailable")
	// ErrUnknownHold: no hold (or prepare row) with that prepare id for that org and workspace.
	ErrUnknownHold = errors.New("unknown prepare id")
	// ErrHoldReleased: the hold was released (its push did not prepare), so it cannot be captured.
	ErrHoldReleased = errors.New("hold already released")
)

// Ledger is a handle on the ledger database. It is safe for concurrent use.
type Ledger struct {
	pool     *pgxpool.Pool
	log      *slog.Logger
	batch    *batcher  // nil: one transaction per query row
	captured *captured // holds known captured: their rows need no probe
}

// Options tune a Ledger; the zero value is what the proxy runs with.
type Options struct {
	GroupCommit GroupCommit
}

// Open connects to the Postgres database at url (pgx syntax, URL or keyword/value; pool_* parameters
// are honoured), migrates the schema and returns the ledger, with the default Options.
func Open(ctx context.Context, url string, log *slog.Logger) (*Ledger, error) {
	return OpenWith(ctx, url, log, Options{})
}

// OpenWith is Open with options.
func OpenWith(ctx context.Context, url string, log *slog.Logger, o Options) (*Ledger, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("open ledger: %w", err)
	}
	if !strings.Contains(url, "pool_max_conns") {
		// pgxpool's default (max(4, CPUs)) queues requests on small machines while each waits
		// for a commit; commits of different orgs proceed in parallel.
		cfg.MaxConns = int32(max(16, 4*runtime.GOMAXPROCS(0)))
	}
	cfg.ConnConfig.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		log.Debug("postgres notice", "severity", n.Severity, "message", n.Message)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, wrap("open ledger", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, wrap("open ledger", err)
	}
	if err := Migrate(ctx, pool, log); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open ledger: %w", err)
	}
	l := &Ledger{pool: pool, log: log, captured: newCaptured()}
	if !o.GroupCommit.Disabled {
		l.batch = newBatcher(l, o.GroupCommit.withDefaults())
	}
	return l, nil
}

// Close commits the query rows already queued, then closes every connection; calls after Close fail
// with ErrUnavailable.
func (l *Ledger) Close() {
	if l.batch != nil {
		l.batch.close()
	}
	l.pool.Close()
}

// Ping checks that the database answers (readiness).
func (l *Ledger) Ping(ctx context.Context) error {
	return wrap("ping ledger", l.pool.Ping(ctx))
}

// Pool is the underlying connection pool, for packages that keep their own tables in the same
// database (their schema belongs in the migrations module too).
func (l *Ledger) Pool() *pgxpool.Pool { return l.pool }

// wrap names the failed operation and marks connectivity failures with ErrUnavailable.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	if unavailable(err) {
		return fmt.Errorf("%s: %w: %w", op, ErrUnavailable, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// retryAborted runs one statement of its own transaction, at most three times, while Postgres
// aborts it to break a deadlock (40P01) or a serialization failure (40001): an aborted statement
// changed nothing, and the other side has usually finished by the time it runs again (a deadlock
// is found only after deadlock_timeout). It waits a moment before each new attempt, a little
// longer each time and jittered: run again at once, it took the first of its locks back before
// the other side, woken by the abort, could, and on a busy machine met the same deadlock three
// times (ledger.TestIdempotencyClaimRetriedAfterDeadlock failed so once in CI).
func retryAborted(run func() error) error {
	var err error
	for attempt := range 3 {
		if attempt > 0 {
			time.Sleep(time.Duration(attempt)*20*time.Millisecond + rand.N(20*time.Millisecond))
		}
		var pe *pgconn.PgError
		if err = run(); !errors.As(err, &pe) || pe.Code != "40P01" && pe.Code != "40001" {
			return err
		}
	}
	return err
}

func unavailable(err error) bool {
	if errors.Is(err, context.Canceled) {
		return false // the caller gave up; the database may be fine
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case strings.HasPrefix(pe.Code, "08"), // connection exception
			strings.HasPrefix(pe.Code, "53"), // insufficient resources (too many connections, disk full)
			strings.HasPrefix(pe.Code, "57"), // operator intervention: shutdown, statement timeout, cannot connect now
			strings.HasPrefix(pe.Code, "58"), // system error
			pe.Code == "25006":               // read-only transaction: we reached a standby
			return true
		}
		return false
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	return errors.As(err, &ce) || errors.As(err, &ne) || pgconn.Timeout(err) ||
		errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, puddle.ErrClosedPool) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ENOENT)
}
