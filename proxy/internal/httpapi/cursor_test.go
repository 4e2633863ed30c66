package httpapi

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
	"github.com/hanzoai/lsp/proxy/internal/auth"
	"github.com/hanzoai/lsp/proxy/internal/ledger"
	"github.com/hanzoai/lsp/proxy/internal/operation"
)

const (
	cursorTenant = "1111111111111111111111111111111111111111111111111111111111111111"
	cursorCommit = "2222222222222222222222222222222222222222"
)

func cursorRequest() operation.Request {
	return operation.Request{
		Op: daemonv1.Op_OP_REFERENCES, OpName: "locate", Repo: "r", Path: "a.go",
		Line: 3, Character: 4, IncludeDeclaration: true, Limit: 10,
	}
}

// TestCursorRoundTrip: what is sealed opens, with its offset, generation,
// commit and prepare.
func TestCursorRoundTrip(t *testing.T) {
	s := New(Deps{CursorSecret: []byte("secret-a")})
	req := cursorRequest()
	const prep = "0190f7c2-5f1e-4b7a-9c1d-3e2f4a5b6c7d"
	raw := s.sealCursor(cursorTenant, &req, cursorCommit, prep, 20, 7)
	again := cursorRequest()
	c, err := s.openCursor(raw, cursorTenant, &again)
	if err != nil {
		t.Fatal(err)
	}
	if c.Offset != 20 || c.Generation != 7 || c.Commit != cursorCommit || c.Tenant != cursorTenant {
		t.Fatalf("opened %+v", c)
	}
	if again.CursorCommit != cursorCommit || again.CursorPrepareID != prep {
		t.Fatalf("CursorCommit %q, CursorPrepareID %q", again.CursorCommit, again.CursorPrepareID)
	}
	if strings.Contains(raw, cursorTenant) || strings.ContainsAny(raw, "+/= ") {
		t.Fatalf("cursor %q is not opaque URL-safe text", raw)
	}
}

