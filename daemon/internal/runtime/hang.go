package runtime

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// hungAfter is how many requests to an instance must run out its request
// timeout in a row, in silence, before it is declared hung and killed (the
// monitor reaps it and the next use restarts it, with backoff). In a row:
// each counted request was sent after the one before it had been counted,
// so requests that waited side by side count once, and the server has
// been silent through at least twice the request timeout (two minutes in
// production) with a request waiting all along. One is not enough: a
// server may take longer than the timeout on one huge request.
const hungAfter = 2

// hungSilence is the least silence a verdict needs besides its strikes:
// a server busy on one long computation that says nothing (a cold
// reference search over a large module, a project load that reports no
// progress) can outlast two request timeouts, and killing it throws the
// work away — again on every restart. A wedged server is killed a few
// minutes later instead. A variable for tests.
var hungSilence = 5 * time.Minute

// timeoutSlack: a request counts as having run out its request timeout
// when it waited at least the timeout less this fraction of it. The lsp
// package applies the timeout just before the call begins; a caller's own
// deadline that ends it sooner says nothing about the server.
const timeoutSlack = 10

// hangWatch tells a hung server from a slow one, for one instance. Silence
// is the sign: any byte read from the server's stdout counts as life (a
// reply, a progress report, a log line, diagnostics, part of a frame), so
// a server that is busy on one request while it answers others, reports
// progress or logs, and one still loading that does so, is never hung.
// The JSON-RPC connection tells it of every call given up (jsonrpc.Watcher)
// and it counts those the server's request timeout ended, never those
// whose caller went away or had a shorter deadline of its own.
type hangWatch struct {
	timeout time.Duration
	silence time.Duration // hungSilence when it was made
	base    time.Time     // heard counts from it, on the monotonic clock
	heard   atomic.Int64  // when a read from the server last returned data, since base
	fired   atomic.Bool
	hung    func(timeouts int, silent time.Duration) // kills the instance; called once

	mu      sync.Mutex
	strikes int       // requests in a row that ran out their timeout in silence
	first   time.Time // when the first of them began
	last    time.Time // when the last of them was counted
}

func newHangWatch(timeout time.Duration, hung func(timeouts int, silent time.Duration)) *hangWatch {
	return &hangWatch{timeout: timeout, silence: hungSilence, base: time.Now(), hung: hung}
}

// read notes n bytes read from the server.
func (w *hangWatch) read(n int) {
	if n > 0 {
		w.heard.Store(int64(time.Since(w.base)))
	}
}

// heardSince reports whether the server has said anything since t.
func (w *hangWatch) heardSince(t time.Time) bool {
	return time.Duration(w.heard.Load()) >= t.Sub(w.base)
}

// abandoned counts a call given up because ctx ended; began is when it
// began.
func (w *hangWatch) abandoned(ctx context.Context, began time.Time) {
	now := time.Now()
	if w.fired.Load() || !errors.Is(ctx.Err(), context.DeadlineExceeded) || now.Sub(began) < w.timeout-w.timeout/timeoutSlack {
		return
	}
	w.mu.Lock()
	switch {
	case w.heardSince(began):
		// It spoke while the request waited: slow on this one, not hung.
		w.strikes = 0
	case w.strikes > 0 && w.heardSince(w.first):
		// It spoke since the run began: this request begins another.
		w.strikes, w.first, w.last = 1, began, now
	case w.strikes > 0 && began.Before(w.last):
		// It waited beside the last one counted: the same silence.
	default:
		if w.strikes == 0 {
			w.first = began
		}
		w.strikes++
		w.last = now
	}
	strikes := w.strikes
	silent := now.Sub(w.base.Add(time.Duration(w.heard.Load())))
	fire := strikes >= hungAfter && silent >= w.silence && !w.fired.Swap(true)
	w.mu.Unlock()
	if fire {
		w.hung(strikes, silent)
	}
}
