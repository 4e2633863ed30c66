package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/auth"
)

// testAPI is a Server with the real JWT verifier over a fresh development
// key pair and no operation service: every request these tests send must be
// refused before an operation would run, and do fails the test if one is
// not.
type testAPI struct {
	s        *Server
	token    string // sub agent-1, owner acme, also a member of beta
	stranger string // well-formed, signed by a key the proxy does not trust
}

const (
	testAudience  = "lsp-test"
	testForgeTok  = "forge-token-1"
	foreignOrg    = "evil"
	testOwner     = "acme"
	testMemberOrg = "beta"
)

func newTestAPI(t *testing.T) *testAPI {
	t.Helper()
	dir := t.TempDir()
	priv, pub, err := auth.GenerateDevKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	otherPriv, _, err := auth.GenerateDevKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	v, err := auth.NewVerifier(context.Background(), auth.Config{KeysFile: pub, Audience: testAudience}, &http.Client{Timeout: time.Second}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Close)
	claims := auth.DevClaims{Subject: "agent-1", Owner: testOwner, Orgs: []string{testMemberOrg}, Audience: testAudience}
	token, err := auth.SignDevToken(priv, claims, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := auth.SignDevToken(otherPriv, claims, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	s := New(Deps{
		Verifier:       v,
		CursorSecret:   []byte("cursor-secret-for-tests-0123456789"),
		ForgeAuth:      "bearer",
		RequestTimeout: 5 * time.Second,
		Log:            log,
	})
	return &testAPI{s: s, token: token, stranger: stranger}
}

// headers builds request headers: the bearer token (none when tok is ""),
// the forge credential when forge is set, and X-Org-Id when org is set.
func (a *testAPI) headers(tok, org string, forge bool) http.Header {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	if tok != "" {
		h.Set("Authorization", "Bearer "+tok)
	}
	if org != "" {
		h.Set("X-Org-Id", org)
	}
	if forge {
		h.Set("X-Forge-Token", testForgeTok)
	}
	return h
}

// do serves one request. The Server has no operation service, so a request
// that gets past every check panics on it; that is reported as a failure.
func (a *testAPI) do(t *testing.T, method, path, body string, h http.Header) (rec *httptest.ResponseRecorder) {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	for k, v := range h {
		req.Header[k] = v
	}
	rec = httptest.NewRecorder()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("%s %s %s: the request was not refused and reached the operation service: %v", method, path, body, r)
		}
	}()
	a.s.Handler().ServeHTTP(rec, req)
	return rec
}

// errorOf decodes the error envelope and checks its shape.
func errorOf(t *testing.T, rec *httptest.ResponseRecorder) errorDetail {
	t.Helper()
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("error answer has Content-Type %q", ct)
	}
	var raw map[string]map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &raw); err != nil {
		t.Fatalf("error answer is not the envelope: %v: %s", err, rec.Body)
	}
	if len(raw) != 1 || raw["error"] == nil {
		t.Fatalf("error answer is not {\"error\": …}: %s", rec.Body)
	}
	var env errorBody
	if err := json.Unmarshal(rec.Body.Bytes(), &env); err != nil {
		t.Fatal(err)
	}
	if env.Error.Code == "" || env.Error.Message == "" {
		t.Fatalf("error answer without code or message: %s", rec.Body)
	}
	return env.Error
}

// validBodies is one accepted body per POST route.
var validBodies = map[string]string{
	"/prepare":     `{"repo":"r","rev":"refs/heads/main"}`,
	"/hover":       `{"repo":"r","path":"a.go","line":1,"character":2}`,
	"/locate":      `{"repo":"r","path":"a.go","line":1,"character":2,"relation":"reference","include_declaration":true,"limit":5}`,
	"/symbols":     `{"repo":"r","query":"Foo"}`,
	"/diagnostics": `{"repo":"r","path":"a.go"}`,
	"/complete":    `{"repo":"r","path":"a.go","line":0,"character":0}`,
	"/signature":   `{"repo":"r","path":"a.go","line":3,"character":4}`,
	"/calls":       `{"repo":"r","path":"a.go","line":1,"character":2,"direction":"incoming"}`,
	"/types":       `{"repo":"r","path":"a.go","line":1,"character":2,"direction":"subtypes"}`,
	"/read":        `{"repo":"r","path":"a.go","start_line":0,"end_line":9}`,
}

