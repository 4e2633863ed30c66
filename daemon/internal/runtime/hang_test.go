package runtime

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestHangPolicy drives a hangWatch with calls that really wait (the
// policy compares times, so the steps sleep through a short timeout) and
// counts its verdicts. Steps:
//
//	call    a call that runs out the timeout in silence
//	pair    two calls side by side that do
//	spoken  a call that runs it out, the server speaking meanwhile
//	hear    the server speaks between calls
//	cancel  a call its caller cancels after waiting the whole timeout
//	short   a call whose caller's own deadline ends it soon
func TestHangPolicy(t *testing.T) {
	t.Parallel()
	const timeout = 40 * time.Millisecond
	tests := []struct {
		name    string
		steps   []string
		want    int           // verdicts: at most one
		silence time.Duration // the watch's least silence (hungSilence)
	}{
		{name: "strikes without the least silence", steps: []string{"call", "call"}, silence: time.Hour},
		{name: "strikes until the least silence", steps: []string{"call", "call", "call"}, silence: 5 * timeout / 2, want: 1},
		{name: "two in a row", steps: []string{"call", "call"}, want: 1},
		{name: "one is not enough", steps: []string{"call"}},
		{name: "side by side count once", steps: []string{"pair"}},
		{name: "side by side then another", steps: []string{"pair", "call"}, want: 1},
		{name: "the verdict is given once", steps: []string{"call", "call", "call", "call"}, want: 1},
		{name: "speaking during a call clears", steps: []string{"call", "spoken", "call"}},
		{name: "speaking between calls clears", steps: []string{"call", "hear", "call"}},
		{name: "a run after speaking", steps: []string{"call", "hear", "call", "call"}, want: 1},
		{name: "callers that cancel do not count", steps: []string{"cancel", "cancel", "cancel"}},
		{name: "callers' short deadlines do not count", steps: []string{"short", "short", "short"}},
		{name: "callers' give-ups neither count nor clear", steps: []string{"call", "cancel", "short", "call"}, want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var verdicts int
			w := newHangWatch(timeout, func(timeouts int, silent time.Duration) {
				verdicts++
				if timeouts < hungAfter || silent < hungAfter*timeout*(timeoutSlack-1)/timeoutSlack || silent < tt.silence {
					t.Errorf("verdict after %d timeouts and %v of silence", timeouts, silent)
				}
			})
			w.silence = tt.silence
			expired := func(began time.Time) {
				ctx, cancel := context.WithDeadline(context.Background(), began.Add(timeout))
				defer cancel()
				<-ctx.Done()
				w.abandoned(ctx, began)
			}
			for _, step := range tt.steps {
				switch began := time.Now(); step {
				case "call":
					expired(began)
				case "pair":
					expired(began)
					expired(began.Add(time.Millisecond))
				case "spoken":
					time.Sleep(timeout / 2)
					w.read(1)
					expired(began)
				case "hear":
					w.read(1)
				case "cancel":
					ctx, cancel := context.WithCancel(context.Background())
					time.Sleep(timeout)
					cancel()
					w.abandoned(ctx, began)
				case "short":
					ctx, cancel := context.WithTimeout(context.Background(), timeout/4)
					<-ctx.Done()
					w.abandoned(ctx, began)
					cancel()
				default:
					t.Fatalf("step %q", step)
				}
			}
			if verdicts != tt.want {
				t.Fatalf("%d verdicts, want %d", verdicts, tt.want)
			}
		})
	}
}

// warnings records what a logger is told at Warn and above, and passes
// everything on.
type warnings struct {
	slog.Handler
	mu   *sync.Mutex
	recs *[]slog.Record
}

func recordWarnings(t *testing.T) (*slog.Logger, func() []slog.Record) {
	w := warnings{Handler: testLogger(t).Handler(), mu: new(sync.Mutex), recs: new([]slog.Record)}
	return slog.New(w), func() []slog.Record {
		w.mu.Lock()
		defer w.mu.Unlock()
		return append([]slog.Record(nil), *w.recs...)
	}
}

func (w warnings) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		w.mu.Lock()
		*w.recs = append(*w.recs, r.Clone())
		w.mu.Unlock()
	}
	return w.Handler.Handle(ctx, r)
}

func (w warnings) WithAttrs(as []slog.Attr) slog.Handler {
	w.Handler = w.Handler.WithAttrs(as)
	return w
}

func (w warnings) WithGroup(name string) slog.Handler {
	w.Handler = w.Handler.WithGroup(name)
	return w
}

