package deps

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
)

// maxWarnings bounds what one prepare reports; the rest are counted.
const maxWarnings = 20

// Fetcher runs the dependency phase. It is safe for concurrent use;
// prepares of workspaces sharing a home (revisions of one repository) run
// their phases one at a time.
type Fetcher struct {
	cfg    Config
	log    *slog.Logger
	client *http.Client
	// npmClient follows redirects only on the npm registry's host.
	npmClient *http.Client
	// sumdb verifies what go.sum lacks; nil when off.
	sumdb *checksumDB
	// seed is the standard library's build cache new Go homes start
	// with (gobuildseed.go); nil: none.
	seed *BuildSeed

	mu    sync.Mutex
	homes map[string]*homeLock
	// phases holds a token per phase running (Config.MaxPhases).
	phases chan struct{}
}

// SetBuildSeed gives the phase the standard library's build cache to put
// in new Go homes (NewBuildSeed); a prepare before it is made goes without.
func (f *Fetcher) SetBuildSeed(s *BuildSeed) { f.seed = s }

// seedGo gives ws's home the build seed when the tree has a Go module and
// the home no build cache of its own yet.
func (f *Fetcher) seedGo(ws runtime.Workspace) {
	seed, ok := f.seed.ready()
	if !ok {
		return
	}
	if dirs, _ := findModules(ws.Root); len(dirs) == 0 {
		return
	}
	if seeded, err := seedBuildCache(ws, seed); err != nil {
		f.log.Warn("deps: go build cache seed not copied", "err", err)
	} else if seeded {
		f.log.Debug("deps: go build cache seeded", "home", ws.Home)
	}
}

// homeLock is one home's turn: a token while a phase has it.
type homeLock struct {
	held  chan struct{}
	users int // phases having or waiting for it; the entry goes with the last
}

// New returns a Fetcher for cfg.
func New(cfg Config, log *slog.Logger) *Fetcher {
	if cfg.MaxPhases <= 0 {
		cfg.MaxPhases = DefaultMaxPhases
	}
	f := &Fetcher{cfg: cfg, log: log, client: newClient(cfg.GoProxies), homes: map[string]*homeLock{}, phases: make(chan struct{}, cfg.MaxPhases)}
	if cfg.NPMRegistry != nil {
		f.npmClient = newClient([]*url.URL{cfg.NPMRegistry})
	}
	db, err := newChecksumDB(cfg.GoSumDB)
	if err != nil {
		// FromEnv checked it; a bad key in code verifies nothing.
		log.Error("deps: checksum database", "err", err)
	}
	f.sumdb = db
	return f
}

// Enabled reports whether any mirror is configured; without one Fetch
// runs only the units that need none.
func (f *Fetcher) Enabled() bool {
	return f != nil && (len(f.cfg.GoProxies) > 0 || f.cfg.NPMRegistry != nil)
}

