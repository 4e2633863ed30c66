package e2e

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/auth"
	"github.com/hanzoai/lsp/proxy/internal/ctl"
	"github.com/hanzoai/lsp/proxy/internal/daemonclient"
	"github.com/hanzoai/lsp/proxy/internal/devforge"
	"github.com/hanzoai/lsp/proxy/internal/devstack"
	"github.com/hanzoai/lsp/proxy/internal/ledger"
)

// The money rules of CONTRACT §5 on the whole path: single flight and the gate under concurrency,
// the re-prepare grace, Idempotency-Key, the ledger going away and coming back, the spend cap, the
// dashboards' view, and `lspctl ledger reconcile` over everything the suite wrote. These tests do
// not run in parallel: one of them stops Postgres under the shared stack.

// moneyHolds counts the holds ever taken for org.
func moneyHolds(t *testing.T, org string) int {
	t.Helper()
	var n int
	if err := stack.Ledger.Pool().QueryRow(context.Background(), `SELECT count(*) FROM holds WHERE org = $1`, org).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// moneyRepo adds a repository with the sample's content to org on the forge.
func moneyRepo(t *testing.T, org, repo string) string {
	t.Helper()
	commit, err := devforge.CreateRepo(stack.ForgeRoot, org, repo, devstack.SampleRepo, "sample "+repo)
	if err != nil {
		t.Fatal(err)
	}
	return commit
}

// TestMoneyConcurrentIdenticalColdRequests: N identical cold requests at once prepare once: one
// prepare row, one hold (the single-flight leader's), every request answered.
func TestMoneyConcurrentIdenticalColdRequests(t *testing.T) {
	tn := newTenant(t, "money-flight", 10)
	const n = 8
	answers := make([]answer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { answers[i] = tn.post(t, "/hover", with(helloPos, "repo", tn.repo)) })
	}
	wg.Wait()
	prepared := 0
	for _, a := range answers {
		if a.status != http.StatusOK {
			t.Fatalf("a concurrent cold hover: %d %s", a.status, a.raw)
		}
		if a.body["prepared"] == true {
			prepared++
		}
	}
	rs := rows(t, tn.org)
	if p, q := filter(rs, "prepare"), filter(rs, "query"); len(p) != 1 || p[0].AmountCents != -2 || len(p)+len(q) != n {
		t.Fatalf("%d concurrent cold requests wrote %d prepare rows and %d query rows; want 1 (−2¢) and %d", n, len(p), len(q), n-1)
	}
	if prepared != 1 {
		t.Fatalf("%d answers say prepared; want 1", prepared)
	}
	if h := moneyHolds(t, tn.org); h != 1 {
		t.Fatalf("%d holds taken; want 1", h)
	}
	if b := balance(t, tn.org); b.BalanceCents != 8 || b.HeldCents != 0 {
		t.Fatalf("balance %+v; want 8, nothing held", b)
	}
}

// TestMoneyFundsForKPrepares: funds for k prepares and N > k distinct cold requests at once: exactly
// k succeed, N − k are refused at the gate (402, nothing fetched), and the balance never goes below
// zero, watched while they run.
func TestMoneyFundsForKPrepares(t *testing.T) {
	const k, n = 2, 5
	tn := newTenant(t, "money-funds", 2*k)
	repos := make([]string, n)
	for i := range repos {
		repos[i] = fmt.Sprint("repo", i)
		moneyRepo(t, tn.org, repos[i])
	}
	stop := make(chan struct{})
	var watched atomic.Int32
	var watch sync.WaitGroup
	watch.Go(func() {
		for {
			b, err := stack.Ledger.Balance(context.Background(), tn.org)
			if err != nil {
				t.Error(err)
				return
			}
			if b.BalanceCents < 0 || b.AvailableCents < 0 {
				t.Errorf("balance went below zero: %+v", b)
			}
			watched.Add(1)
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	})
	answers := make([]answer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { answers[i] = tn.post(t, "/hover", with(helloPos, "repo", repos[i])) })
	}
	wg.Wait()
	close(stop)
	watch.Wait()

	ok, refused := 0, 0
	for i, a := range answers {
		switch {
		case a.status == http.StatusOK && a.body["prepared"] == true:
			ok++
		case a.status == http.StatusPaymentRequired && a.errorCode() == "insufficient_funds":
			refused++
			if d := stack.Forge.PackDownloads(tn.org, repos[i]); d != 0 {
				t.Errorf("%s was refused at the gate but fetched %d times", repos[i], d)
			}
		default:
			t.Fatalf("%s: %d %s", repos[i], a.status, a.raw)
		}
	}
	if ok != k || refused != n-k {
		t.Fatalf("%d succeeded and %d were refused; want %d and %d", ok, refused, k, n-k)
	}
	if b := balance(t, tn.org); b.BalanceCents != 0 || b.HeldCents != 0 {
		t.Fatalf("balance %+v; want 0 and nothing held", b)
	}
	rs := rows(t, tn.org)
	if p, q := filter(rs, "prepare"), filter(rs, "query"); len(p) != k || len(q) != n-k {
		t.Fatalf("%d prepare rows and %d query rows; want %d and %d", len(p), len(q), k, n-k)
	}
	if h := moneyHolds(t, tn.org); h != k {
		t.Fatalf("%d holds taken; want %d (a refused request holds nothing)", h, k)
	}
	t.Logf("balance watched %d times while the requests ran", watched.Load())
}