// TestFakeHungServerIsRestarted: a server that answers initialize and
// then nothing, while it lives on and reads its stdin, is killed once
// requests in a row run out their timeout, and the next request gets a
// new generation that answers.
func TestFakeHungServerIsRestarted(t *testing.T) {
	t.Parallel()
	log, warned := recordWarnings(t)
	srv := startFakeLogging(t, log, 300*time.Millisecond, "-freezeonce")
	first := current(srv)
	for i := range hungAfter {
		if _, err := hoverLine(context.Background(), srv, 1); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("hover %d on the hung server: %v, want DeadlineExceeded", i+1, err)
		}
		if i < hungAfter-1 && (current(srv) != first || !first.alive()) {
			t.Fatalf("killed after %d timeouts; want %d", i+1, hungAfter)
		}
	}
	select {
	case <-first.dead:
	case <-time.After(10 * time.Second):
		t.Fatalf("the hung server was not killed after %d timeouts in a row", hungAfter)
	}
	assertGroupGone(t, first.proc.Pid())
	h, err := hoverLine(context.Background(), srv, 1)
	if err != nil {
		t.Fatalf("hover after the restart: %v", err)
	}
	if !strings.HasPrefix(h.Markdown, "fake hover from pid") {
		t.Fatalf("hover = %q", h.Markdown)
	}
	if g := srv.Info().Generation; g != 2 {
		t.Fatalf("generation after the restart = %d, want 2", g)
	}
	var found bool
	for _, r := range warned() {
		if !strings.HasPrefix(r.Message, "language server hung") {
			continue
		}
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "generation" && a.Value.Uint64() == 1 {
				found = true
			}
			return true
		})
	}
	if !found {
		t.Fatalf("no warning that generation 1 hung among %v", warned())
	}
}

// TestFakeHungAgainBacksOff: an instance killed for hanging has always
// lived past healthyAfter (the verdict alone takes minutes), yet it is no
// healthy instance whose death clears the failures before it: a server
// that hangs after every restart counts each one, and backs off like one
// that crashes after every restart.
func TestFakeHungAgainBacksOff(t *testing.T) {
	t.Parallel()
	srv := startFake(t, 300*time.Millisecond, "-freeze")
	for n := 1; n <= 2; n++ {
		if _, _, err := srv.Client(context.Background()); err != nil {
			t.Fatalf("start %d: %v", n, err)
		}
		inst := current(srv)
		// As old as a production instance is by its hang verdict.
		srv.mu.Lock()
		inst.started = inst.started.Add(-healthyAfter)
		srv.mu.Unlock()
		for i := range hungAfter {
			if _, err := hoverLine(context.Background(), srv, 1); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("hover %d on hung instance %d: %v, want DeadlineExceeded", i+1, n, err)
			}
		}
		select {
		case <-inst.dead:
		case <-time.After(10 * time.Second):
			t.Fatalf("hung instance %d was not killed", n)
		}
		srv.mu.Lock()
		failures := srv.failures
		srv.mu.Unlock()
		// From the second failure in a row on, backoffLocked makes the
		// next start wait.
		if failures != n {
			t.Fatalf("%d failures counted after %d hung instances in a row, want %d", failures, n, n)
		}
	}
}

// TestFakeSlowServerIsNotKilled: requests that run out their timeout on a
// server that shows life meanwhile — it reports its progress, or answers
// other requests — never get it killed.
func TestFakeSlowServerIsNotKilled(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		flags  []string
		others bool // other requests are answered meanwhile
	}{
		{name: "reporting progress", flags: []string{"-chatty", "-quiet"}},
		{name: "answering other requests", flags: []string{"-quiet"}, others: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := startFake(t, 300*time.Millisecond, tt.flags...)
			first := current(srv)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			if tt.others {
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						case <-time.After(20 * time.Millisecond):
						}
						if _, err := hoverLine(context.Background(), srv, 1); err != nil {
							t.Errorf("another hover: %v", err)
							return
						}
					}
				})
			}
			for i := range hungAfter + 2 {
				if _, err := hoverLine(context.Background(), srv, lineHang); !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("hover %d on a request the server never answers: %v, want DeadlineExceeded", i+1, err)
					break
				}
			}
			close(stop)
			wg.Wait()
			if current(srv) != first || !first.alive() {
				t.Fatal("a server that showed life was killed")
			}
			if _, err := hoverLine(context.Background(), srv, 1); err != nil {
				t.Fatalf("hover: %v", err)
			}
			if g := srv.Info().Generation; g != 1 {
				t.Fatalf("generation = %d, want 1", g)
			}
		})
	}
}

// TestFakeCallerGivingUpDoesNotCount: a silent server whose callers give
// up first — they cancel, or their own deadline comes before the request
// timeout — is not declared hung: only the request timeout counts.
func TestFakeCallerGivingUpDoesNotCount(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{name: "caller cancels", want: context.Canceled, ctx: func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(50*time.Millisecond, cancel)
			return ctx, cancel
		}},
		{name: "caller's deadline sooner", want: context.DeadlineExceeded, ctx: func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 50*time.Millisecond)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := startFake(t, 300*time.Millisecond, "-freezeonce")
			first := current(srv)
			for i := range hungAfter + 2 {
				ctx, cancel := tt.ctx()
				_, err := hoverLine(ctx, srv, 1)
				cancel()
				if current(srv) != first || !first.alive() {
					t.Fatalf("the server was killed for %d callers giving up", i+1)
				}
				if !errors.Is(err, tt.want) {
					t.Fatalf("hover %d: %v, want %v", i+1, err, tt.want)
				}
			}
			if err := syscall.Kill(first.proc.Pid(), 0); err != nil {
				t.Fatalf("the server's process: %v", err)
			}
			c, gen, err := srv.Client(context.Background())
			if err != nil || gen != 1 || c != first.client {
				t.Fatalf("Client: generation %d, err %v; want the first instance", gen, err)
			}
		})
	}
}