// Fetch runs the phase for a workspace whose tree is ws.Root, writing only
// under ws.Home, and returns the warnings for the prepare answer. It never
// fails the prepare.
func (f *Fetcher) Fetch(ctx context.Context, ws runtime.Workspace) []string {
	if f == nil {
		// No mirrors at all: the units that need none still run.
		f = &Fetcher{log: slog.New(slog.DiscardHandler), homes: map[string]*homeLock{}}
	}
	timeout := f.cfg.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	// The phase's deadline starts once the home is ours, then a place
	// among the phases running (Config.MaxPhases): a second commit of the
	// repository waiting for the first one's phase, or a phase waiting for
	// a place, gets its whole time. The home comes first, so a revision
	// waiting for another of its repository holds no place meanwhile. The
	// wait is bounded too, by as long again, and ends with ctx (a Delete
	// ends a late phase's): a phase waiting holds its workspace, which no
	// budget evicts meanwhile.
	wait, endWait := context.WithTimeout(ctx, timeout)
	unlock, ok := f.lock(wait, ws.Home)
	if !ok {
		endWait()
		return []string{"the dependency phase did not run: another revision of this repository was running its phase until this one's deadline"}
	}
	defer unlock()
	if f.phases != nil {
		select {
		case f.phases <- struct{}{}:
			defer func() { <-f.phases }()
		case <-wait.Done():
			endWait()
			return []string{fmt.Sprintf("the dependency phase did not run: the daemon was running its bound of %d phases for other prepares until this one's deadline", cap(f.phases))}
		}
	}
	endWait()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	w := &warnings{}
	// A Go tree's new home starts with the standard library's build
	// cache, side by side with the rest of the phase.
	seeding := make(chan struct{})
	go func() {
		defer close(seeding)
		f.seedGo(ws)
	}()
	defer func() { <-seeding }()
	// What needs no mirror: C/C++ compile flags read from the build files
	// (cfamily.go), the crates a Cargo.lock pins (cargo.go), Python's
	// manifests (there is no PyPI mirror: each declared dependency is a
	// warning).
	f.synthesizeC(ws, w)
	f.checkCargo(ws, w)
	for _, p := range pythonWarnings(ws.Root) {
		w.add("%s", p)
	}
	if !f.Enabled() {
		return w.list()
	}
	// One download budget for the whole phase, npm and Go together.
	left := &atomic.Int64{}
	left.Store(f.cfg.MaxBytes)
	// The npm install and the Go module fetch share nothing but the
	// budget (atomic) and the warnings (locked): npm writes the tree's
	// node_modules, Go a module cache staged beside the tree. They run
	// side by side, so the phase takes the longer of the two, not the sum.
	var wg sync.WaitGroup
	if f.cfg.NPMRegistry != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.installNPM(ctx, ws, left, w)
		}()
	}
	if len(f.cfg.GoProxies) > 0 {
		// Staged beside the tree (daemon-owned), moved into the home's
		// cache at the end without following a link.
		c, err := newGoCache(ws.Home, filepath.Dir(ws.Root), f.cfg.MaxBytes)
		if err != nil {
			f.log.Error("deps: module cache", "err", err)
			w.add("the module cache could not be made; Go dependencies were not fetched")
		} else {
			m := &mirror{bases: f.cfg.GoProxies, client: f.client, left: left}
			f.fetchGo(ctx, ws, c, m, w)
			if err := c.close(); err != nil {
				f.log.Warn("deps: remove the staged module cache", "err", err)
			}
		}
	}
	wg.Wait()
	return w.list()
}

// lock waits for home's turn until ctx ends; ok is false when it ended
// first.
func (f *Fetcher) lock(ctx context.Context, home string) (unlock func(), ok bool) {
	f.mu.Lock()
	l := f.homes[home]
	if l == nil {
		l = &homeLock{held: make(chan struct{}, 1)}
		f.homes[home] = l
	}
	l.users++
	f.mu.Unlock()
	leave := func() {
		f.mu.Lock()
		if l.users--; l.users == 0 {
			delete(f.homes, home)
		}
		f.mu.Unlock()
	}
	select {
	case l.held <- struct{}{}:
		return func() { <-l.held; leave() }, true
	case <-ctx.Done():
		leave()
		return nil, false
	}
}

// warnings collects a phase's warnings from concurrent downloads.
type warnings struct {
	mu   sync.Mutex
	seen map[string]bool
	all  []string
}

func (w *warnings) add(format string, args ...any) {
	s := "dependencies: " + fmt.Sprintf(format, args...)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.seen == nil {
		w.seen = map[string]bool{}
	}
	if !w.seen[s] {
		w.seen[s] = true
		w.all = append(w.all, s)
	}
}

// list is the warnings in a stable order, bounded.
func (w *warnings) list() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := append([]string(nil), w.all...)
	sort.Strings(out)
	if len(out) > maxWarnings {
		n := len(out) - (maxWarnings - 1)
		out = append(out[:maxWarnings-1], fmt.Sprintf("dependencies: %d more warnings", n))
	}
	return out
}