// TestCursorRefused: a tampered, foreign or mismatched cursor is 400.
func TestCursorRefused(t *testing.T) {
	s := New(Deps{CursorSecret: []byte("secret-a")})
	other := New(Deps{CursorSecret: []byte("secret-b")})
	req := cursorRequest()
	raw := s.sealCursor(cursorTenant, &req, cursorCommit, "", 20, 7)
	payload, sig, _ := strings.Cut(raw, ".")

	// A payload rewritten to another offset, signed or not.
	var c cursor
	b, _ := base64.RawURLEncoding.DecodeString(payload)
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	c.Offset = 900
	nb, _ := json.Marshal(c)
	forged := base64.RawURLEncoding.EncodeToString(nb)

	// A correctly signed cursor over more than 1024 bytes is refused by
	// size alone: pad an otherwise valid payload with a field the decoder
	// ignores.
	pad := func(n int) string {
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		m["pad"] = strings.Repeat("x", n)
		pb, _ := json.Marshal(m)
		p := base64.RawURLEncoding.EncodeToString(pb)
		return p + "." + s.sign(p)
	}
	if small := pad(10); len(small) > 1024 {
		t.Fatal("pad(10) is too long")
	} else if _, err := s.openCursor(small, cursorTenant, ptr(cursorRequest())); err != nil {
		t.Fatalf("a padded cursor under the bound is refused, so the size case below proves nothing: %v", err)
	}

	mutate := func(f func(r *operation.Request)) *operation.Request {
		r := cursorRequest()
		f(&r)
		return &r
	}
	cases := []struct {
		name   string
		raw    string
		tenant string
		req    *operation.Request
	}{
		{"payload tampered", forged + "." + sig, cursorTenant, ptr(cursorRequest())},
		{"payload byte flipped", flip(payload, 3) + "." + sig, cursorTenant, ptr(cursorRequest())},
		{"signature byte flipped", payload + "." + flip(sig, 5), cursorTenant, ptr(cursorRequest())},
		{"signature cut", payload + "." + sig[:len(sig)-1], cursorTenant, ptr(cursorRequest())},
		{"signature missing", payload, cursorTenant, ptr(cursorRequest())},
		{"signature empty", payload + ".", cursorTenant, ptr(cursorRequest())},
		{"signed by another proxy key", other.sealCursor(cursorTenant, ptr(cursorRequest()), cursorCommit, "", 20, 7), cursorTenant, ptr(cursorRequest())},
		{"forged and signed by another key", forged + "." + other.sign(forged), cursorTenant, ptr(cursorRequest())},
		{"extra dot", raw + ".x", cursorTenant, ptr(cursorRequest())},
		{"empty", "", cursorTenant, ptr(cursorRequest())},
		{"not base64", "!!!." + s.sign("!!!"), cursorTenant, ptr(cursorRequest())},
		{"signed non-JSON", "eA." + s.sign("eA"), cursorTenant, ptr(cursorRequest())},
		{"oversize", pad(1100), cursorTenant, ptr(cursorRequest())},
		{"another tenant", raw, strings.Repeat("3", 64), ptr(cursorRequest())},
		{"another repo", raw, cursorTenant, mutate(func(r *operation.Request) { r.Repo = "s" })},
		{"another route", raw, cursorTenant, mutate(func(r *operation.Request) { r.OpName = "symbols" })},
		{"another relation", raw, cursorTenant, mutate(func(r *operation.Request) { r.Op = daemonv1.Op_OP_DEFINITION })},
		{"another path", raw, cursorTenant, mutate(func(r *operation.Request) { r.Path = "b.go" })},
		{"another line", raw, cursorTenant, mutate(func(r *operation.Request) { r.Line++ })},
		{"another character", raw, cursorTenant, mutate(func(r *operation.Request) { r.Character++ })},
		{"another query", raw, cursorTenant, mutate(func(r *operation.Request) { r.Query = "x" })},
		{"include_declaration off", raw, cursorTenant, mutate(func(r *operation.Request) { r.IncludeDeclaration = false })},
		{"another limit", raw, cursorTenant, mutate(func(r *operation.Request) { r.Limit = 11 })},
		{"a language", raw, cursorTenant, mutate(func(r *operation.Request) { r.Language = "go" })},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := s.openCursor(c.raw, c.tenant, c.req)
			if err == nil {
				t.Fatal("accepted")
			}
			if e := errorStatus(err); e != 400 {
				t.Fatalf("status %d, want 400: %v", e, err)
			}
			if c.req.CursorCommit != "" {
				t.Fatalf("a refused cursor set CursorCommit %q", c.req.CursorCommit)
			}
		})
	}
}

