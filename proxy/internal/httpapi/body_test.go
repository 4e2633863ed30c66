package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
	"github.com/hanzoai/lsp/proxy/internal/apierr"
	"github.com/hanzoai/lsp/proxy/internal/auth"
	"github.com/hanzoai/lsp/proxy/internal/operation"
)

func routeByPath(t testing.TB, path string) opRoute {
	t.Helper()
	for _, rt := range opRoutes {
		if rt.path == path {
			return rt
		}
	}
	t.Fatalf("no route %s", path)
	return opRoute{}
}

// TestParseBody covers the strict decoder on its own.
func TestParseBody(t *testing.T) {
	allowed := fieldSet("repo", "line", "include_declaration")
	cases := []struct {
		name string
		raw  string
		msg  string // "" when accepted
	}{
		{"ok", `{"repo":"r","line":3,"include_declaration":true}`, ""},
		{"empty object", `{}`, ""},
		{"whitespace around", " \n{\"repo\":\"r\"}\r\n", ""},
		{"unknown field", `{"repo":"r","owner":"o"}`, `unknown field "owner"`},
		{"known to another route", `{"repo":"r","path":"a"}`, `unknown field "path"`},
		{"long unknown name is cut", `{"` + strings.Repeat("x", 200) + `":1}`, "…"},
		{"repeated", `{"repo":"a","repo":"b"}`, `"repo" is repeated`},
		{"repeated after escape", `{"line":1,"l\u0069ne":2}`, `"line" is repeated`},
		{"two objects", `{"repo":"a"}{"repo":"b"}`, "one JSON object"},
		{"trailing garbage", `{"repo":"a"} x`, "one JSON object"},
		{"not an object", `[1]`, "one JSON object"},
		{"null", `null`, "one JSON object"},
		{"empty", ``, "one JSON object"},
		{"invalid UTF-8", "{\"repo\":\"\xc3\x28\"}", "UTF-8"},
		{"wrong type string", `{"line":"3"}`, `"line" has the wrong type`},
		{"wrong type bool", `{"include_declaration":1}`, `"include_declaration" has the wrong type`},
		{"wrong type float", `{"line":3.0}`, `"line" has the wrong type`},
		{"exponent", `{"line":3e2}`, `"line" has the wrong type`},
		{"nested", `{"repo":["r"]}`, `"repo" has the wrong type`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := parseBody([]byte(c.raw), allowed)
			if c.msg == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted: %+v", b)
			}
			var e *apierr.Error
			if !errors.As(err, &e) || e.Status != 400 || e.Code != apierr.InvalidRequest {
				t.Fatalf("error %v is not a 400 invalid_request", err)
			}
			if !strings.Contains(e.Message, c.msg) {
				t.Fatalf("message %q does not contain %q", e.Message, c.msg)
			}
		})
	}
}

