// Package pool keeps the daemon's live workspaces: which trees are
// published, which language servers run for each, single-flight prepares,
// and deletion after LSP_WORKSPACE_TTL without use. A workspace's servers
// are its own: nothing, not a process and not a cache, is shared between
// tenants.
package pool

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
	"github.com/hanzoai/lsp/daemon/internal/sanitize"
	"github.com/hanzoai/lsp/daemon/internal/uri"
	"github.com/hanzoai/lsp/daemon/internal/workspace"
	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
)

// Spec is one reviewed language server and the extensions it serves.
type Spec struct {
	runtime.Spec
	Extensions []string
	// LanguageIDs maps an extension to the LSP languageId sent in didOpen
	// (".tsx" → "typescriptreact"); Spec.Language when absent.
	LanguageIDs map[string]string
	// RSSEstimate, when set, is what admission reserves for one server of
	// this spec before any has been measured (the reviewed entry's
	// rss_estimate_mb, from the corpus's peaks): the first rust-analyzer
	// (~960 MB) must not start unreserved into a full budget.
	RSSEstimate int64
	// LoadQuiet is the reviewed entry's load_quiet_ms: how long the server
	// must stay quiet before its first load counts as done (AwaitLoad);
	// zero: LoadQuiet; negative: no quiet at all (done when no foreground
	// progress is in flight).
	LoadQuiet time.Duration
	// NoDependencies is the reviewed entry's reads_dependencies: false.
	// Its server may start before the dependency phase has ended; every
	// other server waits for it (Workspace.Server).
	NoDependencies bool
}

// loadQuiet is the quiet AwaitLoad waits for from s's server.
func (s *Spec) loadQuiet() time.Duration {
	switch {
	case s.LoadQuiet < 0:
		return 0
	case s.LoadQuiet == 0:
		return LoadQuiet
	}
	return s.LoadQuiet
}

// LanguageID is the languageId of a repo-relative path served by s.
func (s *Spec) LanguageID(rel string) string {
	if id, ok := s.LanguageIDs[path.Ext(rel)]; ok {
		return id
	}
	return s.Language
}

