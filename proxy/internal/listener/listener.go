// Package listener bounds what a client can hold on the proxy's HTTP
// listeners before it has proven anything: connections per client address
// and in total, the time to send a request body, the time to take each
// piece of an answer, and the time a kept-alive connection may idle.
//
// http.Server's own ReadTimeout cannot be used: it is a deadline on the
// whole request, and once it passes the server's background read cancels
// the request's context — an SSE prepare stream or an MCP stream would die
// with it. Instead a request with a body gets a read deadline of its own
// (BodyRead) that is lifted as soon as the body has been read, and every
// write of an answer gets a fresh write deadline (Write): an answer may
// stream for as long as its handler runs, but a client that stops reading
// is cut within Write.
package listener

import (
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// Config are the bounds. A zero field takes its default from Defaults; a
// negative MaxConnsPerAddr or MaxConns turns that bound off.
type Config struct {
	MaxConnsPerAddr int           // open connections from one client IP
	MaxConns        int           // open connections in total
	HeaderRead      time.Duration // to send the request line and headers
	BodyRead        time.Duration // to send the whole request body
	Write           time.Duration // to take each write of an answer
	Idle            time.Duration // a kept-alive connection between requests
}

// Defaults are the bounds unless configured: a few seconds to send a
// request, a minute to take each write, two minutes idle.
func Defaults() Config {
	return Config{
		MaxConnsPerAddr: 128,
		MaxConns:        4096,
		HeaderRead:      10 * time.Second,
		BodyRead:        10 * time.Second,
		Write:           60 * time.Second,
		Idle:            2 * time.Minute,
	}
}

func (c Config) withDefaults() Config {
	d := Defaults()
	if c.MaxConnsPerAddr == 0 {
		c.MaxConnsPerAddr = d.MaxConnsPerAddr
	}
	if c.MaxConns == 0 {
		c.MaxConns = d.MaxConns
	}
	for _, p := range []struct{ v, d *time.Duration }{{&c.HeaderRead, &d.HeaderRead}, {&c.BodyRead, &d.BodyRead}, {&c.Write, &d.Write}, {&c.Idle, &d.Idle}} {
		if *p.v <= 0 {
			*p.v = *p.d
		}
	}
	return c
}

// Server returns an http.Server for h with the bounds of c; serve it on a
// listener from Limit.
func Server(h http.Handler, c Config) *http.Server {
	c = c.withDefaults()
	return &http.Server{
		Handler:           Deadlines(h, c),
		ReadHeaderTimeout: c.HeaderRead,
		// The first write deadline; each write moves it (Deadlines).
		WriteTimeout:   c.Write,
		IdleTimeout:    c.Idle,
		MaxHeaderBytes: 64 << 10,
	}
}

// Deadlines gives a request with a body c.BodyRead to send all of it, and
// every write of the answer c.Write to complete.
func Deadlines(h http.Handler, c Config) http.Handler {
	c = c.withDefaults()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		// A request without a body has its background read running
		// already: a read deadline there would cancel the request.
		if r.Body != nil && r.Body != http.NoBody {
			if err := rc.SetReadDeadline(time.Now().Add(c.BodyRead)); err == nil {
				r.Body = &bodyReader{ReadCloser: r.Body, rc: rc}
			}
		}
		h.ServeHTTP(&deadlineWriter{ResponseWriter: w, rc: rc, d: c.Write}, r)
	})
}

// bodyReader lifts the body's read deadline once the body has been read,
// before the server's background read (which watches for the client going
// away) could trip over it.
type bodyReader struct {
	io.ReadCloser
	rc   *http.ResponseController
	once sync.Once
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) {
		b.once.Do(func() { _ = b.rc.SetReadDeadline(time.Time{}) })
	}
	return n, err
}

// deadlineWriter moves the write deadline before every write and flush, so
// a stream may last as long as its handler while a client that stops
// reading is cut within d.
type deadlineWriter struct {
	http.ResponseWriter
	rc *http.ResponseController
	d  time.Duration
}

func (w *deadlineWriter) extend() { _ = w.rc.SetWriteDeadline(time.Now().Add(w.d)) }

func (w *deadlineWriter) Write(p []byte) (int, error) {
	w.extend()
	return w.ResponseWriter.Write(p)
}

func (w *deadlineWriter) WriteHeader(code int) {
	w.extend()
	w.ResponseWriter.WriteHeader(code)
}

// Flush implements http.Flusher (echo and the MCP SDK look for it).
func (w *deadlineWriter) Flush() {
	w.extend()
	_ = w.rc.Flush()
}

// Unwrap lets http.ResponseController reach the server's writer.
func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Limit wraps ln so that at most c.MaxConnsPerAddr connections from one
// client IP and c.MaxConns in total are open at once. A connection over a
// bound is closed at once, before a byte of it is read, and Accept goes on
// to the next one.
func Limit(ln net.Listener, c Config) net.Listener {
	c = c.withDefaults()
	return &limited{Listener: ln, perAddr: c.MaxConnsPerAddr, total: c.MaxConns, open: map[string]int{}}
}

type limited struct {
	net.Listener
	perAddr, total int // <0: no bound

	mu      sync.Mutex
	open    map[string]int
	n       int
	refused uint64
}

// Accept implements net.Listener.
func (l *limited) Accept() (net.Conn, error) {
	for {
		conn, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr := clientAddr(conn)
		if !l.take(addr) {
			_ = conn.Close()
			continue
		}
		return &limitedConn{Conn: conn, l: l, addr: addr}, nil
	}
}

func (l *limited) take(addr string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if (l.total >= 0 && l.n >= l.total) || (l.perAddr >= 0 && l.open[addr] >= l.perAddr) {
		l.refused++
		return false
	}
	l.n++
	l.open[addr]++
	return true
}

func (l *limited) release(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n--
	if l.open[addr]--; l.open[addr] <= 0 {
		delete(l.open, addr)
	}
}

// Stats reports the open connections and how many were refused so far;
// ln must come from Limit.
func Stats(ln net.Listener) (open int, refused uint64) {
	l, ok := ln.(*limited)
	if !ok {
		return 0, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n, l.refused
}

func clientAddr(c net.Conn) string {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	host, _, err := net.SplitHostPort(c.RemoteAddr().String())
	if err != nil {
		return c.RemoteAddr().String()
	}
	return host
}

type limitedConn struct {
	net.Conn
	l    *limited
	addr string
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.addr) })
	return err
}