// TestOrderOfChecks: 401 → 400 → 403 (CONTRACT §4) on every POST route. A
// body that names an owner is the bad body: no field can name an org.
func TestOrderOfChecks(t *testing.T) {
	a := newTestAPI(t)
	const badBody = `{"repo":"r","owner":"evil"}`
	if len(validBodies) != len(opRoutes)+1 {
		t.Fatalf("validBodies covers %d routes; there are %d", len(validBodies), len(opRoutes)+1)
	}
	for route, good := range validBodies {
		cases := []struct {
			name   string
			body   string
			h      http.Header
			status int
			code   string
		}{
			{"no token, bad body", badBody, a.headers("", foreignOrg, true), 401, "unauthenticated"},
			{"untrusted key, bad body", badBody, a.headers(a.stranger, foreignOrg, true), 401, "unauthenticated"},
			{"garbage token, bad body", badBody, a.headers("x.y.z", foreignOrg, true), 401, "unauthenticated"},
			{"good token, bad body, foreign org", badBody, a.headers(a.token, foreignOrg, true), 400, "invalid_request"},
			{"good token, bad body, no forge token", badBody, a.headers(a.token, "", false), 400, "invalid_request"},
			{"good token, good body, foreign org", good, a.headers(a.token, foreignOrg, true), 403, "forbidden"},
			{"good token, good body, foreign org, no forge token", good, a.headers(a.token, foreignOrg, false), 403, "forbidden"},
			{"good token, good body, member org, no forge token", good, a.headers(a.token, testMemberOrg, false), 401, "unauthenticated"},
			{"good token, good body, owner, no forge token", good, a.headers(a.token, "", false), 401, "unauthenticated"},
		}
		for _, c := range cases {
			t.Run(route+"/"+c.name, func(t *testing.T) {
				rec := a.do(t, http.MethodPost, "/v1/lsp"+route, c.body, c.h)
				if rec.Code != c.status {
					t.Fatalf("status %d, want %d: %s", rec.Code, c.status, rec.Body)
				}
				if e := errorOf(t, rec); e.Code != c.code {
					t.Fatalf("code %q, want %q", e.Code, c.code)
				}
			})
		}
	}
}