// TestCursorOverHTTP: a cursor is checked against the selected org after
// the 403 check and before any operation: a cursor of one org is 400 for
// another org of the same principal, and a tampered one is 400.
func TestCursorOverHTTP(t *testing.T) {
	a := newTestAPI(t)
	rt := routeByPath(t, "/locate")
	const body = `{"repo":"r","path":"a.go","line":1,"character":2,"relation":"reference","cursor":%q}`
	b, err := parseBody([]byte(strings.Replace(body, `,"cursor":%q`, "", 1)), rt.fields)
	if err != nil {
		t.Fatal(err)
	}
	req, err := rt.request(b)
	if err != nil {
		t.Fatal(err)
	}
	acme := auth.TenantKey(nil, testOwner)
	sealed := a.s.sealCursor(acme, &req, cursorCommit, "", 100, 1)
	for name, c := range map[string]struct {
		cursor, org string
	}{
		"another org of the principal": {sealed, testMemberOrg},
		"tampered":                     {flip(sealed, 10), testOwner},
		"garbage":                      {"garbage", ""},
	} {
		t.Run(name, func(t *testing.T) {
			rec := a.do(t, http.MethodPost, "/v1/lsp/locate", strings.Replace(body, "%q", jsonString(c.cursor), 1), a.headers(a.token, c.org, true))
			if rec.Code != 400 {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			if e := errorOf(t, rec); e.Message != "the cursor is not valid for this request" {
				t.Fatalf("message %q", e.Message)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// flip changes the byte at i to another base64url character.
func flip(s string, i int) string {
	r := []byte(s)
	if r[i] == 'A' {
		r[i] = 'B'
	} else {
		r[i] = 'A'
	}
	return string(r)
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// FuzzOpenCursor: any string given as an operation or a ledger cursor opens
// only with its kind's signature under the proxy's key; any payload signed
// so (which only the proxy can make) decodes without a panic and opens only
// for its tenant; and what the real encoders seal opens again with what
// they sealed, as its own kind only.
func FuzzOpenCursor(f *testing.F) {
	s := New(Deps{CursorSecret: []byte("fuzz-secret")})
	other := New(Deps{CursorSecret: []byte("other-secret")})
	req := cursorRequest()
	op := s.sealCursor(cursorTenant, &req, cursorCommit, "prep", 20, 7)
	led := s.sealLedgerCursor("acme", ledger.RowFilter{Model: "query"}, 42)
	for _, raw := range []string{op, led, "", ".", "x.y", flip(op, 4), op + ".x", other.sealCursor(cursorTenant, &req, cursorCommit, "", 1, 1)} {
		p, _, _ := strings.Cut(raw, ".")
		b, _ := base64.RawURLEncoding.DecodeString(p)
		f.Add(raw, b, uint32(20), uint64(7), int64(42))
	}
	f.Add("", []byte(`{"t":"`+cursorTenant+`","q":"x","o":-1,"g":1e99}`), uint32(0), uint64(0), int64(-1))
	f.Add("", []byte(`{"k":"ledger","o":"acme","f":"","a":-5}`), uint32(1<<31), uint64(1<<63), int64(1<<62))
	f.Fuzz(func(t *testing.T, raw string, payload []byte, offset uint32, gen uint64, after int64) {
		p, sig, _ := strings.Cut(raw, ".")
		r := cursorRequest()
		if _, err := s.openCursor(raw, cursorTenant, &r); err == nil && (len(raw) > 1024 || sig != s.sign(p)) {
			t.Fatalf("operation cursor %q opened without its signature", raw)
		} else if err != nil && (errorStatus(err) != 400 || r.CursorCommit != "") {
			t.Fatalf("refused with %v, CursorCommit %q", err, r.CursorCommit)
		}
		if _, err := s.parseLedgerCursor(raw); err == nil && (len(raw) > 1024 || sig != s.signLedger(p)) {
			t.Fatalf("ledger cursor %q opened without its signature", raw)
		}

		// A payload signed with the key: the decode alone decides.
		pp := base64.RawURLEncoding.EncodeToString(payload)
		if c, err := s.openCursor(pp+"."+s.sign(pp), cursorTenant, ptr(cursorRequest())); err == nil && c.Tenant != cursorTenant {
			t.Fatalf("opened %+v for another tenant", c)
		}
		if _, err := other.openCursor(pp+"."+s.sign(pp), cursorTenant, ptr(cursorRequest())); err == nil {
			t.Fatal("a cursor opened under another key")
		}
		if c, err := s.parseLedgerCursor(pp + "." + s.signLedger(pp)); err == nil && (c.Kind != "ledger" || c.AfterID < 0) {
			t.Fatalf("opened ledger cursor %+v", c)
		}
		if _, err := s.parseLedgerCursor(pp + "." + s.sign(pp)); err == nil {
			t.Fatal("an operation signature opened a ledger cursor")
		}

		// The real encoders round-trip, each for its own kind only.
		sealed := s.sealCursor(cursorTenant, &req, cursorCommit, "prep", offset, gen)
		r = cursorRequest()
		c, err := s.openCursor(sealed, cursorTenant, &r)
		if err != nil || c.Offset != offset || c.Generation != gen || r.CursorCommit != cursorCommit || r.CursorPrepareID != "prep" {
			t.Fatalf("operation round trip: %+v, %v", c, err)
		}
		if _, err := s.parseLedgerCursor(sealed); err == nil {
			t.Fatal("an operation cursor opened as a ledger cursor")
		}
		if after < 0 {
			return
		}
		sealed = s.sealLedgerCursor("acme", ledger.RowFilter{Model: "query"}, after)
		if got, err := s.openLedgerCursor(sealed, "acme", ledger.RowFilter{Model: "query"}); err != nil || got != after {
			t.Fatalf("ledger round trip: %d, %v", got, err)
		}
		if _, err := s.openCursor(sealed, cursorTenant, ptr(cursorRequest())); err == nil {
			t.Fatal("a ledger cursor opened as an operation cursor")
		}
	})
}