// Languages are the distinct languageIds s serves, in the order of its
// extensions: a server's tools are listed under each of them.
func (s *Spec) Languages() []string {
	out := []string{s.Language}
	for _, x := range s.Extensions {
		if id := s.LanguageID("f" + x); !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

// Pool is every workspace of this daemon.
type Pool struct {
	store   *workspace.Store
	specs   []Spec
	spawner runtime.Spawner
	log     *slog.Logger

	mu   sync.Mutex
	live map[workspace.Key]*Workspace
	// preparing holds a key while its tree is being written or evicted:
	// a prepare waits for it, a query answers "needs tree".
	preparing map[workspace.Key]chan struct{}
	// incoming holds what each tree being written will take on disk
	// (Prepare, treeDiskEstimate), which the disk budget counts before
	// it lands.
	incoming map[workspace.Key]int64
	// deletingHomes holds a home while the disk budget deletes it
	// (claimHomeLocked): a prepare of its repository waits for it.
	deletingHomes map[workspace.Home]chan struct{}
	budget        Budget
	// life ends with Close; background samplers run on it.
	life     context.Context
	stopLife context.CancelFunc
	// bootGeneration is where the generations of a tree adopted from an
	// earlier daemon start: past any that daemon gave (its boot time in
	// milliseconds — an earlier daemon that ran Δ ms gave fewer than Δ
	// generations above its own, a start taking far more than a
	// millisecond; within 2^53, which JSON readers keep exact).
	bootGeneration uint64
	// closed is set by Close: no workspace goes live afterwards (a
	// request still running when the daemon stops must not start a
	// server nobody will stop).
	closed bool
	// nservers counts server slots holding a reservation: starting or
	// running, released once the server is closed or its start failed.
	nservers int
	// treeBytes caches each published tree's allocated bytes (trees never
	// change under their commit but for the npm packages the dependency
	// phase moves into one, measured again once they appear).
	treeBytes map[workspace.Key]treeMeasure
	// homes caches each home's measured disk, with a stamp of what may
	// have written it since (homeSizes).
	homes homeCache
	// rssPeak is, per spec ID, the largest tree RSS one server reached: the
	// estimate of what one more will take.
	rssPeak map[string]int64
	// stopping counts evicted slot sets still shutting down.
	stopping int
	// Budget passes are serialised per resource: each measures, then
	// evicts, and two at once would evict twice for one excess.
	enforcingRSS  sync.Mutex
	enforcingDisk sync.Mutex
	// graves are what a disk pass evicted, moved aside (under
	// enforcingDisk) and removed once the pass has let go of it, in the
	// background (removals); gravesBytes and gravesInodes are their bytes
	// and inodes, and removingBytes and removing those of passes done
	// whose graves are still being removed: free already, for the
	// filesystem's reserve (fsShort).
	graves        []string
	gravesBytes   int64
	gravesInodes  float64
	removingBytes atomic.Int64
	removing      atomic.Int64
	removals      sync.WaitGroup
	// onDiskMeasured, for tests, runs in each disk pass once it has
	// measured, before it decides what to evict.
	onDiskMeasured func()
}

// New builds a pool over a store.
func New(store *workspace.Store, specs []Spec, sp runtime.Spawner, log *slog.Logger) *Pool {
	life, stop := context.WithCancel(context.Background())
	return &Pool{
		life: life, stopLife: stop, bootGeneration: uint64(time.Now().UnixMilli()),
		store: store, specs: specs, spawner: sp, log: log,
		live:          map[workspace.Key]*Workspace{},
		preparing:     map[workspace.Key]chan struct{}{},
		deletingHomes: map[workspace.Home]chan struct{}{},
		incoming:      map[workspace.Key]int64{},
		treeBytes:     map[workspace.Key]treeMeasure{},
		homes:         homeCache{measured: map[workspace.Home]homeMeasure{}, touched: map[workspace.Home]uint64{}},
		rssPeak:       map[string]int64{},
	}
}

// Workspace is one published tree and its servers.
type Workspace struct {
	Key       workspace.Key
	Dir       string
	Home      string
	PrepareID string
	pool      *Pool

	// generations numbers the instances of each server (by spec ID)
	// across the Servers started for w — a budget stops them and a
	// question starts new ones — so that a generation never repeats for
	// a workspace (a cursor bound to one expires when it changes).
	generations map[string]*atomic.Uint64

	// warnings are what the push that published the tree found while
	// preparing it (workspace.Store.Warnings), for every prepare answer
	// about it (PrepareWarnings); with a late dependency phase, the tree's
	// own until it ends, then the phase's result (Late).
	warnMu   sync.Mutex
	warnings []string
	// deps is closed once the dependency phase of a tree published before
	// it (Pool.Prepare's late) has ended; nil when it ran before. Until
	// then only servers that read no dependencies start.
	deps       chan struct{}
	cancelDeps context.CancelFunc
	// warmed is closed when the prepare's Warm has started its servers:
	// a late phase begins then.
	warmed     chan struct{}
	warmedOnce sync.Once

	lastUsed atomic.Int64
	busy     atomic.Int32
	docCount atomic.Int32
	docBytes atomic.Int64 // bytes offered to the cache (maxCachedDocBytes)

	mu      sync.Mutex
	servers map[string]*slot
	closed  bool
	// deferred are the servers a focused Warm left for StartDeferred,
	// until their start ends: listed by Languages meanwhile.
	deferred map[string]bool
	// answered is closed once a query on w has been answered
	// (MarkAnswered): the deferred servers wait for it.
	answered     chan struct{}
	answeredOnce sync.Once

	// present are the languageIds of the files the last prepare pushed
	// (nil for a tree adopted from disk).
	presentMu sync.Mutex
	present   map[string]bool

	// deleting is set, under the pool's lock, once a Delete has taken w
	// out of service; whoever sees w idle afterwards (the Delete itself or
	// the last release) deletes the tree, exactly once.
	deleting atomic.Pointer[deletion]

	// docs caches the files queries open: a tree never changes under its
	// commit, so each file is read and hashed once.
	docs sync.Map // repo-relative path → *Document
	// derived caches what other packages compute from the tree (Derived).
	derived sync.Map
	// reported holds the load problems already logged, per server.
	reported sync.Map // spec ID + "\x00" + message → struct{}
	// known are the load warnings every instance of each server reported
	// here: the tree never changes under its commit, so what one
	// generation could not load the next cannot either, also before it
	// has said so again.
	knownMu sync.Mutex
	known   map[string][]string // spec ID → warnings, first seen first
}

// Document is one file of a workspace's tree, as servers see it.
type Document struct {
	Text   []byte
	SHA256 string
}

// maxCachedDocs and maxCachedDocBytes bound the per-workspace document
// cache: by count, and by bytes (documents are up to the runner's
// MaxDocument each, 8 MiB in the daemon).
const (
	maxCachedDocs     = 1024
	maxCachedDocBytes = 64 << 20
)

// ErrNoDocument is returned for a path that is not a regular file of the tree.
var ErrNoDocument = errors.New("no such file in this revision")

// ErrDocumentTooLarge is returned for a file over the size bound.
var ErrDocumentTooLarge = errors.New("the file is too large to open")

// Derived returns the value cached under key for w, computing it with f
// the first time. A published tree, and what the dependency phase
// published with it, never change under their commit, so a value derived
// from them (the query runner's external roots and anchor documents)
// lives exactly as long as the workspace.
func (w *Workspace) Derived(key any, f func() any) any {
	if v, ok := w.derived.Load(key); ok {
		return v
	}
	v, _ := w.derived.LoadOrStore(key, f())
	return v
}

// DerivedFromDeps is Derived for a value that reads what the dependency
// phase publishes (the external roots read the installed npm packages):
// while a late phase runs it is computed afresh each time, never cached,
// since what it reads is still to come.
func (w *Workspace) DerivedFromDeps(key any, f func() any) any {
	if !w.DepsDone() {
		return f()
	}
	return w.Derived(key, f)
}

// DepsDone reports whether w's dependency phase has ended.
func (w *Workspace) DepsDone() bool { return isDone(w.DepsEnded()) }

// DepsEnded is closed once w's dependency phase has ended (at once when it
// ran before publication). A late phase always ends: cut short by a Delete
// or Close, it ends too.
func (w *Workspace) DepsEnded() <-chan struct{} {
	if w.deps == nil {
		return closedChan
	}
	return w.deps
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// PrepareWarnings are what preparing w's tree found: its normalisation and
// its dependency phase (once that has ended).
func (w *Workspace) PrepareWarnings() []string {
	w.warnMu.Lock()
	defer w.warnMu.Unlock()
	return slices.Clip(w.warnings)
}

// Document returns the tree file at rel, read once. Trees hold only regular
// files, and in node_modules the dependency phase's own relative links
// into the tree (no jailed process can plant one: the jails bind the tree
// read-only), and rel was validated, so a plain read under the tree is
// safe.
func (w *Workspace) Document(rel string, maxBytes int64) (*Document, error) {
	if d, ok := w.docs.Load(rel); ok {
		return d.(*Document), nil
	}
	full := filepath.Join(w.Dir, filepath.FromSlash(rel))
	fi, err := os.Lstat(full)
	if err != nil || !fi.Mode().IsRegular() {
		return nil, ErrNoDocument
	}
	if maxBytes > 0 && fi.Size() > maxBytes {
		return nil, ErrDocumentTooLarge
	}
	b, err := os.ReadFile(full)
	if err != nil {
		return nil, ErrNoDocument
	}
	sum := sha256.Sum256(b)
	d := &Document{Text: b, SHA256: hex.EncodeToString(sum[:])}
	if w.docCount.Add(1) <= maxCachedDocs && w.docBytes.Add(int64(len(b))) <= maxCachedDocBytes {
		w.docs.Store(rel, d)
	}
	return d, nil
}

// slot starts a server once and shares the outcome.
type slot struct {
	ready chan struct{}
	srv   *runtime.Server
	err   error
}

// LanguageInfo is what a language's server negotiated.
type LanguageInfo struct {
	Language    string
	Server      runtime.Info
	Tools       []string
	Fingerprint string
	// Warnings are the load problems the server reported for this
	// workspace (LoadWarnings); never set on what Negotiated remembers.
	Warnings []string
}

// Specs returns the configured servers.
func (p *Pool) Specs() []Spec { return p.specs }

// SpecFor returns the server for a repo-relative path, by extension.
func (p *Pool) SpecFor(rel string) (*Spec, bool) {
	ext := path.Ext(rel)
	for i := range p.specs {
		for _, x := range p.specs[i].Extensions {
			if x == ext {
				return &p.specs[i], true
			}
		}
	}
	return nil, false
}

// Acquire returns the live workspace for k and marks it busy until release
// is called; a busy workspace is never deleted under its request. A tree
// published on disk by an earlier run of the daemon is adopted. ok is false
// when the daemon does not hold k, or while k is being written or deleted
// (its key is in preparing until the tree is gone, so a tree on its way out
// is never adopted again).
func (p *Pool) Acquire(k workspace.Key) (w *Workspace, release func(), ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, nil, false
	}
	w, ok = p.live[k]
	if !ok {
		if _, busy := p.preparing[k]; busy {
			return nil, nil, false
		}
		if !p.store.Published(k) {
			return nil, nil, false
		}
		id, err := p.store.PrepareID(k)
		if err != nil {
			return nil, nil, false
		}
		warnings, err := p.store.Warnings(k)
		if err != nil {
			p.log.Warn("workspace warnings unreadable", "workspace", k.String(), "err", err)
		}
		w = p.newWorkspace(k, id, warnings, true)
		p.live[k] = w
	}
	w.busy.Add(1)
	w.lastUsed.Store(time.Now().UnixNano())
	var once sync.Once
	return w, func() { once.Do(w.release) }, true
}

// release ends one request on w. The last request on a workspace that a
// Delete took out of service while it ran finishes that deletion.
func (w *Workspace) release() {
	w.lastUsed.Store(time.Now().UnixNano())
	if w.busy.Add(-1) == 0 && w.deleting.Load() != nil {
		// Off the request's path: removing a large tree takes a while,
		// and Delete (or whoever waits on the key) waits for it anyway.
		go w.finishDelete()
	}
}

// InFlight reports whether a write, eviction or deletion of k is in flight
// now. A push whose stream broke keeps its write (and its dependency phase)
// running, so this stays true until that write published the tree or gave
// up: the proxy releases a hold only when it is false.
func (p *Pool) InFlight(k workspace.Key) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, inflight := p.preparing[k]
	return inflight
}

// WaitInFlight waits for a write, eviction or deletion of k in flight to
// end, and reports whether one did. It reports false at once when none is
// in flight, and when ctx ends first.
func (p *Pool) WaitInFlight(ctx context.Context, k workspace.Key) bool {
	p.mu.Lock()
	done, inflight := p.preparing[k]
	p.mu.Unlock()
	if !inflight {
		return false
	}
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

func (p *Pool) newWorkspace(k workspace.Key, prepareID string, warnings []string, adopted bool) *Workspace {
	w := &Workspace{
		Key: k, Dir: p.store.TreeDir(k), Home: p.store.HomeDir(k), PrepareID: prepareID, warnings: warnings,
		pool: p, servers: map[string]*slot{}, answered: make(chan struct{}), warmed: make(chan struct{}),
		generations: make(map[string]*atomic.Uint64, len(p.specs)),
	}
	for _, s := range p.specs {
		g := new(atomic.Uint64)
		if adopted {
			// A tree an earlier daemon published keeps its prepare id:
			// its servers' generations must not repeat that daemon's.
			g.Store(p.bootGeneration)
		}
		w.generations[s.ID] = g
	}
	return w
}

// MarkAnswered records that a query on w has been answered.
func (w *Workspace) MarkAnswered() { w.answeredOnce.Do(func() { close(w.answered) }) }

// Answered is closed once a query on w has been answered.
func (w *Workspace) Answered() <-chan struct{} { return w.answered }

// Prepare receives a pushed tree. Only one push per key writes; a push that
// arrives while another is in flight waits for it, and one that arrives
// after it answers at once. prepared is true only when this push wrote the
// tree; prepareID is the id the workspace holds afterwards. beforePublish
// runs, when this push writes the tree, on the verified tree just before
// it is published (see workspace.Store.Write): k answers "needs tree" and
// other pushes of k wait until it returns. The warnings it returns are
// kept with the tree (Workspace.PrepareWarnings). It runs under ctx
// without its cancellation: a tree is published only with a phase that
// ran, never one a caller cut short.
//
// With late set, the tree is published as soon as it is verified and
// beforePublish runs behind it, in the background, once the caller's
// Warm has started the focus's server (startLateDeps): the
// workspace is live at once, but only the servers that read no
// dependencies (Spec.NoDependencies) start before the phase ends; the
// others, and what is derived from the phase's output, wait for it. A
// focused prepare whose server reads none (a JSON file of a repository
// with two thousand npm packages) answers before they are installed.
func (p *Pool) Prepare(ctx context.Context, k workspace.Key, prepareID string, files []*daemonv1.FileEntry, body io.Reader, beforePublish func(ctx context.Context, ws runtime.Workspace) []string, late *Late) (prepared bool, heldID string, err error) {
	if _, err := workspace.CheckManifestFor(files, p.store.Limits(), body); err != nil {
		return false, "", err
	}
	p.mu.Lock()
	maxDisk := p.budget.MaxDisk
	p.mu.Unlock()
	// What the tree will take on disk, not what its manifest declares:
	// the budget counts allocated blocks (treeDiskEstimate).
	onDisk := treeDiskEstimate(files)
	if maxDisk > 0 && onDisk > maxDisk {
		return false, "", fmt.Errorf("prepare %s: %w (%d bytes on disk, budget %d)", k, ErrTreeOverBudget, onDisk, maxDisk)
	}
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return false, "", ErrPoolClosed
		}
		if w, ok := p.live[k]; ok {
			p.mu.Unlock()
			return false, w.PrepareID, nil
		}
		// A tree still on disk but being deleted is not one to report as
		// held: wait for the deletion, then write it again.
		wait, inflight := p.preparing[k]
		if !inflight && p.store.Published(k) {
			p.mu.Unlock()
			id, err := p.store.PrepareID(k)
			return false, id, err
		}
		if home, deleting := p.deletingHomes[k.Home()]; !inflight && deleting {
			// The disk budget is deleting the repository's home: write
			// the tree once it is gone, into a new one.
			wait, inflight = home, true
		}
		if !inflight {
			done := make(chan struct{})
			p.homes.touch(k)
			p.preparing[k] = done
			p.incoming[k] = onDisk
			p.mu.Unlock()
			// Room on disk for the tree before a byte of it is written.
			p.enforceDisk(ctx, activeHomeMaxAge)
			if beforePublish == nil {
				late = nil
			}
			var hook func(tree, home string) []string
			var warnings []string
			if beforePublish != nil && late == nil {
				hook = func(tree, home string) []string {
					warnings = beforePublish(context.WithoutCancel(ctx), runtime.Workspace{Root: tree, Home: home, Cache: p.store.CacheDir(k)})
					return warnings
				}
			}
			var published bool
			if late != nil {
				published, err = p.store.WriteBeforeDeps(k, prepareID, files, body)
			} else {
				published, err = p.store.Write(k, prepareID, files, body, hook)
			}
			p.mu.Lock()
			delete(p.preparing, k)
			delete(p.incoming, k)
			close(done)
			// Closed meanwhile: the tree stays on disk, adopted by the
			// next daemon, but nothing of it runs in this one.
			if err == nil && published && !p.closed {
				if late != nil {
					warnings = slices.Clone(late.Warnings)
				}
				w := p.newWorkspace(k, prepareID, warnings, false)
				if late != nil {
					p.startLateDeps(w, beforePublish)
				}
				p.live[k] = w
			}
			p.mu.Unlock()
			if err != nil {
				return false, "", fmt.Errorf("prepare %s: %w", k, err)
			}
			if !published {
				id, err := p.store.PrepareID(k)
				return false, id, err
			}
			return true, prepareID, nil
		}
		p.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return false, "", ctx.Err()
		}
	}
}