// TestBodyRefusals runs bodies through the real handlers with a foreign
// X-Org-Id: a refused body is 400 (naming the problem), an accepted one
// gets as far as the org check, 403.
func TestBodyRefusals(t *testing.T) {
	a := newTestAPI(t)
	h := a.headers(a.token, foreignOrg, true)
	pos := func(extra string) string {
		return `{"repo":"r","path":"a.go","line":1,"character":2` + extra + `}`
	}
	withPath := func(p string) string {
		b, _ := json.Marshal(map[string]any{"repo": "r", "path": p, "line": 0, "character": 0})
		return string(b)
	}
	withRepo := func(r string) string {
		b, _ := json.Marshal(map[string]any{"repo": r, "path": "a.go", "line": 0, "character": 0})
		return string(b)
	}
	const accepted = 403
	cases := []struct {
		name, route, body string
		status            int
		msg               string // a substring of the message of a refusal
	}{
		// Strict bodies.
		{"unknown field", "/hover", pos(`,"org":"x"`), 400, `unknown field "org"`},
		{"forge url field", "/prepare", `{"repo":"r","forge_url":"http://x"}`, 400, `"forge_url"`},
		{"case variant of a field", "/hover", `{"Repo":"r","path":"a.go","line":1,"character":2}`, 400, `unknown field "Repo"`},
		{"line on symbols", "/symbols", `{"repo":"r","query":"x","line":1}`, 400, `unknown field "line"`},
		{"relation on hover", "/hover", pos(`,"relation":"definition"`), 400, `unknown field "relation"`},
		{"limit on hover", "/hover", pos(`,"limit":5`), 400, `unknown field "limit"`},
		{"cursor on signature", "/signature", pos(`,"cursor":"x"`), 400, `unknown field "cursor"`},
		{"direction on locate", "/locate", pos(`,"direction":"incoming"`), 400, `unknown field "direction"`},
		{"query on diagnostics", "/diagnostics", `{"repo":"r","path":"a.go","query":"x"}`, 400, `unknown field "query"`},
		{"focus path on prepare", "/prepare", `{"repo":"r","path":"a.go"}`, accepted, ""},
		{"focus path out of the tree", "/prepare", `{"repo":"r","path":"../a.go"}`, 400, "segments"},
		{"repeated field", "/hover", `{"repo":"r","repo":"s","path":"a.go","line":1,"character":2}`, 400, `"repo" is repeated`},
		{"repeated field, escaped", "/hover", `{"repo":"r","re\u0070o":"s","path":"a.go","line":1,"character":2}`, 400, `"repo" is repeated`},
		{"repeated field, same value", "/prepare", `{"repo":"r","repo":"r"}`, 400, "repeated"},
		{"trailing object", "/prepare", `{"repo":"r"} {"repo":"s"}`, 400, "one JSON object"},
		{"trailing garbage", "/prepare", `{"repo":"r"}x`, 400, "one JSON object"},
		{"trailing whitespace is fine", "/prepare", "{\"repo\":\"r\"}\n\t ", accepted, ""},
		{"array", "/prepare", `[{"repo":"r"}]`, 400, "one JSON object"},
		{"null", "/prepare", `null`, 400, "one JSON object"},
		{"string", "/prepare", `"r"`, 400, "one JSON object"},
		{"empty body", "/prepare", ``, 400, "one JSON object"},
		{"truncated", "/prepare", `{"repo":"r"`, 400, "one JSON object"},
		{"invalid UTF-8", "/prepare", "{\"repo\":\"r\xff\"}", 400, "UTF-8"},
		{"too large", "/prepare", `{"repo":"r","rev":"` + strings.Repeat("a", MaxBody) + `"}`, 400, "larger than"},
		// Types.
		{"line as string", "/hover", `{"repo":"r","path":"a.go","line":"1","character":2}`, 400, `"line" has the wrong type`},
		{"line fractional", "/hover", `{"repo":"r","path":"a.go","line":1.5,"character":2}`, 400, `"line" has the wrong type`},
		{"line overflows int64", "/hover", `{"repo":"r","path":"a.go","line":99999999999999999999,"character":2}`, 400, `"line" has the wrong type`},
		{"repo as number", "/prepare", `{"repo":7}`, 400, `"repo" has the wrong type`},
		{"repo as object", "/prepare", `{"repo":{"name":"r"}}`, 400, `"repo" has the wrong type`},
		{"include_declaration as string", "/locate", pos(`,"relation":"reference","include_declaration":"yes"`), 400, `"include_declaration" has the wrong type`},
		{"limit as string", "/symbols", `{"repo":"r","query":"x","limit":"5"}`, 400, `"limit" has the wrong type`},
		// Positions.
		{"missing line", "/hover", `{"repo":"r","path":"a.go","character":2}`, 400, "a position is required"},
		{"missing character", "/complete", `{"repo":"r","path":"a.go","line":2}`, 400, "a position is required"},
		{"null line", "/hover", `{"repo":"r","path":"a.go","line":null,"character":2}`, 400, "a position is required"},
		{"symbol and line", "/hover", `{"repo":"r","symbol":"F","line":1,"character":2}`, 400, "give symbol alone"},
		{"empty symbol", "/locate", `{"repo":"r","symbol":""}`, 400, "symbol must be"},
		{"symbol with a space", "/locate", `{"repo":"r","symbol":"a b"}`, 400, "symbol must be"},
		{"text and character", "/hover", `{"repo":"r","path":"a.go","line":1,"character":2,"text":"x"}`, 400, "text or character"},
		{"text without line", "/hover", `{"repo":"r","path":"a.go","text":"x"}`, 400, "text needs line"},
		{"text of two lines", "/hover", `{"repo":"r","path":"a.go","line":1,"text":"a\nb"}`, 400, "one line"},
		{"text without path", "/hover", `{"repo":"r","line":1,"text":"x"}`, 400, "path is required"},
		{"context_lines too many", "/locate", `{"repo":"r","symbol":"F","context_lines":51}`, 400, "context_lines"},
		{"context_lines negative", "/calls", `{"repo":"r","symbol":"F","direction":"incoming","context_lines":-1}`, 400, "context_lines"},
		{"read backwards", "/read", `{"repo":"r","path":"a.go","start_line":5,"end_line":4}`, 400, "end_line"},
		{"read negative", "/read", `{"repo":"r","path":"a.go","start_line":-1}`, 400, "negative"},
		{"read module not a module", "/read", `{"repo":"r","path":"a.go","module":"std"}`, 400, "module must be"},
		{"read without path", "/read", `{"repo":"r","start_line":1}`, 400, "path is required"},
		{"negative line", "/hover", `{"repo":"r","path":"a.go","line":-1,"character":2}`, 400, "negative"},
		{"negative character", "/signature", `{"repo":"r","path":"a.go","line":1,"character":-1}`, 400, "negative"},
		{"zero position", "/hover", `{"repo":"r","path":"a.go","line":0,"character":0}`, accepted, ""},
		{"huge line is past any file", "/hover", `{"repo":"r","path":"a.go","line":4294967296,"character":0}`, 422, "past the end"},
		{"missing path", "/hover", `{"repo":"r","line":1,"character":2}`, 400, "path is required"},
		// Repo and rev.
		{"missing repo", "/hover", `{"path":"a.go","line":1,"character":2}`, 400, "repo is required"},
		{"empty repo", "/hover", withRepo(""), 400, "repo is required"},
		{"repo .", "/hover", withRepo("."), 400, "repo must be"},
		{"repo ..", "/hover", withRepo(".."), 400, "repo must be"},
		{"repo with slash", "/hover", withRepo("org/r"), 400, "repo must be"},
		{"repo leading dash", "/hover", withRepo("-r"), 400, "repo must be"},
		{"repo leading dot", "/hover", withRepo(".r"), 400, "repo must be"},
		{"repo with space", "/hover", withRepo("r r"), 400, "repo must be"},
		{"repo 101 bytes", "/hover", withRepo(strings.Repeat("a", 101)), 400, "repo must be"},
		{"repo 100 bytes", "/hover", withRepo(strings.Repeat("a", 100)), accepted, ""},
		{"repo with dots", "/hover", withRepo("my.repo_1-x"), accepted, ""},
		{"malformed sha rev", "/prepare", `{"repo":"r","rev":"0123456789abcdef0123456789abcdef012345678"}`, 400, "rev must be"},
		{"other ref namespace", "/prepare", `{"repo":"r","rev":"refs/pull/1/head"}`, 400, "rev must be"},
		{"full sha rev", "/prepare", `{"repo":"r","rev":"` + strings.Repeat("ab", 20) + `"}`, accepted, ""},
		{"no rev", "/prepare", `{"repo":"r"}`, accepted, ""},
		// Paths: never decoded, no traversal.
		{"path ..", "/hover", withPath("../a.go"), 400, "segments"},
		{"path inner ..", "/hover", withPath("a/../../b.go"), 400, "segments"},
		{"path .", "/hover", withPath("./a.go"), 400, "segments"},
		{"path leading slash", "/hover", withPath("/etc/passwd"), 400, "relative"},
		{"path NUL", "/hover", withPath("a\x00.go"), 400, "NUL"},
		{"path backslash", "/hover", withPath(`a\b.go`), 400, "'/' separators"},
		{"path backslash traversal", "/hover", withPath(`..\a.go`), 400, "'/' separators"},
		{"path empty segment", "/hover", withPath("a//b.go"), 400, "segments"},
		{"path trailing slash", "/hover", withPath("a/"), 400, "segments"},
		{"path newline", "/hover", withPath("a\n.go"), 400, "control"},
		{"path DEL", "/hover", withPath("a\x7f.go"), 400, "control"},
		{"path too long", "/hover", withPath(strings.Repeat("a", 1025)), 400, "longer than"},
		{"path percent-encoded dots", "/hover", withPath("%2e%2e/a.go"), accepted, ""},
		{"path percent-encoded slash", "/hover", withPath("a%2fb.go"), accepted, ""},
		{"path inner percent dots", "/hover", withPath("a/%2E%2E/b.go"), accepted, ""},
		{"path dots in names", "/hover", withPath("a/..b/c...go"), accepted, ""},
		{"path unicode", "/hover", withPath("dir/ünïcode.go"), accepted, ""},
		// Limits.
		{"limit 0", "/symbols", `{"repo":"r","query":"x","limit":0}`, 400, "limit must be between 1 and 1000"},
		{"limit negative", "/locate", pos(`,"limit":-1`), 400, "limit must be between 1 and 1000"},
		{"limit 1001", "/complete", pos(`,"limit":1001`), 400, "limit must be between 1 and 1000"},
		{"limit 1", "/diagnostics", `{"repo":"r","path":"a.go","limit":1}`, accepted, ""},
		{"limit 1000", "/calls", pos(`,"direction":"outgoing","limit":1000`), accepted, ""},
		// Symbols: exactly one of path and query.
		{"symbols path and query", "/symbols", `{"repo":"r","path":"a.go","query":"x"}`, 400, "not both"},
		{"symbols neither", "/symbols", `{"repo":"r"}`, 400, "path or query is required"},
		{"symbols language without query", "/symbols", `{"repo":"r","path":"a.go","language":"go"}`, 400, "give it with query"},
		{"symbols language not an id", "/symbols", `{"repo":"r","query":"x","language":"Py thon"}`, 400, "LSP language id"},
		{"symbols path", "/symbols", `{"repo":"r","path":"a.go"}`, accepted, ""},
		{"symbols empty query", "/symbols", `{"repo":"r","query":""}`, accepted, ""},
		{"symbols bad path", "/symbols", `{"repo":"r","path":"../a.go"}`, 400, "segments"},
		{"symbols long query", "/symbols", `{"repo":"r","query":"` + strings.Repeat("q", 257) + `"}`, 400, "query is longer"},
		// Locate: relation enum, include_declaration only with reference.
		{"relation default", "/locate", pos(``), accepted, ""},
		{"relation definition", "/locate", pos(`,"relation":"definition"`), accepted, ""},
		{"relation declaration", "/locate", pos(`,"relation":"declaration"`), accepted, ""},
		{"relation type", "/locate", pos(`,"relation":"type"`), accepted, ""},
		{"relation implementation", "/locate", pos(`,"relation":"implementation"`), accepted, ""},
		{"relation reference", "/locate", pos(`,"relation":"reference"`), accepted, ""},
		{"relation plural", "/locate", pos(`,"relation":"references"`), 400, "relation must be"},
		{"relation capitalised", "/locate", pos(`,"relation":"Definition"`), 400, "relation must be"},
		{"relation empty", "/locate", pos(`,"relation":""`), 400, "relation must be"},
		{"include_declaration with reference", "/locate", pos(`,"relation":"reference","include_declaration":false`), accepted, ""},
		{"include_declaration with default relation", "/locate", pos(`,"include_declaration":true`), 400, "include_declaration belongs to relation reference"},
		{"include_declaration with definition", "/locate", pos(`,"relation":"definition","include_declaration":false`), 400, "include_declaration belongs"},
		// Calls and types: direction enums, required.
		{"calls incoming", "/calls", pos(`,"direction":"incoming"`), accepted, ""},
		{"calls outgoing", "/calls", pos(`,"direction":"outgoing"`), accepted, ""},
		{"calls no direction", "/calls", pos(``), 400, "direction must be incoming or outgoing"},
		{"calls types direction", "/calls", pos(`,"direction":"supertypes"`), 400, "direction must be incoming or outgoing"},
		{"types supertypes", "/types", pos(`,"direction":"supertypes"`), accepted, ""},
		{"types subtypes", "/types", pos(`,"direction":"subtypes"`), accepted, ""},
		{"types no direction", "/types", pos(``), 400, "direction must be supertypes or subtypes"},
		{"types calls direction", "/types", pos(`,"direction":"incoming"`), 400, "direction must be supertypes or subtypes"},
		// Content type.
		{"charset is fine", "/prepare", `{"repo":"r"}`, accepted, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := a.do(t, http.MethodPost, "/v1/lsp"+c.route, c.body, h)
			if rec.Code != c.status {
				t.Fatalf("%s %s: status %d, want %d: %s", c.route, c.body, rec.Code, c.status, rec.Body)
			}
			if c.status == accepted {
				return
			}
			e := errorOf(t, rec)
			if !strings.Contains(e.Message, c.msg) {
				t.Fatalf("message %q does not contain %q", e.Message, c.msg)
			}
			if c.status == 400 && e.Code != "invalid_request" {
				t.Fatalf("code %q, want invalid_request", e.Code)
			}
		})
	}
}

