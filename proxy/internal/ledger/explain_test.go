package ledger_test

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/ledger"
)

// planNodes lists the node types of an EXPLAIN (FORMAT JSON) plan with the relation each reads.
func planNodes(plan any, out *[]string) {
	switch p := plan.(type) {
	case map[string]any:
		if nt, ok := p["Node Type"].(string); ok {
			rel, _ := p["Relation Name"].(string)
			*out = append(*out, nt+" "+rel)
		}
		for _, v := range p {
			planNodes(v, out)
		}
	case []any:
		for _, v := range p {
			planNodes(v, out)
		}
	}
}

// At 1 M usage rows (1,000 orgs over 30 days) and 100,000 money rows, every dashboard query — the
// ledger listing with each filter, the usage rollups, the spend cap's counter, the grace check — plans
// without a sequential scan of a big table.
func TestDashboardQueriesUseIndexes(t *testing.T) {
	if testing.Short() || os.Getenv("LSP_SKIP_BIG") != "" {
		t.Skip("loads a million rows")
	}
	t.Parallel()
	_, url := openUnchecked(t)
	conn := connect(t, url)
	start := time.Now()
	if _, err := conn.Exec(ctx, `SET session_replication_role = replica;
		SELECT lsp_usage_partition((now() AT TIME ZONE 'UTC')::date - d) FROM generate_series(0, 30) d;
		INSERT INTO accounts (org, balance_cents, daily_cap_cents) SELECT 'org' || o, 1000000, 100000 FROM generate_series(0, 999) o;
		INSERT INTO ledger_rows (kind, model, payer_org, tenant_key, repo, commit, amount_cents, prepare_id, created_at)
		SELECT 'lsp', 'prepare', 'org' || (i % 1000), 'tk', 'repo' || (i % 7), md5(i::text), -2, 'p' || i,
		       now() - make_interval(secs => (i % (30 * 86400)))
		  FROM generate_series(1, 90000) i;
		INSERT INTO ledger_rows (kind, payer_org, amount_cents, created_at)
		SELECT 'credit', 'org' || (i % 1000), 5, now() - make_interval(secs => (i % (30 * 86400))) FROM generate_series(1, 10000) i;
		INSERT INTO usage_rows (payer_org, tenant_key, subject, repo, commit, op, language, http_status, request_id, prepare_id, prepared, created_at)
		SELECT 'org' || (i % 1000), 'tk', 'alice', 'repo' || (i % 7), md5((i % 90000)::text), 'locate', 'gopls', 200,
		       'r' || i, 'p' || (i % 90000 + 1), false, now() - make_interval(secs => (i % (30 * 86400)))
		  FROM generate_series(1, 1000000) i;
		ANALYZE`); err != nil {
		t.Fatal(err)
	}
	t.Logf("loaded 1,000,000 usage rows and 100,000 money rows in %v", time.Since(start).Round(time.Millisecond))

	type q struct {
		name string
		sql  string
		args []any
	}
	var qs []q
	for _, f := range []ledger.RowFilter{
		{Org: "org7"},
		{Org: "org7", Model: "prepare"},
		{Org: "org7", Model: "credit"},
		{Org: "org7", Model: "query"},
		{Org: "org7", Repo: "repo3"},
		{Org: "org7", Repo: "repo3", Model: "query"},
		{Org: "org7", AfterID: 500000, Settle: time.Minute},
		{Org: "org7", From: time.Now().Add(-48 * time.Hour), To: time.Now().Add(-24 * time.Hour)},
	} {
		sql, args := ledger.RowsQuery(f)
		qs = append(qs, q{fmt.Sprintf("ledger %+v", f), sql, args})
	}
	for _, f := range []ledger.UsageFilter{
		{Org: "org7"},
		{Org: "org7", Repo: "repo3"},
		{Org: "org7", From: time.Now().AddDate(0, 0, -7)},
	} {
		sql, args := ledger.UsageDaysQuery(f)
		qs = append(qs, q{fmt.Sprintf("usage %+v", f), sql, args})
	}
	qs = append(qs,
		q{"spend cap counter", `SELECT coalesce(max(s.cents), 0) FROM spend_daily s WHERE s.org = $1 AND s.day = (now() AT TIME ZONE 'UTC')::date`, []any{"org7"}},
		q{"grace check", `SELECT EXISTS (SELECT 1 FROM ledger_rows r WHERE r.model = 'prepare' AND r.amount_cents < 0
			AND r.payer_org = $1 AND r.repo = $2 AND r.commit = $3 AND r.created_at > now() - interval '24 hours')`, []any{"org7", "repo3", "abc"}},
		q{"the rollup of one day", `SELECT * FROM lsp_usage_rollup_rows($1, $2, $3, NULL)`,
			[]any{"org7", time.Now().Add(-24 * time.Hour), time.Now()}},
	)
	for _, x := range qs {
		var raw string
		if err := conn.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+x.sql, x.args...).Scan(&raw); err != nil {
			t.Fatalf("%s: %v", x.name, err)
		}
		var plan any
		if err := json.Unmarshal([]byte(raw), &plan); err != nil {
			t.Fatal(err)
		}
		var nodes []string
		planNodes(plan, &nodes)
		for _, n := range nodes {
			// The planner may scan a small table or a partition holding a few hours of rows; a
			// sequential scan of anything with more than 10,000 rows fails.
			rel, ok := strings.CutPrefix(n, "Seq Scan ")
			if !ok {
				continue
			}
			var tuples float64
			if err := conn.QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE relname = $1`, rel).Scan(&tuples); err != nil {
				t.Fatal(err)
			}
			if tuples > 10000 {
				t.Errorf("%s: a sequential scan of %s (%.0f rows)", x.name, rel, tuples)
			}
		}
		t.Logf("%s: %s", x.name, strings.Join(nodes, ", "))
	}
}