// Late asks Prepare to run the dependency phase behind the tree's
// publication. Warnings are the workspace's until the phase ends (the
// tree's own, found before it was pushed); the phase's result replaces
// them then, so it repeats them.
type Late struct {
	Warnings []string
}

// startLateDeps runs w's dependency phase behind its publication, called
// under p.mu as w goes live. The phase begins once the prepare's Warm has
// started the focus's server, which it would otherwise share two cores
// with (the JSON server's start took 381 ms beside axios's install, 234
// to 285 ms before it). The phase holds w like a request, so a
// Delete or an eviction meanwhile cancels it (claim) and deletes the tree
// once it has returned; a phase cut short that way, or by Close, leaves
// the tree marked pending, and NewStore deletes it at the next start.
func (p *Pool) startLateDeps(w *Workspace, phase func(ctx context.Context, ws runtime.Workspace) []string) {
	w.deps = make(chan struct{})
	ctx, cancel := context.WithCancel(p.life)
	w.cancelDeps = cancel
	w.busy.Add(1)
	go func() {
		defer w.release()
		defer cancel()
		select {
		case <-w.warmed:
		case <-ctx.Done():
		}
		warnings := phase(ctx, runtime.Workspace{Root: w.Dir, Home: w.Home, Cache: p.store.CacheDir(w.Key)})
		if ctx.Err() == nil {
			if err := p.store.FinishDeps(w.Key, warnings); err != nil {
				p.log.Error("late dependency phase", "workspace", w.Key.String(), "err", err)
			}
			// Measured again: the npm packages appeared in the tree.
			p.mu.Lock()
			delete(p.treeBytes, w.Key)
			p.mu.Unlock()
		}
		w.warnMu.Lock()
		w.warnings = warnings
		w.warnMu.Unlock()
		close(w.deps)
	}()
}

