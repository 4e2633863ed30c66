package soak

import (
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/hanzoai/lsp/proxy/internal/auth"
	"github.com/hanzoai/lsp/proxy/internal/devforge"
	"github.com/hanzoai/lsp/proxy/internal/devstack"
)

// HostileResult is one hostile input and what the proxy answered.
type HostileResult struct {
	Name       string
	WantStatus int
	WantCode   string
	Status     int
	Code       string
	Attempts   int // > 1 when a fault window answered first and the input was sent again
	OK         bool
	Note       string
	RequestID  string
	rule       rowRule
}

// hostileCase is one input of the corpus and its contract answer.
type hostileCase struct {
	name   string
	req    req
	status int
	code   string
	rule   rowRule
	// forge: the input passes the proxy's own checks, so a fault window
	// (502, 503, 504) may answer first; it is then sent again.
	forge bool
	// check inspects a matching answer further ("" when fine).
	check func(answer) string
}

const hostileOrg = "hostile"

// runHostile seeds the hostile org and sends every input of the corpus,
// each until it gets an answer outside a fault window.
func (r *run) runHostile(ctx context.Context) []HostileResult {
	cases, err := r.hostileCases(ctx)
	if err != nil {
		return []HostileResult{{Name: "seed the hostile corpus", Note: err.Error()}}
	}
	var out []HostileResult
	for _, hc := range cases {
		res := HostileResult{Name: hc.name, WantStatus: hc.status, WantCode: hc.code, rule: hc.rule}
		hc.req.expect = &expectation{status: hc.status, code: hc.code, rule: hc.rule}
		var a answer
		for res.Attempts < 20 && ctx.Err() == nil {
			res.Attempts++
			var id string
			var err error
			id, a, err = r.client.do(ctx, hc.req)
			res.RequestID, res.Status, res.Code = id, a.status, a.code
			if err != nil {
				res.Note = "no answer: " + err.Error()
			}
			if hc.forge && (a.status == 502 || a.status == 503 || a.status == 504) {
				// The attempt a fault window answered may have prepared
				// the tree: the retry's prepare answer must still name
				// what preparing it found (the daemon keeps it).
				time.Sleep(time.Second)
				continue
			}
			break
		}
		res.OK = res.Status == hc.status && res.Code == hc.code
		if res.OK && hc.check != nil {
			if msg := hc.check(a); msg != "" {
				res.OK, res.Note = false, msg
			}
		}
		out = append(out, res)
	}
	return out
}

