package httpapi

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/apierr"
	"github.com/hanzoai/lsp/proxy/internal/auth"
	"github.com/hanzoai/lsp/proxy/internal/ledger"
	"github.com/labstack/echo/v4"
)

// The billing dashboards' view (CONTRACT §4-§5): GET /balance and GET /ledger read the payer org's
// money and rows. They need the JWT and the role billing:ORG for the selected org, and never the forge
// credential: they never touch the forge. They write no ledger rows.

// Money is what the API needs of the ledger beyond the operation path: the Idempotency-Key records and
// the dashboards' reads. *ledger.Ledger implements it.
type Money interface {
	Balance(ctx context.Context, org string) (ledger.Balance, error)
	QueryRows(ctx context.Context, f ledger.RowFilter) ([]ledger.LedgerRow, error)
	UsageDays(ctx context.Context, f ledger.UsageFilter) ([]ledger.UsageDay, error)
	ClaimIdempotencyKey(ctx context.Context, r ledger.IdempotencyRequest) (ledger.IdempotencyState, *ledger.StoredAnswer, error)
	StoreIdempotentAnswer(ctx context.Context, org, key, attempt string, a ledger.StoredAnswer) error
	ReleaseIdempotencyKey(ctx context.Context, org, key, attempt string) error
}

// Ledger page sizes (CONTRACT §4 list conventions).
const (
	defaultLedgerLimit = 100
	maxLedgerLimit     = 1000
)

// registerBilling adds the dashboard routes to the authenticated group.
func (s *Server) registerBilling(g *echo.Group) {
	g.GET("/balance", s.balance)
	g.GET("/ledger", s.ledgerRows)
	g.GET("/usage", s.usageDays)
}

// billingOrg is the caller variant of the dashboard routes: the selected org (403 when the principal
// is not a member), the role billing:ORG for it (403 without), and a token from the org's rate bucket
// (429), as every route takes: a dashboard reading the ledger in a loop must not take the ledger's
// connections from every tenant's usage rows. No forge credential.
func (s *Server) billingOrg(c echo.Context) (string, error) {
	p := c.Get(ctxPrincipal).(*auth.Principal)
	org, err := p.SelectOrg(c.Request().Header.Get("X-Org-Id"))
	if err != nil {
		return "", apierr.New(http.StatusForbidden, apierr.Forbidden, "the principal is not a member of the selected org")
	}
	if !p.HasRole("billing", org) {
		return "", apierr.New(http.StatusForbidden, apierr.Forbidden, "reading the ledger needs the role billing:%s", org)
	}
	if err := s.rateLimit(org); err != nil {
		return "", err
	}
	return org, nil
}

// balance is GET /balance.
func (s *Server) balance(c echo.Context) error {
	if _, err := queryParams(c, nil); err != nil {
		return err
	}
	org, err := s.billingOrg(c)
	if err != nil {
		return err
	}
	if s.d.Money == nil {
		return ledgerUnavailable(errors.New("no ledger configured"))
	}
	b, err := s.d.Money.Balance(c.Request().Context(), org)
	if err != nil {
		return moneyError(err)
	}
	return c.JSON(http.StatusOK, b)
}

// ledgerQuery is a checked GET /ledger query.
type ledgerQuery struct {
	filter ledger.RowFilter // without Org and AfterID
	limit  int
	cursor string
}

var ledgerParams = fieldSet("from", "to", "model", "repo", "limit", "cursor")