// Warm starts the servers for the languages present in files, so that the
// first query finds them initialized, and reports what they negotiated.
// Failures become warnings: the tree is prepared either way. With a focus
// (the file the caller asks about first) whose server is among them, only
// that server starts now: the others are returned as deferred, for
// StartDeferred once the workspace has answered its first question
// (rpc.Server.startDeferred). Until then they are listed without tools
// (Languages). On two cores, every server of a polyglot tree starting at
// once made the focus's start wait for all of theirs (yaml, json and bash
// beside nearly every repository).
func (w *Workspace) Warm(ctx context.Context, files []*daemonv1.FileEntry, focus string) (infos []LanguageInfo, warnings []string, deferred []*Spec) {
	defer w.warmedOnce.Do(func() { close(w.warmed) })
	seen := map[string]bool{}
	var specs []*Spec
	for _, f := range files {
		if s, ok := w.pool.SpecFor(f.GetPath()); ok && !seen[s.ID] {
			seen[s.ID] = true
			specs = append(specs, s)
		}
	}
	// The languages listed are the repository's own: installed or hidden
	// files (node_modules/, .github/) start their server but are not what
	// the repository is written in (the anchor rule of query.findAnchor).
	present := map[string]bool{}
	for _, f := range files {
		if s, ok := w.pool.SpecFor(f.GetPath()); ok && !installedOrHidden(f.GetPath()) {
			present[s.LanguageID(f.GetPath())] = true
		}
	}
	w.presentMu.Lock()
	w.present = present
	w.presentMu.Unlock()
	if fs, ok := w.pool.SpecFor(focus); ok && focus != "" && seen[fs.ID] && len(specs) > 1 {
		deferred = slices.DeleteFunc(specs, func(s *Spec) bool { return s == fs })
		specs = []*Spec{fs}
		w.mu.Lock()
		if w.deferred == nil {
			w.deferred = map[string]bool{}
		}
		for _, s := range deferred {
			w.deferred[s.ID] = true
		}
		w.mu.Unlock()
	}
	infos, warnings = w.start(ctx, specs)
	return infos, warnings, deferred
}

