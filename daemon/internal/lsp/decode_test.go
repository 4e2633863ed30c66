package lsp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// small counts every element against MaxItems, kept or dropped.
var small = Limits{MaxItems: 4, MaxMarkdownBytes: 64, MaxTextBytes: 32}.withDefaults()

func TestDecodeHover(t *testing.T) {
	tests := []struct {
		name      string
		raw       string
		want      string // "" with wantNil
		wantNil   bool
		wantErr   bool
		truncated bool
	}{
		{name: "null", raw: `null`, wantNil: true},
		{name: "markup markdown", raw: `{"contents":{"kind":"markdown","value":"**x**"}}`, want: "**x**"},
		{name: "markup plaintext is escaped", raw: `{"contents":{"kind":"plaintext","value":"a*b_[c]"}}`, want: `a\*b\_\[c\]`},
		{name: "marked string", raw: `{"contents":"# title"}`, want: "# title"},
		{name: "marked code", raw: `{"contents":{"language":"go","value":"func f()"}}`, want: "```go\nfunc f()\n```"},
		{name: "code with backticks gets a longer fence", raw: "{\"contents\":{\"language\":\"md\",\"value\":\"```x```\"}}", want: "````md\n```x```\n````"},
		{name: "hostile language tag", raw: `{"contents":{"language":"go\n<script>","value":"x"}}`, want: "```goscript\nx\n```"},
		{name: "list of marked strings", raw: `{"contents":["one",{"language":"go","value":"two"},42,"three"]}`, want: "one\n\n```go\ntwo\n```\n\nthree"},
		{name: "empty contents", raw: `{"contents":""}`, wantNil: true},
		{name: "empty list", raw: `{"contents":[]}`, wantNil: true},
		{name: "missing contents", raw: `{}`, wantNil: true},
		{name: "contents of odd type", raw: `{"contents":42}`, wantErr: true},
		{name: "not an object", raw: `[1]`, wantErr: true},
		{name: "over the bound", raw: fmt.Sprintf(`{"contents":%q}`, strings.Repeat("é", 40)), want: strings.Repeat("é", 32), truncated: true},
		{name: "bad range is ignored", raw: `{"contents":"x","range":"nope"}`, want: "x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := decodeHover(json.RawMessage(tt.raw), small)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v", err)
			}
			if tt.wantErr {
				return
			}
			if tt.wantNil {
				if h != nil {
					t.Fatalf("hover = %+v, want nil", h)
				}
				return
			}
			if h == nil || h.Markdown != tt.want || h.Truncated != tt.truncated {
				t.Fatalf("hover = %+v, want %q (truncated %v)", h, tt.want, tt.truncated)
			}
		})
	}
}

func TestDecodeLocations(t *testing.T) {
	loc := func(uri string, line int) string {
		return fmt.Sprintf(`{"uri":%q,"range":{"start":{"line":%d,"character":1},"end":{"line":%d,"character":2}}}`, uri, line, line)
	}
	link := fmt.Sprintf(`{"targetUri":"file:///b.go","targetRange":{"start":{"line":1,"character":0},"end":{"line":9,"character":0}},` +
		`"targetSelectionRange":{"start":{"line":4,"character":5},"end":{"line":4,"character":9}}}`)
	tests := []struct {
		name      string
		raw       string
		want      []string // uri:line
		truncated bool
		dropped   int
		wantErr   bool
	}{
		{name: "null", raw: `null`},
		{name: "single location", raw: loc("file:///a.go", 3), want: []string{"file:///a.go:3"}},
		{name: "list", raw: "[" + loc("file:///a.go", 1) + "," + loc("file:///b.go", 2) + "]", want: []string{"file:///a.go:1", "file:///b.go:2"}},
		{name: "links use the selection range", raw: "[" + link + "]", want: []string{"file:///b.go:4"}},
		{name: "bad items are dropped", raw: `[{"uri":""},{"range":1},7,` + loc("file:///a.go", 1) + `]`, want: []string{"file:///a.go:1"}, dropped: 3},
		{name: "negative position is dropped", raw: `[{"uri":"file:///a","range":{"start":{"line":-1,"character":0},"end":{"line":0,"character":0}}}]`, dropped: 1},
		{name: "over the bound", raw: "[" + strings.Repeat(loc("file:///a.go", 1)+",", 5) + loc("file:///a.go", 1) + "]",
			want: []string{"file:///a.go:1", "file:///a.go:1", "file:///a.go:1", "file:///a.go:1"}, truncated: true},
		{name: "a string", raw: `"file:///a.go"`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := decodeLocations(json.RawMessage(tt.raw), small)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v", err)
			}
			var got []string
			for _, x := range l.Items {
				got = append(got, fmt.Sprintf("%s:%d", x.URI, x.Range.Start.Line))
			}
			if strings.Join(got, " ") != strings.Join(tt.want, " ") || l.Truncated != tt.truncated || l.Dropped != tt.dropped {
				t.Fatalf("got %v truncated=%v dropped=%d, want %v %v %d", got, l.Truncated, l.Dropped, tt.want, tt.truncated, tt.dropped)
			}
		})
	}
}

