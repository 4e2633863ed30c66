package jsonrpc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Standard JSON-RPC and LSP error codes.
const (
	CodeParseError       = -32700
	CodeInvalidRequest   = -32600
	CodeMethodNotFound   = -32601
	CodeInvalidParams    = -32602
	CodeInternalError    = -32603
	CodeRequestCancelled = -32800
	CodeContentModified  = -32801
	CodeServerCancelled  = -32802
	CodeRequestFailed    = -32803
)

// Error is a JSON-RPC error object, as received from or sent to the peer.
type Error struct {
	Code    int64           `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *Error) Error() string {
	return fmt.Sprintf("jsonrpc error %d: %s", e.Code, e.Message)
}

// ErrClosed matches (with errors.Is) every error reporting that the
// connection has stopped, whatever the cause.
var ErrClosed = errors.New("jsonrpc: connection closed")

// ErrWriteTimeout is the cause of a connection stopped because the peer
// took none of a frame, or not all of it, within Options.WriteTimeout.
var ErrWriteTimeout = errors.New("jsonrpc: the peer stopped reading (write timeout)")

// errLocalClose is the cause recorded when Close is called.
var errLocalClose = errors.New("closed locally")

// ClosedError reports that the connection stopped; Cause says why (io.EOF
// when the peer closed its stream, ErrFrameTooLarge, ErrBadHeader,
// ErrBadMessage, a write error, or a local Close).
type ClosedError struct{ Cause error }

func (e *ClosedError) Error() string { return "jsonrpc: connection closed: " + e.Cause.Error() }
func (e *ClosedError) Unwrap() error { return e.Cause }
func (e *ClosedError) Is(target error) bool {
	return target == ErrClosed
}

// Request is a request or notification from the peer.
type Request struct {
	Method string
	Params json.RawMessage
	// ID is the raw request id; nil for a notification.
	ID json.RawMessage
}

// IsNotification reports whether no reply is expected.
func (r *Request) IsNotification() bool { return r.ID == nil }

// Handler answers the peer. For a request, the result (marshalled to JSON;
// nil becomes null) or the error is sent back: an *Error goes as is, any
// other error as an internal error. For a notification both are ignored.
// Handlers run on the reader goroutine: they must not block and must not
// wait on a Call of the same Conn.
type Handler func(ctx context.Context, req *Request) (any, error)

// Options configure a Conn.
type Options struct {
	// MaxFrameSize bounds one incoming frame body; DefaultMaxFrameSize if zero.
	MaxFrameSize int
	// Handler answers the peer; with none, requests get MethodNotFound and
	// notifications are dropped.
	Handler Handler
	// Logger receives protocol anomalies that do not end the connection.
	Logger *slog.Logger
	// WriteTimeout bounds how long the peer may leave a frame unread,
	// whatever the writer's context: DefaultWriteTimeout if zero. Past it
	// the connection stops.
	WriteTimeout time.Duration
}

// DefaultWriteTimeout applies when Options.WriteTimeout is zero. A language
// server reads its stdin on a thread or event loop of its own; one that
// leaves a frame unread this long is wedged, and every request queued
// behind the frame is lost anyway.
const DefaultWriteTimeout = 30 * time.Second

// Watcher is a stream that is told how its Conn's calls go: the runtime's
// pipe to a language server, which tells a hung server from a slow one by
// it. Its methods run on the caller's goroutine and must not block.
type Watcher interface {
	// Abandoned is told of a call given up without a reply because its
	// context (done now) ended; began is when Call was entered.
	Abandoned(ctx context.Context, began time.Time)
}

// Conn is one JSON-RPC connection. It is safe for concurrent use.
type Conn struct {
	rwc          io.ReadWriteCloser
	maxFrame     int
	handler      Handler
	log          *slog.Logger
	writeTimeout time.Duration
	watcher      Watcher      // rwc, when it is one
	anomalies    atomic.Int64 // malformed messages from the peer (anomaly)
	replies      chan []byte  // replies to the peer's requests, for replyLoop

	ctx    context.Context // handler context; cancelled when the Conn stops
	cancel context.CancelFunc

	nextID atomic.Int64

	mu      sync.Mutex
	pending map[int64]chan *wireMsg
	closing bool
	err     error

	// turn is the stream's write turn: a sender holds it for one frame.
	turn chan struct{}
	// stalled is how long writes have waited, since the stream last took
	// a byte, on a stream that took none of theirs: each gave up at its
	// caller's deadline, and together they count against WriteTimeout as
	// one long write would (only the turn's holder touches it).
	stalled time.Duration
	done    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
}

// wireMsg is any JSON-RPC message as it appears on the wire.
type wireMsg struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *Error          `json:"error,omitempty"`

	recv time.Time // when the reader had the frame, before decoding it
}

type wireTimerKey struct{}

// WireTimes add up where a context's Calls spent their time.
type WireTimes struct {
	// Wire is from handing the request to the writer to reading the
	// reply's frame, before it is decoded: the peer's time plus the
	// pipe's, the part of a call a client spoken to directly pays too.
	Wire atomic.Int64
	// Wakeup is from the reader having the reply's frame to the waiting
	// Call running again: the hand-off between goroutines.
	Wakeup atomic.Int64
}

// WithWireTimer returns a context whose Calls add their times to t; the
// daemon's per-stage timing (HIP §5) subtracts the wire time from the
// handler's.
func WithWireTimer(ctx context.Context, t *WireTimes) context.Context {
	return context.WithValue(ctx, wireTimerKey{}, t)
}

// NewConn starts reading from and writing to rwc. Closing rwc must unblock
// pending Reads and Writes (true of pipes and sockets).
func NewConn(rwc io.ReadWriteCloser, opts Options) *Conn {
	if opts.MaxFrameSize <= 0 {
		opts.MaxFrameSize = DefaultMaxFrameSize
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = DefaultWriteTimeout
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Conn{
		rwc:          rwc,
		maxFrame:     opts.MaxFrameSize,
		handler:      opts.Handler,
		log:          opts.Logger,
		writeTimeout: opts.WriteTimeout,
		ctx:          ctx,
		cancel:       cancel,
		pending:      make(map[int64]chan *wireMsg),
		turn:         make(chan struct{}, 1),
		done:         make(chan struct{}),
	}
	c.watcher, _ = rwc.(Watcher)
	c.replies = make(chan []byte, maxQueuedReplies)
	c.wg.Add(2)
	go c.readLoop()
	go c.replyLoop()
	return c
}

// maxQueuedReplies bounds the replies to the peer's requests waiting for
// the write turn.
const maxQueuedReplies = 64

// replyLoop writes the replies to the peer's requests, in turn with the
// callers' frames. The reader only queues them: waiting for the turn
// itself, it stopped reading while a caller's large frame was being
// written, and a peer that writes its request before it reads on (a full
// pipe each way) held both until the write timeout killed the connection.
func (c *Conn) replyLoop() {
	defer c.wg.Done()
	for {
		select {
		case body := <-c.replies:
			if err := c.send(c.ctx, body); err != nil {
				c.log.Debug("jsonrpc: reply not sent", "err", err)
			}
		case <-c.done:
			return
		}
	}
}

// reply queues a reply for replyLoop. With the queue full (a caller's
// long write holds the turn while the peer sends many requests) the reader
// waits for room, at most the write timeout: past it the replies are not
// being written, and the connection stops.
func (c *Conn) reply(body []byte) {
	select {
	case c.replies <- body:
		return
	default:
	}
	t := time.NewTimer(c.writeTimeout)
	defer t.Stop()
	select {
	case c.replies <- body:
	case <-c.done:
	case <-t.C:
		c.stop(fmt.Errorf("%w: replies to the peer's requests were not written within %v", ErrBadMessage, c.writeTimeout))
	}
}

// Done is closed when the connection has stopped.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err is nil while the connection runs, then a *ClosedError.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close stops the connection, closes rwc, fails calls in flight and waits
// for the connection's goroutines. It must not be called from a Handler.
func (c *Conn) Close() error {
	c.stop(errLocalClose)
	c.wg.Wait()
	return nil
}

func (c *Conn) stop(cause error) {
	c.once.Do(func() {
		if n := c.anomalies.Load(); n > maxAnomalyLogs {
			c.log.Warn("jsonrpc: malformed messages from the peer", "count", n)
		}
		c.mu.Lock()
		c.closing = true
		c.err = &ClosedError{Cause: cause}
		c.pending = map[int64]chan *wireMsg{}
		c.mu.Unlock()
		c.cancel()
		close(c.done)
		_ = c.rwc.Close()
	})
}

// Call sends a request and waits for its reply, decoding the result into
// result (when non-nil; a json.RawMessage receives it verbatim). When ctx
// ends first, Call sends $/cancelRequest for the id and returns ctx.Err().
// A reply carrying an error returns it as *Error, as does one with neither
// result nor error when result is non-nil (ErrNoResult); a stopped
// connection returns a *ClosedError. A stream that is a Watcher hears of
// every call given up because ctx ended.
func (c *Conn) Call(ctx context.Context, method string, params, result any) error {
	began := time.Now()
	p, err := marshalParams(params)
	if err != nil {
		return err
	}
	id := c.nextID.Add(1)
	body, err := encodeRequest(id, method, p)
	if err != nil {
		return fmt.Errorf("encode request: %w", err)
	}
	ch := make(chan *wireMsg, 1)
	c.mu.Lock()
	if c.closing {
		err := c.err
		c.mu.Unlock()
		return err
	}
	c.pending[id] = ch
	c.mu.Unlock()

	sent := time.Now()
	if err := c.send(ctx, body); err != nil {
		c.forget(id)
		c.abandoned(ctx, began)
		return err
	}
	select {
	case resp := <-ch:
		if t, ok := ctx.Value(wireTimerKey{}).(*WireTimes); ok {
			t.Wakeup.Add(int64(time.Since(resp.recv)))
			t.Wire.Add(int64(resp.recv.Sub(sent)))
		}
		if resp.Error != nil {
			return resp.Error
		}
		if result == nil {
			return nil
		}
		if len(resp.Result) == 0 {
			c.anomaly("jsonrpc: reply with neither result nor error", "method", string(clip([]byte(method))))
			return ErrNoResult
		}
		if raw, ok := result.(*json.RawMessage); ok {
			// The reply's result is already valid JSON in a slice of its
			// own (the reader copied it out of the frame): hand it over
			// rather than scanning and copying it again, on every query.
			*raw = resp.Result
			return nil
		}
		if err := json.Unmarshal(resp.Result, result); err != nil {
			return fmt.Errorf("decode result: %w", err)
		}
		return nil
	case <-ctx.Done():
		c.forget(id)
		c.cancelAsync(id)
		c.abandoned(ctx, began)
		return ctx.Err()
	case <-c.done:
		return c.Err()
	}
}

// Notify sends a notification. ctx bounds only the wait for the writer.
func (c *Conn) Notify(ctx context.Context, method string, params any) error {
	p, err := marshalParams(params)
	if err != nil {
		return err
	}
	body, err := json.Marshal(wireMsg{JSONRPC: "2.0", Method: method, Params: p})
	if err != nil {
		return fmt.Errorf("encode notification: %w", err)
	}
	return c.send(ctx, body)
}

// encodeRequest writes a request's JSON directly: params are already JSON
// (marshalParams), and marshalling the envelope with them inside would scan
// and copy them a second time on every call.
func encodeRequest(id int64, method string, params json.RawMessage) ([]byte, error) {
	m, err := json.Marshal(method)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, 0, len(`{"jsonrpc":"2.0","id":,"method":,"params":}`)+20+len(m)+len(params))
	buf = append(buf, `{"jsonrpc":"2.0","id":`...)
	buf = strconv.AppendInt(buf, id, 10)
	buf = append(buf, `,"method":`...)
	buf = append(buf, m...)
	if params != nil {
		buf = append(buf, `,"params":`...)
		buf = append(buf, params...)
	}
	return append(buf, '}'), nil
}

func marshalParams(params any) (json.RawMessage, error) {
	switch p := params.(type) {
	case nil:
		return nil, nil
	case json.RawMessage:
		if !json.Valid(p) {
			return nil, fmt.Errorf("encode params: invalid JSON")
		}
		return p, nil
	}
	b, err := json.Marshal(params)
	if err != nil {
		return nil, fmt.Errorf("encode params: %w", err)
	}
	return b, nil
}

// watchdog stops the connection when a write to a stream without write
// deadlines has not ended in time — unless it ended first.
type watchdog struct {
	mu      sync.Mutex
	written bool
	t       *time.Timer
}

func (c *Conn) watch(left time.Duration) *watchdog {
	d := &watchdog{}
	d.t = time.AfterFunc(left, func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		if !d.written {
			c.stop(fmt.Errorf("write: %w: a frame not taken in %v", ErrWriteTimeout, left))
		}
	})
	return d
}

// finish marks the write ended; false when the watchdog had already fired
// (and, if the write had not ended then, stopped the connection).
func (d *watchdog) finish() bool {
	d.mu.Lock()
	d.written = true
	d.mu.Unlock()
	return d.t.Stop()
}

// abandoned tells the watcher of a call that ctx ended (a send can fail
// for other reasons).
func (c *Conn) abandoned(ctx context.Context, began time.Time) {
	if c.watcher != nil && ctx.Err() != nil {
		c.watcher.Abandoned(ctx, began)
	}
}

func (c *Conn) forget(id int64) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}

// cancelAsync tells the peer we stopped waiting. It runs on its own
// goroutine so that an abandoned call returns at once even when the writer
// is busy.
func (c *Conn) cancelAsync(id int64) {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return
	}
	c.wg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.wg.Done()
		if err := c.Notify(c.ctx, "$/cancelRequest", map[string]int64{"id": id}); err != nil {
			c.log.Debug("jsonrpc: cancel not sent", "id", id, "err", err)
		}
	}()
}

// writeDeadliner is a stream whose writes take a deadline: the server's
// stdin pipe (an *os.File), a net.Conn.
type writeDeadliner interface {
	SetWriteDeadline(time.Time) error
}

// send writes one frame from the calling goroutine once it has the
// stream's turn, waiting for the turn at most until ctx ends. There is no
// writer goroutine: handing each frame to one cost every call a wake-up
// (HIP §5).
//
// Every write is bounded, so that a peer that stops reading holds no
// writer, nor anyone waiting for the turn, for long. Its caller's deadline
// bounds it: a write that put nothing on the wire by then leaves the
// connection running, one cut short stops it (the stream is broken). The
// write timeout bounds it whatever the context (replies to the peer and
// $/cancelRequest have none): past it the connection stops. Writes that
// gave up at their callers' deadlines with nothing written add up against
// the write timeout, so that short deadlines cannot keep a peer that reads
// nothing connected forever. A stream without write deadlines is closed by
// a watchdog at the write timeout instead.
func (c *Conn) send(ctx context.Context, body []byte) error {
	select {
	case c.turn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-c.done:
		return c.Err()
	}
	defer func() { <-c.turn }()
	select {
	case <-c.done:
		return c.Err()
	default:
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	began := time.Now()
	left := c.writeTimeout - c.stalled
	deadline, callers := began.Add(left), false
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline, callers = d, true
	}
	var dog *watchdog
	if wd, ok := c.rwc.(writeDeadliner); !ok || wd.SetWriteDeadline(deadline) != nil {
		// Only closing the stream ends a write to it; a caller's
		// deadline is not worth the connection, so only the write
		// timeout closes it.
		dog = c.watch(left)
	}
	f := frame(body)
	n, err := c.rwc.Write(f)
	if dog != nil && !dog.finish() && err != nil {
		// The watchdog closed the stream under the write (its stop
		// closes done before the stream).
		<-c.done
		return c.Err()
	}
	if n > 0 {
		c.stalled = 0
	}
	if err == nil {
		return nil
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		c.stop(fmt.Errorf("write: %w", err))
		return c.Err()
	}
	if callers {
		if n == 0 {
			if c.stalled += time.Since(began); c.stalled < c.writeTimeout {
				return context.DeadlineExceeded
			}
			c.stop(fmt.Errorf("write: %w: %v with nothing read", ErrWriteTimeout, c.writeTimeout))
			return fmt.Errorf("%w: %w", c.Err(), context.DeadlineExceeded)
		}
		c.stop(fmt.Errorf("write: %w", err))
		return fmt.Errorf("jsonrpc: the peer read no frame until the caller's deadline: %w", context.DeadlineExceeded)
	}
	c.stop(fmt.Errorf("write: %w: %d of %d bytes read in %v", ErrWriteTimeout, n, len(f), c.writeTimeout))
	return c.Err()
}

func (c *Conn) readLoop() {
	defer c.wg.Done()
	r := bufio.NewReaderSize(c.rwc, 64<<10)
	for {
		body, err := ReadFrame(r, c.maxFrame)
		if err != nil {
			c.stop(err)
			return
		}
		m := wireMsg{recv: time.Now()}
		if err := json.Unmarshal(body, &m); err != nil {
			c.stop(fmt.Errorf("%w: %v", ErrBadMessage, err))
			return
		}
		if m.JSONRPC != "2.0" {
			c.stop(fmt.Errorf("%w: jsonrpc version %q", ErrBadMessage, clip([]byte(m.JSONRPC))))
			return
		}
		c.dispatch(&m)
	}
}

func (c *Conn) dispatch(m *wireMsg) {
	hasID := len(m.ID) > 0 && !bytes.Equal(m.ID, []byte("null"))
	switch {
	case m.Method != "" && hasID:
		c.serve(m)
	case m.Method != "":
		if c.handler != nil {
			_, _ = c.handler(c.ctx, &Request{Method: m.Method, Params: m.Params})
		}
	case hasID:
		var id int64
		if err := json.Unmarshal(m.ID, &id); err != nil {
			c.anomaly("jsonrpc: reply with a foreign id", "id", string(clip(m.ID)))
			return
		}
		c.mu.Lock()
		ch, ok := c.pending[id]
		delete(c.pending, id)
		c.mu.Unlock()
		if !ok {
			// Late replies to abandoned calls are normal after a cancel.
			c.log.Debug("jsonrpc: reply for no pending call", "id", id)
			return
		}
		ch <- m
	case m.Error != nil:
		c.anomaly("jsonrpc: peer reported an error without an id", "code", m.Error.Code, "message", string(clip([]byte(m.Error.Message))))
	default:
		c.anomaly("jsonrpc: message is neither request, notification nor reply")
	}
}

// maxAnomalyLogs bounds the warnings one connection logs about what its
// peer sent wrong: a server writing malformed frames in a loop would
// otherwise fill the daemon's log, which every tenant shares. The rest are
// counted, and the count logged when the connection stops.
const maxAnomalyLogs = 16

// anomaly logs a peer's malformed message, the first maxAnomalyLogs of the
// connection's.
func (c *Conn) anomaly(msg string, args ...any) {
	switch n := c.anomalies.Add(1); {
	case n <= maxAnomalyLogs:
		c.log.Warn(msg, args...)
	case n == maxAnomalyLogs+1:
		c.log.Warn("jsonrpc: the peer sends more malformed messages; they are counted, not logged")
	}
}

func (c *Conn) serve(m *wireMsg) {
	if m.ID[0] != '"' && (m.ID[0] < '0' || m.ID[0] > '9') && m.ID[0] != '-' {
		c.anomaly("jsonrpc: request id is neither number nor string", "method", string(clip([]byte(m.Method))))
		return
	}
	var (
		result any
		err    error
	)
	if c.handler == nil {
		err = &Error{Code: CodeMethodNotFound, Message: "method not found: " + string(clip([]byte(m.Method)))}
	} else {
		result, err = c.handler(c.ctx, &Request{Method: m.Method, Params: m.Params, ID: m.ID})
	}
	reply := wireMsg{JSONRPC: "2.0", ID: m.ID}
	if err == nil {
		raw, merr := json.Marshal(result)
		if merr != nil {
			err = merr
		} else {
			reply.Result = raw
		}
	}
	if err != nil {
		var rpcErr *Error
		if !errors.As(err, &rpcErr) {
			rpcErr = &Error{Code: CodeInternalError, Message: err.Error()}
		}
		reply.Error = rpcErr
		reply.Result = nil
	}
	body, merr := json.Marshal(reply)
	if merr != nil {
		c.log.Error("jsonrpc: encode reply", "method", string(clip([]byte(m.Method))), "err", merr)
		return
	}
	c.reply(body)
}