// TestRouteRequest: what each route builds from an accepted body.
func TestRouteRequest(t *testing.T) {
	sha := strings.Repeat("0f", 20)
	cases := []struct {
		route, raw string
		want       operation.Request
	}{
		{"/hover", `{"repo":"r","path":"%2e%2e/a.go","line":7,"character":9}`,
			operation.Request{Op: daemonv1.Op_OP_HOVER, Path: "%2e%2e/a.go", Line: 7, Character: 9}},
		{"/locate", `{"repo":"r","path":"a.go","line":1,"character":2}`,
			operation.Request{Op: daemonv1.Op_OP_DEFINITION, Path: "a.go", Line: 1, Character: 2, Limit: 100}},
		{"/locate", `{"repo":"r","path":"a.go","line":1,"character":2,"relation":"declaration"}`,
			operation.Request{Op: daemonv1.Op_OP_DECLARATION, Path: "a.go", Line: 1, Character: 2, Limit: 100}},
		{"/locate", `{"repo":"r","path":"a.go","line":1,"character":2,"relation":"type","limit":7}`,
			operation.Request{Op: daemonv1.Op_OP_TYPE_DEFINITION, Path: "a.go", Line: 1, Character: 2, Limit: 7}},
		{"/locate", `{"repo":"r","path":"a.go","line":1,"character":2,"relation":"implementation"}`,
			operation.Request{Op: daemonv1.Op_OP_IMPLEMENTATION, Path: "a.go", Line: 1, Character: 2, Limit: 100}},
		{"/locate", `{"repo":"r","path":"a.go","line":1,"character":2,"relation":"reference","include_declaration":true}`,
			operation.Request{Op: daemonv1.Op_OP_REFERENCES, Path: "a.go", Line: 1, Character: 2, IncludeDeclaration: true, Limit: 100}},
		{"/locate", `{"repo":"r","path":"a.go","line":1,"character":2,"relation":"reference","include_declaration":false,"limit":1000}`,
			operation.Request{Op: daemonv1.Op_OP_REFERENCES, Path: "a.go", Line: 1, Character: 2, Limit: 1000}},
		{"/symbols", `{"repo":"r","path":"x/y.go"}`,
			operation.Request{Op: daemonv1.Op_OP_DOCUMENT_SYMBOLS, Path: "x/y.go", Limit: 100}},
		{"/symbols", `{"repo":"r","query":"Foo","limit":3}`,
			operation.Request{Op: daemonv1.Op_OP_WORKSPACE_SYMBOLS, Query: "Foo", Limit: 3}},
		{"/symbols", `{"repo":"r","query":"Foo","language":"python"}`,
			operation.Request{Op: daemonv1.Op_OP_WORKSPACE_SYMBOLS, Query: "Foo", Language: "python", Limit: 100}},
		{"/diagnostics", `{"repo":"r","path":"a.go"}`,
			operation.Request{Op: daemonv1.Op_OP_DIAGNOSTICS, Path: "a.go", Limit: 100}},
		{"/complete", `{"repo":"r","path":"a.go","line":0,"character":0,"limit":1}`,
			operation.Request{Op: daemonv1.Op_OP_COMPLETION, Path: "a.go", Limit: 1}},
		{"/signature", `{"repo":"r","path":"a.go","line":4,"character":5}`,
			operation.Request{Op: daemonv1.Op_OP_SIGNATURE_HELP, Path: "a.go", Line: 4, Character: 5}},
		{"/calls", `{"repo":"r","path":"a.go","line":1,"character":2,"direction":"incoming"}`,
			operation.Request{Op: daemonv1.Op_OP_INCOMING_CALLS, Path: "a.go", Line: 1, Character: 2, Limit: 100}},
		{"/calls", `{"repo":"r","path":"a.go","line":1,"character":2,"direction":"outgoing"}`,
			operation.Request{Op: daemonv1.Op_OP_OUTGOING_CALLS, Path: "a.go", Line: 1, Character: 2, Limit: 100}},
		{"/types", `{"repo":"r","path":"a.go","line":1,"character":2,"direction":"supertypes"}`,
			operation.Request{Op: daemonv1.Op_OP_SUPERTYPES, Path: "a.go", Line: 1, Character: 2, Limit: 100}},
		{"/types", `{"repo":"r","path":"a.go","line":1,"character":2,"direction":"subtypes","rev":"` + sha + `"}`,
			operation.Request{Op: daemonv1.Op_OP_SUBTYPES, Path: "a.go", Line: 1, Character: 2, Limit: 100}},
	}
	for _, c := range cases {
		t.Run(c.route+" "+c.raw, func(t *testing.T) {
			rt := routeByPath(t, c.route)
			b, err := parseBody([]byte(c.raw), rt.fields)
			if err != nil {
				t.Fatal(err)
			}
			got, err := rt.request(b)
			if err != nil {
				t.Fatal(err)
			}
			want := c.want
			want.OpName, want.Repo = rt.name, "r"
			if strings.Contains(c.raw, sha) {
				if got.Rev.String() != sha {
					t.Fatalf("rev %q, want %q", got.Rev.String(), sha)
				}
				got.Rev = want.Rev
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("got  %+v\nwant %+v", got, want)
			}
		})
	}
}

// TestCheckLimit: default 100, bounds 1..1000.
func TestCheckLimit(t *testing.T) {
	if n, err := checkLimit(nil); err != nil || n != 100 {
		t.Fatalf("default: %d, %v", n, err)
	}
	for v, ok := range map[int64]bool{-1: false, 0: false, 1: true, 100: true, 1000: true, 1001: false, 1 << 40: false} {
		n, err := checkLimit(&v)
		if ok != (err == nil) || ok && int64(n) != v {
			t.Errorf("limit %d: %d, %v", v, n, err)
		}
	}
}