func TestDecodeSymbols(t *testing.T) {
	rng := `{"start":{"line":1,"character":0},"end":{"line":2,"character":0}}`
	ds := func(name string, kind int, children string) string {
		s := fmt.Sprintf(`{"name":%q,"kind":%d,"range":%s,"selectionRange":%s`, name, kind, rng, rng)
		if children != "" {
			s += `,"children":[` + children + `]`
		}
		return s + "}"
	}
	nest := func(depth int) string {
		s := ds("leaf", 13, "")
		for range depth {
			s = ds("n", 13, s)
		}
		return "[" + s + "]"
	}
	lim := Limits{MaxItems: 5}.withDefaults()
	tests := []struct {
		name      string
		raw       string
		want      []string // name/container/kind
		truncated bool
		dropped   int
	}{
		{name: "hierarchy flattened", raw: "[" + ds("T", 23, ds("F", 8, "")+","+ds("M", 6, "")) + "," + ds("f", 12, "") + "]",
			want: []string{"T//struct", "F/T/field", "M/T/method", "f//function"}},
		{name: "symbol information", raw: `[{"name":"X","kind":5,"containerName":"pkg","location":{"uri":"file:///x.go","range":` + rng + `}}]`,
			want: []string{"X/pkg/class"}},
		{name: "workspace symbol without range", raw: `[{"name":"Y","kind":12,"location":{"uri":"file:///y.go"}}]`, want: []string{"Y//function"}},
		{name: "nameless and rangeless dropped", raw: `[{"kind":1,"range":` + rng + `},{"name":"z"},"s",` + ds("ok", 99, "") + `]`,
			want: []string{"ok//"}, dropped: 3},
		{name: "children count against the bound", raw: "[" + ds("a", 5, ds("b", 5, "")+","+ds("c", 5, "")+","+ds("d", 5, "")) + "," + ds("e", 5, "") + "," + ds("f", 5, "") + "]",
			want: []string{"a//class", "b/a/class", "c/a/class", "d/a/class", "e//class"}, truncated: true},
		{name: "nesting is bounded", raw: nest(40), want: nil, truncated: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := decodeSymbols(json.RawMessage(tt.raw), "file:///doc.go", lim)
			if err != nil {
				t.Fatal(err)
			}
			if tt.name == "nesting is bounded" {
				if !l.Truncated || len(l.Items) > lim.MaxItems {
					t.Fatalf("deep nesting: %d items, truncated %v", len(l.Items), l.Truncated)
				}
				return
			}
			var got []string
			for _, s := range l.Items {
				got = append(got, s.Name+"/"+s.Container+"/"+s.Kind.String())
			}
			if strings.Join(got, " ") != strings.Join(tt.want, " ") || l.Truncated != tt.truncated || l.Dropped != tt.dropped {
				t.Fatalf("got %v truncated=%v dropped=%d, want %v %v %d", got, l.Truncated, l.Dropped, tt.want, tt.truncated, tt.dropped)
			}
		})
	}
}