// TestMoneyReprepareWithinGrace: the daemon loses the workspace (deleted through its own RPC); the
// next request prepares it again for 0¢, recorded as a prepare row with reason reprepare.
func TestMoneyReprepareWithinGrace(t *testing.T) {
	tn := newTenant(t, "money-grace", 10)
	if a := tn.post(t, "/hover", with(helloPos, "repo", tn.repo)); a.status != http.StatusOK || a.body["prepared"] != true {
		t.Fatalf("first hover: %d %s", a.status, a.raw)
	}
	pool, err := daemonclient.Dial([]string{"unix://" + stack.DaemonSock}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	key := daemonclient.Key{TenantKey: auth.TenantKey([]byte("dev-tenant-key-secret"), tn.org), Repo: tn.repo, Commit: tn.commit}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if deleted, err := pool.Pick(key).Delete(ctx, key); err != nil || !deleted {
		t.Fatalf("delete the workspace on the daemon: %v, %v", deleted, err)
	}
	again := tn.post(t, "/hover", with(helloPos, "repo", tn.repo))
	if again.status != http.StatusOK {
		t.Fatalf("hover after the workspace was deleted: %d %s", again.status, again.raw)
	}
	p := filter(rows(t, tn.org), "prepare")
	if len(p) != 2 || p[0].AmountCents != -2 || p[0].Reason != "" || p[1].AmountCents != 0 || p[1].Reason != "reprepare" {
		t.Fatalf("prepare rows %+v; want −2¢ then 0¢ reprepare", p)
	}
	if b := balance(t, tn.org); b.BalanceCents != 8 {
		t.Fatalf("balance %+v; want 8: a revision is paid once per grace window", b)
	}
}

// TestMoneyIdempotencyKey: a retry of a cold request with the same key is answered from the first
// answer, marked replayed, and neither holds nor writes again; another body with the key is 422; a
// key held by an attempt in flight (another replica's, here) is 409.
func TestMoneyIdempotencyKey(t *testing.T) {
	tn := newTenant(t, "money-idem", 10)
	body := with(helloPos, "repo", tn.repo)
	first := tn.post(t, "/hover", body, "Idempotency-Key", "hover-1")
	if first.status != http.StatusOK || first.body["prepared"] != true || first.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first: %d %v %s", first.status, first.header, first.raw)
	}
	for range 2 {
		again := tn.post(t, "/hover", body, "Idempotency-Key", "hover-1")
		if again.status != http.StatusOK || again.raw != first.raw || again.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("retry: %d %v %s", again.status, again.header, again.raw)
		}
	}
	rs := rows(t, tn.org)
	if p, q := filter(rs, "prepare"), filter(rs, "query"); len(p) != 1 || len(q) != 0 {
		t.Fatalf("after a request and two retries: %d prepare rows, %d query rows; want 1 and 0", len(p), len(q))
	}
	if h := moneyHolds(t, tn.org); h != 1 {
		t.Fatalf("%d holds; want 1", h)
	}
	if b := balance(t, tn.org); b.BalanceCents != 8 {
		t.Fatalf("balance %+v; want 8", b)
	}

	other := tn.post(t, "/hover", with(helloPos, "repo", tn.repo, "line", 11), "Idempotency-Key", "hover-1")
	if other.status != http.StatusUnprocessableEntity || other.errorCode() != "idempotency_key_reused" {
		t.Fatalf("same key, another body: %d %s", other.status, other.raw)
	}

	// Another replica runs the same request under key hover-2 right now.
	ctx := context.Background()
	var hash string
	if err := stack.Ledger.Pool().QueryRow(ctx, `SELECT request_hash FROM idempotency_keys WHERE org = $1 AND key = 'hover-1'`, tn.org).Scan(&hash); err != nil {
		t.Fatal(err)
	}
	st, _, err := stack.Ledger.ClaimIdempotencyKey(ctx, ledger.IdempotencyRequest{Org: tn.org, Key: "hover-2", RequestHash: hash,
		Attempt: "another-replica", TTL: time.Hour, Lease: time.Hour})
	if err != nil || st != ledger.IdempotencyClaimed {
		t.Fatalf("claim as another replica: %s %v", st, err)
	}
	busy := tn.post(t, "/hover", body, "Idempotency-Key", "hover-2")
	if busy.status != http.StatusConflict || busy.errorCode() != "idempotency_in_progress" {
		t.Fatalf("same request while another attempt runs: %d %s", busy.status, busy.raw)
	}
	if n := len(rows(t, tn.org)); n != len(rs) {
		t.Fatalf("the refused retries wrote %d rows", n-len(rs))
	}
}

