package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// HoldRequest asks to reserve the price of a prepare.
type HoldRequest struct {
	PrepareID string // the hold's key; travels with the tree and comes back with every answer
	Org       string // the payer
	TenantKey string
	Subject   string
	Repo      string
	Commit    string
	RequestID string
	Price     int64         // cents, ≥ 0
	TTL       time.Duration // the hold stops counting against available funds after this
	Grace     time.Duration // a charge of the same (Org, Repo, Commit) within this makes the hold 0¢ (until a DELETE /workspaces ends it)
}

func (r HoldRequest) validate() error {
	switch {
	case r.PrepareID == "" || len(r.PrepareID) > 128:
		return errors.New("prepare id must be 1 to 128 bytes")
	case r.Org == "" || r.TenantKey == "" || r.Repo == "" || r.Commit == "":
		return errors.New("org, tenant key, repo and commit are required")
	case r.Price < 0:
		return errors.New("negative price")
	case r.TTL <= 0:
		return errors.New("hold TTL must be positive")
	case r.Grace < 0:
		return errors.New("negative grace")
	}
	return nil
}

// Hold atomically reserves r.Price against the org's available funds (balance − live, unexpired
// holds) and returns the amount held. If a charged prepare row for (Org, Repo, Commit) exists
// within r.Grace (and after the revision's last EndGrace), the hold is 0¢: a re-prepare needs no funds and always succeeds. Otherwise it fails
// with ErrInsufficientFunds when available < price, or ErrSpendCapExceeded when the org's daily cap
// would be passed. Repeating a hold with the same prepare id and workspace returns the existing hold.
// One statement.
func (l *Ledger) Hold(ctx context.Context, r HoldRequest) (int64, error) {
	if err := r.validate(); err != nil {
		return 0, fmt.Errorf("hold: %w", err)
	}
	var status string
	var amount int64
	err := l.pool.QueryRow(ctx,
		`SELECT o_status, o_amount_cents FROM lsp_hold($1, $2, $3, $4, $5, $6, $7, $8,
			make_interval(secs => $9), make_interval(secs => $10))`,
		r.PrepareID, r.Org, r.TenantKey, r.Subject, r.Repo, r.Commit, r.RequestID, r.Price,
		r.TTL.Seconds(), r.Grace.Seconds()).Scan(&status, &amount)
	if err != nil {
		return 0, wrap("hold", err)
	}
	switch status {
	case "ok":
		return amount, nil
	case "insufficient_funds":
		return 0, fmt.Errorf("hold %d¢ for %s: %w", r.Price, r.Org, ErrInsufficientFunds)
	case "spend_cap_exceeded":
		return 0, fmt.Errorf("hold %d¢ for %s: %w", r.Price, r.Org, ErrSpendCapExceeded)
	}
	return 0, fmt.Errorf("hold: unexpected status %q", status)
}

// Row describes the request a usage row records (and, for Capture, the request that prepared).
// HTTPStatus 0 means not known.
type Row struct {
	PrepareID  string
	Org        string
	TenantKey  string
	Subject    string
	Repo       string
	Commit     string
	Op         string
	Language   string
	RequestID  string
	HTTPStatus int
	// Prepared: this request's push wrote the tree (usage rows only).
	Prepared bool
}

func validStatus(s int) bool { return s == 0 || s >= 100 && s <= 599 }