// StartDeferred starts the servers a focused Warm deferred; a start that
// fails is logged, and the next question for its language tries again.
func (w *Workspace) StartDeferred(ctx context.Context, specs []*Spec) {
	w.start(ctx, specs)
	w.mu.Lock()
	for _, s := range specs {
		delete(w.deferred, s.ID)
	}
	w.mu.Unlock()
}

// start starts specs' servers at once: one slow to initialize does not
// hold the others back (the pool's budgets still apply to each start).
func (w *Workspace) start(ctx context.Context, specs []*Spec) ([]LanguageInfo, []string) {
	type started struct {
		srv *runtime.Server
		err error
	}
	out := make([]started, len(specs))
	var wg sync.WaitGroup
	for i, s := range specs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i].srv, out[i].err = w.Server(ctx, s)
		}()
	}
	wg.Wait()
	var infos []LanguageInfo
	var warnings []string
	for i, s := range specs {
		if err := out[i].err; err != nil {
			warnings = append(warnings, fmt.Sprintf("language server %s did not start", s.ID))
			if !errors.Is(err, ErrClosed) { // a deferred start after a Delete: nothing went wrong
				w.pool.log.Warn("warm server", "server", s.ID, "workspace", w.Key.String(), "err", err)
			}
			continue
		}
		infos = append(infos, w.infos(s, out[i].srv)...)
	}
	return infos, warnings
}

func installedOrHidden(rel string) bool {
	for _, seg := range strings.Split(path.Dir(rel), "/") {
		if seg == "node_modules" || strings.HasPrefix(seg, ".") && seg != "." {
			return true
		}
	}
	return false
}

// languagesOf are the languageIds of s to list for w: those of the
// files its last prepare pushed, or every one s serves when w was not
// prepared by this process (adopted from disk).
func (w *Workspace) languagesOf(s *Spec) []string {
	w.presentMu.Lock()
	defer w.presentMu.Unlock()
	all := s.Languages()
	if w.present == nil {
		return all
	}
	var out []string
	for _, id := range all {
		if w.present[id] {
			out = append(out, id)
		}
	}
	if len(out) == 0 {
		return all[:1]
	}
	return out
}

// LoadQuiet is how long a server must stay quiet (no progress, no
// publication) after it starts before its first load counts as done,
// unless its reviewed entry says otherwise (Spec.LoadQuiet): gopls
// publishes its workspace's diagnostics about two seconds after its load
// ends. LoadWait bounds the whole wait.
const (
	LoadQuiet = 2500 * time.Millisecond
	LoadWait  = 20 * time.Second
)

// AwaitLoad waits, at most LoadWait, until every running server of w
// that only admits (all when only is nil) has finished its first load
// and published what it found (lsp WaitQuiet), so that what follows —
// the prepare answer — knows whether the project loaded. It never fails:
// what is not known by then is reported by later answers. When a question
// follows at once (queryFollows: an implicit prepare), a server whose
// diagnosis reports follow its load is waited for until the load alone
// (lsp WaitLoaded): the answer says what the diagnosis had not yet found.
func (w *Workspace) AwaitLoad(ctx context.Context, only func(*Spec) bool, queryFollows bool) {
	ctx, cancel := context.WithTimeout(ctx, LoadWait)
	defer cancel()
	var wg sync.WaitGroup
	for _, r := range w.Running() {
		if only != nil && !only(r.Spec) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if c, _, err := r.Server.Client(ctx); err == nil {
				start := time.Now()
				wait := c.WaitQuiet
				if queryFollows {
					wait = c.WaitLoaded
				}
				err := wait(ctx, r.Spec.loadQuiet())
				w.pool.log.Info("first load", "workspace", w.Key.String(), "server", r.Spec.ID,
					"took_ms", time.Since(start).Milliseconds(), "bounded", err != nil, "diagnosed", c.Diagnosed())
			}
		}()
	}
	wg.Wait()
}

// Running is one started server of a workspace.
type Running struct {
	Spec   *Spec
	Server *runtime.Server
}

