package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hanzoai/lsp/daemon/internal/jsonrpc"
	"github.com/hanzoai/lsp/daemon/internal/lsp"
	"github.com/hanzoai/lsp/daemon/internal/readiness"
)

const (
	// startTimeout bounds spawning plus the initialize handshake.
	startTimeout = 60 * time.Second
	// shutdownGrace bounds the shutdown request and, separately, the wait
	// for the process to exit after exit; then the group is killed.
	shutdownGrace = 2 * time.Second
	// Restart backoff: the first restart after a crash is immediate, each
	// further consecutive failure doubles the wait from restartBase up to
	// restartMax. An instance that lived healthyAfter resets the count.
	restartBase  = 250 * time.Millisecond
	restartMax   = 30 * time.Second
	healthyAfter = time.Minute
)

// Info identifies the running (or last) server instance.
type Info struct {
	ID         string // Spec.ID
	Name       string // serverInfo.name
	Version    string // serverInfo.version (gopls: its "Version" field)
	Generation uint64
}

// Server is one language server for one workspace. It is safe for
// concurrent use.
type Server struct {
	sp   Spawner
	spec Spec
	ws   Workspace
	log  *slog.Logger

	life context.Context // cancelled by Close; aborts restarts
	stop context.CancelFunc

	mu          sync.Mutex
	cur         *instance // the live instance, nil when down
	last        *instance // the most recent initialized instance, live or not
	gen         uint64
	closed      bool
	starting    *attempt
	failures    int
	lastFailure time.Time

	wg sync.WaitGroup // one per instance monitor

	staticOnce sync.Once
	static     []lsp.Problem // Spec.Problems, read once
}

type instance struct {
	gen     uint64
	proc    Process
	client  *lsp.Client
	watch   *hangWatch
	started time.Time
	dead    chan struct{} // closed once the process tree is reaped
	retired bool          // guarded by Server.mu: failure already accounted
}

func (i *instance) alive() bool {
	if i.watch.fired.Load() {
		// Declared hung and killed: not worth a caller's request while
		// the monitor reaps it.
		return false
	}
	select {
	case <-i.dead:
		return false
	case <-i.client.Done():
		return false
	default:
		return true
	}
}

type attempt struct {
	done chan struct{}
	err  error
}

