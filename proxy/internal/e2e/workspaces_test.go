package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/auth"
)

// call makes a GET or DELETE with a raw query string (and optional body).
func call(t *testing.T, method, route, query, jwt, forgeToken, body string, hdr ...string) answer {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, stack.ProxyURL+"/v1/lsp"+route+"?"+query, rd)
	if jwt != "" {
		req.Header.Set("Authorization", "Bearer "+jwt)
	}
	if forgeToken != "" {
		req.Header.Set("X-Forge-Token", forgeToken)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatalf("%s %s: %v", method, route, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, header: resp.Header, raw: string(raw)}
	if err := json.Unmarshal(raw, &a.body); err != nil {
		t.Fatalf("%s %s: answer is not JSON: %q", method, route, raw)
	}
	return a
}

// TestCapabilitiesAndDeleteWorkspace: the probe says what a call would
// cost without preparing, charging or writing a row; DELETE removes the
// workspace now, and the next call re-prepares free within the grace.
func TestCapabilitiesAndDeleteWorkspace(t *testing.T) {
	tn := newTenant(t, "probe", 10)
	q := url.Values{"repo": {tn.repo}}.Encode()
	tree := filepath.Join(stack.DaemonRoot, "trees", auth.TenantKey([]byte("dev-tenant-key-secret"), "probe"), tn.repo, tn.commit)
	probe := func(query string) answer {
		t.Helper()
		a := call(t, http.MethodGet, "/capabilities", query, tn.jwt, tn.forgeToken, "")
		if a.status != http.StatusOK {
			t.Fatalf("capabilities: %d %s", a.status, a.raw)
		}
		if a.body["commit"] != tn.commit || a.body["repo"] != tn.repo {
			t.Fatalf("capabilities names %v@%v", a.body["repo"], a.body["commit"])
		}
		return a
	}

	cold := probe(q)
	if cold.body["warm"] != false {
		t.Fatalf("a revision never prepared is warm: %s", cold.raw)
	}
	langs, _ := cold.body["languages"].([]any)
	if len(langs) == 0 {
		t.Fatalf("no languages: %s", cold.raw)
	}
	var goLang map[string]any
	for _, l := range langs {
		if m := l.(map[string]any); m["language"] == "go" {
			goLang = m
		}
	}
	// A cold answer is the daemon's static configuration: what other
	// tenants' workspaces on the shard negotiated (tools, server version,
	// generation) is theirs.
	if goLang == nil || goLang["server"].(map[string]any)["id"] != "gopls" || goLang["warm"] != false {
		t.Fatalf("go entry = %v", goLang)
	}
	if tools, _ := goLang["tools"].([]any); len(tools) != 0 || goLang["server"].(map[string]any)["generation"] != float64(0) || goLang["server"].(map[string]any)["version"] != "" {
		t.Fatalf("a cold go entry carries what a running server negotiated: %v", goLang)
	}
	if n := stack.Forge.PackDownloads("probe", tn.repo); n != 0 {
		t.Fatalf("the probe downloaded content %d times", n)
	}
	if _, err := os.Stat(tree); !os.IsNotExist(err) {
		t.Fatalf("the probe prepared the tree (stat: %v)", err)
	}
	if rs := rows(t, "probe"); len(rs) != 1 {
		t.Fatalf("the probe wrote rows: %+v", rs)
	}

	if a := tn.post(t, "/hover", with(helloPos, "repo", tn.repo)); a.status != http.StatusOK || a.body["prepared"] != true {
		t.Fatalf("first hover: %d %s", a.status, a.raw)
	}
	before := len(rows(t, "probe"))
	if warm := probe(url.Values{"repo": {tn.repo}, "rev": {tn.commit}}.Encode()); warm.body["warm"] != true {
		t.Fatalf("after a prepare the revision is not warm: %s", warm.raw)
	}
	if n := len(rows(t, "probe")); n != before {
		t.Fatalf("the probe wrote %d rows", n-before)
	}
	if _, err := os.Stat(tree); err != nil {
		t.Fatalf("the prepared tree is not where the test looks: %v", err)
	}

	del := call(t, http.MethodDelete, "/workspaces", q, tn.jwt, tn.forgeToken, "")
	if del.status != http.StatusOK || del.body["deleted"] != true || del.body["commit"] != tn.commit {
		t.Fatalf("delete: %d %s", del.status, del.raw)
	}
	if _, err := os.Stat(tree); !os.IsNotExist(err) {
		t.Fatalf("the tree is still on the daemon after DELETE (stat: %v)", err)
	}
	if a := probe(q); a.body["warm"] != false {
		t.Fatalf("after DELETE the revision is still warm: %s", a.raw)
	}
	if again := call(t, http.MethodDelete, "/workspaces", q, tn.jwt, tn.forgeToken, ""); again.status != http.StatusOK || again.body["deleted"] != false {
		t.Fatalf("second delete: %d %s", again.status, again.raw)
	}
	if n := len(rows(t, "probe")); n != before {
		t.Fatalf("DELETE wrote %d rows", n-before)
	}

	// The tenant's own DELETE ended the revision's grace (CONTRACT §5): the
	// next call prepares again and is charged, so one charge does not buy
	// unlimited delete-and-prepare cycles.
	if a := tn.post(t, "/hover", with(helloPos, "repo", tn.repo)); a.status != http.StatusOK {
		t.Fatalf("hover after DELETE: %d %s", a.status, a.raw)
	}
	prepares := filter(rows(t, "probe"), "prepare")
	if len(prepares) != 2 || prepares[1].AmountCents != -2 || prepares[1].Reason != "" {
		t.Fatalf("prepare rows = %+v; want the second charged after the DELETE", prepares)
	}
	if b := balance(t, "probe"); b.BalanceCents != 6 {
		t.Fatalf("balance = %+v; want 6 (charged again after the DELETE)", b)
	}
}