// FuzzParseBody: no input panics the decoder or a route's builder, and an
// accepted body holds only allowed fields, re-encodes to a body that is
// accepted again with the same meaning, and builds only sane requests.
func FuzzParseBody(f *testing.F) {
	for _, b := range validBodies {
		f.Add([]byte(b), uint8(0))
	}
	for i := range opRoutes {
		f.Add([]byte(validBodies[opRoutes[i].path]), uint8(i+1))
	}
	for _, s := range []string{
		`{"repo":"r","repo":"s"}`, `{"line":-1}`, `{"path":"%2e%2e/x"}`, `{"limit":1001}`,
		`{"repo":"r","path":"a//b","line":1,"character":1}`, `{"a":{"b":[1,2,{"c":null}]}}`,
		`{"cursor":"x.y","limit":1}`, "{\"repo\":\"\\ud800\"}", `{"line":1e2}`, `{} {}`, `[`, "\xff",
		`{"repo":"r","symbol":"uuid.NewRandom","context_lines":3}`, `{"repo":"r","path":"a.go","line":2,"text":"é x"}`,
		`{"repo":"r","symbol":"F","path":"a.go","line":1}`, `{"repo":"r","path":"a.go","start_line":3,"end_line":2}`,
		`{"repo":"r","query":"Foo","language":"python"}`, `{"repo":"r","path":"a.go","language":"go"}`,
	} {
		f.Add([]byte(s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, raw []byte, which uint8) {
		// which picks the route: 0 is /prepare, i+1 is opRoutes[i].
		idx := int(which) % (len(opRoutes) + 1)
		allowed := fieldSet(commonFields...)
		if idx > 0 {
			allowed = opRoutes[idx-1].fields
		}
		b, err := parseBody(raw, allowed)
		if err != nil {
			if e := apierr.From(err); e.Status != 400 {
				t.Fatalf("refusal is %d, not 400: %v", e.Status, err)
			}
			return
		}
		var present map[string]json.RawMessage
		if err := json.Unmarshal(raw, &present); err != nil {
			t.Fatalf("accepted a body that is not an object: %v", err)
		}
		for name := range present {
			if !allowed[name] {
				t.Fatalf("accepted field %q outside %v", name, allowed)
			}
		}
		again := reencode(t, b)
		b2, err := parseBody(again, allowed)
		if err != nil {
			t.Fatalf("re-encoded body %s refused: %v", again, err)
		}
		if !reflect.DeepEqual(b, b2) {
			t.Fatalf("re-encoded body changed meaning: %+v vs %+v", b, b2)
		}
		if idx == 0 {
			if repo, _, err := commonRequest(b); err == nil && !auth.ValidRepo(repo) {
				t.Fatalf("prepare accepted repo %q", repo)
			}
			return
		}
		rt := opRoutes[idx-1]
		req, err := rt.request(b)
		if err != nil {
			if s := apierr.From(err).Status; s != 400 && s != 422 {
				t.Fatalf("refusal is %d: %v", s, err)
			}
			return
		}
		req2, err := rt.request(b2)
		if err != nil || !reflect.DeepEqual(req, req2) {
			t.Fatalf("re-encoded body builds differently: %+v / %+v, %v", req, req2, err)
		}
		if req.Op == daemonv1.Op_OP_UNSPECIFIED || req.OpName != rt.name {
			t.Fatalf("built no operation: %+v", req)
		}
		if _, err := checkRepo(&req.Repo); err != nil {
			t.Fatalf("built a bad repo: %v", err)
		}
		if req.Path != "" {
			if _, err := checkPath(&req.Path); err != nil {
				t.Fatalf("built a bad path: %v", err)
			}
		}
		if rt.list != (req.Limit != 0) || req.Limit > 1000 {
			t.Fatalf("limit %d on a route with list=%v", req.Limit, rt.list)
		}
		if req.Language != "" && (req.Op != daemonv1.Op_OP_WORKSPACE_SYMBOLS || !daemonv1.ValidLanguageID(req.Language)) {
			t.Fatalf("language %q on %v", req.Language, req.Op)
		}
		if req.IncludeDeclaration && req.Op != daemonv1.Op_OP_REFERENCES {
			t.Fatalf("include_declaration on %v", req.Op)
		}
		if req.ContextLines != nil && *req.ContextLines > 50 {
			t.Fatalf("context_lines %d", *req.ContextLines)
		}
		if req.Symbol != "" && (req.Text != "" || b.Line != nil || b.Character != nil) {
			t.Fatalf("symbol with a position: %+v", req)
		}
		if req.Text != "" && (req.Path == "" || b.Character != nil || strings.ContainsAny(req.Text, "\r\n")) {
			t.Fatalf("text without path or with character: %+v", req)
		}
		if req.Op == daemonv1.Op_OP_READ && (req.EndLine < req.StartLine || req.Path == "") {
			t.Fatalf("read %+v", req)
		}
	})
}

// reencode writes the fields of b that are set, as JSON.
func reencode(t *testing.T, b *body) []byte {
	t.Helper()
	all, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(all, &m); err != nil {
		t.Fatal(err)
	}
	for k, v := range m {
		if string(v) == "null" {
			delete(m, k)
		}
	}
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// parseBodyDecoding is parseBody as it was first written, on the
// decoder alone: a generic decode for the names, a token walk for
// repeated ones, then the struct with unknown fields disallowed. It reads
// a body three times; FuzzParseBodyAgrees holds parseBody's single walk to
// its verdicts.
func parseBodyDecoding(raw []byte, allowed map[string]bool) (*body, error) {
	if !utf8.Valid(raw) {
		return nil, errors.New("UTF-8")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return nil, errors.New("not one object")
	}
	for name := range fields {
		if !allowed[name] {
			return nil, errors.New("unknown field")
		}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.Token()
	seen := map[string]bool{}
	for dec.More() {
		t, _ := dec.Token()
		name, _ := t.(string)
		if seen[name] {
			return nil, errors.New("repeated")
		}
		seen[name] = true
		var skip json.RawMessage
		dec.Decode(&skip)
	}
	dec = json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var b body
	if err := dec.Decode(&b); err != nil {
		return nil, err
	}
	return &b, nil
}

// FuzzParseBodyAgrees: parseBody accepts exactly the bodies the three
// decodes accepted, with the same meaning, and refuses the rest; on what
// it accepts, replayBody's lenient read agrees on repo, rev and limit.
func FuzzParseBodyAgrees(f *testing.F) {
	for _, b := range validBodies {
		f.Add([]byte(b))
	}
	for _, s := range []string{
		`{"repo":"r","repo":"s"}`, `{"line":1,"l\u0069ne":2}`, `{"Repo":"r"}`, `{"repo":"r" , "line" : 3 }`,
		`{"repo":{"a":[1,"]}",{"b":"\"}"}]},"line":2}`, `{"repo":"a"} x`, `{} {}`, `[1]`, `null`, ` {"line":-0} `,
		`{"line":3.0}`, `{"include_declaration":1,"owner":2}`, "{\"repo\":\"\\ud800\"}", `{"\u0072epo":"r"}`,
		`{"repo":"x\",\"repo","repo":"y"}`, `{"text":"} ,","line":1,"line":2}`, `{"repo":"\\","path":"[{"}`,
		`{"repo":"r","REV":"x"}`, `{"repo":"r","limit":100,"re\u0076":"main"}`, `{"repo":"r","limit":null,"rev":null}`,
		"{\"repo\":\"r\"}\v", "\u00a0{}", "{\"repo\":\"r\"}\u2028", "\f{\"limit\":1000}", " \t\r\n{\"repo\":\"r\"}\n",
	} {
		f.Add([]byte(s))
	}
	allowed := fieldSet(commonFields...)
	for _, rt := range opRoutes {
		for name := range rt.fields {
			allowed[name] = true
		}
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, err := parseBody(raw, allowed)
		want, werr := parseBodyDecoding(raw, allowed)
		if (err == nil) != (werr == nil) {
			t.Fatalf("%q: parseBody says %v, the decoder %v", raw, err, werr)
		}
		if err != nil {
			return
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: parseBody read %+v, the decoder %+v", raw, got, want)
		}
		// A replay re-checks the forge with the idempotency middleware's
		// lenient read of the same bytes: it must name what was checked.
		var peek replayBody
		if err := json.Unmarshal(raw, &peek); err != nil {
			t.Fatalf("%q: the replay read fails: %v", raw, err)
		}
		if !reflect.DeepEqual(peek, replayBody{Repo: got.Repo, Rev: got.Rev, Limit: got.Limit}) {
			t.Fatalf("%q: the replay reads %+v, the body %+v", raw, peek, got)
		}
	})
}

// A name cut for an error message is cut between characters: a character
// cut in two would reach the client as U+FFFD.
func TestTruncateOnACharacter(t *testing.T) {
	if got := truncate("ééé", 3); got != "é…" {
		t.Fatalf("truncate(ééé, 3) = %q, want %q", got, "é…")
	}
}