// Start spawns the server and initializes it; ctx bounds only the start.
// The server keeps running until Close.
func Start(ctx context.Context, sp Spawner, spec Spec, ws Workspace, log *slog.Logger) (*Server, error) {
	if spec.ID == "" || spec.Executable == "" {
		return nil, errors.New("start: spec needs an ID and an executable")
	}
	if ws.Root == "" || ws.Home == "" {
		return nil, fmt.Errorf("start %s: workspace needs a root and a home", spec.ID)
	}
	if spec.RequestTimeout <= 0 {
		spec.RequestTimeout = DefaultRequestTimeout
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	life, stop := context.WithCancel(context.Background())
	s := &Server{sp: sp, spec: spec, ws: ws, log: log, life: life, stop: stop}
	gen := s.nextGeneration()
	inst, err := s.launch(ctx, gen)
	if err != nil {
		stop()
		return nil, fmt.Errorf("start %s: %w", spec.ID, err)
	}
	s.cur, s.last, s.gen = inst, inst, gen
	return s, nil
}

// nextGeneration is the generation of the next instance (s.mu held, or
// before s is shared).
func (s *Server) nextGeneration() uint64 {
	if s.spec.NextGeneration != nil {
		return s.spec.NextGeneration()
	}
	return s.gen + 1
}

// pipe joins the process's stdout and stdin into the connection's stream,
// and shows the instance's hangWatch what the server says and which calls
// the connection gives up (a jsonrpc.Watcher).
type pipe struct {
	io.ReadCloser
	w     io.WriteCloser
	watch *hangWatch
}

func (p pipe) Read(b []byte) (int, error) {
	n, err := p.ReadCloser.Read(b)
	p.watch.read(n)
	return n, err
}

func (p pipe) Write(b []byte) (int, error) { return p.w.Write(b) }

// Abandoned implements jsonrpc.Watcher.
func (p pipe) Abandoned(ctx context.Context, began time.Time) { p.watch.abandoned(ctx, began) }

var _ jsonrpc.Watcher = pipe{}

// SetWriteDeadline bounds writes to the server's stdin (an *os.File pipe,
// which takes deadlines): the JSON-RPC connection gives each frame its
// caller's deadline or its write timeout, whichever is sooner.
func (p pipe) SetWriteDeadline(t time.Time) error {
	if d, ok := p.w.(interface{ SetWriteDeadline(time.Time) error }); ok {
		return d.SetWriteDeadline(t)
	}
	return os.ErrNoDeadline
}
func (p pipe) Close() error {
	werr := p.w.Close()
	rerr := p.ReadCloser.Close()
	return errors.Join(werr, rerr)
}

// launch spawns and initializes one instance. On failure the process is
// killed and reaped before launch returns.
func (s *Server) launch(ctx context.Context, gen uint64) (*instance, error) {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	folders, err := s.folders()
	if err != nil {
		return nil, err
	}
	begun := time.Now()
	proc, err := s.sp.Spawn(ctx, s.spec, s.ws)
	if err != nil {
		return nil, err
	}
	spawned := time.Now()
	// The reviewed entry's options, then what the language's dependency
	// phase prepared, then what its load signs need the server to report.
	signs := readiness.For(s.spec.Language)
	initOpts := s.spec.InitializationOptions
	var prepared json.RawMessage
	if s.spec.Init != nil {
		prepared = s.spec.Init(s.ws)
	}
	for _, patch := range []json.RawMessage{prepared, signs.InitializationOptions()} {
		if initOpts, err = mergeSettings(initOpts, patch); err != nil {
			_ = proc.Kill()
			_ = proc.Wait()
			return nil, fmt.Errorf("initialization options: %w", err)
		}
	}
	watch := newHangWatch(s.spec.RequestTimeout, func(timeouts int, silent time.Duration) {
		s.mu.Lock()
		closed := s.closed
		s.mu.Unlock()
		if closed {
			// Close's shutdown request ran out: Close kills it anyway.
			return
		}
		s.log.Warn("language server hung (requests in a row ran out their timeout in silence): killed; it restarts on next use",
			"generation", gen, "pid", proc.Pid(), "timeouts", timeouts, "silent_ms", silent.Milliseconds(), "request_timeout", s.spec.RequestTimeout)
		if err := proc.Kill(); err != nil {
			s.log.Warn("kill hung language server", "generation", gen, "err", err)
		}
	})
	client, err := lsp.Connect(ctx, pipe{proc.Stdout(), proc.Stdin(), watch}, lsp.Options{
		Root:                  s.ws.Root,
		ClientName:            "hanzo-lsp-daemon",
		InitializationOptions: initOpts,
		Settings:              s.spec.Settings,
		Folders:               folders,
		RequestTimeout:        s.spec.RequestTimeout,
		Logger:                s.log,
		LoadSigns:             signs,
	})
	if err != nil {
		_ = proc.Kill()
		_ = proc.Wait()
		if t, ok := proc.(stderrTailer); ok {
			s.log.Warn("language server failed to initialize", "err", err, "generation", gen, "stderr", t.StderrTail())
		}
		return nil, err
	}
	inst := &instance{gen: gen, proc: proc, client: client, watch: watch, started: time.Now(), dead: make(chan struct{})}
	info := client.Info()
	// Where a start's time goes: the jail's setup and the exec
	// (spawn), then the server's own start up to its initialize answer.
	s.log.Info("language server ready", "generation", gen, "pid", proc.Pid(), "name", info.Name, "version", info.Version, "tools", client.Tools(),
		"spawn_ms", spawned.Sub(begun).Milliseconds(), "initialize_ms", inst.started.Sub(spawned).Milliseconds())
	s.wg.Add(1)
	go s.monitor(inst)
	return inst, nil
}

// folders are the spec's workspace folders for the workspace, with their
// settings merged over the spec's.
func (s *Server) folders() ([]lsp.Folder, error) {
	if s.spec.Folders == nil {
		return nil, nil
	}
	var out []lsp.Folder
	for _, f := range s.spec.Folders(s.ws) {
		if f.Dir != s.ws.Root && !strings.HasPrefix(f.Dir, s.ws.Root+string(filepath.Separator)) {
			continue
		}
		st, err := mergeSettings(s.spec.Settings, f.Settings)
		if err != nil {
			return nil, fmt.Errorf("folder settings: %w", err)
		}
		out = append(out, lsp.Folder{Dir: f.Dir, Settings: st})
	}
	return out, nil
}

// monitor reaps the instance when its process dies, and kills the process
// when its connection dies first (a protocol violation, closed stdout, or
// a server that stopped reading its stdin leaves a process nobody can talk
// to). A server declared hung (hangWatch) is killed where the verdict
// falls, and reaped here.
func (s *Server) monitor(inst *instance) {
	defer s.wg.Done()
	waited := make(chan error, 1)
	go func() { waited <- inst.proc.Wait() }()
	var err error
	select {
	case err = <-waited:
	case <-inst.client.Done():
		_ = inst.proc.Kill()
		err = <-waited
	}
	_ = inst.client.Close()
	s.mu.Lock()
	s.retireLocked(inst, err)
	s.mu.Unlock()
	close(inst.dead)
}

// retireLocked takes a dead instance out of service once, counting it as a
// failure unless the server is closing.
func (s *Server) retireLocked(inst *instance, exitErr error) {
	if inst.retired {
		return
	}
	inst.retired = true
	if s.cur == inst {
		s.cur = nil
	}
	if s.closed {
		return
	}
	now := time.Now()
	if now.Sub(inst.started) >= healthyAfter && !inst.watch.fired.Load() {
		// A hung instance is always older than healthyAfter (its verdict
		// takes minutes): it still counts on the last failures, so that
		// one hung again and again backs off.
		s.failures = 0
	}
	s.failures++
	s.lastFailure = now
	attrs := []any{"generation", inst.gen, "connection", inst.client.Err()}
	if exitErr != nil {
		attrs = append(attrs, "exit", exitErr)
	}
	if t, ok := inst.proc.(stderrTailer); ok {
		attrs = append(attrs, "stderr", t.StderrTail())
	}
	s.log.Warn("language server stopped; it restarts on next use", attrs...)
}

// backoffLocked is how long the next start must wait.
func (s *Server) backoffLocked() time.Duration {
	if s.failures <= 1 {
		return 0
	}
	d := restartBase << min(s.failures-2, 16)
	d = min(d, restartMax)
	return max(0, time.Until(s.lastFailure.Add(d)))
}

// Client returns the live client and its generation, restarting a dead
// server first (with backoff; concurrent callers share one restart). The
// client stays valid until the server dies; calls on a dead client fail
// with errors matching jsonrpc.ErrClosed. Requests are bounded by ctx and
// Spec.RequestTimeout, whichever ends first.
func (s *Server) Client(ctx context.Context) (*lsp.Client, uint64, error) {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, 0, ErrClosed
		}
		if inst := s.cur; inst != nil {
			if inst.alive() {
				s.mu.Unlock()
				return inst.client, inst.gen, nil
			}
			s.retireLocked(inst, nil)
		}
		a := s.starting
		if a == nil {
			a = s.restartLocked()
		}
		s.mu.Unlock()
		select {
		case <-a.done:
			if a.err != nil {
				return nil, 0, fmt.Errorf("%w: %w", ErrUnavailable, a.err)
			}
		case <-ctx.Done():
			return nil, 0, fmt.Errorf("%w: waiting for a restart: %w", ErrUnavailable, ctx.Err())
		}
	}
}

