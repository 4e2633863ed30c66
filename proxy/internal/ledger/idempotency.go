package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// IdempotencyState is what ClaimIdempotencyKey found.
type IdempotencyState string

const (
	// IdempotencyClaimed: the caller runs the request, then stores its answer or releases the key.
	IdempotencyClaimed IdempotencyState = "claimed"
	// IdempotencyReplay: an earlier attempt's answer is stored; answer it again.
	IdempotencyReplay IdempotencyState = "replay"
	// IdempotencyMismatch: the key was used with another route or body (422 idempotency_key_reused).
	IdempotencyMismatch IdempotencyState = "mismatch"
	// IdempotencyInProgress: another attempt with this key is running (409 idempotency_in_progress).
	IdempotencyInProgress IdempotencyState = "in_progress"
	// IdempotencyFull: the org's keys hold its bound of bytes (MaxOrgBytes); no new key until some
	// expire (429).
	IdempotencyFull IdempotencyState = "full"
)

// ErrNotClaimed: the attempt no longer holds the key (its lease lapsed and a retry took it over).
var ErrNotClaimed = errors.New("idempotency key not held by this attempt")

// IdempotencyRequest claims an Idempotency-Key for one attempt.
type IdempotencyRequest struct {
	Org         string // the payer org: keys of different orgs never meet
	Key         string // the header's value, 1 to 255 bytes
	RequestHash string // binds the key to one route and body
	Attempt     string // random, unique per attempt: only its holder stores the answer
	TTL         time.Duration
	// Lease bounds how long an attempt may hold the key without an answer (its proxy may have died);
	// a retry after it takes the key over.
	Lease time.Duration
	// MaxOrgBytes bounds the bytes the org's keys hold (0: no bound): each answered key's row counts
	// ~256 bytes of overhead, its key, its headers and its answer (a key in flight nothing yet). An
	// org at it claims no
	// new key; a key it holds still replays (migrations 009, 010).
	MaxOrgBytes int64
}

// StoredAnswer is an answer kept for replays.
type StoredAnswer struct {
	Status int
	Header map[string]string // only the headers a replay must repeat (Content-Type, Retry-After)
	Body   []byte
}

// ClaimIdempotencyKey claims r.Key for r.Attempt, or reports the stored answer, a mismatch, an
// attempt in progress or an org at its bound. One statement.
func (l *Ledger) ClaimIdempotencyKey(ctx context.Context, r IdempotencyRequest) (IdempotencyState, *StoredAnswer, error) {
	switch {
	case r.Org == "" || r.Key == "" || len(r.Key) > 255 || r.RequestHash == "" || r.Attempt == "":
		return "", nil, errors.New("claim idempotency key: org, a key of 1 to 255 bytes, hash and attempt are required")
	case r.TTL <= 0 || r.Lease <= 0:
		return "", nil, errors.New("claim idempotency key: ttl and lease must be positive")
	}
	var state string
	var status *int32
	var header []byte
	var body []byte
	// Every claim's sweep deletes expired keys of any org, and an answered key's deletion updates its
	// org's count: two sweeps (or a sweep and an org's own cleanup at its bound) may take two orgs'
	// counts in opposite orders. Postgres breaks such a deadlock by aborting one statement, which then
	// did nothing, so it runs again.
	err := retryAborted(func() error {
		return l.pool.QueryRow(ctx,
			`SELECT o_state, o_http_status, o_headers, o_body
			   FROM lsp_idem_claim($1, $2, $3, $4, make_interval(secs => $5), make_interval(secs => $6), $7)`,
			r.Org, r.Key, r.RequestHash, r.Attempt, r.TTL.Seconds(), r.Lease.Seconds(), max(r.MaxOrgBytes, 0)).
			Scan(&state, &status, &header, &body)
	})
	if err != nil {
		return "", nil, wrap("claim idempotency key", err)
	}
	switch s := IdempotencyState(state); s {
	case IdempotencyClaimed, IdempotencyMismatch, IdempotencyInProgress, IdempotencyFull:
		return s, nil, nil
	case IdempotencyReplay:
		a := &StoredAnswer{Body: body}
		if status != nil {
			a.Status = int(*status)
		}
		if len(header) > 0 {
			if err := json.Unmarshal(header, &a.Header); err != nil {
				return "", nil, fmt.Errorf("claim idempotency key: stored headers: %w", err)
			}
		}
		return s, a, nil
	}
	return "", nil, fmt.Errorf("claim idempotency key: unexpected state %q", state)
}

// StoreIdempotentAnswer keeps the answer of the attempt that holds the key, for replays. It fails with
// ErrNotClaimed when the attempt no longer holds it.
func (l *Ledger) StoreIdempotentAnswer(ctx context.Context, org, key, attempt string, a StoredAnswer) error {
	if a.Status < 100 || a.Status > 599 {
		return fmt.Errorf("store idempotent answer: bad HTTP status %d", a.Status)
	}
	header, err := json.Marshal(a.Header)
	if err != nil {
		return fmt.Errorf("store idempotent answer: %w", err)
	}
	body := a.Body
	if body == nil {
		body = []byte{}
	}
	var ok bool
	// A finish holds its key's row as it updates its org's count, which a claim cleaning up the org's
	// expired keys may hold while it waits for that row: Postgres aborts one (retryAborted).
	if err := retryAborted(func() error {
		return l.pool.QueryRow(ctx, `SELECT lsp_idem_finish($1, $2, $3, $4, $5, $6)`,
			org, key, attempt, a.Status, header, body).Scan(&ok)
	}); err != nil {
		return wrap("store idempotent answer", err)
	}
	if !ok {
		return fmt.Errorf("store idempotent answer: %w", ErrNotClaimed)
	}
	return nil
}

// ReleaseIdempotencyKey gives the key back so that a retry runs afresh: for attempts that ended having
// done nothing a retry could repeat. Releasing a key the attempt no longer holds does nothing.
func (l *Ledger) ReleaseIdempotencyKey(ctx context.Context, org, key, attempt string) error {
	return wrap("release idempotency key", retryAborted(func() error {
		_, err := l.pool.Exec(ctx, `SELECT lsp_idem_abandon($1, $2, $3)`, org, key, attempt)
		return err
	}))
}