func TestDecodeCompletion(t *testing.T) {
	tests := []struct {
		name       string
		raw        string
		want       []string // label=insert
		incomplete bool
		doc        string
	}{
		{name: "null", raw: `null`},
		{name: "array", raw: `[{"label":"a"},{"label":"b","insertText":"b()"}]`, want: []string{"a=a", "b=b()"}},
		{name: "list", raw: `{"isIncomplete":true,"items":[{"label":"x","textEdit":{"newText":"xx","range":{}}}]}`, want: []string{"x=xx"}, incomplete: true},
		{name: "documentation", raw: `[{"label":"d","documentation":{"kind":"markdown","value":"*doc*"}}]`, want: []string{"d=d"}, doc: "*doc*"},
		{name: "plain documentation escaped", raw: `[{"label":"d","documentation":"a_b"}]`, want: []string{"d=d"}, doc: `a\_b`},
		{name: "labelless dropped", raw: `[{"label":""},{"kind":"x","label":"k"},{"label":"ok"}]`, want: []string{"ok=ok"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := decodeCompletion(json.RawMessage(tt.raw), small)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, it := range c.Items {
				got = append(got, it.Label+"="+it.InsertText)
			}
			if strings.Join(got, " ") != strings.Join(tt.want, " ") || c.Incomplete != tt.incomplete {
				t.Fatalf("got %v incomplete=%v", got, c.Incomplete)
			}
			if tt.doc != "" && c.Items[0].Documentation != tt.doc {
				t.Fatalf("doc = %q, want %q", c.Items[0].Documentation, tt.doc)
			}
		})
	}
}

func TestDecodeSignatureHelp(t *testing.T) {
	tests := []struct {
		name   string
		raw    string
		params []string
		nilOK  bool
	}{
		{name: "null", raw: `null`, nilOK: true},
		{name: "no signatures", raw: `{"signatures":[]}`, nilOK: true},
		{name: "string labels", raw: `{"signatures":[{"label":"f(a int, b string)","parameters":[{"label":"a int"},{"label":"b string"}]}]}`, params: []string{"a int", "b string"}},
		{name: "offsets", raw: `{"signatures":[{"label":"f(a int, b string)","parameters":[{"label":[2,7]},{"label":[9,17]}]}]}`, params: []string{"a int", "b string"}},
		// 😀 is two UTF-16 units but four bytes.
		{name: "offsets after a non-BMP rune", raw: `{"signatures":[{"label":"😀(x y)","parameters":[{"label":[3,6]}]}]}`, params: []string{"x y"}},
		{name: "offsets out of range", raw: `{"signatures":[{"label":"f()","parameters":[{"label":[2,90]},{"label":[3,1]}]}]}`, params: []string{"", ""}},
		{name: "offsets inside a surrogate pair", raw: `{"signatures":[{"label":"😀x","parameters":[{"label":[1,3]}]}]}`, params: []string{""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := decodeSignatureHelp(json.RawMessage(tt.raw), small)
			if err != nil {
				t.Fatal(err)
			}
			if tt.nilOK {
				if h != nil {
					t.Fatalf("got %+v, want nil", h)
				}
				return
			}
			var got []string
			for _, p := range h.Signatures[0].Parameters {
				got = append(got, p.Label)
			}
			if strings.Join(got, "|") != strings.Join(tt.params, "|") {
				t.Fatalf("params %q, want %q", got, tt.params)
			}
		})
	}
}

func TestDecodeDiagnostics(t *testing.T) {
	raw := `[{"range":{"start":{"line":1,"character":2},"end":{"line":1,"character":4}},"severity":1,"code":42,"source":"s","message":"m"},
		{"range":{"start":{"line":0,"character":0},"end":{"line":0,"character":1}},"severity":9,"code":"E1","message":"n"},
		{"message":"no range"}]`
	l, err := decodeDiagnostics(json.RawMessage(raw), 10, small)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Items) != 2 || l.Dropped != 1 {
		t.Fatalf("got %+v", l)
	}
	if d := l.Items[0]; d.Code != "42" || d.Severity.String() != "error" || d.Range.Start.Character != 2 {
		t.Fatalf("first = %+v", d)
	}
	if d := l.Items[1]; d.Code != "E1" || d.Severity != 0 {
		t.Fatalf("second = %+v", d)
	}
}