// restartLocked starts a restart in the background, so that a caller whose
// context ends does not abort a start other callers wait for.
func (s *Server) restartLocked() *attempt {
	a := &attempt{done: make(chan struct{})}
	s.starting = a
	delay := s.backoffLocked()
	gen := s.nextGeneration()
	go func() {
		defer close(a.done)
		if delay > 0 {
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-s.life.Done():
				t.Stop()
			}
		}
		var inst *instance
		err := s.life.Err()
		if err == nil {
			inst, err = s.launch(s.life, gen)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.starting = nil
		switch {
		case s.closed:
			if inst != nil {
				_ = inst.proc.Kill()
			}
			a.err = ErrClosed
		case err != nil:
			s.failures++
			s.lastFailure = time.Now()
			a.err = err
			s.log.Warn("language server restart failed", "generation", gen, "err", err)
		default:
			s.cur, s.last, s.gen = inst, inst, gen
		}
	}()
	return a
}

// Do runs fn with the live client (see Client). When fn fails because the
// server died under it, the error matches ErrExited as well as the
// underlying jsonrpc error.
func (s *Server) Do(ctx context.Context, fn func(ctx context.Context, c *lsp.Client, generation uint64) error) error {
	c, gen, err := s.Client(ctx)
	if err != nil {
		return err
	}
	err = fn(ctx, c, gen)
	if err != nil && errors.Is(err, jsonrpc.ErrClosed) {
		s.mu.Lock()
		closed := s.closed
		s.mu.Unlock()
		if closed {
			return fmt.Errorf("%w: %w", ErrClosed, err)
		}
		return fmt.Errorf("%w (generation %d): %w", ErrExited, gen, err)
	}
	return err
}

