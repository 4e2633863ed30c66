package ctl

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestReadFrame(t *testing.T) {
	for _, tc := range []struct {
		name, in, body string
		err            error
	}{
		{"plain", "Content-Length: 2\r\n\r\n{}", "{}", nil},
		{"with content type", "Content-Type: application/vscode-jsonrpc; charset=utf-8\r\nContent-Length: 2\r\n\r\n{}", "{}", nil},
		{"lower case, bare newlines", "content-length:2\n\n{}", "{}", nil},
		{"empty stream", "", "", io.EOF},
		{"no length", "Content-Type: x\r\n\r\n{}", "", errFrame},
		{"negative length", "Content-Length: -1\r\n\r\n", "", errFrame},
		{"two lengths", "Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}", "", errFrame},
		{"over the limit", "Content-Length: 99999999999\r\n\r\n", "", errFrame},
		{"no colon", "Content-Length 2\r\n\r\n{}", "", errFrame},
		{"short body", "Content-Length: 10\r\n\r\n{}", "", io.ErrUnexpectedEOF},
		{"cut in the headers", "Content-Length: 2\r\n", "", io.ErrUnexpectedEOF},
		{"long header line", strings.Repeat("x", 2000) + "\r\n\r\n", "", errFrame},
		{"many headers", strings.Repeat("X: y\r\n", 40) + "\r\n", "", errFrame},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, err := readFrame(bufio.NewReader(strings.NewReader(tc.in)))
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil || string(body) != tc.body {
				t.Fatalf("got %q, %v; want %q", body, err, tc.body)
			}
		})
	}
}

// TestFrameRoundTrip: what frameWriter writes, readFrame reads back, one
// message after another.
func TestFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w := &frameWriter{w: &buf}
	msgs := []string{`{"a":1}`, `{"b":"ünïcode"}`, `{}`}
	for _, m := range msgs {
		if err := w.write([]byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	r := bufio.NewReader(&buf)
	for _, m := range msgs {
		got, err := readFrame(r)
		if err != nil || string(got) != m {
			t.Fatalf("got %q, %v; want %q", got, err, m)
		}
	}
	if _, err := readFrame(r); err != io.EOF {
		t.Fatalf("after the last message: %v, want EOF", err)
	}
}

func FuzzReadFrame(f *testing.F) {
	f.Add([]byte("Content-Length: 2\r\n\r\n{}"))
	f.Add([]byte("Content-Length: 5\r\nContent-Type: x\r\n\r\n{}"))
	f.Add([]byte("content-length:0\n\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bufio.NewReader(bytes.NewReader(in))
		for i := 0; i < 4; i++ {
			body, err := readFrame(r)
			if err != nil {
				return
			}
			if len(body) > maxFrame || len(body) > len(in) {
				t.Fatalf("a %d-byte body from %d bytes of input", len(body), len(in))
			}
		}
	})
}

func TestRepoPathUnder(t *testing.T) {
	root := "/home/me/hello"
	for _, tc := range []struct {
		uri, path string
		ok        bool
	}{
		{"file:///home/me/hello/main.go", "main.go", true},
		{"file:///home/me/hello/greet/greet.go", "greet/greet.go", true},
		{"file://localhost/home/me/hello/main.go", "main.go", true},
		{"file:///home/me/hello/dir%20with%20space/a.go", "dir with space/a.go", true},
		{"file:///home/me/hello", "", false},
		{"file:///home/me/hello2/main.go", "", false},
		{"file:///home/me/hello/../other/main.go", "", false},
		{"file:///etc/passwd", "", false},
		{"untitled:Untitled-1", "", false},
		{"file://otherhost/home/me/hello/main.go", "", false},
		{"https://example.com/home/me/hello/main.go", "", false},
	} {
		path, ok := repoPathUnder(root, tc.uri)
		if ok != tc.ok || path != tc.path {
			t.Errorf("%s: got %q %v, want %q %v", tc.uri, path, ok, tc.path, tc.ok)
		}
	}
}

func TestLocalURI(t *testing.T) {
	root := "/home/me/hello"
	for _, tc := range []struct {
		path, uri string
		ok        bool
	}{
		{"main.go", "file:///home/me/hello/main.go", true},
		{"greet/greet.go", "file:///home/me/hello/greet/greet.go", true},
		{"dir with space/a.go", "file:///home/me/hello/dir%20with%20space/a.go", true},
		{"../escape.go", "", false},
		{"a/../../escape.go", "", false},
		{"/abs.go", "", false},
		{"", "", false},
	} {
		uri, ok := localURI(root, tc.path)
		if ok != tc.ok || uri != tc.uri {
			t.Errorf("%q: got %q %v, want %q %v", tc.path, uri, ok, tc.uri, tc.ok)
		}
		if ok {
			if back, ok := repoPathUnder(root, uri); !ok || back != tc.path {
				t.Errorf("%q: round trip gave %q %v", tc.path, back, ok)
			}
		}
	}
}

func TestWordAt(t *testing.T) {
	text := "package main\n\tfmt.Println(greet.Hello(\"wörld\"), ünï)\n"
	for _, tc := range []struct {
		line, char int64
		word       string
		start, end int64
	}{
		{1, 20, "Hello", 19, 24},
		{1, 19, "Hello", 19, 24},
		{1, 24, "Hello", 19, 24},
		{1, 3, "fmt", 1, 4},
		{1, 36, "ünï", 35, 38},
		{1, 0, "", 0, 0},
		{9, 0, "", 0, 0},
		{1, 999, "", 0, 0},
	} {
		w, s, e := wordAt(text, tc.line, tc.char)
		if w != tc.word || (w != "" && (s != tc.start || e != tc.end)) {
			t.Errorf("%d:%d: got %q [%d,%d), want %q [%d,%d)", tc.line, tc.char, w, s, e, tc.word, tc.start, tc.end)
		}
	}
}
