package ctl

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
)

// The LSP base protocol: header lines ending in \r\n, a blank line, then
// Content-Length bytes of JSON. Written here rather than imported: the
// daemon's jsonrpc package is another module's internal code, and the
// bridge needs only these few bounded lines.

const (
	// maxFrame bounds one message from the editor: a whole buffer sent on
	// didOpen or didChange (full sync) fits with room to spare.
	maxFrame = 64 << 20
	// maxHeaderLine and maxHeaders bound the header block, which is read
	// before the length is known.
	maxHeaderLine = 1024
	maxHeaders    = 16
)

var errFrame = errors.New("malformed frame")

// readFrame reads one message's body. io.EOF means the editor closed the
// stream between messages; any other error leaves the stream unusable.
func readFrame(r *bufio.Reader) ([]byte, error) {
	length := -1
	for n := 0; ; n++ {
		if n > maxHeaders {
			return nil, fmt.Errorf("%w: more than %d header lines", errFrame, maxHeaders)
		}
		line, err := readHeaderLine(r)
		if err != nil {
			if err == io.EOF && n == 0 {
				return nil, io.EOF
			}
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		if line == "" {
			break
		}
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("%w: header line without a colon", errFrame)
		}
		if strings.EqualFold(strings.TrimSpace(name), "Content-Length") {
			if length >= 0 {
				return nil, fmt.Errorf("%w: two Content-Length headers", errFrame)
			}
			v, err := strconv.Atoi(strings.TrimSpace(value))
			if err != nil || v < 0 {
				return nil, fmt.Errorf("%w: bad Content-Length %q", errFrame, strings.TrimSpace(value))
			}
			if v > maxFrame {
				return nil, fmt.Errorf("%w: Content-Length %d over the %d limit", errFrame, v, maxFrame)
			}
			length = v
		}
		// Content-Type is the only other header the protocol defines;
		// it is always utf-8 JSON in practice, so it is not checked.
	}
	if length < 0 {
		return nil, fmt.Errorf("%w: no Content-Length", errFrame)
	}
	body := make([]byte, length)
	if _, err := io.ReadFull(r, body); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("read a %d-byte body: %w", length, err)
	}
	return body, nil
}

// readHeaderLine reads one header line without its \r\n, refusing lines
// longer than maxHeaderLine so a stream without newlines cannot grow
// memory.
func readHeaderLine(r *bufio.Reader) (string, error) {
	var b strings.Builder
	for {
		c, err := r.ReadByte()
		if err != nil {
			if err == io.EOF && b.Len() > 0 {
				return "", io.ErrUnexpectedEOF
			}
			return "", err
		}
		if c == '\n' {
			return strings.TrimSuffix(b.String(), "\r"), nil
		}
		if b.Len() >= maxHeaderLine {
			return "", fmt.Errorf("%w: header line over %d bytes", errFrame, maxHeaderLine)
		}
		b.WriteByte(c)
	}
}

// frameWriter writes whole messages; replies from concurrent requests
// and notifications must not interleave.
type frameWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (f *frameWriter) write(body []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := fmt.Fprintf(f.w, "Content-Length: %d\r\n\r\n", len(body)); err != nil {
		return err
	}
	_, err := f.w.Write(body)
	return err
}