// Info describes the current instance, or the last one while the server
// is down.
func (s *Server) Info() Info {
	s.mu.Lock()
	inst := s.last
	s.mu.Unlock()
	info := inst.client.Info()
	return Info{ID: s.spec.ID, Name: info.Name, Version: info.Version, Generation: inst.gen}
}

// Tools are the negotiated tools of the current (or last) instance.
func (s *Server) Tools() []string {
	s.mu.Lock()
	inst := s.last
	s.mu.Unlock()
	return inst.client.Tools()
}

// CapabilityFingerprint of the current (or last) instance.
func (s *Server) CapabilityFingerprint() string {
	s.mu.Lock()
	inst := s.last
	s.mu.Unlock()
	return inst.client.CapabilityFingerprint()
}

// LoadProblems are the load problems the current (or last) instance
// reported (lsp.Client.LoadProblems).
// Those the spec's language unit knows before any instance runs
// (Spec.Problems, read once) come first.
func (s *Server) LoadProblems() ([]lsp.Problem, int) {
	s.mu.Lock()
	inst := s.last
	s.mu.Unlock()
	s.staticOnce.Do(func() {
		if s.spec.Problems != nil {
			for _, m := range s.spec.Problems(s.ws) {
				s.static = append(s.static, lsp.Problem{Message: m})
			}
		}
	})
	ps, more := inst.client.LoadProblems()
	if len(s.static) == 0 {
		return ps, more
	}
	return append(slices.Clone(s.static), ps...), more
}

// Alive reports whether an instance is running now.
func (s *Server) Alive() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur != nil && s.cur.alive()
}

// Spec returns the spec the server runs (with defaults applied).
func (s *Server) Spec() Spec { return s.spec }

// URI returns the document URI of a workspace-relative, '/'-separated path.
func (s *Server) URI(rel string) lsp.DocumentURI {
	return lsp.FileURI(filepath.Join(s.ws.Root, filepath.FromSlash(rel)))
}

// Close shuts the server down: shutdown and exit with a short grace, then
// SIGKILL to the process group, then reaping of every process the server
// left. It waits for all of that, also for instances that died earlier and
// are still being cleaned up. Close is idempotent.
func (s *Server) Close(ctx context.Context) error {
	s.mu.Lock()
	already := s.closed
	s.closed = true
	inst := s.cur
	s.cur = nil
	a := s.starting
	s.mu.Unlock()
	s.stop()
	if a != nil {
		<-a.done
	}
	if !already && inst != nil && inst.alive() {
		gctx, cancel := context.WithTimeout(ctx, shutdownGrace)
		if err := inst.client.Shutdown(gctx); err != nil {
			s.log.Debug("language server shutdown", "err", err)
		}
		cancel()
		t := time.NewTimer(shutdownGrace)
		select {
		case <-inst.dead:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	if inst != nil {
		if err := inst.proc.Kill(); err != nil {
			s.log.Warn("kill language server", "err", err)
		}
	}
	s.wg.Wait()
	return nil
}