// TestWorkspaceRoutesRefuse: strict query parameters, the order of checks,
// and the forge's ACL, with no side effect.
func TestWorkspaceRoutesRefuse(t *testing.T) {
	tn := newTenant(t, "probe-strict", 10)
	bobJWT, err := stack.Token("bob@probe-strict", "probe-strict", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	stack.Forge.Grant("forge-bob-strict", "elsewhere/*")
	for _, method := range []string{http.MethodGet, http.MethodDelete} {
		route := "/capabilities"
		if method == http.MethodDelete {
			route = "/workspaces"
		}
		for _, tc := range []struct {
			name, query, jwt, forge, body string
			hdr                           []string
			status                        int
			code                          string
		}{
			{"unknown parameter", "repo=hello&org=other", tn.jwt, tn.forgeToken, "", nil, 400, "invalid_request"},
			{"repeated parameter", "repo=hello&repo=other", tn.jwt, tn.forgeToken, "", nil, 400, "invalid_request"},
			{"no repo", "rev=main", tn.jwt, tn.forgeToken, "", nil, 400, "invalid_request"},
			{"short sha", "repo=hello&rev=" + tn.commit[:10], tn.jwt, tn.forgeToken, "", nil, 400, "invalid_request"},
			{"repo with a slash", "repo=other%2Fhello", tn.jwt, tn.forgeToken, "", nil, 400, "invalid_request"},
			{"a body", "repo=hello", tn.jwt, tn.forgeToken, `{"org":"other"}`, nil, 400, "invalid_request"},
			{"no token", "repo=hello", "", tn.forgeToken, "", nil, 401, "unauthenticated"},
			{"no forge token", "repo=hello", tn.jwt, "", "", nil, 401, "unauthenticated"},
			{"foreign org", "repo=hello", tn.jwt, tn.forgeToken, "", []string{"X-Org-Id", "acme"}, 403, "forbidden"},
			{"no forge access", "repo=hello", bobJWT, "forge-bob-strict", "", nil, 404, "not_found"},
			{"no such repo", "repo=nope", bobJWT, "forge-bob-strict", "", nil, 404, "not_found"},
		} {
			t.Run(method+" "+tc.name, func(t *testing.T) {
				a := call(t, method, route, tc.query, tc.jwt, tc.forge, tc.body, tc.hdr...)
				if a.status != tc.status || a.errorCode() != tc.code {
					t.Fatalf("%d %s; want %d %s", a.status, a.raw, tc.status, tc.code)
				}
			})
		}
	}
	if n := stack.Forge.PackDownloads("probe-strict", "hello"); n != 0 {
		t.Fatalf("refused requests downloaded content %d times", n)
	}
	if rs := rows(t, "probe-strict"); len(rs) != 1 {
		t.Fatalf("refused requests wrote rows: %+v", rs)
	}
}

// TestCursorNeverPrepares: a cursor whose workspace is gone (here the tenant deleted it) is 409
// cursor_expired and never prepares the revision again: nothing is held or charged (CONTRACT §4).
func TestCursorNeverPrepares(t *testing.T) {
	tn := newTenant(t, "cursor-gone", 10)
	refs, cursor := firstPageThenDelete(t, tn)
	before := call(t, http.MethodGet, "/balance", "", tn.jwt, "", "")
	page := tn.post(t, "/locate", with(refs, "cursor", cursor))
	if page.status != http.StatusConflict || errCode(page.body) != "cursor_expired" {
		t.Fatalf("the cursor of a deleted workspace: %d %s", page.status, page.raw)
	}
	after := call(t, http.MethodGet, "/balance", "", tn.jwt, "", "")
	if after.body["balance_cents"] != before.body["balance_cents"] || after.body["held_cents"] != 0.0 {
		t.Fatalf("balance %s, then %s: the cursor prepared", before.raw, after.raw)
	}
}

// TestCursorOfAWorkspacePreparedAgain: a workspace deleted and prepared
// again restarts its servers at the same generation, so the generation
// alone would let page 1's cursor read the new servers' pages. The cursor
// is bound to the prepare that answered page 1: 409 cursor_expired.
func TestCursorOfAWorkspacePreparedAgain(t *testing.T) {
	tn := newTenant(t, "cursor-again", 10)
	refs, cursor := firstPageThenDelete(t, tn)
	if again := tn.post(t, "/locate", refs); again.status != http.StatusOK || again.body["prepared"] != true {
		t.Fatalf("the first page again, preparing anew: %d %s", again.status, again.raw)
	}
	page := tn.post(t, "/locate", with(refs, "cursor", cursor))
	if page.status != http.StatusConflict || errCode(page.body) != "cursor_expired" {
		t.Fatalf("the cursor of the earlier prepare: %d %s", page.status, page.raw)
	}
}

// firstPageThenDelete asks tn's first page of references (one per page)
// and deletes the workspace; it returns the request and page 1's cursor.
func firstPageThenDelete(t *testing.T, tn *tenant) (map[string]any, string) {
	t.Helper()
	refs := with(helloPos, "repo", tn.repo, "relation", "reference", "include_declaration", true, "limit", 1)
	first := tn.post(t, "/locate", refs)
	cursor, _ := first.body["next_cursor"].(string)
	if first.status != http.StatusOK || cursor == "" {
		t.Fatalf("first page: %d %s", first.status, first.raw)
	}
	if del := call(t, http.MethodDelete, "/workspaces", url.Values{"repo": {tn.repo}}.Encode(), tn.jwt, tn.forgeToken, ""); del.status != http.StatusOK || del.body["deleted"] != true {
		t.Fatalf("delete: %d %s", del.status, del.raw)
	}
	return refs, cursor
}
