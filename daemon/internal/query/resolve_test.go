package query

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/hanzoai/lsp/daemon/internal/lsp"
)

func TestTextPositionCountsUTF16(t *testing.T) {
	doc := []byte("package p\n\n// héllo 𝔘 wörld: x := Foo(y)\r\nvar z = 1\n")
	for _, tc := range []struct {
		line uint32
		text string
		want uint32
		ok   bool
	}{
		{2, "Foo", 24, true},   // é, ö are one unit each, 𝔘 is two
		{2, "héllo", 3, true},  // the first occurrence
		{2, "wörld", 12, true}, // after the surrogate pair
		{3, "1", 8, true},
		{3, "Foo", 0, false},
		{9, "x", 0, false},
	} {
		r, ok := textPosition(doc, tc.line, tc.text)
		if ok != tc.ok || (ok && (r.Start.Character != tc.want || r.Start.Line != tc.line)) {
			t.Errorf("textPosition(%d, %q) = %+v, %v; want character %d, %v", tc.line, tc.text, r, ok, tc.want, tc.ok)
		}
		if ok && r.End.Character-r.Start.Character != utf16Len(tc.text) {
			t.Errorf("textPosition(%d, %q) range %+v is not the text's length", tc.line, tc.text, r)
		}
	}
}

func TestMatchSymbols(t *testing.T) {
	syms := []lsp.Symbol{
		{Name: "NewRandom", Container: "github.com/google/uuid", URI: "file:///w/version4.go", SelectionRange: lsp.Range{Start: lsp.Position{Line: 1}}},
		{Name: "NewRandomFromReader", Container: "github.com/google/uuid", URI: "file:///w/version4.go", SelectionRange: lsp.Range{Start: lsp.Position{Line: 2}}},
		{Name: "(*Client).Do", URI: "file:///w/c.go", SelectionRange: lsp.Range{Start: lsp.Position{Line: 3}}},
		{Name: "Do", Container: "Server", URI: "file:///w/s.go", SelectionRange: lsp.Range{Start: lsp.Position{Line: 4}}},
		{Name: "String", Container: "UUID", URI: "file:///w/uuid.go", SelectionRange: lsp.Range{Start: lsp.Position{Line: 5}}},
		{Name: "String", Container: "Variant", URI: "file:///w/uuid.go", SelectionRange: lsp.Range{Start: lsp.Position{Line: 6}}},
		{Name: "String", Container: "Variant", URI: "file:///w/uuid.go", SelectionRange: lsp.Range{Start: lsp.Position{Line: 6}}}, // listed twice
	}
	for _, tc := range []struct {
		q    string
		want []uint32 // selection lines
	}{
		{"NewRandom", []uint32{1}},
		{"uuid.NewRandom", []uint32{1}},
		{"google/uuid.NewRandom", []uint32{1}},
		{"github.com/google/uuid.NewRandom", []uint32{1}},
		{"Random", nil},
		{"Client.Do", []uint32{3}},
		{"Do", []uint32{3, 4}},
		{"Server.Do", []uint32{4}},
		{"String", []uint32{5, 6}},
		{"Variant.String", []uint32{6}},
		{"xuuid.NewRandom", nil},
	} {
		var got []uint32
		for _, s := range matchSymbols(syms, tc.q) {
			got = append(got, s.SelectionRange.Start.Line)
		}
		if len(got) != len(tc.want) {
			t.Errorf("matchSymbols(%q) = %v; want %v", tc.q, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("matchSymbols(%q) = %v; want %v", tc.q, got, tc.want)
			}
		}
	}
	if unqualified("uuid.NewRandom") != "NewRandom" || unqualified("pkg/sub.Type.Method") != "Type.Method" || unqualified("Foo") != "" {
		t.Error("unqualified")
	}
}

func TestNamePosition(t *testing.T) {
	doc := []byte("export function xcreate() {}\nexport function create(é) {}\n")
	r := lsp.Range{Start: lsp.Position{Line: 0}, End: lsp.Position{Line: 1, Character: 20}}
	if p := namePosition(doc, r, "create"); p.Line != 1 || p.Character != 16 {
		t.Fatalf("namePosition = %+v; want 1:16 (a word, not inside xcreate)", p)
	}
}

func TestValidSymbolQuery(t *testing.T) {
	for q, want := range map[string]bool{
		"NewRandom": true, "uuid.NewRandom": true, "pkg/sub.Type.Method": true, "$store": true,
		"": false, "a b": false, "a..b": false, ".a": false, "a/": false, "a\nb": false, strings.Repeat("a", 300): false,
	} {
		if got := validSymbolQuery(q); got != want {
			t.Errorf("validSymbolQuery(%q) = %v", q, got)
		}
	}
}