// parseLedgerQuery checks GET /ledger's query: every fault is 400.
func parseLedgerQuery(q map[string]string) (ledgerQuery, error) {
	lq := ledgerQuery{limit: defaultLedgerLimit, cursor: q["cursor"]}
	var err error
	for _, name := range []string{"from", "to"} {
		v, ok := q[name]
		if !ok {
			continue
		}
		t, perr := time.Parse(time.RFC3339Nano, v)
		if perr != nil {
			return lq, apierr.BadRequest("%s must be an RFC 3339 time, e.g. 2026-01-02T15:04:05Z", name)
		}
		if name == "from" {
			lq.filter.From = t
		} else {
			lq.filter.To = t
		}
	}
	if !lq.filter.From.IsZero() && !lq.filter.To.IsZero() && !lq.filter.From.Before(lq.filter.To) {
		return lq, apierr.BadRequest("from must be before to")
	}
	if v, ok := q["model"]; ok {
		if lq.filter.Model, err = oneOf(&v, "", "prepare", "query", "credit"); err != nil {
			return lq, apierr.BadRequest("model must be prepare, query or credit")
		}
	}
	if v, ok := q["repo"]; ok {
		if lq.filter.Repo, err = checkRepo(&v); err != nil {
			return lq, err
		}
	}
	if v, ok := q["limit"]; ok {
		n, perr := strconv.Atoi(v)
		if perr != nil || n < 1 || n > maxLedgerLimit {
			return lq, apierr.BadRequest("limit must be between 1 and %d", maxLedgerLimit)
		}
		lq.limit = n
	}
	if _, ok := q["cursor"]; ok && lq.cursor == "" {
		return lq, apierr.BadRequest("cursor must not be empty")
	}
	return lq, nil
}

// ledgerRows is GET /ledger: the payer org's rows in id order, one page at a time.
func (s *Server) ledgerRows(c echo.Context) error {
	q, err := queryParams(c, ledgerParams)
	if err != nil {
		return err
	}
	lq, err := parseLedgerQuery(q)
	if err != nil {
		return err
	}
	org, err := s.billingOrg(c)
	if err != nil {
		return err
	}
	f := lq.filter
	f.Org = org
	if lq.cursor != "" {
		// A cursor is checked once the org is known: it is bound to it.
		if f.AfterID, err = s.openLedgerCursor(lq.cursor, org, f); err != nil {
			return err
		}
	}
	if s.d.Money == nil {
		return ledgerUnavailable(errors.New("no ledger configured"))
	}
	// One row more than the page says whether another page follows. Ids of one org commit in
	// ascending order, so a row that commits after this read has a higher id than any returned here
	// and is on a later page: paging by id never skips a row.
	f.Limit = lq.limit + 1
	// Usage rows commit out of id order (no account lock): pages stay behind the settle horizon, so
	// paging on the id never skips one (LSP_LEDGER_SETTLE).
	f.Settle = s.d.LedgerSettle
	rows, err := s.d.Money.QueryRows(c.Request().Context(), f)
	if err != nil {
		return moneyError(err)
	}
	var next *string
	if len(rows) > lq.limit {
		rows = rows[:lq.limit]
		cur := s.sealLedgerCursor(org, f, rows[len(rows)-1].ID)
		next = &cur
	}
	if wantsCSV(c.Request().Header.Get("Accept")) {
		return writeLedgerCSV(c, rows, next)
	}
	out := make([]ledgerRowJSON, len(rows))
	for i, r := range rows {
		out[i] = rowJSON(r)
	}
	return c.JSON(http.StatusOK, map[string]any{"org": org, "rows": out, "next_cursor": next})
}

func writeLedgerCSV(c echo.Context, rows []ledger.LedgerRow, next *string) error {
	h := c.Response().Header()
	h.Set(echo.HeaderContentType, "text/csv; charset=utf-8")
	if next != nil {
		h.Set("X-Next-Cursor", *next)
	}
	c.Response().WriteHeader(http.StatusOK)
	w, err := ledger.NewCSVWriter(c.Response(), true)
	if err != nil {
		return err
	}
	if err := w.Write(rows); err != nil {
		return err
	}
	return w.Flush()
}