// TestMoneyLedgerDown: with Postgres stopped, requests fail with 503 ledger_unavailable and
// Retry-After; after it is back they work again. Then Postgres crashes (immediate restart) under a
// load of warm requests: every request answered 200 has exactly one row, none has two, and every
// failure said ledger_unavailable.
func TestMoneyLedgerDown(t *testing.T) {
	if stack.PG == nil {
		t.Skip("the stack does not own its Postgres")
	}
	tn := newTenant(t, "money-down", 10)
	if a := tn.post(t, "/hover", with(helloPos, "repo", tn.repo)); a.status != http.StatusOK {
		t.Fatalf("warm-up: %d %s", a.status, a.raw)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var seq atomic.Int64
	type sent struct {
		id     string
		status int
		code   string
	}
	var mu sync.Mutex
	var log []sent
	hover := func() answer {
		id := fmt.Sprintf("money-down-%d", seq.Add(1))
		a := tn.post(t, "/hover", with(helloPos, "repo", tn.repo), "X-Request-Id", id)
		mu.Lock()
		log = append(log, sent{id, a.status, a.errorCode()})
		mu.Unlock()
		if a.status == http.StatusServiceUnavailable && a.header.Get("Retry-After") == "" {
			t.Errorf("a 503 without Retry-After: %s", a.raw)
		}
		return a
	}
	// untilOK retries until the ledger answers again; each attempt is a request of its own.
	untilOK := func() {
		for range 200 {
			if a := hover(); a.status == http.StatusOK {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatal("requests did not work again after Postgres came back")
	}

	if err := stack.PG.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	down := hover()
	if down.status != http.StatusServiceUnavailable || down.errorCode() != "ledger_unavailable" {
		_ = stack.PG.Restart(ctx, false)
		t.Fatalf("hover with Postgres stopped: %d %s", down.status, down.raw)
	}
	if err := stack.PG.Restart(ctx, false); err != nil {
		t.Fatal(err)
	}
	untilOK()

	// A crash under load.
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for !stop.Load() {
				hover()
			}
		})
	}
	time.Sleep(300 * time.Millisecond) // some rows before the crash
	if err := stack.PG.Restart(ctx, true); err != nil {
		stop.Store(true)
		wg.Wait()
		t.Fatal(err)
	}
	untilOK()
	stop.Store(true)
	wg.Wait()

	byID := map[string][]ledger.LedgerRow{}
	for _, r := range rows(t, tn.org) {
		byID[r.RequestID] = append(byID[r.RequestID], r)
	}
	var ok, unavailable int
	for _, s := range log {
		got := byID[s.id]
		switch {
		case s.status == http.StatusOK:
			ok++
			if len(got) != 1 || got[0].HTTPStatus != 200 {
				t.Errorf("request %s was answered 200 but has rows %+v", s.id, got)
			}
		case s.code == "ledger_unavailable":
			unavailable++
			if len(got) > 1 {
				t.Errorf("request %s has %d rows", s.id, len(got))
			}
		default:
			t.Errorf("request %s: %d %s", s.id, s.status, s.code)
		}
	}
	if p := filter(rows(t, tn.org), "prepare"); len(p) != 1 {
		t.Fatalf("%d prepare rows; want 1", len(p))
	}
	if b := balance(t, tn.org); b.BalanceCents != 8 {
		t.Fatalf("balance %+v; want 8", b)
	}
	t.Logf("%d requests: %d answered 200, %d ledger_unavailable", len(log), ok, unavailable)
}