func TestEscapeModule(t *testing.T) {
	for in, want := range map[string]string{
		"github.com/BurntSushi/toml@v1.0.0": "github.com/!burnt!sushi/toml@v1.0.0",
		"example.com/x@v1.2.3":              "example.com/x@v1.2.3",
		"example.com/x@v1.0.0-RC1":          "example.com/x@v1.0.0-!r!c1",
		"../x@v1":                           "",
		"x@":                                "",
		"x@v1/../..":                        "",
		"cache/download/x/@v@v1.0.0.zip":    "",
	} {
		got, ok := escapeModule(in)
		if (want == "") == ok || got != want {
			t.Errorf("escapeModule(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}

func TestCutLinesBounds(t *testing.T) {
	cd := &coder{ctx: 2, left: 30, files: map[string]*source{}, scrub: strings.NewReplacer()}
	src := &source{lines: []string{"a", "b\u202e", "c", "d", "e", strings.Repeat("x", 2000)}}
	c := cd.cutLines(src, 0, 3, 100)
	if len(c.Lines) != 4 || c.Lines[1] != "b" || c.Truncated {
		t.Fatalf("cutLines = %+v; want 4 lines, the bidi override removed", c)
	}
	c = cd.cutLines(src, 4, 9, 100)
	if !c.Truncated || len(c.Lines) != 1 {
		t.Fatalf("cutLines past the byte budget = %+v; want one line, truncated", c)
	}
}

func FuzzAddressing(f *testing.F) {
	f.Add([]byte("package p\n// é𝔘 x\nfunc F() {}\n"), uint32(1), "x", "p.F")
	f.Add([]byte(""), uint32(0), "", "")
	f.Fuzz(func(t *testing.T, doc []byte, line uint32, text, query string) {
		if r, ok := textPosition(doc, line, text); ok {
			l, _ := lineText(doc, line)
			if r.Start.Character > utf16Len(l) || r.End.Character > utf16Len(l) {
				t.Fatalf("range %+v past line %q", r, l)
			}
		}
		_ = namePosition(doc, lsp.Range{End: lsp.Position{Line: line}}, text)
		if validSymbolQuery(query) {
			_ = matchSymbols([]lsp.Symbol{{Name: query, Container: text}}, query)
			if !utf8.ValidString(query) {
				t.Fatal("invalid UTF-8 accepted")
			}
		}
		_, _ = escapeModule(query)
		_ = splitLines(doc)
	})
}

// A restarted server's generation empties the cache: lists of earlier
// generations are neither served nor kept.
func TestSymbolCacheKeepsOneGeneration(t *testing.T) {
	sc := &symbolCache{files: map[string]lsp.List[lsp.Symbol]{}}
	list := lsp.List[lsp.Symbol]{Items: []lsp.Symbol{{Name: "A"}}}
	g1, g2 := symbolCacheView{sc, 1}, symbolCacheView{sc, 2}
	g1.put("a.go", list)
	if _, ok := g1.get("a.go"); !ok {
		t.Fatal("generation 1 does not see its own list")
	}
	if _, ok := g2.get("a.go"); ok {
		t.Fatal("generation 2 sees generation 1's list")
	}
	g2.put("b.go", list)
	if len(sc.files) != 1 {
		t.Fatalf("cache holds %d lists after a new generation's first, want 1", len(sc.files))
	}
	g1.put("c.go", list)
	if _, ok := g1.get("c.go"); ok || len(sc.files) != 1 {
		t.Fatal("an older generation's list was kept")
	}
	if _, ok := g2.get("b.go"); !ok {
		t.Fatal("generation 2 lost its list")
	}
	g2.put("d.go", lsp.List[lsp.Symbol]{})
	if _, ok := g2.get("d.go"); ok {
		t.Fatal("an empty list (a server still loading) was kept")
	}
}

// A miss from a server that was still indexing, or could not load the
// project, is no proof the name is absent: the answer says why.
func TestMissSaysWhenNotReady(t *testing.T) {
	r := &Runner{}
	_, st := r.pick(nil, &converter{}, "NewRandom", nil, "", "")
	if !strings.HasSuffix(st.GetMessage(), "no symbol NewRandom in the workspace") {
		t.Errorf("ready miss: %q", st.GetMessage())
	}
	_, st = r.pick(nil, &converter{}, "NewRandom", nil, "", "clangd was still indexing the project")
	if !strings.Contains(st.GetMessage(), "clangd was still indexing the project") || !strings.Contains(st.GetMessage(), "may still exist") {
		t.Errorf("miss while indexing: %q", st.GetMessage())
	}
}