// hostileCases builds the corpus (it needs the hostile repositories and
// tokens, so it seeds them first).
func (r *run) hostileCases(ctx context.Context) ([]hostileCase, error) {
	st := r.stack
	forgeToken := "forge-" + hostileOrg
	for name, files := range hostileRepos() {
		if _, err := devforge.CreateRepo(st.ForgeRoot, hostileOrg, name, files, "hostile"); err != nil {
			return nil, err
		}
	}
	if _, err := devforge.CreateRepo(st.ForgeRoot, hostileOrg, "plain", goRepo("plain", 0), "plain"); err != nil {
		return nil, err
	}
	if _, err := devforge.CreateRepo(st.ForgeRoot, hostileOrg, "withdep", depRepo(r.goSum), "withdep"); err != nil {
		return nil, err
	}
	locks := r.hostileLockfiles()
	for name, lf := range locks {
		if _, err := devforge.CreateRepo(st.ForgeRoot, hostileOrg, name, tsRepo(name, lf[0]), "hostile lockfile"); err != nil {
			return nil, err
		}
	}
	st.Forge.Grant(forgeToken, hostileOrg+"/*")
	// The faults run beside this: a Postgres restart may be under way, so the credit is tried
	// again until the ledger is back (the restart's own bound is far below this one).
	credit := st.Ledger.Credit(ctx, hostileOrg, 1000, "soak")
	for wait := time.Now().Add(time.Minute); credit != nil && time.Now().Before(wait) && ctx.Err() == nil; {
		time.Sleep(500 * time.Millisecond)
		credit = st.Ledger.Credit(ctx, hostileOrg, 1000, "soak")
	}
	if credit != nil {
		return nil, credit
	}
	valid, err := st.Token("mallory@"+hostileOrg, hostileOrg, nil, nil)
	if err != nil {
		return nil, err
	}
	r.warmMu.Lock()
	r.hostileTenant = &tenant{org: hostileOrg, jwt: valid, forge: forgeToken}
	r.warmMu.Unlock()
	tokens, err := r.badTokens(valid)
	if err != nil {
		return nil, err
	}

	post := func(route string, body any) req {
		var b []byte
		switch v := body.(type) {
		case string:
			b = []byte(v)
		case []byte:
			b = v
		default:
			b, _ = json.Marshal(v)
		}
		return req{route: "/v1/lsp/" + route, body: b, jwt: valid, forge: forgeToken, org: hostileOrg, op: route}
	}
	pos := func(repo, path string, line, char int64) map[string]any {
		return map[string]any{"repo": repo, "path": path, "line": line, "character": char}
	}
	with := func(q req, mut func(*req)) req { mut(&q); return q }
	bad := func(name string, q req) hostileCase {
		return hostileCase{name: name, req: q, status: 400, code: "invalid_request", rule: rowsNone}
	}
	hover := func(repo, path string) req { return post("hover", pos(repo, path, 0, 0)) }
	names := func(limit int) func(answer) string {
		return func(a answer) string {
			if !strings.Contains(a.message, fmt.Sprint(limit)) {
				return fmt.Sprintf("the message %q does not name the bound %d", a.message, limit)
			}
			return ""
		}
	}
	warns := func(a answer) string {
		all := strings.Join(a.warnings, " | ")
		for _, w := range []string{"escape", "abs", "dangling"} {
			if !strings.Contains(all, w) {
				return fmt.Sprintf("no warning names %q: %q", w, all)
			}
		}
		return ""
	}

	nested := strings.Repeat("[", 10000) + strings.Repeat("]", 10000)
	cases := []hostileCase{
		bad("malformed JSON", post("hover", `{"repo": "plain", "path":`)),
		bad("oversized JSON (70 KiB)", post("hover", map[string]any{"repo": "plain", "path": strings.Repeat("a", 70<<10), "line": 0, "character": 0})),
		bad("unknown field (org)", post("hover", map[string]any{"repo": "plain", "path": "main.go", "line": 0, "character": 0, "org": "org00"})),
		bad("unknown field (forge_url)", post("hover", map[string]any{"repo": "plain", "path": "main.go", "line": 0, "character": 0, "forge_url": "http://evil"})),
		bad("repeated field", post("hover", `{"repo":"plain","repo":"other","path":"main.go","line":0,"character":0}`)),
		bad("wrong type", post("hover", `{"repo":"plain","path":"main.go","line":"ten","character":0}`)),
		bad("JSON array", post("hover", `[{"repo":"plain"}]`)),
		bad("nesting 10000 deep", post("hover", `{"repo":`+nested+`}`)),
		bad("invalid UTF-8", post("hover", []byte("{\"repo\":\"plain\",\"path\":\"m\xff\xfe.go\",\"line\":0,\"character\":0}"))),
		bad("text/plain body", with(post("hover", pos("plain", "main.go", 0, 0)), func(q *req) { q.header = map[string]string{"Content-Type": "text/plain"} })),
		bad("empty body", post("hover", "")),
		bad("trailing data", post("hover", `{"repo":"plain","path":"main.go","line":0,"character":0} {}`)),
		bad("negative line", post("hover", pos("plain", "main.go", -1, 0))),
		bad("negative character", post("hover", pos("plain", "main.go", 0, -5))),
		bad("path ../ escape", hover("plain", "../../etc/passwd")),
		bad("path a/../main.go", hover("plain", "greet/../main.go")),
		bad("path ./main.go", hover("plain", "./main.go")),
		bad("path absolute", hover("plain", "/etc/passwd")),
		bad("path NUL", hover("plain", "main.go\x00.txt")),
		bad("path backslash", hover("plain", `..\..\etc\passwd`)),
		bad("path empty segment", hover("plain", "greet//greet.go")),
		bad("path control character", hover("plain", "main\n.go")),
		bad("path very long (4 KiB)", hover("plain", strings.Repeat("long/", 800)+"x.go")),
		bad("repo ../other", hover("../org00", "main.go")),
		bad("repo with slash", hover("org00/repo0", "main.go")),
		bad("limit 5000", post("symbols", map[string]any{"repo": "plain", "path": "main.go", "limit": 5000})),
		bad("position on a non-position route", post("symbols", map[string]any{"repo": "plain", "path": "main.go", "line": 1})),
		bad("relation unknown", post("locate", map[string]any{"repo": "plain", "path": "main.go", "line": 10, "character": 20, "relation": "everything"})),
		{name: "line 2^40", req: post("hover", pos("plain", "main.go", 1<<40, 0)), status: 422, code: "position_out_of_range", rule: rowsNone},
		{name: "short sha rev", req: with(post("hover", map[string]any{"repo": "plain", "rev": "abc123", "path": "main.go", "line": 0, "character": 0}), func(*req) {}), status: 400, code: "invalid_request", rule: rowsNone, forge: true},

		// Identity.
		{name: "no bearer token", req: with(hover("plain", "main.go"), func(q *req) { q.jwt = "" }), status: 401, code: "unauthenticated"},
		{name: "garbage token", req: with(hover("plain", "main.go"), func(q *req) { q.jwt = "not.a.jwt" }), status: 401, code: "unauthenticated"},
		{name: "forged token (unknown key)", req: with(hover("plain", "main.go"), func(q *req) { q.jwt = tokens["unknown-key"] }), status: 401, code: "unauthenticated"},
		{name: "forged token (known kid, other key)", req: with(hover("plain", "main.go"), func(q *req) { q.jwt = tokens["known-kid"] }), status: 401, code: "unauthenticated"},
		{name: "expired token (the stack's key)", req: with(hover("plain", "main.go"), func(q *req) { q.jwt = tokens["expired"] }), status: 401, code: "unauthenticated"},
		{name: "alg none token", req: with(hover("plain", "main.go"), func(q *req) { q.jwt = tokens["none"] }), status: 401, code: "unauthenticated"},
		{name: "wrong audience", req: with(hover("plain", "main.go"), func(q *req) { q.jwt = tokens["audience"] }), status: 401, code: "unauthenticated"},
		{name: "tampered payload (owner swapped)", req: with(hover("plain", "main.go"), func(q *req) { q.jwt = tokens["tampered"] }), status: 401, code: "unauthenticated"},
		{name: "no forge token", req: with(hover("plain", "main.go"), func(q *req) { q.forge = "" }), status: 401, code: "unauthenticated"},
		{name: "X-Org-Id of another org", req: with(hover("plain", "main.go"), func(q *req) { q.header = map[string]string{"X-Org-Id": "org00"} }), status: 403, code: "forbidden"},

		// The forge decides.
		{name: "repository that does not exist", req: hover("nosuchrepo", "main.go"), status: 404, code: "not_found", rule: rowsNone, forge: true},
		{name: "another tenant's forge token", req: with(hover("plain", "main.go"), func(q *req) { q.forge = "forge-org00" }), status: 404, code: "not_found", rule: rowsNone, forge: true},
		{name: "unknown branch", req: post("hover", map[string]any{"repo": "plain", "rev": "refs/heads/nope", "path": "main.go", "line": 0, "character": 0}), status: 404, code: "not_found", rule: rowsNone, forge: true},

		// The daemon decides (the request reached it: one row each).
		{name: "position past the end of the file", req: post("hover", pos("plain", "main.go", 9999, 0)), status: 422, code: "position_out_of_range", rule: rowsOne, forge: true},
		{name: "%2e%2e (a legal name, never decoded), absent", req: hover("plain", "%2e%2e"), status: 404, code: "not_found", rule: rowsOne, forge: true},
		{name: "%2e%2e/main.go, absent", req: hover("plain", "%2e%2e/main.go"), status: 404, code: "not_found", rule: rowsOne, forge: true},
		{name: "%2e%2e/x.go, present", req: post("symbols", map[string]any{"repo": "dotdot", "path": "%2e%2e/x.go"}), status: 200, rule: rowsOne, forge: true},
		{name: "path very deep (300 segments), absent", req: hover("plain", strings.Repeat("d/", 300)+"x.go"), status: 404, code: "not_found", rule: rowsOne, forge: true},
		{name: "declaration (gopls has none)", req: post("locate", map[string]any{"repo": "plain", "path": "main.go", "line": 10, "character": 20, "relation": "declaration"}), status: 422, code: "capability_unavailable", rule: rowsOne, forge: true},
		{name: "tampered cursor", req: post("symbols", map[string]any{"repo": "plain", "path": "main.go", "cursor": "eyJvIjoxfQ.AAAA"}), status: 400, code: "invalid_request", rule: rowsAtMost1, forge: true},

		// Trees (CONTRACT §3).
		{name: "symlinks out of the tree: served, with warnings", req: post("prepare", map[string]any{"repo": "symlinks"}), status: 200, rule: rowsOne, forge: true, check: warns},
		{name: "dropped out-of-tree symlink", req: hover("symlinks", "escape"), status: 404, code: "not_found", rule: rowsOne, forge: true},
		{name: "huge file (over LSP_TREE_MAX_FILE_BYTES)", req: hover("hugefile", "main.go"), status: 413, code: "tree_too_large", rule: rowsOne, forge: true, check: names(treeMaxFileBytes)},
		{name: "many files (over LSP_TREE_MAX_FILES)", req: hover("manyfiles", "main.go"), status: 413, code: "tree_too_large", rule: rowsOne, forge: true, check: names(treeMaxFiles)},
		{name: "many bytes (over LSP_TREE_MAX_BYTES)", req: hover("bulky", "main.go"), status: 413, code: "tree_too_large", rule: rowsOne, forge: true, check: names(treeMaxBytes)},
		{name: "deep tree (over LSP_TREE_MAX_DEPTH)", req: hover("deep", "main.go"), status: 413, code: "tree_too_large", rule: rowsOne, forge: true, check: names(treeMaxDepth)},
		{name: "many directories (over LSP_TREE_MAX_DIRS)", req: hover("chains", "main.go"), status: 413, code: "tree_too_large", rule: rowsOne, forge: true, check: names(treeMaxDirs)},
		{name: "binary blob: hover", req: hover("binary", "blob.bin"), status: 422, code: "unsupported_language", rule: rowsOne, forge: true},
		{name: "binary bytes in a .go file: diagnostics", req: post("diagnostics", map[string]any{"repo": "binary", "path": "blob.go"}), status: 200, rule: rowsOne, forge: true},

		// Language-server output pointing outside the workspace (CONTRACT §4):
		// gopls answers with a file in GOROOT; the answer names the module
		// and a module-relative path, never a host path.
		{name: "definition in GOROOT: external, std module, no host path", req: post("locate", pos("plain", "main.go", 10, 6)), status: 200, rule: rowsOne, forge: true,
			check: externalIn("std@go", "fmt/print.go", goroot(), r.cfg.Dir)},
		// … and in the module cache the daemon filled from its mirror.
		{name: "definition in the module cache: external, module@version, no host path", req: post("locate", pos("withdep", "main.go", 5, 14)), status: 200, rule: rowsOne, forge: true,
			check: externalIn(depModule+"@"+depVersion, "dep.go", r.cfg.Dir)},

		// Routes.
		{name: "unknown route", req: post("nope", pos("plain", "main.go", 0, 0)), status: 404, code: "not_found"},
		// A known path with the wrong method: 405 invalid_request, and Allow
		// says what the path takes (RFC 9110 §15.5.6).
		{name: "GET on an operation route", req: with(hover("plain", "main.go"), func(q *req) { q.method = http.MethodGet }), status: 405, code: "invalid_request",
			check: func(a answer) string {
				if !strings.Contains(a.header.Get("Allow"), http.MethodPost) {
					return fmt.Sprintf("Allow is %q", a.header.Get("Allow"))
				}
				return ""
			}},
	}
	// Hostile lockfiles in TypeScript repositories: the prepare answers,
	// with a warning saying why the lockfile was refused; no request
	// leaves (checked at the end: Report.OutsideRequests).
	for _, name := range sortedKeys(locks) {
		cases = append(cases, hostileCase{name: "package-lock.json " + name + ": prepared, with a warning", req: post("prepare", map[string]any{"repo": name}),
			status: 200, rule: rowsOne, forge: true, check: warnsOf(locks[name][1])})
	}
	if r.cfg.TypeScript != "" {
		cases = append(cases, hostileCase{name: "hover in that TypeScript repository (served)", req: post("hover", pos("lock-outside", "src/add.ts", 1, 17)),
			status: 200, rule: rowsOne, forge: true})
	}
	return cases, nil
}

