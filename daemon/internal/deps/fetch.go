package deps

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
	"github.com/hanzoai/lsp/daemon/internal/safefs"
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

	mu    sync.Mutex
	homes map[string]*homeLock
}

type homeLock struct {
	sync.Mutex
	users int
}

// New returns a Fetcher for cfg.
func New(cfg Config, log *slog.Logger) *Fetcher {
	f := &Fetcher{cfg: cfg, log: log, client: newClient(cfg.GoProxies), homes: map[string]*homeLock{}}
	if cfg.NPMRegistry != nil {
		f.npmClient = newClient([]*url.URL{cfg.NPMRegistry})
	}
	return f
}

// Enabled reports whether any mirror is configured; without one Fetch
// does nothing.
func (f *Fetcher) Enabled() bool {
	return f != nil && (len(f.cfg.GoProxies) > 0 || f.cfg.NPMRegistry != nil)
}

// Fetch runs the phase for a workspace whose tree is ws.Root, writing only
// under ws.Home, and returns the warnings for the prepare answer. It never
// fails the prepare.
func (f *Fetcher) Fetch(ctx context.Context, ws runtime.Workspace) []string {
	if !f.Enabled() {
		return nil
	}
	timeout := f.cfg.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	// The deadline starts once the home is ours: a second commit of the
	// repository waiting for the first one's phase gets its whole time.
	unlock := f.lock(ws.Home)
	defer unlock()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	w := &warnings{}
	// One download budget for the whole phase, npm and Go together.
	left := &atomic.Int64{}
	left.Store(f.cfg.MaxBytes)
	if f.cfg.NPMRegistry != nil {
		f.installNPM(ctx, ws, left, w)
	}
	if len(f.cfg.GoProxies) > 0 {
		// The cache is in the home, which jails write: it is named by
		// its descriptor from here on (safefs), never by a path a link
		// could redirect.
		mc, err := openModCache(ws)
		modCache := ""
		if err == nil {
			defer mc.Close()
			modCache = mc.Path()
		}
		if err != nil {
			f.log.Error("deps: module cache", "err", err)
			w.add("the module cache could not be made; Go dependencies were not fetched")
		} else {
			m := &mirror{bases: f.cfg.GoProxies, client: f.client, left: left}
			f.fetchGo(ctx, ws.Root, modCache, m, w)
			if err := ownLike(ws.Home, modCache); err != nil {
				f.log.Warn("deps: give the module cache to the home's owner", "err", err)
			}
		}
	}
	return w.list()
}

func (f *Fetcher) lock(home string) func() {
	f.mu.Lock()
	l := f.homes[home]
	if l == nil {
		l = &homeLock{}
		f.homes[home] = l
	}
	l.users++
	f.mu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		f.mu.Lock()
		if l.users--; l.users == 0 {
			delete(f.homes, home)
		}
		f.mu.Unlock()
	}
}

// openModCache opens (making it) the module cache beneath the home,
// following no link, and gives the directories on the way to the home's
// owner.
func openModCache(ws runtime.Workspace) (*safefs.Dir, error) {
	home, err := safefs.Open(ws.Home)
	if err != nil {
		return nil, err
	}
	defer home.Close()
	st, err := home.Stat()
	if err != nil {
		return nil, err
	}
	owner := safefs.Keep
	if int(st.Uid) != os.Geteuid() {
		owner = safefs.Owner{UID: int(st.Uid), GID: int(st.Gid)}
	}
	rel, err := filepath.Rel(ws.Home, runtime.ModCache(ws))
	if err != nil {
		return nil, err
	}
	return home.MkdirAll(filepath.ToSlash(rel), 0o755, safefs.MkdirOpts{Owner: owner})
}

// ownLike gives what the phase wrote under dir (a safefs.Dir's Path) to
// the owner of home: a jailed server runs as the home's uid and must be
// able to take the go command's lock files in the cache. It follows no
// link and gives away no file with a second link (safefs.ChownTree).
func ownLike(home, dir string) error {
	fi, err := os.Lstat(home)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || int(st.Uid) == os.Geteuid() {
		return nil
	}
	d, err := safefs.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.ChownTree(int(st.Uid), int(st.Gid))
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
