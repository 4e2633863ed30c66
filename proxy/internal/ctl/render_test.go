package ctl

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestPlainText(t *testing.T) {
	for _, tc := range []struct{ name, md, want string }{
		{"code block", "```go\nfunc Hello(name string) string\n```\n\nHello returns **a** greeting.", "func Hello(name string) string\n\nHello returns a greeting."},
		{"code is untouched", "```go\nx := a ** b // [a](b) `c`\n```", "x := a ** b // [a](b) `c`"},
		{"link and heading", "# Title\n\nsee [the docs](https://example.com)", "Title\n\nsee the docs"},
		{"escapes and backticks", "a\\_b uses `fmt.Println`", "a_b uses fmt.Println"},
		{"rules and blank runs", "a\n\n\n---\n\n\nb\n\n", "a\n\nb"},
		{"crlf", "a\r\nb", "a\nb"},
		{"empty", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := PlainText(tc.md); got != tc.want {
				t.Fatalf("PlainText(%q) = %q; want %q", tc.md, got, tc.want)
			}
		})
	}
}

func FuzzPlainText(f *testing.F) {
	f.Add("```go\nfunc f()\n```\n[a](b) **c** \\_ `d`")
	f.Add("#\n---\n\n\n")
	f.Fuzz(func(t *testing.T, md string) {
		out := PlainText(md)
		if utf8.ValidString(md) && !utf8.ValidString(out) {
			t.Fatalf("valid input became invalid UTF-8: %q", out)
		}
		if strings.Contains(out, "\n\n\n") {
			t.Fatalf("more than one blank line in a row: %q", out)
		}
		if len(out) > len(md) {
			t.Fatalf("output %q is longer than its input %q", out, md)
		}
	})
}

func TestParseAt(t *testing.T) {
	for _, tc := range []struct {
		in         string
		path       string
		line, char int64
		ok         bool
	}{
		{"main.go:11:21", "main.go", 10, 20, true},
		{"a:b/c.go:1:1", "a:b/c.go", 0, 0, true},
		{"main.go:0:1", "", 0, 0, false},
		{"main.go:1", "", 0, 0, false},
		{":1:1", "", 0, 0, false},
		{"main.go:x:1", "", 0, 0, false},
	} {
		p, l, c, err := parseAt(tc.in)
		if (err == nil) != tc.ok || (tc.ok && (p != tc.path || l != tc.line || c != tc.char)) {
			t.Errorf("parseAt(%q) = %q %d %d %v", tc.in, p, l, c, err)
		}
	}
}
