package soak

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// rowRule is what the contract says the ledger holds for one request id.
type rowRule int

const (
	rowsNone    rowRule = iota // refused before the daemon: no row
	rowsOne                    // reached the daemon and the client saw the answer: exactly one row
	rowsAtMost1                // a fault window or a disconnect: at most one row of each model
)

// outcome is one request as the client saw it.
type outcome struct {
	id      string
	org     string
	op      string
	status  int // 0: no answer (transport error, client left)
	code    string
	cold    bool // answered with prepared: true
	elapsed time.Duration
	rule    rowRule
	// retryAfter is the Retry-After header of the answer ("" when absent);
	// CONTRACT §4 says every 429 and 503 carries it.
	retryAfter string
}

// client sends requests to the proxy and remembers every answer.
type client struct {
	base string
	http *http.Client
	seq  atomic.Int64

	mu       sync.Mutex
	outcomes []outcome
}

func newClient(base string) *client {
	return &client{base: base, http: &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second,
	}}}
}

// req is one request to send.
type req struct {
	method, route string
	body          []byte
	jwt, forge    string
	header        map[string]string
	org, op       string
	// expect, when set, is the contract answer of a hostile input: a
	// matching answer is held to its row rule rather than ruleFor's.
	expect *expectation
}

type expectation struct {
	status int
	code   string
	rule   rowRule
}

// answer is the proxy's answer to one request.
type answer struct {
	status   int
	code     string
	prepared bool
	commit   string
	message  string
	warnings []string
	header   http.Header
	raw      []byte
}

func (c *client) nextID() string { return fmt.Sprintf("soak-%d", c.seq.Add(1)) }

// do sends r with a fresh request id and records the outcome unless the
// caller records it itself (record false).
func (c *client) do(ctx context.Context, r req) (string, answer, error) {
	id := c.nextID()
	a, elapsed, err := c.send(ctx, id, r)
	o := outcome{id: id, org: r.org, op: r.op, status: a.status, code: a.code, cold: a.prepared, elapsed: elapsed,
		retryAfter: a.header.Get("Retry-After")}
	o.rule = ruleFor(a.status, a.code, a.message)
	if e := r.expect; e != nil && e.status == a.status && e.code == a.code {
		o.rule = e.rule
	}
	c.record(o)
	return id, a, err
}

func (c *client) record(o outcome) {
	c.mu.Lock()
	c.outcomes = append(c.outcomes, o)
	c.mu.Unlock()
}

func (c *client) send(ctx context.Context, id string, r req) (answer, time.Duration, error) {
	method := r.method
	if method == "" {
		method = http.MethodPost
	}
	hr, err := http.NewRequestWithContext(ctx, method, c.base+r.route, bytes.NewReader(r.body))
	if err != nil {
		return answer{}, 0, err
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("X-Request-Id", id)
	if r.jwt != "" {
		hr.Header.Set("Authorization", "Bearer "+r.jwt)
	}
	if r.forge != "" {
		hr.Header.Set("X-Forge-Token", r.forge)
	}
	for k, v := range r.header {
		hr.Header.Set(k, v)
	}
	start := time.Now()
	resp, err := c.http.Do(hr)
	if err != nil {
		return answer{}, time.Since(start), err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	elapsed := time.Since(start)
	if err != nil {
		return answer{status: resp.StatusCode}, elapsed, err
	}
	a := answer{status: resp.StatusCode, header: resp.Header, raw: raw}
	var body struct {
		Prepared bool     `json:"prepared"`
		Commit   string   `json:"commit"`
		Warnings []string `json:"warnings"`
		Evidence struct {
			Warnings []string `json:"warnings"`
		} `json:"evidence"`
		Error *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(raw, &body) == nil {
		a.prepared, a.commit = body.Prepared, body.Commit
		a.warnings = append(body.Warnings, body.Evidence.Warnings...)
		if body.Error != nil {
			a.code, a.message = body.Error.Code, body.Error.Message
		}
	}
	return a, elapsed, nil
}

// ruleFor is the ledger rule for a well-formed operation request answered
// with status, code and message. Refusals of the request itself come before
// the daemon; money refusals and tree bounds come after the daemon asked for
// the tree; a 404 is the forge's (no row) or the daemon's (a row), so the
// load, whose paths all exist, only sees the forge's kind in fault windows.
// An org over its share of a proxy's prepares is refused, as a proxy out of
// prepare slots is (503), once the daemon has said the revision is cold: a
// row, unless the daemon was not reached; every other 429 comes before it.
func ruleFor(status int, code, message string) rowRule {
	switch {
	case status == http.StatusOK, code == "insufficient_funds", code == "spend_cap_exceeded",
		code == "tree_too_large", code == "position_out_of_range", code == "unsupported_language",
		code == "capability_unavailable":
		return rowsOne
	case status == 0, status >= 500, code == "not_found",
		code == "rate_limited" && strings.Contains(message, "prepares at once"):
		return rowsAtMost1
	default: // 400, 401, 403, 429
		return rowsNone
	}
}

// contractCodes are the error codes CONTRACT §4 lists, by status.
var contractCodes = map[string]int{
	"invalid_request": 400, "unauthenticated": 401, "insufficient_funds": 402, "spend_cap_exceeded": 402,
	"forbidden": 403, "not_found": 404, "cursor_expired": 409, "idempotency_in_progress": 409,
	"tree_too_large": 413, "unsupported_language": 422, "capability_unavailable": 422,
	"position_out_of_range": 422, "idempotency_key_reused": 422, "rate_limited": 429,
	"forge_unavailable": 502, "daemon_unavailable": 503, "ledger_unavailable": 503,
	"capacity_exhausted": 503, "timeout": 504,
}

// percentile of sorted durations.
func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	i := int(float64(len(d)-1) * p)
	return d[i]
}
