package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

// amends reads how many rows written ahead the proxy has amended so far.
func amends(t *testing.T) int {
	t.Helper()
	resp, err := http.Get(stack.ProxyURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, `lsp_proxy_stage_seconds_count{stage="ledger_amend"} `); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

// TestRowWrittenAheadSaysWhatWasAnswered: once a workspace has answered, the
// next query's row is written while the daemon works, expecting a 200
// (operation/ahead.go). Whatever the answer turns out to be, each request
// still has exactly one row, and it says what was answered: a 200 stays, a
// refusal by the daemon is amended to its status, and a request that had to
// prepare again (its workspace was deleted meanwhile) has its prepare row
// alone.
func TestRowWrittenAheadSaysWhatWasAnswered(t *testing.T) {
	tn := newTenant(t, "ahead", 10)
	var seq int
	send := func(route string, body map[string]any) (string, answer) {
		t.Helper()
		seq++
		id := fmt.Sprintf("ahead-%d", seq)
		return id, tn.post(t, route, with(body, "repo", tn.repo), "X-Request-Id", id)
	}
	type want struct {
		status int
		model  string
	}
	expect := map[string]want{}
	amendsBefore := amends(t)
	for _, tc := range []struct {
		name   string
		route  string
		body   map[string]any
		status int
		model  string
	}{
		{"cold: prepares", "/hover", helloPos, 200, "prepare"},
		{"warm: nothing expected yet beyond the prepare", "/hover", helloPos, 200, "query"},
		{"warm: as expected", "/locate", helloPos, 200, "query"},
		{"warm: past the end of the file", "/hover", with(helloPos, "line", 100000), 422, "query"},
		{"warm: no such file", "/hover", with(helloPos, "path", "nope.go"), 404, "query"},
		{"warm again after the refusals", "/hover", helloPos, 200, "query"},
		{"delete the workspace", "", nil, 0, ""},
		{"the expectation is stale: this request prepares again", "/hover", helloPos, 200, "prepare"},
		{"warm after the re-prepare", "/symbols", map[string]any{"path": "main.go"}, 200, "query"},
	} {
		if tc.route == "" {
			q := url.Values{"repo": {tn.repo}}.Encode()
			if a := call(t, http.MethodDelete, "/workspaces", q, tn.jwt, tn.forgeToken, ""); a.status != http.StatusOK || a.body["deleted"] != true {
				t.Fatalf("%s: %d %s", tc.name, a.status, a.raw)
			}
			continue
		}
		id, a := send(tc.route, tc.body)
		if a.status != tc.status {
			t.Fatalf("%s: %d %s", tc.name, a.status, a.raw)
		}
		expect[id] = want{tc.status, tc.model}
	}

	// The two refusals were written ahead as 200 and amended (other
	// tests' amends may add to the count, never take from it).
	if n := amends(t) - amendsBefore; n < 2 {
		t.Errorf("%d rows amended; the refusals were not written ahead", n)
	}

	byID := map[string][]want{}
	for _, r := range rows(t, tn.org) {
		if r.Kind == "lsp" {
			byID[r.RequestID] = append(byID[r.RequestID], want{r.HTTPStatus, r.Model})
		}
	}
	for id, w := range expect {
		if got := byID[id]; len(got) != 1 || got[0] != w {
			t.Errorf("request %s: rows %+v, want one %+v", id, got, w)
		}
	}
	if len(byID) != len(expect) {
		t.Errorf("rows for %d requests, want %d: %+v", len(byID), len(expect), byID)
	}
	// The first prepare was charged; the second, within the grace window, is 0¢.
	if b := balance(t, tn.org); b.BalanceCents != 8 || b.HeldCents != 0 {
		t.Errorf("balance %+v; want 8, nothing held", b)
	}
}
