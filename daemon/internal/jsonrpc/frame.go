package jsonrpc

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// DefaultMaxFrameSize bounds a frame body when Options.MaxFrameSize is zero.
const DefaultMaxFrameSize = 32 << 20

// MaxHeaderBytes bounds the whole header section of one frame. LSP defines
// two headers, so a few hundred bytes is already generous; the bound exists so
// a peer cannot make us buffer an endless header.
const MaxHeaderBytes = 4 << 10

var (
	// ErrFrameTooLarge: the peer declared a body larger than the bound.
	ErrFrameTooLarge = errors.New("jsonrpc: frame too large")
	// ErrBadHeader: the header section is malformed or too long.
	ErrBadHeader = errors.New("jsonrpc: malformed header")
	// ErrBadMessage: the body is not a JSON-RPC 2.0 message.
	ErrBadMessage = errors.New("jsonrpc: malformed message")
)

// ErrNoResult is what a Call that wants a result returns for a reply with
// neither result nor error, which JSON-RPC 2.0 forbids (a success carries
// "result", null when there is none): no answer, so never taken for an
// empty one. An *Error, so callers treat it as the server's refusal to
// answer this request, not as a broken connection.
var ErrNoResult = &Error{Code: CodeInternalError, Message: "the reply has neither result nor error"}

// ReadFrame reads one frame from r and returns its body. It returns io.EOF
// only when the stream ends cleanly between frames. The body is allocated
// only after its declared length has been checked against maxBody, and the
// header section is limited to MaxHeaderBytes, so a hostile peer cannot make
// it allocate more than maxBody plus r's buffer.
func ReadFrame(r *bufio.Reader, maxBody int) ([]byte, error) {
	if maxBody <= 0 {
		maxBody = DefaultMaxFrameSize
	}
	length := int64(-1)
	total := 0
	for {
		line, err := readHeaderLine(r, MaxHeaderBytes-total)
		total += len(line)
		if err != nil {
			if errors.Is(err, io.EOF) {
				if total == 0 {
					return nil, io.EOF
				}
				return nil, fmt.Errorf("%w: stream ended inside the header section", ErrBadHeader)
			}
			return nil, err
		}
		line = bytes.TrimSuffix(line, []byte("\n"))
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok || len(bytes.TrimSpace(name)) == 0 {
			return nil, fmt.Errorf("%w: header line %q is not \"Name: value\"", ErrBadHeader, clip(line))
		}
		name = bytes.TrimSpace(name)
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length >= 0 {
				return nil, fmt.Errorf("%w: duplicate Content-Length", ErrBadHeader)
			}
			n, err := parseLength(value)
			if err != nil {
				return nil, err
			}
			if n > int64(maxBody) {
				return nil, fmt.Errorf("%w: Content-Length %d exceeds the %d-byte limit", ErrFrameTooLarge, n, maxBody)
			}
			length = n
		case bytes.EqualFold(name, []byte("Content-Type")):
			// The only defined value is JSON in UTF-8; the body parser
			// rejects anything else anyway.
		default:
			// Unknown headers are allowed by the base protocol; they count
			// against the header bound and are otherwise ignored.
		}
	}
	if length < 0 {
		return nil, fmt.Errorf("%w: no Content-Length", ErrBadHeader)
	}
	if length == 0 {
		return nil, fmt.Errorf("%w: empty body", ErrBadMessage)
	}
	body := make([]byte, length)
	if _, err := io.ReadFull(r, body); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("%w: stream ended after %d-byte header promised %d bytes", ErrBadMessage, total, length)
		}
		return nil, err
	}
	return body, nil
}

// readHeaderLine reads up to and including '\n', failing once more than
// budget bytes would be needed.
func readHeaderLine(r *bufio.Reader, budget int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(line)+len(chunk) > budget {
			return nil, fmt.Errorf("%w: header section exceeds %d bytes", ErrBadHeader, MaxHeaderBytes)
		}
		line = append(line, chunk...)
		switch {
		case err == nil:
			return line, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(line) > 0:
			return line, fmt.Errorf("%w: stream ended inside the header section", ErrBadHeader)
		default:
			return line, err
		}
	}
}

func parseLength(v []byte) (int64, error) {
	if len(v) == 0 || len(v) > 19 {
		return 0, fmt.Errorf("%w: Content-Length %q", ErrBadHeader, clip(v))
	}
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%w: Content-Length %q", ErrBadHeader, clip(v))
		}
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: Content-Length %q", ErrBadHeader, clip(v))
	}
	return n, nil
}

// clip keeps error messages short when a peer sends garbage.
func clip(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}

// WriteFrame writes body as one frame with a single Write call, so that
// concurrent writers sharing w through a lock never interleave partial
// frames.
func WriteFrame(w io.Writer, body []byte) error {
	_, err := w.Write(frame(body))
	return err
}

// frame is body's whole frame, header and body: one Write puts it on the
// wire.
func frame(body []byte) []byte {
	buf := make([]byte, 0, len(body)+32)
	buf = append(buf, "Content-Length: "...)
	buf = strconv.AppendInt(buf, int64(len(body)), 10)
	buf = append(buf, "\r\n\r\n"...)
	return append(buf, body...)
}