// Running are w's started servers, in spec order.
func (w *Workspace) Running() []Running {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []Running
	for i := range w.pool.specs {
		s := &w.pool.specs[i]
		if sl, ok := w.servers[s.ID]; ok && isDone(sl.ready) && sl.err == nil {
			out = append(out, Running{Spec: s, Server: sl.srv})
		}
	}
	return out
}

// Scrubber replaces the daemon's host paths in a server's text: the tree
// (its npm packages in node_modules too) becomes repo-relative, the home
// "$HOME" and anything else under the daemon's root "$LSP_DAEMON_ROOT".
// extra roots (GOROOT, a module cache) are named by module first — except
// the npm packages among them: in text, a package's files read as on a
// checkout, "node_modules/.pnpm/…/x.d.ts" where tsserver prints a path
// (hover's import("…") types), not "name@version/x.d.ts" as a location
// names them.
func (w *Workspace) Scrubber(extra []uri.External) *strings.Replacer {
	nm := runtime.NodeModules(runtime.Workspace{Root: w.Dir, Home: w.Home})
	extra = slices.DeleteFunc(slices.Clone(extra), func(x uri.External) bool {
		return x.Dir == nm || strings.HasPrefix(x.Dir, nm+string(filepath.Separator))
	})
	pol := uri.Policy{Root: w.Dir, Externals: extra}
	return pol.Scrubber(
		uri.Host{Dir: w.Home, Name: "$HOME"},
		uri.Host{Dir: w.pool.store.Root(), Name: "$LSP_DAEMON_ROOT"},
	)
}

// LoadWarnings are the load problems srv (the server of s) reported for
// w — and those earlier instances of it reported — scrubbed of host
// paths, as warnings: "gopls could not load the project: main.go: could
// not import …". Each is logged once per workspace and server, at warning
// level.
func (w *Workspace) LoadWarnings(s *Spec, srv *runtime.Server) []string {
	problems, more := srv.LoadProblems()
	scrub := w.Derived(scrubKey{}, func() any { return w.Scrubber(nil) }).(*strings.Replacer)
	var fresh []string
	for _, p := range problems {
		msg := scrub.Replace(p.Message)
		if p.URI != "" {
			msg = scrub.Replace(string(p.URI)) + ": " + msg
		}
		// Server text, like every other that leaves the daemon.
		msg = sanitize.Line(msg, 1<<10)
		if _, seen := w.reported.LoadOrStore(s.ID+"\x00"+msg, struct{}{}); !seen {
			w.pool.log.Warn("language server could not load the project", "workspace", w.Key.String(), "server", s.ID, "message", msg)
		}
		fresh = append(fresh, fmt.Sprintf("%s could not load the project: %s", s.ID, msg))
	}
	if more > 0 {
		fresh = append(fresh, fmt.Sprintf("%s reported %d more load problem(s)", s.ID, more))
	}
	w.knownMu.Lock()
	defer w.knownMu.Unlock()
	if w.known == nil {
		w.known = map[string][]string{}
	}
	list := w.known[s.ID]
	for _, f := range fresh {
		if !slices.Contains(list, f) && len(list) < 2*maxLoadWarnings {
			list = append(list, f)
		}
	}
	w.known[s.ID] = list
	return slices.Clone(list)
}

// FileWarnings are the problems srv's server (of s) reported about one
// document alone (lsp.Client.FileProblems: a file no package of the
// build contains), scrubbed of host paths, as warnings for the answers
// about that document: "gopls did not load this file: No packages found
// for open file a_test.go. This file may be excluded due to its build
// tags." The rest of the workspace is not qualified by them. Each is
// logged once per workspace and server, at warning level.
func (w *Workspace) FileWarnings(s *Spec, problems []string) []string {
	if len(problems) == 0 {
		return nil
	}
	scrub := w.Derived(scrubKey{}, func() any { return w.Scrubber(nil) }).(*strings.Replacer)
	out := make([]string, 0, len(problems))
	for _, p := range problems {
		msg := sanitize.Line(scrub.Replace(p), 1<<10)
		if _, seen := w.reported.LoadOrStore(s.ID+"\x00file\x00"+msg, struct{}{}); !seen {
			w.pool.log.Warn("language server did not load a file", "workspace", w.Key.String(), "server", s.ID, "message", msg)
		}
		out = append(out, fmt.Sprintf("%s did not load this file: %s", s.ID, msg))
	}
	return out
}

// maxLoadWarnings bounds the warnings of one server kept per workspace
// (twice it, across generations).
const maxLoadWarnings = 17

// KnownLoadWarnings fills in the load warnings w's servers reported, by
// server id, on infos that lack them (what Negotiated remembers, for a
// workspace whose servers are not running now).
func (w *Workspace) KnownLoadWarnings(infos []LanguageInfo) []LanguageInfo {
	w.knownMu.Lock()
	defer w.knownMu.Unlock()
	out := slices.Clone(infos)
	for i := range out {
		if len(out[i].Warnings) == 0 {
			out[i].Warnings = slices.Clone(w.known[out[i].Server.ID])
		}
	}
	return out
}

type scrubKey struct{}

// infos are what srv negotiated, once per languageId of s present in w:
// answers route by file extension, and a polyglot tree lists each of its
// languages with the tools its server offers.
func (w *Workspace) infos(s *Spec, srv *runtime.Server) []LanguageInfo {
	var out []LanguageInfo
	for _, id := range w.languagesOf(s) {
		out = append(out, LanguageInfo{Language: id, Server: srv.Info(), Tools: srv.Tools(), Fingerprint: srv.CapabilityFingerprint()})
	}
	return out
}

