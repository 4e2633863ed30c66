package jsonrpc

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// rawPeer drives the other end of a pipe byte by byte, so tests can send
// what a well-behaved Conn never would.
type rawPeer struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
}

func newPair(t *testing.T, opts Options) (*Conn, *rawPeer) {
	t.Helper()
	a, b := net.Pipe()
	c := NewConn(a, opts)
	p := &rawPeer{t: t, conn: b, r: bufio.NewReader(b)}
	t.Cleanup(func() {
		_ = b.Close()
		_ = c.Close()
	})
	return c, p
}

func (p *rawPeer) read() wireMsg {
	p.t.Helper()
	body, err := ReadFrame(p.r, 0)
	if err != nil {
		p.t.Fatalf("peer read: %v", err)
	}
	var m wireMsg
	if err := json.Unmarshal(body, &m); err != nil {
		p.t.Fatalf("peer decode %q: %v", body, err)
	}
	return m
}

func (p *rawPeer) write(body string) {
	p.t.Helper()
	if err := WriteFrame(p.conn, []byte(body)); err != nil {
		p.t.Fatalf("peer write: %v", err)
	}
}

func TestCallsMatchRepliesOutOfOrder(t *testing.T) {
	c, p := newPair(t, Options{})
	type res struct {
		v   string
		err error
	}
	results := make(chan res, 2)
	for _, method := range []string{"first", "second"} {
		go func() {
			var v string
			err := c.Call(context.Background(), method, map[string]string{"m": method}, &v)
			results <- res{v, err}
		}()
	}
	a, b := p.read(), p.read()
	// Answer in reverse order of arrival; each caller must get its own reply.
	p.write(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":%q}`, b.ID, b.Method))
	p.write(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":%q}`, a.ID, a.Method))
	got := map[string]bool{}
	for range 2 {
		r := <-results
		if r.err != nil {
			t.Fatal(r.err)
		}
		got[r.v] = true
	}
	if !got["first"] || !got["second"] {
		t.Fatalf("results %v", got)
	}
}

func TestConcurrentCallsBetweenConns(t *testing.T) {
	a, b := net.Pipe()
	server := NewConn(b, Options{Handler: func(_ context.Context, req *Request) (any, error) {
		if req.Method != "echo" {
			return nil, &Error{Code: CodeMethodNotFound, Message: req.Method}
		}
		return req.Params, nil
	}})
	client := NewConn(a, Options{})
	defer server.Close()
	defer client.Close()

	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 64 {
		wg.Go(func() {
			var got map[string]int
			if err := client.Call(context.Background(), "echo", map[string]int{"i": i}, &got); err != nil {
				errs <- err
				return
			}
			if got["i"] != i {
				errs <- fmt.Errorf("call %d got %v", i, got)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	err := client.Call(context.Background(), "nope", nil, nil)
	var rpcErr *Error
	if !errors.As(err, &rpcErr) || rpcErr.Code != CodeMethodNotFound {
		t.Fatalf("unknown method: %v", err)
	}
}

func TestReplyShapes(t *testing.T) {
	tests := []struct {
		name      string
		reply     string
		want      string
		wantErr   int64
		wantErrIs error
	}{
		{name: "null result", reply: `"result":null`, want: "null"},
		{name: "missing result", reply: ``, wantErrIs: ErrNoResult}, // not an empty answer
		{name: "object", reply: `"result":{"a":[1,2]}`, want: `{"a":[1,2]}`},
		{name: "error", reply: `"error":{"code":-32803,"message":"nope"}`, wantErr: CodeRequestFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, p := newPair(t, Options{})
			done := make(chan error, 1)
			var raw json.RawMessage
			go func() { done <- c.Call(context.Background(), "m", nil, &raw) }()
			req := p.read()
			sep := ","
			if tt.reply == "" {
				sep = ""
			}
			p.write(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s%s%s}`, req.ID, sep, tt.reply))
			err := <-done
			if tt.wantErrIs != nil {
				if !errors.Is(err, tt.wantErrIs) {
					t.Fatalf("err = %v, want %v", err, tt.wantErrIs)
				}
				return
			}
			if tt.wantErr != 0 {
				var rpcErr *Error
				if !errors.As(err, &rpcErr) || rpcErr.Code != tt.wantErr {
					t.Fatalf("err = %v, want code %d", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(raw) != tt.want {
				t.Fatalf("raw = %q, want %q", raw, tt.want)
			}
		})
	}
}

func TestCancelSendsCancelRequest(t *testing.T) {
	c, p := newPair(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Call(ctx, "slow", nil, nil) }()
	req := p.read()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	n := p.read()
	if n.Method != "$/cancelRequest" || len(n.ID) != 0 {
		t.Fatalf("got %+v, want a $/cancelRequest notification", n)
	}
	var params struct{ ID json.RawMessage }
	if err := json.Unmarshal(n.Params, &params); err != nil || string(params.ID) != string(req.ID) {
		t.Fatalf("cancel params %s, want id %s", n.Params, req.ID)
	}
	// A late reply to the abandoned call is dropped, and the conn lives on.
	p.write(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":1}`, req.ID))
	go func() { done <- c.Call(context.Background(), "next", nil, nil) }()
	next := p.read()
	p.write(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":null}`, next.ID))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestHandlerServesPeer(t *testing.T) {
	var mu sync.Mutex
	var notes []string
	c, p := newPair(t, Options{Handler: func(_ context.Context, req *Request) (any, error) {
		switch {
		case req.IsNotification():
			mu.Lock()
			notes = append(notes, string(req.Params))
			mu.Unlock()
			return nil, nil
		case req.Method == "ask":
			return map[string]string{"answer": "yes"}, nil
		case req.Method == "fail":
			return nil, errors.New("plain failure")
		}
		return nil, &Error{Code: CodeMethodNotFound, Message: "no"}
	}})
	_ = c
	for i := range 20 {
		p.write(fmt.Sprintf(`{"jsonrpc":"2.0","method":"note","params":[%d]}`, i))
	}
	tests := []struct {
		id, method, want string
		code             int64
	}{
		{id: `"s1"`, method: "ask", want: `{"answer":"yes"}`},
		{id: `7`, method: "fail", code: CodeInternalError},
		{id: `8`, method: "other", code: CodeMethodNotFound},
	}
	for _, tt := range tests {
		p.write(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":%q}`, tt.id, tt.method))
		reply := p.read()
		if string(reply.ID) != tt.id {
			t.Fatalf("reply id %s, want %s", reply.ID, tt.id)
		}
		if tt.code != 0 {
			if reply.Error == nil || reply.Error.Code != tt.code {
				t.Fatalf("%s: reply %+v, want code %d", tt.method, reply, tt.code)
			}
			continue
		}
		if string(reply.Result) != tt.want {
			t.Fatalf("%s: result %s, want %s", tt.method, reply.Result, tt.want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i, n := range notes {
		if n != fmt.Sprintf("[%d]", i) {
			t.Fatalf("notification %d = %s: order lost", i, n)
		}
	}
	if len(notes) != 20 {
		t.Fatalf("%d notifications, want 20", len(notes))
	}
}

func TestProtocolViolationsKillTheConn(t *testing.T) {
	tests := []struct {
		name  string
		bytes string
		want  error
	}{
		{name: "oversize frame", bytes: "Content-Length: 1025\r\n\r\n", want: ErrFrameTooLarge},
		{name: "invalid json", bytes: "Content-Length: 5\r\n\r\n{nope", want: ErrBadMessage},
		{name: "batch", bytes: "Content-Length: 2\r\n\r\n[]", want: ErrBadMessage},
		{name: "wrong version", bytes: "Content-Length: 17\r\n\r\n{\"jsonrpc\":\"1.0\"}", want: ErrBadMessage},
		{name: "bad header", bytes: "Content-Length: x\r\n\r\n", want: ErrBadHeader},
		{name: "peer hangs up", want: io.EOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, p := newPair(t, Options{MaxFrameSize: 1024})
			done := make(chan error, 1)
			go func() { done <- c.Call(context.Background(), "m", nil, nil) }()
			p.read()
			if tt.bytes == "" {
				_ = p.conn.Close()
			} else if _, err := io.WriteString(p.conn, tt.bytes); err != nil {
				t.Fatal(err)
			}
			err := <-done
			if !errors.Is(err, ErrClosed) || !errors.Is(err, tt.want) {
				t.Fatalf("call err = %v, want ErrClosed wrapping %v", err, tt.want)
			}
			<-c.Done()
			if !errors.Is(c.Err(), tt.want) {
				t.Fatalf("Err() = %v", c.Err())
			}
			if err := c.Notify(context.Background(), "late", nil); !errors.Is(err, ErrClosed) {
				t.Fatalf("notify after death: %v", err)
			}
		})
	}
}

func TestCloseFailsCallsInFlight(t *testing.T) {
	c, p := newPair(t, Options{})
	done := make(chan error, 1)
	go func() { done <- c.Call(context.Background(), "m", nil, nil) }()
	p.read()
	go func() { _, _ = io.Copy(io.Discard, p.conn) }()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("err = %v", err)
	}
	if err := c.Call(context.Background(), "m", nil, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("call after close: %v", err)
	}
}

// The wire timer adds each Call's time from handing the request over to
// reading its reply: a peer that answers 30 ms late shows at least that,
// and a context without a timer is left alone.
func TestWireTimer(t *testing.T) {
	c, p := newPair(t, Options{})
	var times WireTimes
	wire := &times.Wire
	ctx := WithWireTimer(context.Background(), &times)
	done := make(chan error, 2)
	go func() { done <- c.Call(ctx, "a", nil, nil) }()
	m := p.read()
	time.Sleep(30 * time.Millisecond)
	p.write(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":null}`, m.ID))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	first := time.Duration(wire.Load())
	if first < 30*time.Millisecond || first > 10*time.Second {
		t.Fatalf("wire time %v, want at least the peer's 30 ms", first)
	}
	go func() { done <- c.Call(context.Background(), "b", nil, nil) }()
	m = p.read()
	p.write(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":null}`, m.ID))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := time.Duration(wire.Load()); got != first {
		t.Fatalf("a call without the timer changed it: %v → %v", first, got)
	}
	if w := time.Duration(times.Wakeup.Load()); w < 0 || w > first {
		t.Fatalf("wake-up %v: want between 0 and the wire time %v", w, first)
	}
}

// osPipeConn is a connection over two real pipes, as the daemon has with
// a server's stdin and stdout: writes take deadlines, and a pipe holds
// 64 KiB that nobody reads.
type osPipeConn struct {
	r *os.File
	w *os.File
}

func (p osPipeConn) Read(b []byte) (int, error)         { return p.r.Read(b) }
func (p osPipeConn) Write(b []byte) (int, error)        { return p.w.Write(b) }
func (p osPipeConn) SetWriteDeadline(t time.Time) error { return p.w.SetWriteDeadline(t) }
func (p osPipeConn) Close() error                       { return errors.Join(p.w.Close(), p.r.Close()) }

// TestPeerThatStopsReading: the caller writes its own frame (no writer
// goroutine), so a peer that reads nothing must not hold it past its
// deadline. Over net.Pipe nothing reaches the wire and the connection
// goes on; over a real pipe, a frame bigger than the pipe's buffer is cut
// short by the deadline, and the connection, whose stream is now broken,
// stops.
func TestPeerThatStopsReading(t *testing.T) {
	t.Run("nothing written", func(t *testing.T) {
		c, p := newPair(t, Options{})
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		if err := c.Call(ctx, "m", nil, nil); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v", err)
		}
		if err := c.Err(); err != nil {
			t.Fatalf("the connection stopped though nothing was written: %v", err)
		}
		go func() {
			m := p.read()
			p.write(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":1}`)
		}()
		if err := c.Call(context.Background(), "m", nil, nil); err != nil {
			t.Fatalf("the next call: %v", err)
		}
	})
	t.Run("frame cut short", func(t *testing.T) {
		inR, inW, outR, outW := twoPipes(t)
		c := NewConn(osPipeConn{r: outR, w: inW}, Options{})
		t.Cleanup(func() {
			_ = c.Close()
			_ = inR.Close()
			_ = outW.Close()
		})
		// A second: long enough that the write has begun before it ends
		// however loaded the machine.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		big := json.RawMessage(`"` + strings.Repeat("x", 1<<20) + `"`)
		done := make(chan error, 1)
		go func() { done <- c.Call(ctx, "m", big, nil) }()
		select {
		case err := <-done:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("err = %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a peer that reads nothing held the caller past its deadline")
		}
		select {
		case <-c.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the connection goes on with a frame cut short")
		}
	})
}

// plainStream is a stream whose writes take no deadline (io.Pipe), so
// only closing it can end a write the peer does not read.
type plainStream struct {
	r *io.PipeReader
	w *io.PipeWriter
}

func (p plainStream) Read(b []byte) (int, error)  { return p.r.Read(b) }
func (p plainStream) Write(b []byte) (int, error) { return p.w.Write(b) }
func (p plainStream) Close() error                { return errors.Join(p.w.Close(), p.r.Close()) }

// TestWritesAreBounded: every write to a peer that reads nothing ends
// within the write timeout and stops the connection — also writes with no
// deadline of their own: a reply to the peer's request (written on the
// reader goroutine, which then reads nothing more), a notification on a
// context without one, a write to a stream that takes no deadline — and
// writes that each give up at their caller's short deadline add up to it.
func TestWritesAreBounded(t *testing.T) {
	const bound = 200 * time.Millisecond
	big := strings.Repeat("x", 1<<20) // more than a pipe holds
	// Each case returns the connection, with a peer that never reads, and
	// makes it write.
	tests := []struct {
		name string
		run  func(t *testing.T) *Conn
	}{
		{name: "reply to the peer over a pipe", run: func(t *testing.T) *Conn {
			inR, inW, outR, outW := twoPipes(t)
			c := NewConn(osPipeConn{r: outR, w: inW}, Options{WriteTimeout: bound, Handler: func(context.Context, *Request) (any, error) {
				return big, nil
			}})
			t.Cleanup(func() {
				_ = c.Close()
				_ = inR.Close()
				_ = outW.Close()
			})
			if err := WriteFrame(outW, []byte(`{"jsonrpc":"2.0","id":1,"method":"ask"}`)); err != nil {
				t.Fatal(err)
			}
			return c
		}},
		{name: "notification without a deadline", run: func(t *testing.T) *Conn {
			c, _ := newPair(t, Options{WriteTimeout: bound})
			go func() { _ = c.Notify(context.Background(), "n", nil) }()
			return c
		}},
		{name: "stream without write deadlines", run: func(t *testing.T) *Conn {
			inR, inW := io.Pipe()
			outR, outW := io.Pipe()
			c := NewConn(plainStream{r: outR, w: inW}, Options{WriteTimeout: bound})
			t.Cleanup(func() {
				_ = c.Close()
				_ = inR.Close()
				_ = outW.Close()
			})
			go func() { _ = c.Notify(context.Background(), "n", nil) }()
			return c
		}},
		{name: "short caller deadlines add up", run: func(t *testing.T) *Conn {
			c, _ := newPair(t, Options{WriteTimeout: bound})
			go func() {
				for i := 0; ; i++ {
					ctx, cancel := context.WithTimeout(context.Background(), bound/4)
					err := c.Notify(ctx, "n", nil)
					cancel()
					if i == 0 && (!errors.Is(err, context.DeadlineExceeded) || c.Err() != nil) {
						t.Errorf("the first short write: %v, connection %v; want DeadlineExceeded, still running", err, c.Err())
					}
					if errors.Is(err, ErrClosed) {
						return
					}
				}
			}()
			return c
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.run(t)
			select {
			case <-c.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("a peer that reads nothing held a write past the write timeout")
			}
			if err := c.Err(); !errors.Is(err, ErrWriteTimeout) {
				t.Fatalf("the connection stopped with %v, want ErrWriteTimeout", err)
			}
			if err := c.Notify(context.Background(), "late", nil); !errors.Is(err, ErrClosed) {
				t.Fatalf("a write after the timeout: %v", err)
			}
		})
	}
}

// watchedPipe is a stream that is a Watcher.
type watchedPipe struct {
	net.Conn
	abandoned chan error
}

func (w watchedPipe) Abandoned(ctx context.Context, began time.Time) {
	if time.Since(began) < 0 {
		panic("began in the future")
	}
	w.abandoned <- ctx.Err()
}

// TestWatcherHearsAbandonedCalls: a stream that is a Watcher hears of each
// call its context ended, with the context's error, and of no other.
func TestWatcherHearsAbandonedCalls(t *testing.T) {
	a, b := net.Pipe()
	w := watchedPipe{Conn: a, abandoned: make(chan error, 10)}
	c := NewConn(w, Options{})
	p := &rawPeer{t: t, conn: b, r: bufio.NewReader(b)}
	t.Cleanup(func() {
		_ = b.Close()
		_ = c.Close()
	})
	go func() {
		for {
			body, err := ReadFrame(p.r, 0)
			if err != nil {
				return
			}
			var m wireMsg
			_ = json.Unmarshal(body, &m)
			if m.Method == "answer" {
				_ = WriteFrame(b, []byte(`{"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":1}`))
			}
		}
	}()
	if err := c.Call(context.Background(), "answer", nil, nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := c.Call(ctx, "ignore", nil, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	if err := c.Call(ctx, "ignore", nil, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	close(w.abandoned)
	var got []error
	for err := range w.abandoned {
		got = append(got, err)
	}
	if len(got) != 2 || got[0] != context.DeadlineExceeded || got[1] != context.Canceled {
		t.Fatalf("the watcher heard %v, want [DeadlineExceeded Canceled]", got)
	}
}

// twoPipes is a peer's stdin (in) and stdout (out) as the runtime makes
// them: real pipes, which take write deadlines.
func twoPipes(t *testing.T) (inR, inW, outR, outW *os.File) {
	t.Helper()
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err = os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	return inR, inW, outR, outW
}

// countingHandler counts the records logged at Warn and above, and the
// longest.
type countingHandler struct {
	mu      sync.Mutex
	n, long int
}

func (h *countingHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n++
	size := len(r.Message)
	r.Attrs(func(a slog.Attr) bool { size += len(a.Value.String()); return true })
	h.long = max(h.long, size)
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

// TestPeerAnomaliesLogBounded: a peer sending malformed messages in a loop
// gets a bounded number of log lines, each bounded (a method name of
// megabytes was logged whole), then one count when the connection stops.
func TestPeerAnomaliesLogBounded(t *testing.T) {
	h := &countingHandler{}
	c, p := newPair(t, Options{Logger: slog.New(h)})
	for i := range 200 {
		p.write(fmt.Sprintf(`{"jsonrpc":"2.0","id":"foreign-%d","result":null}`, i))
	}
	p.write(`{"jsonrpc":"2.0","id":{},"method":"` + strings.Repeat("m", 1<<20) + `"}`)
	// A call answered proves the reader has handled everything before it.
	done := make(chan error, 1)
	go func() { done <- c.Call(context.Background(), "m", nil, nil) }()
	req := p.read()
	p.write(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":null}`, req.ID))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n > maxAnomalyLogs+2 || h.long > 1024 {
		t.Fatalf("%d warnings logged, the longest %d bytes; want at most %d, each under 1 KiB", h.n, h.long, maxAnomalyLogs+2)
	}
}

// TestReplyDoesNotWaitForTheWriteTurn: a peer that sends a request and
// more output while a caller is writing a frame to it, and reads on only
// once its output was read, is not deadlocked: the reply to its request waits in a queue,
// not in the reader, which reads on. Before, the reader waited for the
// caller's turn, the caller for the peer, and the write timeout ended the
// connection.
func TestReplyDoesNotWaitForTheWriteTurn(t *testing.T) {
	c, p := newPair(t, Options{WriteTimeout: 500 * time.Millisecond})
	done := make(chan error, 1)
	go func() { done <- c.Call(context.Background(), "big", strings.Repeat("x", 256<<10), nil) }()
	// The caller holds the turn once its frame has begun.
	head := make([]byte, 8)
	if _, err := io.ReadFull(p.r, head); err != nil {
		t.Fatal(err)
	}
	p.write(`{"jsonrpc":"2.0","id":"s1","method":"window/workDoneProgress/create","params":{"token":1}}`)
	// More output before it reads on: a log line, which the reader must
	// take while the caller's frame is still being written.
	p.write(`{"jsonrpc":"2.0","method":"window/logMessage","params":{"type":3,"message":"busy"}}`)
	rest, err := ReadFrame(bufio.NewReader(io.MultiReader(strings.NewReader(string(head)), p.r)), 0)
	if err != nil {
		t.Fatal(err)
	}
	var call wireMsg
	if err := json.Unmarshal(rest, &call); err != nil || call.Method != "big" {
		t.Fatalf("the call's frame: %v %q", err, call.Method)
	}
	if reply := p.read(); string(reply.ID) != `"s1"` {
		t.Fatalf("the reply to the peer's request: %+v", reply)
	}
	p.write(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":null}`, call.ID))
	if err := <-done; err != nil {
		t.Fatalf("the call: %v", err)
	}
}

// TestManyRequestsDuringALongWrite: a peer that sends more requests than
// the reply queue holds while a caller's long frame is being written (it
// reads that frame, slowly, on its own) keeps its connection: the reader
// waits for room in the queue rather than stop it.
func TestManyRequestsDuringALongWrite(t *testing.T) {
	c, p := newPair(t, Options{WriteTimeout: 5 * time.Second})
	const requests = 3 * maxQueuedReplies
	done := make(chan error, 1)
	go func() { done <- c.Call(context.Background(), "big", strings.Repeat("x", 256<<10), nil) }()
	head := make([]byte, 8) // the caller holds the turn once its frame has begun
	if _, err := io.ReadFull(p.r, head); err != nil {
		t.Fatal(err)
	}
	read := make(chan error, 1)
	var callID json.RawMessage
	go func() {
		// The peer's reader, on its own: the rest of the call's frame, then
		// every reply.
		time.Sleep(50 * time.Millisecond)
		r := bufio.NewReader(io.MultiReader(strings.NewReader(string(head)), p.r))
		for n := 0; n <= requests; n++ {
			body, err := ReadFrame(r, 0)
			if err != nil {
				read <- err
				return
			}
			var m wireMsg
			_ = json.Unmarshal(body, &m)
			if m.Method == "big" {
				callID = m.ID
			}
		}
		read <- nil
	}()
	for i := range requests {
		p.write(fmt.Sprintf(`{"jsonrpc":"2.0","id":"s%d","method":"window/workDoneProgress/create","params":{"token":%d}}`, i, i))
	}
	if err := <-read; err != nil {
		t.Fatalf("the peer's reads: %v", err)
	}
	p.write(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":null}`, callID))
	if err := <-done; err != nil {
		t.Fatalf("the call: %v", err)
	}
}
