package jsonrpc

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestReadFrame(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		max     int
		want    []string
		wantErr error // checked with errors.Is after the wanted frames
	}{
		{name: "one frame", in: "Content-Length: 2\r\n\r\n{}", want: []string{"{}"}, wantErr: io.EOF},
		{name: "two frames", in: "Content-Length: 2\r\n\r\n{}Content-Length: 4\r\n\r\nnull", want: []string{"{}", "null"}, wantErr: io.EOF},
		{name: "content type and case", in: "content-length: 2\r\nContent-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n[]", want: []string{"[]"}, wantErr: io.EOF},
		{name: "bare newlines", in: "Content-Length: 2\n\n{}", want: []string{"{}"}, wantErr: io.EOF},
		{name: "unknown header ignored", in: "X-Thing: 1\r\nContent-Length: 2\r\n\r\n{}", want: []string{"{}"}, wantErr: io.EOF},
		{name: "empty stream", in: "", wantErr: io.EOF},
		{name: "over the bound", in: "Content-Length: 11\r\n\r\n01234567890", max: 10, wantErr: ErrFrameTooLarge},
		{name: "huge declared length", in: "Content-Length: 99999999999999\r\n\r\n", max: 10, wantErr: ErrFrameTooLarge},
		{name: "length overflows int64", in: "Content-Length: 99999999999999999999\r\n\r\n", wantErr: ErrBadHeader},
		{name: "negative length", in: "Content-Length: -1\r\n\r\n", wantErr: ErrBadHeader},
		{name: "no length", in: "Content-Type: x\r\n\r\n{}", wantErr: ErrBadHeader},
		{name: "duplicate length", in: "Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}", wantErr: ErrBadHeader},
		{name: "not a header", in: "hello world\r\n\r\n", wantErr: ErrBadHeader},
		{name: "stray blank line", in: "\r\nContent-Length: 2\r\n\r\n{}", wantErr: ErrBadHeader},
		{name: "header too long", in: "X: " + strings.Repeat("a", MaxHeaderBytes) + "\r\n\r\n", wantErr: ErrBadHeader},
		{name: "header never ends", in: strings.Repeat("X: y\r\n", MaxHeaderBytes), wantErr: ErrBadHeader},
		{name: "eof in header", in: "Content-Length: 2\r\n", wantErr: ErrBadHeader},
		{name: "eof in body", in: "Content-Length: 5\r\n\r\n{}", wantErr: ErrBadMessage},
		{name: "empty body", in: "Content-Length: 0\r\n\r\n", wantErr: ErrBadMessage},
		{name: "spaces in length", in: "Content-Length: 1 2\r\n\r\n{}", wantErr: ErrBadHeader},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := bufio.NewReaderSize(strings.NewReader(tt.in), 16)
			var got []string
			var err error
			for {
				var body []byte
				body, err = ReadFrame(r, tt.max)
				if err != nil {
					break
				}
				got = append(got, string(body))
			}
			if strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Errorf("frames = %q, want %q", got, tt.want)
			}
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("err = %v, want %v", err, tt.wantErr)
			}
		})
	}
}

func TestWriteFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	bodies := []string{`{"a":1}`, `[]`, strings.Repeat("x", 5000)}
	for _, b := range bodies {
		if err := WriteFrame(&buf, []byte(b)); err != nil {
			t.Fatal(err)
		}
	}
	r := bufio.NewReader(&buf)
	for _, want := range bodies {
		got, err := ReadFrame(r, 0)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Fatalf("got %d bytes, want %d", len(got), len(want))
		}
	}
	if _, err := ReadFrame(r, 0); err != io.EOF {
		t.Fatalf("after last frame: %v, want io.EOF", err)
	}
}

// FuzzReadFrame feeds arbitrary bytes to the frame reader: it must never
// panic, never return a body over the bound, and always make progress.
func FuzzReadFrame(f *testing.F) {
	f.Add([]byte("Content-Length: 2\r\n\r\n{}"))
	f.Add([]byte("Content-Length: 2\r\nContent-Type: x\r\n\r\n{}Content-Length: 1\r\n\r\n1"))
	f.Add([]byte("Content-Length: 4097\r\n\r\n"))
	f.Add([]byte("content-length:00000000000000000003\n\nabc"))
	f.Add([]byte("Content-Length: \r\n\r\n"))
	f.Add([]byte(":\r\n\r\n"))
	const maxBody = 4096
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bufio.NewReaderSize(bytes.NewReader(data), 16)
		for i := 0; ; i++ {
			body, err := ReadFrame(r, maxBody)
			if err != nil {
				return
			}
			if len(body) > maxBody || len(body) == 0 {
				t.Fatalf("body of %d bytes with bound %d", len(body), maxBody)
			}
			if i > len(data) {
				t.Fatalf("more frames than input bytes")
			}
		}
	})
}
