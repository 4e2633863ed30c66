package forge

import (
	"bytes"
	"errors"
	"fmt"
	"io"
)

// maxPktPayload is the largest pkt-line payload git allows (65520 bytes in
// all, four of which are the length).
const maxPktPayload = 65516

type pktKind uint8

const (
	pktData  pktKind = iota
	pktFlush         // 0000
	pktDelim         // 0001 (protocol v2)
	pktEnd           // 0002 response-end (protocol v2)
)

var (
	errPktMalformed = errors.New("malformed pkt-line")
	errPktTooLarge  = errors.New("response too large")
)

// pktReader reads pkt-lines from an untrusted forge, consuming at most limit
// bytes in all.
type pktReader struct {
	r         io.Reader
	remaining int64
	hdr       [4]byte
	buf       []byte
}

func newPktReader(r io.Reader, limit int64) *pktReader {
	return &pktReader{r: r, remaining: limit}
}

// next returns the next pkt-line. The payload is valid until the next call.
// A clean end of input before a header is io.EOF; anything else that does
// not frame is errPktMalformed.
func (p *pktReader) next() (pktKind, []byte, error) {
	if err := p.read(p.hdr[:]); err != nil {
		if err == io.EOF {
			return 0, nil, io.EOF
		}
		return 0, nil, err
	}
	n := 0
	for _, c := range p.hdr {
		var v byte
		switch {
		case '0' <= c && c <= '9':
			v = c - '0'
		case 'a' <= c && c <= 'f':
			v = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			v = c - 'A' + 10
		default:
			return 0, nil, errPktMalformed
		}
		n = n<<4 | int(v)
	}
	switch {
	case n == 0:
		return pktFlush, nil, nil
	case n == 1:
		return pktDelim, nil, nil
	case n == 2:
		return pktEnd, nil, nil
	case n < 4 || n-4 > maxPktPayload:
		return 0, nil, errPktMalformed
	}
	if cap(p.buf) < n-4 {
		p.buf = make([]byte, n-4, maxPktPayload)
	}
	payload := p.buf[:n-4]
	if err := p.read(payload); err != nil {
		if err == io.EOF {
			return 0, nil, errPktMalformed
		}
		return 0, nil, err
	}
	return pktData, payload, nil
}

func (p *pktReader) read(b []byte) error {
	if int64(len(b)) > p.remaining {
		return errPktTooLarge
	}
	n, err := io.ReadFull(p.r, b)
	p.remaining -= int64(n)
	switch {
	case err == io.ErrUnexpectedEOF:
		return errPktMalformed
	case err == io.EOF && n == 0:
		return io.EOF
	case err != nil:
		return err
	}
	return nil
}

// writePkt appends one data pkt-line.
func writePkt(b *bytes.Buffer, line string) {
	fmt.Fprintf(b, "%04x%s", len(line)+4, line)
}