// TestContentType: a body that says it is not JSON is refused.
func TestContentType(t *testing.T) {
	a := newTestAPI(t)
	for ct, want := range map[string]int{
		"application/json":                  403,
		"application/json; charset=utf-8":   403,
		"":                                  403,
		"text/plain":                        400,
		"application/x-www-form-urlencoded": 400,
	} {
		h := a.headers(a.token, foreignOrg, true)
		if ct == "" {
			h.Del("Content-Type")
		} else {
			h.Set("Content-Type", ct)
		}
		if rec := a.do(t, http.MethodPost, "/v1/lsp/prepare", `{"repo":"r"}`, h); rec.Code != want {
			t.Errorf("Content-Type %q: status %d, want %d: %s", ct, rec.Code, want, rec.Body)
		}
	}
}

// TestFieldsOfOtherRoutes: every field some route accepts is refused, by
// name, on each route that does not.
func TestFieldsOfOtherRoutes(t *testing.T) {
	a := newTestAPI(t)
	h := a.headers(a.token, foreignOrg, true)
	all := map[string]bool{}
	for _, rt := range opRoutes {
		for f := range rt.fields {
			all[f] = true
		}
	}
	allowed := map[string]map[string]bool{"/prepare": fieldSet(commonFields...)}
	for _, rt := range opRoutes {
		allowed[rt.path] = rt.fields
	}
	for route, fields := range allowed {
		for f := range all {
			if fields[f] {
				continue
			}
			var good map[string]any
			if err := json.Unmarshal([]byte(validBodies[route]), &good); err != nil {
				t.Fatal(err)
			}
			good[f] = 1
			b, _ := json.Marshal(good)
			rec := a.do(t, http.MethodPost, "/v1/lsp"+route, string(b), h)
			if rec.Code != 400 {
				t.Errorf("%s with %q: status %d, want 400", route, f, rec.Code)
				continue
			}
			if e := errorOf(t, rec); !strings.Contains(e.Message, fmt.Sprintf("%q", f)) {
				t.Errorf("%s with %q: message %q does not name the field", route, f, e.Message)
			}
		}
	}
}