// ledgerRowJSON is one row as the API shows it: NULLs as null.
type ledgerRowJSON struct {
	ID          int64     `json:"id"`
	CreatedAt   time.Time `json:"created_at"`
	Kind        string    `json:"kind"`
	Model       any       `json:"model"`
	PayerOrg    string    `json:"payer_org"`
	Subject     any       `json:"subject"`
	Repo        any       `json:"repo"`
	Commit      any       `json:"commit"`
	Op          any       `json:"op"`
	Language    any       `json:"language"`
	AmountCents int64     `json:"amount_cents"`
	HTTPStatus  any       `json:"http_status"`
	RequestID   any       `json:"request_id"`
	PrepareID   any       `json:"prepare_id"`
	Reason      any       `json:"reason"`
	TenantKey   any       `json:"tenant_key"`
}

func rowJSON(r ledger.LedgerRow) ledgerRowJSON {
	var status any
	if r.HTTPStatus != 0 {
		status = r.HTTPStatus
	}
	return ledgerRowJSON{
		ID: r.ID, CreatedAt: r.CreatedAt.UTC(), Kind: r.Kind, Model: nullable(r.Model), PayerOrg: r.PayerOrg,
		Subject: nullable(r.Subject), Repo: nullable(r.Repo), Commit: nullable(r.Commit), Op: nullable(r.Op),
		Language: nullable(r.Language), AmountCents: r.AmountCents, HTTPStatus: status,
		RequestID: nullable(r.RequestID), PrepareID: nullable(r.PrepareID), Reason: nullable(r.Reason),
		TenantKey: nullable(r.TenantKey),
	}
}

// queryParams returns the query's parameters, refusing (400) any not in allowed, a repeated one and
// a malformed query string: like bodies, queries are strict, so no parameter can name an org.
func queryParams(c echo.Context, allowed map[string]bool) (map[string]string, error) {
	raw := c.Request().URL.RawQuery
	if raw == "" {
		return map[string]string{}, nil
	}
	if len(raw) > 4096 {
		return nil, apierr.BadRequest("the query string is longer than 4096 bytes")
	}
	vals, err := url.ParseQuery(raw)
	if err != nil {
		return nil, apierr.BadRequest("the query string is malformed")
	}
	out := make(map[string]string, len(vals))
	for name, vs := range vals {
		if !allowed[name] {
			return nil, apierr.BadRequest("unknown query parameter %q", truncate(name, 64))
		}
		if len(vs) != 1 {
			return nil, apierr.BadRequest("query parameter %q is repeated", name)
		}
		out[name] = vs[0]
	}
	return out, nil
}

// wantsCSV reports whether an Accept header prefers text/csv over JSON.
func wantsCSV(accept string) bool {
	csvQ, jsonQ := -1.0, -1.0
	for _, part := range strings.Split(accept, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		q := 1.0
		if v, ok := params["q"]; ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil && f >= 0 && f <= 1 {
				q = f
			}
		}
		switch mt {
		case "text/csv":
			csvQ = max(csvQ, q)
		case "application/json":
			jsonQ = max(jsonQ, q)
		}
	}
	return csvQ > 0 && csvQ >= jsonQ
}

// ledgerCursor is the signed position of a ledger page: bound to the org and the filters, it carries
// the last id seen.
type ledgerCursor struct {
	Kind    string `json:"k"` // always "ledger": an operation cursor is never one
	Org     string `json:"o"`
	Filter  string `json:"f"`
	AfterID int64  `json:"a"`
}

func ledgerFilterFingerprint(f ledger.RowFilter) string {
	var from, to string
	if !f.From.IsZero() {
		from = f.From.UTC().Format(time.RFC3339Nano)
	}
	if !f.To.IsZero() {
		to = f.To.UTC().Format(time.RFC3339Nano)
	}
	b, _ := json.Marshal([]string{from, to, f.Model, f.Repo})
	sum := sha256.Sum256(b)
	return base64.RawURLEncoding.EncodeToString(sum[:12])
}