func TestParseServerInfo(t *testing.T) {
	tests := []struct{ raw, name, version string }{
		{`{"name":"gopls","version":"{\"GoVersion\":\"go1.26\",\"Path\":\"golang.org/x/tools/gopls\",\"Version\":\"v0.21.1\"}"}`, "gopls", "v0.21.1"},
		{`{"name":"ts","version":"6.0.0"}`, "ts", "6.0.0"},
		{`{"name":"x\u0000\u001b[31my","version":"{not json"}`, "x[31my", "{not json"},
		{`null`, "", ""},
		{`{"name":7}`, "", ""},
	}
	for _, tt := range tests {
		got := parseServerInfo(json.RawMessage(tt.raw))
		if got.Name != tt.name || got.Version != tt.version {
			t.Errorf("parseServerInfo(%s) = %+v, want %q %q", tt.raw, got, tt.name, tt.version)
		}
	}
}

func TestParseCapabilities(t *testing.T) {
	caps := parseCapabilities(json.RawMessage(`{"hoverProvider":true,"definitionProvider":{},"referencesProvider":false,
		"declarationProvider":null,"implementationProvider":"yes","typeHierarchyProvider":{"workDoneProgress":true},"positionEncoding":7}`))
	want := map[string]bool{"hover": true, "definition": true, "references": false, "declaration": false, "implementation": false, "type": true}
	got := map[string]bool{"hover": caps.HoverProvider.Enabled, "definition": caps.DefinitionProvider.Enabled,
		"references": caps.ReferencesProvider.Enabled, "declaration": caps.DeclarationProvider.Enabled,
		"implementation": caps.ImplementationProvider.Enabled, "type": caps.TypeHierarchyProvider.Enabled}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if caps.PositionEncoding != "" {
		t.Errorf("odd positionEncoding kept: %q", caps.PositionEncoding)
	}
}

func TestURIs(t *testing.T) {
	for _, p := range []string{"/a/b.go", "/with space/ü.go", "/pct%41/x#y?.go"} {
		u := FileURI(p)
		back, err := URIPath(u)
		if err != nil || back != p {
			t.Errorf("round trip %q -> %s -> %q, %v", p, u, back, err)
		}
	}
	for _, bad := range []string{"http://x/a", "file://host/a", "file:///a/../b", "file:///a%zz", "file:a", "file:///a?q", "file:///a#f", "relative", "file:///a%00b"} {
		if _, err := URIPath(DocumentURI(bad)); err == nil {
			t.Errorf("URIPath(%q) accepted", bad)
		}
	}
	if canonicalURI("file://localhost/a%2Fb") != canonicalURI("file:///a/b") {
		t.Errorf("canonical forms differ")
	}
}