// TestUnauthenticatedRoutes: probes and the schema need no token; any
// other path under /v1/lsp does.
func TestUnauthenticatedRoutes(t *testing.T) {
	a := newTestAPI(t)
	if rec := a.do(t, http.MethodGet, "/healthz", "", nil); rec.Code != 200 {
		t.Errorf("/healthz: %d", rec.Code)
	}
	if rec := a.do(t, http.MethodGet, "/readyz", "", nil); rec.Code != 200 {
		t.Errorf("/readyz with nothing to ping: %d", rec.Code)
	}
	rec := a.do(t, http.MethodGet, "/v1/lsp/openapi.json", "", nil)
	if rec.Code != 200 || rec.Body.String() != string(OpenAPI) {
		t.Errorf("/v1/lsp/openapi.json: %d, %d bytes", rec.Code, rec.Body.Len())
	}
	rec = a.do(t, http.MethodPost, "/v1/lsp/nope", `{}`, nil)
	if rec.Code != 401 {
		t.Errorf("unknown /v1/lsp route without a token: %d, want 401", rec.Code)
	}
	rec = a.do(t, http.MethodGet, "/nope", "", nil)
	if rec.Code != 404 || errorOf(t, rec).Code != "not_found" {
		t.Errorf("unknown route: %d %s", rec.Code, rec.Body)
	}
}

// TestRequestID: a sane caller id is echoed, anything else replaced.
func TestRequestID(t *testing.T) {
	a := newTestAPI(t)
	for in, keep := range map[string]bool{
		"abc-123_x.y":           true,
		"":                      false,
		"has space":             false,
		strings.Repeat("a", 65): false,
		"ünï":                   false,
	} {
		h := http.Header{}
		if in != "" {
			h.Set("X-Request-Id", in)
		}
		got := a.do(t, http.MethodGet, "/healthz", "", h).Header().Get("X-Request-Id")
		if keep && got != in || !keep && (got == in || !saneRequestID(got)) {
			t.Errorf("X-Request-Id %q answered as %q", in, got)
		}
	}
}