// Capture turns the hold row.PrepareID into exactly one prepare row (amount −held; 0¢ with reason
// 'reprepare' for a re-prepare), updates the balance and marks the hold captured, in one statement.
// It reports captured=false, writing nothing, when the hold was captured before (by an earlier call
// or by RecordUsage's recovery). An expired or released hold is still captured: a prepare that did
// run is charged — at most what the org can pay without eating other live holds, so the
// balance never goes negative (reason 'shortfall' when that is less than the hold).
// row.Org must be the hold's org; non-empty TenantKey, Repo and Commit must match the hold's.
// Errors: ErrUnknownHold.
func (l *Ledger) Capture(ctx context.Context, row Row) (bool, error) {
	if row.PrepareID == "" || row.Org == "" {
		return false, errors.New("capture: prepare id and org are required")
	}
	if !validStatus(row.HTTPStatus) {
		return false, fmt.Errorf("capture: bad HTTP status %d", row.HTTPStatus)
	}
	var status string
	err := l.pool.QueryRow(ctx, `SELECT lsp_capture($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
		row.PrepareID, row.Org, row.TenantKey, row.Repo, row.Commit, row.Subject, row.Op, row.Language,
		row.RequestID, row.HTTPStatus).Scan(&status)
	if err != nil {
		return false, wrap("capture "+row.PrepareID, err)
	}
	switch status {
	case "captured", "already":
		l.captured.add([]Row{row})
		return status == "captured", nil
	case "released":
		return false, fmt.Errorf("capture %s: %w", row.PrepareID, ErrHoldReleased)
	case "unknown":
		return false, fmt.Errorf("capture %s: %w", row.PrepareID, ErrUnknownHold)
	case "mismatch":
		return false, fmt.Errorf("capture %s: %w (the hold is for another workspace)", row.PrepareID, ErrUnknownHold)
	}
	return false, fmt.Errorf("capture %s: unexpected status %q", row.PrepareID, status)
}

// Release gives a live (or expired) hold's funds back: its push did not prepare. Call it only when
// the daemon said the workspace key is neither written under this prepare id nor in flight; should a
// tree still be published under a released hold's id, the first answer naming the id captures it
// (RecordUsage, Capture). Releasing a hold that is unknown, captured or already released does
// nothing.
func (l *Ledger) Release(ctx context.Context, prepareID string) error {
	_, err := l.pool.Exec(ctx,
		`UPDATE holds SET state = 'released', settled_at = now()
		  WHERE prepare_id = $1 AND state IN ('live', 'expired')`, prepareID)
	return wrap("release "+prepareID, err)
}

// EndGrace ends the re-prepare grace of (org, repo, commit) now: the tenant deleted that revision's
// workspace, so its next prepare is charged.
func (l *Ledger) EndGrace(ctx context.Context, org, repo, commit string) error {
	if org == "" || repo == "" || commit == "" {
		return errors.New("end grace: org, repo and commit are required")
	}
	_, err := l.pool.Exec(ctx, `SELECT lsp_end_grace($1, $2, $3)`, org, repo, commit)
	return wrap("end grace", err)
}

// Extend pushes a live hold's expiry to at least now + ttl, for a push that runs longer than its hold.
// A hold that is no longer live and unexpired cannot be extended (ErrUnknownHold): its funds may be
// gone already.
func (l *Ledger) Extend(ctx context.Context, prepareID string, ttl time.Duration) error {
	if ttl <= 0 {
		return errors.New("extend: ttl must be positive")
	}
	tag, err := l.pool.Exec(ctx,
		`UPDATE holds SET expires_at = greatest(expires_at, now() + make_interval(secs => $2))
		  WHERE prepare_id = $1 AND state = 'live' AND expires_at > now()`, prepareID, ttl.Seconds())
	if err != nil {
		return wrap("extend "+prepareID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("extend %s: %w (not live)", prepareID, ErrUnknownHold)
	}
	return nil
}

// RecordUsage writes the usage row of one operation request that reached the daemon: after its
// answer is known and before it is sent, once, never amended. row.Prepared says this request's push
// wrote the tree (its money row is then the prepare row of row.PrepareID). Usage rows carry no money
// and take no account lock; rows of concurrent callers are committed together (GroupCommit) and the
// call returns once its row is durable. If row.PrepareID names a hold of the same org, tenant key,
// repo and commit that is not captured (its proxy crashed, lost the daemon's reply, or released a hold
// whose tree was published after all), that hold is first captured into its prepare row (reason
// 'recovered', or 'shortfall'), in the same transaction and at most once.
func (l *Ledger) RecordUsage(ctx context.Context, row Row) error {
	if row.Org == "" {
		return errors.New("record usage: org is required")
	}
	if !validStatus(row.HTTPStatus) {
		return fmt.Errorf("record usage: bad HTTP status %d", row.HTTPStatus)
	}
	if l.batch != nil {
		return l.batch.record(ctx, row)
	}
	return l.recordUsage(ctx, []Row{row})
}

// Credit adds cents to org's balance as a credit row (subject: who credited). A negative amount is an
// adjustment and fails with ErrInsufficientFunds if it would leave less than the org's live holds.
func (l *Ledger) Credit(ctx context.Context, org string, cents int64, subject string) error {
	if org == "" || cents == 0 {
		return errors.New("credit: org and a non-zero amount are required")
	}
	var status string
	if err := l.pool.QueryRow(ctx, `SELECT lsp_credit($1, $2, $3)`, org, cents, subject).Scan(&status); err != nil {
		return wrap("credit", err)
	}
	if status == "insufficient_funds" {
		return fmt.Errorf("credit %d¢ to %s: %w", cents, org, ErrInsufficientFunds)
	}
	return nil
}

// SetDailyCap sets the most an org may spend on prepares per UTC day (captured and held); a negative
// value removes the cap.
func (l *Ledger) SetDailyCap(ctx context.Context, org string, cents int64) error {
	if org == "" {
		return errors.New("set daily cap: org is required")
	}
	var capCents *int64
	if cents >= 0 {
		capCents = &cents
	}
	_, err := l.pool.Exec(ctx,
		`INSERT INTO accounts (org, daily_cap_cents) VALUES ($1, $2)
		 ON CONFLICT (org) DO UPDATE SET daily_cap_cents = EXCLUDED.daily_cap_cents`, org, capCents)
	return wrap("set daily cap", err)
}

// Balance is an org's money at one instant.
type Balance struct {
	Org            string `json:"org"`
	BalanceCents   int64  `json:"balance_cents"`
	HeldCents      int64  `json:"held_cents"`
	AvailableCents int64  `json:"available_cents"`
}

// Balance reads org's balance and live holds from one snapshot. An unknown org has balance 0.
func (l *Ledger) Balance(ctx context.Context, org string) (Balance, error) {
	b := Balance{Org: org}
	err := l.pool.QueryRow(ctx, `SELECT o_balance_cents, o_held_cents FROM lsp_balance($1)`, org).
		Scan(&b.BalanceCents, &b.HeldCents)
	if err != nil {
		return Balance{}, wrap("balance", err)
	}
	b.AvailableCents = b.BalanceCents - b.HeldCents
	return b, nil
}

// ExpireHolds marks live holds past their expiry as expired and returns how many. Housekeeping only:
// an expired hold stops counting against available funds at its expiry whether or not this runs, and
// can still be captured if its prepare turns out to have run.
func (l *Ledger) ExpireHolds(ctx context.Context) (int, error) {
	var n int
	if err := l.pool.QueryRow(ctx, `SELECT lsp_expire_holds()`).Scan(&n); err != nil {
		return 0, wrap("expire holds", err)
	}
	return n, nil
}

// PendingHold is a hold no prepare settled: neither captured nor released.
type PendingHold struct {
	PrepareID, Org, TenantKey, Subject, Repo, Commit, RequestID string
}

// PendingHolds lists at most limit live or expired holds taken before before, oldest first: those
// whose prepare ended (its deadline is past) without the proxy learning whether the daemon wrote
// the tree — the stream broke and the daemon could not be asked. The settler asks again.
func (l *Ledger) PendingHolds(ctx context.Context, before time.Time, limit int) ([]PendingHold, error) {
	rows, err := l.pool.Query(ctx, `
		SELECT prepare_id, org, tenant_key, coalesce(subject, ''), repo, commit, coalesce(request_id, '')
		  FROM holds
		 WHERE state IN ('live', 'expired') AND created_at < $1
		 ORDER BY created_at
		 LIMIT $2`, before, limit)
	if err != nil {
		return nil, wrap("pending holds", err)
	}
	defer rows.Close()
	var out []PendingHold
	for rows.Next() {
		var h PendingHold
		if err := rows.Scan(&h.PrepareID, &h.Org, &h.TenantKey, &h.Subject, &h.Repo, &h.Commit, &h.RequestID); err != nil {
			return nil, wrap("pending holds", err)
		}
		out = append(out, h)
	}
	return out, wrap("pending holds", rows.Err())
}