// FuzzDecoders runs every decoder of server answers on arbitrary bytes:
// none may panic or return more items than its bound.
func FuzzDecoders(f *testing.F) {
	for _, s := range []string{
		`null`, `[]`, `{}`, `{"contents":["a",{"language":"go","value":"b"}]}`,
		`[{"uri":"file:///a","range":{"start":{"line":1,"character":1},"end":{"line":1,"character":2}}}]`,
		`[{"targetUri":"file:///a","targetSelectionRange":{"start":{"line":0,"character":0},"end":{"line":0,"character":0}}}]`,
		`[{"name":"a","kind":5,"range":{"start":{"line":0,"character":0},"end":{"line":0,"character":0}},"children":[{"name":"b","kind":6,"range":{"start":{"line":0,"character":0},"end":{"line":0,"character":0}}}]}]`,
		`{"isIncomplete":true,"items":[{"label":"x","documentation":"d"}]}`,
		`{"signatures":[{"label":"f(a)","parameters":[{"label":[2,3]}]}],"activeSignature":0}`,
		`[{"from":{"name":"f","uri":"file:///a","range":{"start":{"line":0,"character":0},"end":{"line":0,"character":0}}},"fromRanges":[]}]`,
		`{"kind":"full","items":[{"range":{"start":{"line":0,"character":0},"end":{"line":0,"character":0}},"message":"m","code":1}]}`,
		`[{"range":{"start":{"line":0,"character":0},"end":{"line":0,"character":1}},"message":"a message long enough to count for something","source":"s","code":"E1"},{"range":{"start":{"line":1,"character":0},"end":{"line":1,"character":1}},"message":"another"},{"range":{"start":{"line":2,"character":0},"end":{"line":2,"character":1}},"message":"and a third that no longer fits in the bound"}]`,
	} {
		f.Add([]byte(s))
	}
	lim := Limits{MaxItems: 4, MaxMarkdownBytes: 100, MaxTextBytes: 50}.withDefaults()
	f.Fuzz(func(t *testing.T, data []byte) {
		raw := json.RawMessage(data)
		if h, _ := decodeHover(raw, lim); h != nil && len(h.Markdown) > lim.MaxMarkdownBytes {
			t.Fatalf("hover markdown of %d bytes", len(h.Markdown))
		}
		if l, _ := decodeLocations(raw, lim); len(l.Items) > lim.MaxItems {
			t.Fatalf("%d locations", len(l.Items))
		}
		if l, _ := decodeSymbols(raw, "file:///d", lim); len(l.Items) > lim.MaxItems {
			t.Fatalf("%d symbols", len(l.Items))
		}
		if c, _ := decodeCompletion(raw, lim); len(c.Items) > lim.MaxItems {
			t.Fatalf("%d completions", len(c.Items))
		}
		if s, _ := decodeSignatureHelp(raw, lim); s != nil && len(s.Signatures) > lim.MaxItems {
			t.Fatalf("%d signatures", len(s.Signatures))
		}
		d, _ := decodeDiagnostics(raw, lim.MaxItems, lim)
		if len(d.Items) > lim.MaxItems {
			t.Fatalf("%d diagnostics", len(d.Items))
		}
		// Kept under a byte bound, a list is within it, exactly counted,
		// a prefix of what was decoded, and cut only when it says so.
		const bound = 400
		k, n, ok := fitDiagnostics("file:///d", d, bound)
		cut := len(k.Items) < len(d.Items)
		if !ok || n > bound || n != publishedSize("file:///d", k) || len(k.Items) > len(d.Items) ||
			!slices.Equal(k.Items, d.Items[:len(k.Items)]) || k.Truncated != (cut || d.Truncated) || k.Dropped != d.Dropped {
			t.Fatalf("fitted %+v (%d bytes, %v) from %+v", k, n, ok, d)
		}
		_, _ = decodePullReport(raw, lim)
		var calls List[CallHierarchyCall]
		_ = decodeCalls(raw, "from", &calls, lim)
		if len(calls.Items) > lim.MaxItems {
			t.Fatalf("%d calls", len(calls.Items))
		}
		if items, _, _, _ := decodeHierarchyItems(raw, lim.MaxItems, lim); len(items) > lim.MaxItems {
			t.Fatalf("%d hierarchy items", len(items))
		}
		_ = parseCapabilities(raw)
		_ = parseServerInfo(raw)
		_, _ = URIPath(DocumentURI(data))
	})
}

