package soak

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/ctl"
)

// RowCount is expected against written ledger rows for one rule.
type RowCount struct {
	Requests int // requests the rule applies to
	Expected string
	Written  int
	Bad      int // requests whose rows break the rule
}

// ledgerChecks holds the ledger to what the client saw, then runs lspctl
// ledger reconcile. The proxy has stopped: every hold a proxy will ever
// settle is settled.
func (r *run) ledgerChecks(ctx context.Context, rep *Report) error {
	pool := r.stack.Ledger.Pool()

	// Holds still live belong to prepares whose proxy could not settle them
	// (the ledger or the daemon was down at that instant). They are not
	// orphans while they count down; wait them out.
	var live int
	var last *time.Time
	if err := pool.QueryRow(ctx, `SELECT count(*), max(expires_at) FROM holds WHERE state = 'live'`).Scan(&live, &last); err != nil {
		return fmt.Errorf("ledger checks: %w", err)
	}
	rep.LiveHoldsAtEnd = live
	if live > 0 && last != nil {
		wait := time.Until(*last) + time.Second
		if bound := 2*r.cfg.PrepareTimeout + 2*time.Minute; wait > bound {
			rep.Failures = append(rep.Failures, fmt.Sprintf("a live hold expires in %v, beyond its TTL", wait))
			wait = 0
		}
		if wait > 0 {
			sleepCtx(ctx, wait)
		}
		n, err := r.stack.Ledger.ExpireHolds(ctx)
		if err != nil {
			return fmt.Errorf("ledger checks: %w", err)
		}
		rep.HoldsExpired = n
	}

	rows, err := pool.Query(ctx, `SELECT coalesce(request_id, ''), coalesce(model, ''), coalesce(reason, ''),
		payer_org, coalesce(prepare_id, ''), coalesce(http_status, 0) FROM v_ledger_rows WHERE kind = 'lsp'`)
	if err != nil {
		return fmt.Errorf("ledger checks: %w", err)
	}
	byID := map[string][]row{}
	prepares := map[string]int{}
	for rows.Next() {
		var x row
		if err := rows.Scan(&x.id, &x.model, &x.reason, &x.org, &x.prepareID, &x.status); err != nil {
			rows.Close()
			return fmt.Errorf("ledger checks: %w", err)
		}
		byID[x.id] = append(byID[x.id], x)
		rep.RowsWritten++
		if x.model == "prepare" {
			prepares[x.prepareID]++
			rep.PrepareRows++
			if x.reason == "recovered" {
				rep.RecoveredRows++
			}
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("ledger checks: %w", err)
	}

	fail := func(format string, args ...any) { rep.Failures = append(rep.Failures, fmt.Sprintf(format, args...)) }
	issued := map[string]bool{}
	examples := map[string]int{}
	example := func(kind, format string, args ...any) {
		examples[kind]++
		if examples[kind] <= 5 {
			fail(kind+": "+format, args...)
		}
	}
	rep.Rows = map[rowRule]*RowCount{
		rowsOne:     {Expected: "exactly 1 each"},
		rowsNone:    {Expected: "0"},
		rowsAtMost1: {Expected: "≤ 1 of each model"},
	}
	for _, o := range rep.Outcomes {
		issued[o.id] = true
		rs := byID[o.id]
		c := rep.Rows[o.rule]
		c.Requests++
		c.Written += len(rs)
		switch o.rule {
		case rowsOne:
			if len(rs) != 1 {
				c.Bad++
				example("one row per answered request", "%s (%s %d %s) has %d rows: %s", o.id, o.op, o.status, o.code, len(rs), describeRows(rs))
			} else if o.status == 200 && rs[0].status != 200 {
				c.Bad++
				example("the row carries the answer's status", "%s answered 200, its %s row says %d", o.id, rs[0].model, rs[0].status)
			}
		case rowsNone:
			if len(rs) != 0 {
				c.Bad++
				example("no row before the daemon", "%s (%s %d %s) has %d rows", o.id, o.op, o.status, o.code, len(rs))
			}
		case rowsAtMost1:
			models := map[string]int{}
			for _, x := range rs {
				models[x.model]++
			}
			if models["query"] > 1 || models["prepare"] > 1 {
				c.Bad++
				example("never two rows of a kind for one request", "%s (%s %d %s) has rows %v", o.id, o.op, o.status, o.code, models)
			}
			if models["query"] == 1 && models["prepare"] == 1 {
				rep.QueryAndPrepare++
			}
		}
	}
	for id, rs := range byID {
		if !issued[id] {
			example("no row from nowhere", "request id %q has %d rows but was never sent", id, len(rs))
		}
	}
	for id, n := range prepares {
		if n > 1 {
			example("one prepare row per prepare id", "prepare id %s has %d prepare rows", id, n)
		}
	}
	for _, id := range rep.Leavers {
		charged := false
		for _, x := range byID[id] {
			if x.model == "prepare" {
				charged = true
			}
		}
		rep.LeaversCharged = append(rep.LeaversCharged, charged)
	}

	// The customer pays once per revision per grace window (CONTRACT §5),
	// whatever happened inside the service: evictions, restarts, failover.
	// The whole run lies inside the default 24 h window.
	twice, err := pool.Query(ctx, `SELECT payer_org, coalesce(tenant_key, ''), coalesce(repo, ''), coalesce(commit, ''), count(*)
		FROM ledger_rows WHERE model = 'prepare' AND amount_cents < 0
		GROUP BY 1, 2, 3, 4 HAVING count(*) > 1`)
	if err != nil {
		return fmt.Errorf("ledger checks: %w", err)
	}
	for twice.Next() {
		var org, tk, repo, commit string
		var n int
		if err := twice.Scan(&org, &tk, &repo, &commit, &n); err != nil {
			twice.Close()
			return fmt.Errorf("ledger checks: %w", err)
		}
		rep.ChargedTwice++
		example("one charge per revision", "%s %s@%s was charged %d times", org, repo, commit, n)
	}
	twice.Close()
	var free int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM ledger_rows WHERE model = 'prepare' AND reason = 'reprepare'`).Scan(&free); err != nil {
		return fmt.Errorf("ledger checks: %w", err)
	}
	rep.RepreparesFree = free

	// The workspaces the disk budget evicted: prepared again later (through
	// the proxy), and never charged a second time.
	if df := rep.Disk; df != nil && len(df.Evicted) > 0 {
		rs, err := pool.Query(ctx, `SELECT coalesce(tenant_key, ''), coalesce(repo, ''), coalesce(commit, ''), amount_cents, created_at >= $1
			FROM ledger_rows WHERE model = 'prepare'`, df.Began)
		if err != nil {
			return fmt.Errorf("ledger checks: %w", err)
		}
		type tally struct{ chargedBefore, after, chargedAfter int }
		by := map[treeKey]*tally{}
		for rs.Next() {
			var k treeKey
			var cents int64
			var after bool
			if err := rs.Scan(&k.tenant, &k.repo, &k.commit, &cents, &after); err != nil {
				rs.Close()
				return fmt.Errorf("ledger checks: %w", err)
			}
			if !df.Evicted[k] {
				continue
			}
			t := by[k]
			if t == nil {
				t = &tally{}
				by[k] = t
			}
			switch {
			case !after && cents < 0:
				t.chargedBefore++
			case after:
				t.after++
				if cents < 0 {
					t.chargedAfter++
				}
			}
		}
		rs.Close()
		if err := rs.Err(); err != nil {
			return fmt.Errorf("ledger checks: %w", err)
		}
		for k, t := range by {
			if t.after == 0 {
				continue
			}
			df.Reprepared++
			switch {
			case t.chargedAfter > 0 && t.chargedBefore > 0:
				df.RepreparedCharged++
				example("an evicted workspace is re-prepared at 0¢", "%s@%s was charged again after its eviction", k.repo, k.commit)
			case t.chargedAfter > 0:
				// Its first charge: the tree had been written but never
				// charged (a hold released when the ledger could not
				// capture it); the customer still pays once.
				df.RepreparedFirstCharge++
			}
		}
	}

	// Balances: the sum of the rows, never below zero.
	bal, err := pool.Query(ctx, `SELECT a.org, a.balance_cents, coalesce(s.total, 0)
		FROM accounts a LEFT JOIN (SELECT payer_org, sum(amount_cents) AS total FROM ledger_rows GROUP BY payer_org) s
		ON s.payer_org = a.org ORDER BY a.org`)
	if err != nil {
		return fmt.Errorf("ledger checks: %w", err)
	}
	for bal.Next() {
		var org string
		var stored, sum int64
		if err := bal.Scan(&org, &stored, &sum); err != nil {
			bal.Close()
			return fmt.Errorf("ledger checks: %w", err)
		}
		rep.Balances = append(rep.Balances, fmt.Sprintf("%s %d¢", org, stored))
		if stored != sum || stored < 0 {
			fail("balance of %s is %d¢, its rows sum to %d¢", org, stored, sum)
		}
	}
	bal.Close()

	// lspctl ledger reconcile, as an operator runs it. Holds are settled or
	// expired by now, so no margin is needed.
	os.Setenv("LSP_DATABASE_URL", r.stack.DatabaseURL)
	var out, errOut bytes.Buffer
	code := ctl.Main(ctx, []string{"ledger", "reconcile", "--margin", "0s"}, &out, &errOut)
	rep.Reconcile = strings.TrimSpace(out.String() + errOut.String())
	rep.ReconcileOK = code == 0
	if code != 0 {
		fail("lspctl ledger reconcile exited %d: %s", code, rep.Reconcile)
	}
	return nil
}

// check adds the client-side verdicts: contract codes only, every hostile
// input refused as the contract says, recovery, health and no leak.
func (rep *Report) check() {
	fail := func(format string, args ...any) { rep.Failures = append(rep.Failures, fmt.Sprintf(format, args...)) }
	leavers := map[string]bool{}
	for _, id := range rep.Leavers {
		leavers[id] = true
	}
	odd := map[string]int{}
	noRetry := map[string]int{}
	for _, o := range rep.Outcomes {
		if o.status == http.StatusTooManyRequests || o.status == http.StatusServiceUnavailable {
			rep.RetryAfterDue++
			if validRetryAfter(o.retryAfter) {
				rep.RetryAfterSent++
			} else {
				noRetry[fmt.Sprintf("%d %s (Retry-After %q)", o.status, o.code, o.retryAfter)]++
			}
		}
		switch {
		case o.status == 0 && !leavers[o.id]:
			odd["no answer"]++
		case o.status >= 400:
			want, ok := contractCodes[o.code]
			if !ok || (want != o.status && !(o.status == 405 && o.code == "invalid_request")) {
				odd[fmt.Sprintf("%d %q", o.status, o.code)]++
			}
		}
	}
	keys := make([]string, 0, len(odd))
	for k := range odd {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fail("answers outside the contract: %s ×%d", k, odd[k])
	}
	for _, k := range sortedKeys(noRetry) {
		fail("429/503 without a valid Retry-After (CONTRACT §4): %s ×%d", k, noRetry[k])
	}
	for _, h := range rep.Hostile {
		if !h.OK {
			fail("hostile input %q: got %d %q, want %d %q %s", h.Name, h.Status, h.Code, h.WantStatus, h.WantCode, h.Note)
		}
	}
	for _, f := range rep.Faults {
		if f.Skipped == "" && !f.Recovered {
			fail("fault %q: not recovered after %v (%s)", f.Name, f.RecoverIn, f.Detail)
		}
	}
	if rep.OutsideRequests != 0 {
		fail("the npm registry or the host a hostile lockfile names was asked %d times: a hostile lockfile is refused before any request", rep.OutsideRequests)
	}
	if df := rep.Disk; df != nil {
		if len(df.Evicted) == 0 {
			fail("disk budget: shard d1's budget was lowered to %s (it held %s) and nothing was evicted", mibs(df.Budget), mibs(df.UsageBefore))
		}
		for _, u := range df.Unanswered {
			fail("disk budget: an evicted workspace did not answer again: %s", u)
		}
		// A tree larger than the whole budget is refused before a byte is
		// written (413 through the proxy). Evictions meanwhile are the
		// lowered budget's, which the daemon enforces under the load.
		if df.OversizeBytes > 0 && !strings.Contains(df.OversizeAnswer, "(ResourceExhausted)") {
			fail("disk budget: a tree over the whole budget: %s", df.oversizeNote())
		}
	}
	for i, k := range rep.PoolChargedMaxKiB {
		if max := rep.Config.MaxRSS; max > 0 && k<<10 > max {
			fail("memory: the kernel charged d%d's jails %s, over LSP_POOL_MAX_RSS %s", i, mib(k), mibs(max))
		}
	}
	if !rep.Healthy {
		fail("after the run the service did not answer every warm workspace, /healthz and /readyz")
	}
	b, a := rep.Before, rep.After
	if a.Goroutines > b.Goroutines+leakSlack {
		fail("goroutines: %d before, %d after", b.Goroutines, a.Goroutines)
	}
	if a.OpenFiles > b.OpenFiles+leakSlack {
		fail("open files: %d before, %d after", b.OpenFiles, a.OpenFiles)
	}
	if a.Children > b.Children {
		fail("child processes: %d before, %d after", b.Children, a.Children)
	}
	if len(rep.Strays) > 0 {
		fail("processes left running from the run's directory: %v", rep.Strays)
	}
}

// validRetryAfter: delay-seconds (a non-negative integer) or an HTTP-date
// (RFC 9110 §10.2.3).
func validRetryAfter(v string) bool {
	if v == "" {
		return false
	}
	if n, err := strconv.Atoi(v); err == nil {
		return n >= 0
	}
	_, err := http.ParseTime(v)
	return err == nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// row is one ledger row of kind lsp.
type row struct {
	id, model, reason, org, prepareID string
	status                            int
}

func describeRows(rs []row) string {
	var out []string
	for _, x := range rs {
		d := fmt.Sprintf("%s %d", x.model, x.status)
		if x.reason != "" {
			d += " " + x.reason
		}
		if x.prepareID != "" {
			d += " prepare " + x.prepareID[:min(8, len(x.prepareID))]
		}
		out = append(out, d)
	}
	return strings.Join(out, "; ")
}
