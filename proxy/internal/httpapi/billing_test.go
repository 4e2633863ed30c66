package httpapi

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/auth"
	"github.com/hanzoai/lsp/proxy/internal/ledger"
	"github.com/hanzoai/lsp/proxy/internal/pgtest"
	"github.com/hanzoai/lsp/proxy/internal/ratelimit"
)

// moneyAPI is a Server with the real verifier and a real ledger on a fresh database, and tokens:
// billing (sub agent-1, owner acme, member of beta, billing:acme and billing:beta), member (owner
// acme, member of beta, no role), auditor (owner zeta, billing:acme only: not a member of acme),
// colleague (another subject of acme).
type moneyAPI struct {
	s                        *Server
	l                        *ledger.Ledger
	billing, member, auditor string
	colleague                string // sub agent-2, owner acme
}

func newMoneyAPI(t *testing.T) *moneyAPI {
	t.Helper()
	dir := t.TempDir()
	priv, pub, err := auth.GenerateDevKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	v, err := auth.NewVerifier(context.Background(), auth.Config{KeysFile: pub, Audience: testAudience}, &http.Client{Timeout: time.Second}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Close)
	var signAs func(subject, owner string, orgs, roles []string) string
	l, err := ledger.Open(context.Background(), pgtest.NewDatabase(t), log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	sign := func(owner string, orgs, roles []string) string {
		return signAs("agent-1", owner, orgs, roles)
	}
	signAs = func(subject, owner string, orgs, roles []string) string {
		tok, err := auth.SignDevToken(priv, auth.DevClaims{Subject: subject, Owner: owner, Orgs: orgs, Roles: roles, Audience: testAudience}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	s := New(Deps{
		Verifier:       v,
		CursorSecret:   []byte("cursor-secret-for-tests-0123456789"),
		ForgeAuth:      "bearer",
		RequestTimeout: 5 * time.Second,
		Log:            log,
		Money:          l,
	})
	return &moneyAPI{
		s: s, l: l,
		billing:   sign(testOwner, []string{testMemberOrg}, []string{"billing:" + testOwner, "billing:" + testMemberOrg}),
		member:    sign(testOwner, []string{testMemberOrg}, nil),
		auditor:   sign("zeta", nil, []string{"billing:" + testOwner}),
		colleague: signAs("agent-2", testOwner, nil, nil),
	}
}

// get serves one GET with the token, X-Org-Id when org is set, and extra headers as pairs.
func (a *moneyAPI) get(t *testing.T, path, tok, org string, hdr ...string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if org != "" {
		req.Header.Set("X-Org-Id", org)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	a.s.Handler().ServeHTTP(rec, req)
	return rec
}

func (a *moneyAPI) rowCount(t *testing.T) int {
	t.Helper()
	var n int
	if err := a.l.Pool().QueryRow(context.Background(), `SELECT count(*) FROM ledger_rows`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// seedRows gives acme a credit, a charged prepare and n query rows (repos alternate web, api), and
// beta one credit.
func (a *moneyAPI) seedRows(t *testing.T, n int) {
	t.Helper()
	ctx := context.Background()
	if err := a.l.Credit(ctx, testOwner, 10, "=1+1"); err != nil {
		t.Fatal(err)
	}
	if err := a.l.Credit(ctx, testMemberOrg, 7, "ops"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.l.Hold(ctx, ledger.HoldRequest{PrepareID: "p1", Org: testOwner, TenantKey: "tk", Repo: "web", Commit: "c1",
		Price: 2, TTL: time.Hour, Grace: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.l.Capture(ctx, ledger.Row{PrepareID: "p1", Org: testOwner, Op: "hover", HTTPStatus: 200}); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		repo := []string{"web", "api"}[i%2]
		if err := a.l.RecordUsage(ctx, ledger.Row{Org: testOwner, TenantKey: "tk", Repo: repo, Commit: "c1", Op: "locate",
			Language: "go", RequestID: fmt.Sprint("r", i), HTTPStatus: 200, PrepareID: "p1"}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestBalanceRoute(t *testing.T) {
	a := newMoneyAPI(t)
	a.seedRows(t, 3)
	if _, err := a.l.Hold(context.Background(), ledger.HoldRequest{PrepareID: "p2", Org: testOwner, TenantKey: "tk", Repo: "web", Commit: "c2",
		Price: 2, TTL: time.Hour, Grace: time.Hour}); err != nil {
		t.Fatal(err)
	}
	before := a.rowCount(t)
	rec := a.get(t, "/v1/lsp/balance", a.billing, "") // no X-Forge-Token: none needed
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("balance: %d %s", rec.Code, rec.Body)
	}
	var got map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"org": "acme", "balance_cents": 8.0, "held_cents": 2.0, "available_cents": 6.0}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("balance = %v; want %v", got, want)
	}
	if rec := a.get(t, "/v1/lsp/balance", a.billing, testMemberOrg); rec.Code != 200 || !strings.Contains(rec.Body.String(), `"balance_cents":7`) {
		t.Fatalf("balance of the member org: %d %s", rec.Code, rec.Body)
	}
	for _, tc := range []struct {
		name, path, tok, org string
		status               int
		code                 string
	}{
		{"no token", "/v1/lsp/balance", "", "", 401, "unauthenticated"},
		{"no token, bad query", "/v1/lsp/balance?org=beta", "", "", 401, "unauthenticated"},
		{"a query parameter", "/v1/lsp/balance?org=beta", a.billing, "", 400, "invalid_request"},
		{"bad query before org", "/v1/lsp/balance?x=1", a.billing, foreignOrg, 400, "invalid_request"},
		{"no billing role", "/v1/lsp/balance", a.member, "", 403, "forbidden"},
		{"foreign org", "/v1/lsp/balance", a.billing, foreignOrg, 403, "forbidden"},
		{"role but not a member", "/v1/lsp/balance", a.auditor, testOwner, 403, "forbidden"},
		{"role for another org", "/v1/lsp/balance", a.auditor, "", 403, "forbidden"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := a.get(t, tc.path, tc.tok, tc.org)
			if rec.Code != tc.status || errorOf(t, rec).Code != tc.code {
				t.Fatalf("%d %s; want %d %s", rec.Code, rec.Body, tc.status, tc.code)
			}
		})
	}
	if n := a.rowCount(t); n != before {
		t.Fatalf("GETs wrote %d rows", n-before)
	}
	a.l.Close()
	rec = a.get(t, "/v1/lsp/balance", a.billing, "")
	if rec.Code != 503 || errorOf(t, rec).Code != "ledger_unavailable" || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("balance with the ledger gone: %d %s %v", rec.Code, rec.Body, rec.Header())
	}
}

// ledgerPage is one decoded JSON page.
type ledgerPage struct {
	Org        string           `json:"org"`
	Rows       []map[string]any `json:"rows"`
	NextCursor *string          `json:"next_cursor"`
}

func (a *moneyAPI) page(t *testing.T, query, tok, org string) ledgerPage {
	t.Helper()
	rec := a.get(t, "/v1/lsp/ledger"+query, tok, org)
	if rec.Code != 200 {
		t.Fatalf("GET /ledger%s: %d %s", query, rec.Code, rec.Body)
	}
	var p ledgerPage
	dec := json.NewDecoder(rec.Body)
	dec.UseNumber()
	if err := dec.Decode(&p); err != nil {
		t.Fatal(err)
	}
	return p
}

// pageAll follows next_cursor from the first page of query.
func (a *moneyAPI) pageAll(t *testing.T, query string) []map[string]any {
	t.Helper()
	var all []map[string]any
	q := query
	for range 1000 {
		p := a.page(t, q, a.billing, "")
		all = append(all, p.Rows...)
		if p.NextCursor == nil {
			return all
		}
		sep := "&"
		if query == "" {
			sep = "?"
		}
		q = query + sep + "cursor=" + url.QueryEscape(*p.NextCursor)
	}
	t.Fatal("next_cursor never ended")
	return nil
}

func TestLedgerRouteJSON(t *testing.T) {
	a := newMoneyAPI(t)
	a.seedRows(t, 7)
	before := a.rowCount(t)

	first := a.page(t, "", a.billing, "")
	if first.Org != "acme" || len(first.Rows) != 9 || first.NextCursor != nil {
		t.Fatalf("first page: org %q, %d rows, cursor %v", first.Org, len(first.Rows), first.NextCursor)
	}
	credit, prepare, query := first.Rows[0], first.Rows[1], first.Rows[2]
	for name, tc := range map[string]struct {
		row  map[string]any
		want map[string]string
	}{
		"credit":  {credit, map[string]string{"kind": "credit", "model": "<nil>", "amount_cents": "10", "subject": "=1+1", "http_status": "<nil>", "repo": "<nil>", "payer_org": "acme"}},
		"prepare": {prepare, map[string]string{"kind": "lsp", "model": "prepare", "amount_cents": "-2", "prepare_id": "p1", "http_status": "200", "repo": "web", "reason": "<nil>"}},
		"query":   {query, map[string]string{"kind": "lsp", "model": "query", "amount_cents": "0", "request_id": "r0", "op": "locate", "language": "go", "commit": "c1"}},
	} {
		if len(tc.row) != 16 {
			t.Errorf("%s row has %d fields: %v", name, len(tc.row), tc.row)
		}
		for k, v := range tc.want {
			if got := fmt.Sprint(tc.row[k]); got != v {
				t.Errorf("%s row %s = %s; want %s", name, k, got, v)
			}
		}
		if _, err := time.Parse(time.RFC3339Nano, tc.row["created_at"].(string)); err != nil {
			t.Errorf("%s created_at: %v", name, err)
		}
	}

	// Paging visits every row once, in id order, for any page size.
	for _, limit := range []int{1, 2, 4, 1000} {
		rows := a.pageAll(t, fmt.Sprintf("?limit=%d", limit))
		if len(rows) != 9 {
			t.Fatalf("limit %d: %d rows", limit, len(rows))
		}
		for i := 1; i < len(rows); i++ {
			prev, _ := rows[i-1]["id"].(json.Number).Int64()
			cur, _ := rows[i]["id"].(json.Number).Int64()
			if cur <= prev {
				t.Fatalf("limit %d: ids %d then %d", limit, prev, cur)
			}
		}
	}
	for _, tc := range []struct {
		query string
		want  int
	}{
		{"?model=query", 7},
		{"?model=prepare", 1},
		{"?model=credit", 1},
		{"?repo=api", 3},
		{"?repo=web&model=query&limit=2", 4},
		{"?from=" + url.QueryEscape(time.Now().Add(time.Hour).Format(time.RFC3339)), 0},
		{"?to=" + url.QueryEscape(time.Now().Add(time.Hour).Format(time.RFC3339)), 9},
		{"?from=2000-01-01T00:00:00Z&to=" + url.QueryEscape(time.Now().Add(time.Hour).Format(time.RFC3339Nano)), 9},
	} {
		if n := len(a.pageAll(t, tc.query)); n != tc.want {
			t.Errorf("%s: %d rows; want %d", tc.query, n, tc.want)
		}
	}
	if p := a.page(t, "", a.billing, testMemberOrg); p.Org != "beta" || len(p.Rows) != 1 {
		t.Fatalf("the member org's rows: %+v", p)
	}
	if n := a.rowCount(t); n != before {
		t.Fatalf("GETs wrote %d rows", n-before)
	}
}

func TestLedgerRouteRefusals(t *testing.T) {
	a := newMoneyAPI(t)
	a.seedRows(t, 5)
	p := a.page(t, "?limit=2&model=query", a.billing, "")
	cur := *p.NextCursor
	q := url.QueryEscape
	// An operation cursor signed with the same secret is not a ledger cursor.
	rt := routeByPath(t, "/locate")
	b, _ := parseBody([]byte(`{"repo":"r","path":"a.go","line":1,"character":2}`), rt.fields)
	req, _ := rt.request(b)
	opCursor := a.s.sealCursor(auth.TenantKey(nil, testOwner), &req, "c", "", 1, 1)
	for _, tc := range []struct {
		name, query, tok, org string
		status                int
		code                  string
	}{
		{"no token", "?org=beta", "", "", 401, "unauthenticated"},
		{"an org parameter", "?org=beta", a.billing, "", 400, "invalid_request"},
		{"an unknown parameter", "?owner=beta", a.billing, "", 400, "invalid_request"},
		{"a repeated parameter", "?model=query&model=credit", a.billing, "", 400, "invalid_request"},
		{"a bad model", "?model=refund", a.billing, "", 400, "invalid_request"},
		{"a bad repo", "?repo=" + q("../x"), a.billing, "", 400, "invalid_request"},
		{"a bad time", "?from=yesterday", a.billing, "", 400, "invalid_request"},
		{"from after to", "?from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z", a.billing, "", 400, "invalid_request"},
		{"limit 0", "?limit=0", a.billing, "", 400, "invalid_request"},
		{"limit 1001", "?limit=1001", a.billing, "", 400, "invalid_request"},
		{"limit not a number", "?limit=ten", a.billing, "", 400, "invalid_request"},
		{"an empty cursor", "?cursor=", a.billing, "", 400, "invalid_request"},
		{"a malformed query", "?model=%zz", a.billing, "", 400, "invalid_request"},
		{"a bad query before the org check", "?x=1", a.billing, foreignOrg, 400, "invalid_request"},
		{"no billing role", "", a.member, "", 403, "forbidden"},
		{"foreign org", "", a.billing, foreignOrg, 403, "forbidden"},
		{"role but not a member", "", a.auditor, testOwner, 403, "forbidden"},
		{"cursor of other filters", "?model=credit&cursor=" + q(cur), a.billing, "", 400, "invalid_request"},
		{"cursor without its filters", "?cursor=" + q(cur), a.billing, "", 400, "invalid_request"},
		{"cursor of another org", "?model=query&cursor=" + q(cur), a.billing, testMemberOrg, 400, "invalid_request"},
		{"tampered cursor", "?model=query&cursor=" + q(flip(cur, 5)), a.billing, "", 400, "invalid_request"},
		{"an operation cursor", "?model=query&cursor=" + q(opCursor), a.billing, "", 400, "invalid_request"},
		{"garbage cursor", "?cursor=abc.def", a.billing, "", 400, "invalid_request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := a.get(t, "/v1/lsp/ledger"+tc.query, tc.tok, tc.org)
			if rec.Code != tc.status || errorOf(t, rec).Code != tc.code {
				t.Fatalf("%d %s; want %d %s", rec.Code, rec.Body, tc.status, tc.code)
			}
		})
	}
	if rec := a.get(t, "/v1/lsp/ledger?model=query&cursor="+q(cur), a.billing, ""); rec.Code != 200 {
		t.Fatalf("the cursor itself: %d %s", rec.Code, rec.Body)
	}
}

func TestLedgerRouteCSV(t *testing.T) {
	a := newMoneyAPI(t)
	a.seedRows(t, 3)
	rec := a.get(t, "/v1/lsp/ledger?limit=4", a.billing, "", "Accept", "text/csv")
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "text/csv; charset=utf-8" {
		t.Fatalf("CSV: %d %v %s", rec.Code, rec.Header(), rec.Body)
	}
	next := rec.Header().Get("X-Next-Cursor")
	recs, err := csv.NewReader(rec.Body).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 5 || strings.Join(recs[0], ",") != strings.Join(ledger.CSVColumns, ",") || next == "" {
		t.Fatalf("CSV page: %d records, header %q, next %q", len(recs), recs[0], next)
	}
	if recs[1][5] != "'=1+1" || recs[2][10] != "-2" || recs[2][3] != "prepare" || recs[1][3] != "" {
		t.Fatalf("CSV cells: %q", recs[1:3])
	}
	rec = a.get(t, "/v1/lsp/ledger?limit=4&cursor="+url.QueryEscape(next), a.billing, "", "Accept", "text/csv")
	recs, _ = csv.NewReader(rec.Body).ReadAll()
	if rec.Code != 200 || len(recs) != 2 || rec.Header().Get("X-Next-Cursor") != "" {
		t.Fatalf("last CSV page: %d, %d records, next %q", rec.Code, len(recs), rec.Header().Get("X-Next-Cursor"))
	}
	// A JSON cursor and a CSV cursor are the same thing.
	p := a.page(t, "?limit=4", a.billing, "")
	if *p.NextCursor != next {
		t.Fatalf("JSON next_cursor %q, CSV X-Next-Cursor %q", *p.NextCursor, next)
	}
}

func TestWantsCSV(t *testing.T) {
	for accept, want := range map[string]bool{
		"":                                     false,
		"*/*":                                  false,
		"application/json":                     false,
		"text/csv":                             true,
		"text/csv; charset=utf-8":              true,
		"application/json, text/csv":           true,
		"application/json;q=0.9, text/csv":     true,
		"text/csv;q=0.5, application/json":     false,
		"text/csv;q=0":                         false,
		"text/html, text/csv;q=0.8, */*;q=0.1": true,
		"garbage;;;":                           false,
	} {
		if got := wantsCSV(accept); got != want {
			t.Errorf("wantsCSV(%q) = %v; want %v", accept, got, want)
		}
	}
}

// FuzzLedgerQuery: any query string and any cursor are refused or accepted without a panic; an
// accepted query's cursor round-trips and is refused for another org.
func FuzzLedgerQuery(f *testing.F) {
	s := New(Deps{CursorSecret: []byte("fuzz-secret")})
	valid := s.sealLedgerCursor("acme", ledger.RowFilter{Model: "query"}, 42)
	for _, seed := range []string{"", "model=query&limit=5", "from=2026-01-01T00:00:00Z&to=2026-02-01T00:00:00Z",
		"repo=web", "cursor=" + url.QueryEscape(valid) + "&model=query", "limit=-1", "model=%zz", "a=1&a=2", "cursor=x.y"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		vals, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		q := map[string]string{}
		for k, v := range vals {
			if !ledgerParams[k] || len(v) != 1 {
				return
			}
			q[k] = v[0]
		}
		lq, err := parseLedgerQuery(q)
		if err != nil {
			return
		}
		if lq.limit < 1 || lq.limit > maxLedgerLimit {
			t.Fatalf("limit %d accepted", lq.limit)
		}
		if lq.cursor != "" {
			after, err := s.openLedgerCursor(lq.cursor, "acme", lq.filter)
			if err == nil {
				if _, err := s.openLedgerCursor(lq.cursor, "beta", lq.filter); err == nil {
					t.Fatal("a cursor of acme opened for beta")
				}
				if after < 0 {
					t.Fatalf("negative id %d", after)
				}
			}
		}
		c := s.sealLedgerCursor("acme", lq.filter, 7)
		if after, err := s.openLedgerCursor(c, "acme", lq.filter); err != nil || after != 7 {
			t.Fatalf("round trip: %d, %v", after, err)
		}
	})
}

// GET /usage: the org's daily rollups by repository, operation and status; strict parameters; the
// billing role required.
func TestUsageRoute(t *testing.T) {
	a := newMoneyAPI(t)
	a.seedRows(t, 5) // 3 in web, 2 in api, all locate 200; one charged prepare (op hover, no request)
	rec := a.get(t, "/v1/lsp/usage", a.billing, "")
	if rec.Code != http.StatusOK {
		t.Fatalf("usage: %d %s", rec.Code, rec.Body)
	}
	var out struct {
		Org  string            `json:"org"`
		Days []ledger.UsageDay `json:"days"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	today := time.Now().UTC().Format(time.DateOnly)
	var got []string
	for _, d := range out.Days {
		if d.Day != today {
			t.Errorf("day %q, want today %q", d.Day, today)
		}
		got = append(got, fmt.Sprintf("%s %s %d req=%d prep=%d %d¢", d.Repo, d.Op, d.Status, d.Requests, d.Prepares, d.Cents))
	}
	want := "api locate 200 req=2 prep=0 0¢|web locate 200 req=3 prep=0 0¢|web prepare 0 req=0 prep=0 2¢"
	if out.Org != testOwner || strings.Join(got, "|") != want {
		t.Fatalf("usage %s %q; want %q", out.Org, got, want)
	}
	if rec := a.get(t, "/v1/lsp/usage?repo=api&from="+today, a.billing, ""); rec.Code != 200 || !strings.Contains(rec.Body.String(), `"requests":2`) || strings.Contains(rec.Body.String(), `"web"`) {
		t.Fatalf("usage of api from today: %d %s", rec.Code, rec.Body)
	}
	for _, tc := range []struct {
		q, tok string
		status int
	}{
		{"?from=yesterday", a.billing, 400},
		{"?from=2026-01-02&to=2026-01-01", a.billing, 400},
		{"?org=other", a.billing, 400},
		{"", a.member, 403},
	} {
		if rec := a.get(t, "/v1/lsp/usage"+tc.q, tc.tok, ""); rec.Code != tc.status {
			t.Errorf("usage%s: %d %s; want %d", tc.q, rec.Code, rec.Body, tc.status)
		}
	}
}

// The dashboard routes take a token from the org's rate bucket like every route: over it, 429 with
// Retry-After (after 400 and 403).
func TestBillingRateLimited(t *testing.T) {
	a := newMoneyAPI(t)
	a.s.d.RateLimit = ratelimit.New(1e-6, 1) // one request, then 429
	if rec := a.get(t, "/v1/lsp/balance", a.billing, testMemberOrg); rec.Code != 200 {
		t.Fatalf("first: %d %s", rec.Code, rec.Body)
	}
	for _, path := range []string{"/v1/lsp/balance", "/v1/lsp/ledger", "/v1/lsp/usage"} {
		rec := a.get(t, path, a.billing, testMemberOrg)
		if rec.Code != 429 || errorOf(t, rec).Code != "rate_limited" || rec.Header().Get("Retry-After") == "" {
			t.Fatalf("%s over the rate: %d %v %s", path, rec.Code, rec.Header(), rec.Body)
		}
	}
	if rec := a.get(t, "/v1/lsp/balance", a.member, testMemberOrg); rec.Code != 403 {
		t.Fatalf("without the role, over the rate: %d %s", rec.Code, rec.Body)
	}
}