func (s *Server) sealLedgerCursor(org string, f ledger.RowFilter, afterID int64) string {
	payload, _ := json.Marshal(ledgerCursor{Kind: "ledger", Org: org, Filter: ledgerFilterFingerprint(f), AfterID: afterID})
	p := base64.RawURLEncoding.EncodeToString(payload)
	return p + "." + s.signLedger(p)
}

// signLedger signs with its own purpose, so no other signed value of the API verifies as a ledger
// cursor.
func (s *Server) signLedger(p string) string {
	m := hmac.New(sha256.New, s.d.CursorSecret)
	m.Write([]byte("ledger-cursor\x00"))
	m.Write([]byte(p))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// openLedgerCursor verifies a cursor and returns the id to continue after (400 when it is tampered,
// of another org or of other filters).
func (s *Server) openLedgerCursor(raw, org string, f ledger.RowFilter) (int64, error) {
	c, err := s.parseLedgerCursor(raw)
	if err != nil || c.Org != org || c.Filter != ledgerFilterFingerprint(f) {
		return 0, apierr.BadRequest("the cursor is not valid for this request")
	}
	return c.AfterID, nil
}

func (s *Server) parseLedgerCursor(raw string) (ledgerCursor, error) {
	bad := errors.New("bad cursor")
	if len(raw) > 1024 {
		return ledgerCursor{}, bad
	}
	p, sig, ok := strings.Cut(raw, ".")
	if !ok || !hmac.Equal([]byte(sig), []byte(s.signLedger(p))) {
		return ledgerCursor{}, bad
	}
	b, err := base64.RawURLEncoding.DecodeString(p)
	if err != nil {
		return ledgerCursor{}, bad
	}
	var c ledgerCursor
	if err := json.Unmarshal(b, &c); err != nil || c.Kind != "ledger" || c.AfterID < 0 {
		return ledgerCursor{}, bad
	}
	return c, nil
}

// moneyError maps a ledger failure of these routes.
func moneyError(err error) error {
	if errors.Is(err, ledger.ErrUnavailable) {
		return ledgerUnavailable(err)
	}
	return apierr.From(err)
}

func ledgerUnavailable(err error) error {
	e := apierr.Wrap(err, http.StatusServiceUnavailable, apierr.LedgerUnavailable, "the ledger is unavailable")
	e.RetryAfter = defaultRetryAfter
	return e
}

var usageParams = fieldSet("from", "to", "repo")

// usageDays serves GET /usage: the payer org's daily rollups (usage_daily, and the days not rolled up
// yet computed from usage_rows and the day's prepare rows), by day, repository, operation and status.
// from and to are UTC days (YYYY-MM-DD), to exclusive.
func (s *Server) usageDays(c echo.Context) error {
	q, err := queryParams(c, usageParams)
	if err != nil {
		return err
	}
	var f ledger.UsageFilter
	for _, name := range []string{"from", "to"} {
		v, ok := q[name]
		if !ok {
			continue
		}
		d, perr := time.Parse(time.DateOnly, v)
		if perr != nil {
			return apierr.BadRequest("%s must be a day, e.g. 2026-01-02", name)
		}
		if name == "from" {
			f.From = d
		} else {
			f.To = d
		}
	}
	if !f.From.IsZero() && !f.To.IsZero() && !f.From.Before(f.To) {
		return apierr.BadRequest("from must be before to")
	}
	if v, ok := q["repo"]; ok {
		if f.Repo, err = checkRepo(&v); err != nil {
			return err
		}
	}
	org, err := s.billingOrg(c)
	if err != nil {
		return err
	}
	if s.d.Money == nil {
		return ledgerUnavailable(errors.New("no ledger configured"))
	}
	f.Org = org
	days, err := s.d.Money.UsageDays(c.Request().Context(), f)
	if err != nil {
		return moneyError(err)
	}
	if days == nil {
		days = []ledger.UsageDay{}
	}
	return c.JSON(http.StatusOK, map[string]any{"org": org, "days": days})
}