// goroot is the Go installation the daemons run with (their PATH's go).
func goroot() string {
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// badTokens makes the identity attacks: a key the proxy never saw, the
// stack's kid on another key, an expired token signed with the stack's own
// key, alg none, another audience, and a valid token with its payload swapped.
func (r *run) badTokens(valid string) (map[string]string, error) {
	st := r.stack
	dir := filepath.Join(r.cfg.Dir, "mallory")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	otherKey, _, err := auth.GenerateDevKey(dir)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	claims := auth.DevClaims{Subject: "mallory@" + hostileOrg, Owner: hostileOrg, Audience: devstack.Audience}
	if out["unknown-key"], err = auth.SignDevToken(otherKey, claims, time.Hour); err != nil {
		return nil, err
	}
	kid, err := kidOf(valid)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	live := jwt.MapClaims{"sub": claims.Subject, "owner": hostileOrg, "aud": devstack.Audience,
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
	if out["known-kid"], err = signWith(otherKey, kid, live); err != nil {
		return nil, err
	}
	expired := jwt.MapClaims{"sub": claims.Subject, "owner": hostileOrg, "aud": devstack.Audience,
		"iat": now.Add(-3 * time.Hour).Unix(), "exp": now.Add(-2 * time.Hour).Unix()}
	if out["expired"], err = signWith(st.KeyFile, kid, expired); err != nil {
		return nil, err
	}
	enc := base64.RawURLEncoding
	hdr, _ := json.Marshal(map[string]string{"alg": "none", "typ": "JWT", "kid": kid})
	pl, _ := json.Marshal(live)
	out["none"] = enc.EncodeToString(hdr) + "." + enc.EncodeToString(pl) + "."
	if out["audience"], err = auth.SignDevToken(st.KeyFile, auth.DevClaims{Subject: claims.Subject, Owner: hostileOrg, Audience: "someone-else"}, time.Hour); err != nil {
		return nil, err
	}
	parts := strings.Split(valid, ".")
	swapped := jwt.MapClaims{"sub": claims.Subject, "owner": "org00", "aud": devstack.Audience,
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
	sp, _ := json.Marshal(swapped)
	out["tampered"] = parts[0] + "." + enc.EncodeToString(sp) + "." + parts[2]
	return out, nil
}

func kidOf(token string) (string, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return "", errors.New("kid: not a JWS")
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		return "", fmt.Errorf("kid: %w", err)
	}
	var h struct {
		KID string `json:"kid"`
	}
	if err := json.Unmarshal(raw, &h); err != nil {
		return "", fmt.Errorf("kid: %w", err)
	}
	return h.KID, nil
}

// signWith signs claims with the Ed25519 PKCS#8 key at path, under kid.
func signWith(path, kid string, claims jwt.MapClaims) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return "", errors.New("sign: no PEM block")
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return "", fmt.Errorf("sign: %w", err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return "", fmt.Errorf("sign: %T is not an Ed25519 key", k)
	}
	t := jwt.NewWithClaims(jwt.SigningMethodEdDSA, claims)
	t.Header["kid"] = kid
	return t.SignedString(priv)
}