// TestMoneySpendCap: an org's daily cap stops the prepare that would pass it, before any work.
func TestMoneySpendCap(t *testing.T) {
	tn := newTenant(t, "money-cap", 10)
	if err := stack.Ledger.SetDailyCap(context.Background(), tn.org, 2); err != nil {
		t.Fatal(err)
	}
	if a := tn.post(t, "/hover", with(helloPos, "repo", tn.repo)); a.status != http.StatusOK || a.body["prepared"] != true {
		t.Fatalf("the first prepare within the cap: %d %s", a.status, a.raw)
	}
	moneyRepo(t, tn.org, "second")
	a := tn.post(t, "/hover", with(helloPos, "repo", "second"))
	if a.status != http.StatusPaymentRequired || a.errorCode() != "spend_cap_exceeded" {
		t.Fatalf("a prepare past the cap: %d %s", a.status, a.raw)
	}
	if d := stack.Forge.PackDownloads(tn.org, "second"); d != 0 {
		t.Fatalf("the capped request fetched %d times", d)
	}
	if b := balance(t, tn.org); b.BalanceCents != 8 || b.HeldCents != 0 {
		t.Fatalf("balance %+v; want 8", b)
	}
	if q := filter(rows(t, tn.org), "query"); len(q) != 1 || q[0].HTTPStatus != 402 {
		t.Fatalf("query rows %+v; want the capped request's 402 row", q)
	}
}

// TestMoneyDashboard: the billing routes with the tenant's JWT and no forge credential: the balance
// and the rows as the ledger holds them, as JSON and CSV, and reading them writes nothing.
func TestMoneyDashboard(t *testing.T) {
	tn := newTenant(t, "money-dash", 10)
	if a := tn.post(t, "/hover", with(helloPos, "repo", tn.repo)); a.status != http.StatusOK {
		t.Fatalf("hover: %d %s", a.status, a.raw)
	}
	before := rows(t, tn.org)
	bal := call(t, http.MethodGet, "/balance", "", tn.jwt, "", "")
	if bal.status != http.StatusOK || bal.body["org"] != tn.org || bal.body["balance_cents"] != 8.0 || bal.body["available_cents"] != 8.0 {
		t.Fatalf("balance: %d %s", bal.status, bal.raw)
	}
	page := call(t, http.MethodGet, "/ledger", "limit=1", tn.jwt, "", "")
	list, _ := page.body["rows"].([]any)
	if page.status != http.StatusOK || len(list) != 1 || page.body["next_cursor"] == nil {
		t.Fatalf("ledger page: %d %s", page.status, page.raw)
	}
	req, _ := http.NewRequest(http.MethodGet, stack.ProxyURL+"/v1/lsp/ledger", nil)
	req.Header.Set("Authorization", "Bearer "+tn.jwt)
	req.Header.Set("Accept", "text/csv")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	recs, err := csv.NewReader(bytes.NewReader(raw)).ReadAll()
	if err != nil || resp.StatusCode != http.StatusOK || len(recs) != 1+len(before) {
		t.Fatalf("CSV: %d %v, %d records for %d rows: %s", resp.StatusCode, err, len(recs), len(before), raw)
	}
	for i, r := range before {
		if recs[i+1][0] != fmt.Sprint(r.ID) || recs[i+1][10] != fmt.Sprint(r.AmountCents) {
			t.Fatalf("CSV record %q; row %+v", recs[i+1], r)
		}
	}
	member, err := stack.Token("bob@"+tn.org, tn.org, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a := call(t, http.MethodGet, "/ledger", "", member, "", ""); a.status != http.StatusForbidden {
		t.Fatalf("a member without billing:%s: %d %s", tn.org, a.status, a.raw)
	}
	if after := rows(t, tn.org); len(after) != len(before) {
		t.Fatalf("the dashboard's GETs wrote %d rows", len(after)-len(before))
	}
}

// TestMoneyReconcile runs last in this file: `lspctl ledger reconcile` over everything the suite
// wrote so far, faults included, finds every balance equal to its rows, no orphaned hold and no
// prepare id charged twice.
func TestMoneyReconcile(t *testing.T) {
	t.Setenv("LSP_DATABASE_URL", stack.DatabaseURL)
	var out, errOut bytes.Buffer
	if code := ctl.Main(context.Background(), []string{"ledger", "reconcile", "--settle", "1ns"}, &out, &errOut); code != 0 {
		t.Fatalf("lspctl ledger reconcile: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), "ok:") {
		t.Fatalf("reconcile: %s", out.String())
	}
	t.Log(strings.TrimSpace(out.String()))
}