// Specs are w's servers, in the configuration's order: those serving a
// language its last prepare pushed files of, and any started for it
// (running, failed, or serving only installed files). A server the
// budget stopped is still w's: a workspace-wide question must ask it
// again, not leave its language out. Nil for a tree adopted from disk
// whose servers have not started.
func (w *Workspace) Specs() []*Spec {
	w.presentMu.Lock()
	present := w.present
	w.presentMu.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []*Spec
	for i := range w.pool.specs {
		s := &w.pool.specs[i]
		_, started := w.servers[s.ID]
		if started || slices.ContainsFunc(s.Languages(), func(id string) bool { return present[id] }) {
			out = append(out, s)
		}
	}
	return out
}

// Needs reports whether s is one of w's servers (Specs) — or may be: a
// tree adopted from disk does not know its languages.
func (w *Workspace) Needs(s *Spec) bool {
	w.presentMu.Lock()
	known := w.present != nil
	w.presentMu.Unlock()
	return !known || slices.Contains(w.Specs(), s)
}

// Languages reports the servers running for w, and those a focused Warm
// deferred that have not started yet: by language and server id only, no
// version or tools, as a cold workspace's configuration lists them.
func (w *Workspace) Languages() []LanguageInfo {
	w.mu.Lock()
	var out []LanguageInfo
	var srvs []*runtime.Server // nil: deferred
	var specs []*Spec
	for i := range w.pool.specs {
		s := &w.pool.specs[i]
		if sl, ok := w.servers[s.ID]; ok && isDone(sl.ready) && sl.err == nil {
			srvs = append(srvs, sl.srv)
			specs = append(specs, s)
		} else if w.deferred[s.ID] {
			srvs = append(srvs, nil)
			specs = append(specs, s)
		}
	}
	w.mu.Unlock()
	for i, s := range specs {
		if srvs[i] == nil {
			for _, id := range w.languagesOf(s) {
				out = append(out, LanguageInfo{Language: id, Server: runtime.Info{ID: s.ID}})
			}
			continue
		}
		warnings := w.LoadWarnings(s, srvs[i])
		for _, l := range w.infos(s, srvs[i]) {
			l.Warnings = slices.Clone(warnings)
			out = append(out, l)
		}
	}
	return out
}

// Configured reports every configured server from the operator's
// configuration alone: language and server id, no version, generation or
// tools (those are learned from a running server, which belongs to one
// tenant's workspace).
func (p *Pool) Configured() []LanguageInfo {
	out := make([]LanguageInfo, 0, len(p.specs))
	for i := range p.specs {
		for _, id := range p.specs[i].Languages() {
			out = append(out, LanguageInfo{Language: id, Server: runtime.Info{ID: p.specs[i].ID}})
		}
	}
	return out
}

