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

func TestBounds(t *testing.T) {
	got := Markdown(strings.Repeat("é", 1000), 101)
	if len(got) > 101+len("…") || !utf8.ValidString(got) {
		t.Fatalf("bound broken: %d bytes, valid=%v", len(got), utf8.ValidString(got))
	}
}

func FuzzMarkdown(f *testing.F) {
	f.Add("[a](http://x) \x00 AKIAABCDEFGHIJKLMNOP")
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