// FuzzDecodeLocationsFast: whenever the one-pass decoder takes a reply,
// it answers exactly what the element-by-element decoder does.
func FuzzDecodeLocationsFast(f *testing.F) {
	for _, s := range []string{
		`[]`, `[null]`, `[{}]`, `[1]`, `["a"]`, `[{"uri":1}]`, `[{"uri":"file:///a"}] x`,
		`[{"uri":"file:///a","range":{"start":{"line":1,"character":1},"end":{"line":1,"character":2}}}]`,
		`[{"uri":"file:///a","range":{"start":{"line":1,"character":1},"end":{"line":1,"character":2}}},{"URI":"file:///b","RANGE":{"start":{"line":0,"character":0},"end":{"line":0,"character":0}}}]`,
		`[{"targetUri":"file:///a","targetRange":{"start":{"line":0,"character":0},"end":{"line":0,"character":0}}},{"uri":"file:///c"},{"targetUri":"file:///a","targetSelectionRange":{"start":{"line":0,"character":3},"end":{"line":0,"character":4}}},{},{},{}]`,
	} {
		f.Add([]byte(s))
	}
	lim := Limits{MaxItems: 4}.withDefaults()
	f.Fuzz(func(t *testing.T, data []byte) {
		raw := json.RawMessage(bytes.TrimSpace(data))
		if len(raw) == 0 {
			return
		}
		fast, ok := decodeLocationsFast(raw, lim)
		if !ok {
			return
		}
		each, err := decodeLocationsEach(raw, lim)
		if err != nil || !reflect.DeepEqual(fast, each) {
			t.Fatalf("%s:\n fast %+v\n each %+v (%v)", raw, fast, each, err)
		}
	})
}

// TestSignatureHelpBoundedMemory: many parameters whose offsets span one
// long label share the kept label's bytes (a copy each held gigabytes for
// a reply of kilobytes), at most maxSignatureParams are read, and a
// parameter inside the kept label is its text.
func TestSignatureHelpBoundedMemory(t *testing.T) {
	lim := Limits{}.withDefaults()
	label := "f(x int) " + strings.Repeat("a", lim.MaxTextBytes+10000)
	var b strings.Builder
	b.WriteString(`{"signatures":[{"label":"` + label + `","parameters":[{"label":[2,7]}`)
	for range 10000 {
		b.WriteString(`,{"label":[0,70000]}`)
	}
	b.WriteString(`]}]}`)
	raw := json.RawMessage(b.String())
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	h, err := decodeSignatureHelp(raw, lim)
	runtime.ReadMemStats(&after)
	if err != nil || h == nil {
		t.Fatalf("decode: %v", err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
		t.Errorf("a %d-byte reply allocated %d MiB", len(raw), alloc>>20)
	}
	ps := h.Signatures[0].Parameters
	if len(ps) != maxSignatureParams || !h.Truncated {
		t.Errorf("%d parameters kept, truncated %v; want %d, truncated", len(ps), h.Truncated, maxSignatureParams)
	}
	if ps[0].Label != "x int" || len(ps[1].Label) != len(h.Signatures[0].Label) {
		t.Errorf("labels %q and %d bytes; want \"x int\" and the kept label's %d", ps[0].Label, len(ps[1].Label), len(h.Signatures[0].Label))
	}
}

// TestNestedSymbolsBoundedMemory: a deep document symbol tree is decoded
// without a copy of each subtree per level (an 8 MiB reply nested 33 deep
// allocated 1.6 GiB): allocation stays a small multiple of the reply.
func TestNestedSymbolsBoundedMemory(t *testing.T) {
	rng := `"range":{"start":{"line":0,"character":0},"end":{"line":0,"character":1}}`
	tree := `{"name":"leaf","kind":12,` + rng + `,"detail":"` + strings.Repeat("d", 4<<20) + `"}`
	for range maxSymbolDepth + 1 {
		tree = `{"name":"n","kind":5,` + rng + `,"children":[` + tree + `]}`
	}
	raw := json.RawMessage("[" + tree + "]")
	lim := Limits{}.withDefaults()
	lim.MaxTextBytes = 8 << 20
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	l, err := decodeSymbols(raw, "file:///a.go", lim)
	runtime.ReadMemStats(&after)
	if err != nil || len(l.Items) != maxSymbolDepth+1 || !l.Truncated {
		t.Fatalf("%d symbols, truncated %v, %v; want the %d levels kept, truncated", len(l.Items), l.Truncated, err, maxSymbolDepth+1)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4*uint64(len(raw)) {
		t.Errorf("a %d MiB reply allocated %d MiB", len(raw)>>20, alloc>>20)
	}
}