func isDone(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// ErrClosed is returned for a workspace deleted while in use.
var ErrClosed = errors.New("workspace closed")

// ErrPoolClosed is returned by a Prepare after Close.
var ErrPoolClosed = errors.New("daemon shutting down")

// Server returns w's running server for s, starting it on first use. Starts
// are single-flight; a failed start is retried by the next caller.
func (w *Workspace) Server(ctx context.Context, s *Spec) (*runtime.Server, error) {
	if !s.NoDependencies && !w.DepsDone() {
		select {
		case <-w.DepsEnded():
		case <-ctx.Done():
			return nil, fmt.Errorf("%s waits for the dependency phase, still running: %w", s.ID, ctx.Err())
		}
	}
	reserved := false
	for {
		w.mu.Lock()
		if w.closed {
			w.mu.Unlock()
			if reserved {
				w.pool.releaseServer()
			}
			return nil, ErrClosed
		}
		sl, ok := w.servers[s.ID]
		if ok && isDone(sl.ready) && sl.err != nil {
			ok = false
		}
		if ok {
			w.mu.Unlock()
			if reserved {
				w.pool.releaseServer()
			}
			return sl.wait(ctx)
		}
		if !reserved {
			// Make room under the budgets before starting one more; the
			// lock is not held meanwhile, so look again afterwards.
			w.mu.Unlock()
			if err := w.pool.reserveServer(ctx, w, s); err != nil {
				return nil, err
			}
			reserved = true
			continue
		}
		sl = &slot{ready: make(chan struct{})}
		w.pool.homes.touch(w.Key) // under w.mu, before the slot: homeSizes
		w.servers[s.ID] = sl
		w.mu.Unlock()
		// The server outlives this request: start it on the daemon's
		// context, bounded by its own timeout, not the caller's.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		spec := s.Spec
		gens := w.generations[s.ID]
		spec.NextGeneration = func() uint64 { return gens.Add(1) }
		sl.srv, sl.err = runtime.Start(sctx, w.pool.spawner, spec, runtime.Workspace{Root: w.Dir, Home: w.Home}, w.pool.log.With("server", s.ID, "workspace", w.Key.String()))
		cancel()
		if sl.err != nil {
			w.pool.releaseServer()
		}
		close(sl.ready)
		if sl.err == nil {
			// Now that it runs, measure it: the others make room for
			// what it really takes; then follow it while it loads.
			w.pool.enforceRSS(context.WithoutCancel(ctx), w, 0)
			go w.pool.settle(w)
		}
		return sl.wait(ctx)
	}
}

func (sl *slot) wait(ctx context.Context) (*runtime.Server, error) {
	select {
	case <-sl.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return sl.srv, sl.err
}

// close stops every server of w.
func (w *Workspace) close(ctx context.Context) {
	w.mu.Lock()
	w.closed = true
	slots := w.servers
	w.servers = map[string]*slot{}
	w.mu.Unlock()
	w.stopSlots(ctx, slots)
}

// stopSlots closes the servers of slots taken out of w.servers, and
// releases their reservations once each is gone.
func (w *Workspace) stopSlots(ctx context.Context, slots map[string]*slot) {
	for _, sl := range slots {
		<-sl.ready
		if sl.srv != nil {
			if err := sl.srv.Close(ctx); err != nil {
				w.pool.log.Debug("close server", "workspace", w.Key.String(), "err", err)
			}
			w.pool.releaseServer()
		}
	}
	if len(slots) > 0 {
		// A server may write its home until it has exited: a measure taken
		// once its slot was gone is stale now.
		w.pool.homes.touch(w.Key)
	}
}

// deletion is one Delete of a key in progress: the key stays in preparing
// (so Acquire answers "needs tree" and Prepare waits) until the tree is
// gone and done is closed.
type deletion struct {
	k     workspace.Key
	done  chan struct{} // the preparing entry, closed when the tree is gone
	once  sync.Once
	err   error
	owner *Pool
}

// Delete stops k's servers and deletes its tree. Requests already running
// on k keep their tree until they release it (their servers are stopped at
// once, so they end promptly); no new request gets k meanwhile, and the
// tree is deleted by the last of them. Delete waits for that, bounded by
// ctx; the deletion completes either way.
func (p *Pool) Delete(ctx context.Context, k workspace.Key) (bool, error) {
	d, w, existed, err := p.claim(ctx, k, func(*Workspace, bool) bool { return true })
	if err != nil || d == nil {
		return existed, err
	}
	return existed, p.finish(ctx, d, w)
}

// claim takes k out of service for deletion when ok, called under the
// pool's lock with k's live workspace (nil when not live) and whether its
// tree is on disk, allows it. It waits for a write or an eviction of k in
// flight first. With a nil deletion, k was not deleted (ok refused, or
// there was nothing to delete).
func (p *Pool) claim(ctx context.Context, k workspace.Key, ok func(w *Workspace, published bool) bool) (*deletion, *Workspace, bool, error) {
	for {
		p.mu.Lock()
		if wait, inflight := p.preparing[k]; inflight {
			p.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, nil, false, ctx.Err()
			}
		}
		w := p.live[k]
		published := p.store.Published(k)
		if w == nil && !published {
			p.mu.Unlock()
			return nil, nil, false, nil
		}
		if !ok(w, published) {
			p.mu.Unlock()
			return nil, nil, false, nil
		}
		d := &deletion{k: k, done: make(chan struct{}), owner: p}
		p.homes.touch(k)
		p.preparing[k] = d.done
		delete(p.live, k)
		delete(p.treeBytes, k)
		if w != nil {
			w.deleting.Store(d)
			if w.cancelDeps != nil {
				// A late dependency phase holds w: end it now.
				w.cancelDeps()
			}
		}
		p.mu.Unlock()
		return d, w, true, nil
	}
}

// finish stops w's servers and, once w is idle, deletes the tree; it
// waits for the deletion, bounded by ctx.
func (p *Pool) finish(ctx context.Context, d *deletion, w *Workspace) error {
	if w == nil {
		d.run()
		return d.err
	}
	w.close(ctx)
	if w.busy.Load() == 0 {
		w.finishDelete()
	}
	select {
	case <-d.done:
		return d.err
	case <-ctx.Done():
		return fmt.Errorf("delete %s: waiting for its requests: %w", d.k, ctx.Err())
	}
}

func (w *Workspace) finishDelete() {
	if d := w.deleting.Load(); d != nil {
		d.run()
	}
}

// run deletes the tree and ends the deletion, once.
func (d *deletion) run() {
	d.once.Do(func() {
		d.err = d.owner.store.Delete(d.k)
		p := d.owner
		p.mu.Lock()
		delete(p.preparing, d.k)
		close(d.done)
		p.mu.Unlock()
	})
}

// Sweep deletes workspaces unused for ttl and not busy. Each is checked
// again, under the pool's lock, as it is taken out of service: a request
// that acquired it since the first look keeps it.
func (p *Pool) Sweep(ctx context.Context, ttl time.Duration) int {
	cutoff := time.Now().Add(-ttl).UnixNano()
	p.mu.Lock()
	var idle []workspace.Key
	for k, w := range p.live {
		if w.busy.Load() == 0 && w.lastUsed.Load() < cutoff {
			idle = append(idle, k)
		}
	}
	p.mu.Unlock()
	if keys, err := p.store.List(); err == nil {
		idle = append(idle, keys...)
	}
	n := 0
	seen := map[workspace.Key]bool{}
	for _, k := range idle {
		if seen[k] {
			continue
		}
		seen[k] = true
		d, w, _, err := p.claim(ctx, k, func(w *Workspace, published bool) bool {
			if w != nil {
				return w.busy.Load() == 0 && w.lastUsed.Load() < cutoff
			}
			return published && p.store.ModTime(k).UnixNano() < cutoff
		})
		if err == nil && d != nil {
			err = p.finish(ctx, d, w)
		}
		if err != nil {
			p.log.Warn("sweep", "workspace", k.String(), "err", err)
			continue
		}
		if d != nil {
			n++
		}
	}
	return n
}

// Close stops every server (the trees stay on disk). It is final: a
// prepare afterwards fails with ErrPoolClosed, Acquire finds nothing, and a
// prepare still writing publishes its tree to disk only — gRPC's Stop does
// not wait for the handlers it cancels, and one that went on would start a
// server after the pool stopped them all.
func (p *Pool) Close(ctx context.Context) {
	p.stopLife()
	p.mu.Lock()
	p.closed = true
	ws := make([]*Workspace, 0, len(p.live))
	for _, w := range p.live {
		ws = append(ws, w)
	}
	p.live = map[workspace.Key]*Workspace{}
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Add(1)
		go func() { defer wg.Done(); w.close(ctx) }()
	}
	wg.Wait()
	p.removals.Wait()
}
