package soak

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/devforge"
	"github.com/hanzoai/lsp/proxy/internal/devstack"
	"slices"
)

// Config is one soak run.
type Config struct {
	Dir       string // everything lives below it (a fresh directory, mode 0755 for Postgres)
	DaemonBin string // the lsp-daemon binary
	Gopls     string // the pinned gopls

	Duration    time.Duration // how long the load runs (at least until the faults are done)
	MaxRequests int64         // bound on load requests (0: 1,000,000)
	Workers     int           // concurrent clients (default 6)
	Orgs        int           // tenants (default 6); balances cycle through orgBalances
	Repos       int           // repositories per org (default 2)
	// CommitEvery makes a new revision of some repository this often
	// (cold prepares, orgs running out); 0: never.
	CommitEvery time.Duration
	Faults      bool // inject the faults
	Hostile     bool // send the hostile corpus
	// PrepareTimeout is LSP_PREPARE_TIMEOUT; live holds last twice this plus a minute.
	PrepareTimeout time.Duration
	// Unjailed runs the daemons with LSP_UNJAILED=1; by default every
	// language server runs in the jail, as in production.
	Unjailed bool
	// TypeScript is the pinned TypeScript install (.bin/ts); "" serves Go
	// only (the TypeScript repositories of the corpus are then prepared
	// without a server for their files).
	TypeScript string
	// Each daemon's budgets (LSP_POOL_MAX_SERVERS, LSP_POOL_MAX_RSS,
	// LSP_POOL_MAX_DISK, bytes); 0 takes the default, negative sets none.
	MaxServers int
	MaxRSS     int64
	MaxDisk    int64
	Log        *slog.Logger
}

// Default budgets per daemon: the ordinary load fits them (so the disk
// fault, not the load, is what reaches the disk budget), old revisions'
// servers are evicted, and the tree bound of the proxy stays below the
// disk budget (a tree larger than the whole budget is refused with 413).
const (
	defaultMaxServers = 16
	defaultMaxRSS     = 2 << 30
	defaultMaxDisk    = 256 << 20
)

// orgBalances are the orgs' credits in cents, cycled: rich orgs, one that can
// pay for two prepares, one for one, and one with nothing (its cold requests
// are refused at the gate, its warm ones — none — would be free).
var orgBalances = []int64{1000, 4, 1000, 2, 0, 500}

func (c *Config) defaults() {
	if c.MaxRequests == 0 {
		c.MaxRequests = 1_000_000
	}
	if c.Workers == 0 {
		c.Workers = 6
	}
	if c.Orgs == 0 {
		c.Orgs = 6
	}
	if c.Repos == 0 {
		c.Repos = 2
	}
	if c.PrepareTimeout == 0 {
		c.PrepareTimeout = 20 * time.Second
	}
	if c.MaxServers == 0 {
		c.MaxServers = defaultMaxServers
	}
	if c.MaxRSS == 0 {
		c.MaxRSS = defaultMaxRSS
	}
	if c.MaxDisk == 0 {
		c.MaxDisk = defaultMaxDisk
	}
	if c.Log == nil {
		c.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
}

// tenant is one org: its members' token, its forge token and its repositories.
type tenant struct {
	org, jwt, forge string
	balance         int64
	repos           []string
}

// run is the state of one soak run.
type run struct {
	cfg   Config
	stack *devstack.Stack
	// daemons are the two shards; the disk fault replaces d1 (restarted
	// with another budget) while the sampler reads them: daemonList.
	daemonsMu sync.Mutex
	daemons   []*devstack.Daemon
	forge     *forgeFaults
	client    *client
	// npm is the dependency registry the daemons are configured with, and
	// outside a host the hostile lockfiles point at: neither may ever be
	// asked for anything (lockfiles are validated, never installed).
	npm, outside *countingServer
	goMirror     string // LSP_DEPS_GO_PROXY (file://), serving depModule
	goSum        string // go.sum lines of a repository requiring depModule
	tenants      []*tenant

	warmMu sync.Mutex
	warm   map[[2]string]string // (org, repo) → a commit that answered 200
	// hostileTenant is the hostile corpus's org, once seeded (warmMu).
	hostileTenant *tenant

	faults  []FaultResult
	hostile []HostileResult
	leavers []string // request ids of clients that left mid-prepare

	rssMu        sync.Mutex
	daemonRSSMax int64   // KiB, daemons alone
	treeRSSMax   int64   // KiB, daemons and their language servers
	serverRSSMax []int64 // KiB, per daemon: its language servers (what LSP_POOL_MAX_RSS bounds)
	// poolChargedMax is, per daemon, the high-water mark of its jails'
	// memory cgroup (KiB; the kernel's count, each page once).
	poolChargedMax []int64
	disk           *diskFault
}

// Run brings a stack up in cfg.Dir, soaks it and tears it down. The report
// is returned even when an invariant failed (Report.Failures says which);
// err is for a run that could not be carried out at all.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg.defaults()
	before := snapshot()
	r := &run{cfg: cfg, forge: newForgeFaults(), warm: map[[2]string]string{},
		npm: newCountingServer(), outside: newCountingServer(), serverRSSMax: make([]int64, 2), poolChargedMax: make([]int64, 2)}
	defer r.npm.Close()
	defer r.outside.Close()
	rep := &Report{Config: cfg, Before: before}
	err := r.start(ctx)
	if err == nil {
		err = r.soak(ctx, rep)
	}
	r.stop()
	if err != nil {
		return rep, err
	}
	rep.After = settle(before)
	rep.Strays = strays(cfg.Dir)
	rep.check()
	return rep, nil
}

func (r *run) start(ctx context.Context) error {
	cfg := r.cfg
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(cfg.Dir, 0o755); err != nil {
		return err
	}
	mirror := filepath.Join(cfg.Dir, "gomirror")
	sum, err := writeGoMirror(mirror)
	if err != nil {
		return fmt.Errorf("go module mirror: %w", err)
	}
	r.goMirror, r.goSum = "file://"+mirror, sum
	sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	var addrs []string
	for i := 0; i < 2; i++ {
		dir := filepath.Join(cfg.Dir, fmt.Sprintf("d%d", i))
		addr := "unix://" + filepath.Join(dir, "daemon.sock")
		d, err := devstack.StartDaemon(sctx, devstack.DaemonOptions{
			Bin: cfg.DaemonBin, Dir: dir, Listen: addr, Env: r.daemonEnv(cfg.MaxDisk),
			Servers: devstack.Options{Gopls: cfg.Gopls, TypeScript: cfg.TypeScript, Unjailed: cfg.Unjailed},
		})
		if d != nil {
			r.daemonsMu.Lock()
			r.daemons = append(r.daemons, d)
			r.daemonsMu.Unlock()
		}
		if err != nil {
			return fmt.Errorf("start daemon %d: %w", i, err)
		}
		addrs = append(addrs, addr)
	}
	st, err := devstack.Start(sctx, devstack.Options{
		Dir: filepath.Join(cfg.Dir, "stack"), DaemonBin: cfg.DaemonBin, Gopls: cfg.Gopls,
		Daemons: addrs, ForgeWrap: r.forge.wrap, Log: cfg.Log,
		ProxyEnv: map[string]string{
			"LSP_DAEMON_HEALTH_INTERVAL":      "250ms",
			"LSP_RATE_LIMIT":                  "0", // the soak's load is a few orgs at full speed
			"LSP_FORGE_MAX_DOWNLOADS_PER_ORG": "16",
			"LSP_FORGE_CACHE_TTL":             "2s",
			"LSP_PREPARE_TIMEOUT":             cfg.PrepareTimeout.String(),
			"LSP_REQUEST_TIMEOUT":             soakRequestTimeout.String(),
			"LSP_HOLD_SETTLE_INTERVAL":        settleInterval.String(),
			"LSP_SHUTDOWN_GRACE":              "60s",
			"LSP_TREE_MAX_FILES":              fmt.Sprint(treeMaxFiles),
			"LSP_TREE_MAX_FILE_BYTES":         fmt.Sprint(treeMaxFileBytes),
			"LSP_TREE_MAX_BYTES":              fmt.Sprint(treeMaxBytes),
			"LSP_TREE_MAX_DEPTH":              fmt.Sprint(treeMaxDepth),
			"LSP_TREE_MAX_DIRS":               fmt.Sprint(treeMaxDirs),
			"LSP_LOG_LEVEL":                   "error",
		},
	})
	if err != nil {
		return fmt.Errorf("start stack: %w", err)
	}
	r.stack = st
	r.client = newClient(st.ProxyURL)
	return r.seed(ctx)
}

// daemonEnv is a daemon's budgets (disk: maxDisk) and dependency registry.
func (r *run) daemonEnv(maxDisk int64) map[string]string {
	env := map[string]string{"LSP_DEPS_NPM_REGISTRY": r.npm.URL + "/", "LSP_DEPS_GO_PROXY": r.goMirror}
	for k, v := range map[string]int64{"LSP_POOL_MAX_SERVERS": int64(r.cfg.MaxServers), "LSP_POOL_MAX_RSS": r.cfg.MaxRSS, "LSP_POOL_MAX_DISK": maxDisk} {
		if v > 0 {
			env[k] = fmt.Sprint(v)
		}
	}
	return env
}

// seed creates the orgs, their repositories, tokens and credits.
func (r *run) seed(ctx context.Context) error {
	for i := 0; i < r.cfg.Orgs; i++ {
		t := &tenant{org: fmt.Sprintf("org%02d", i), balance: orgBalances[i%len(orgBalances)]}
		t.forge = "forge-" + t.org
		for j := 0; j < r.cfg.Repos; j++ {
			name := fmt.Sprintf("repo%d", j)
			if _, err := devforge.CreateRepo(r.stack.ForgeRoot, t.org, name, goRepo(t.org+"/"+name, 0), "seed"); err != nil {
				return fmt.Errorf("seed: %w", err)
			}
			t.repos = append(t.repos, name)
		}
		r.stack.Forge.Grant(t.forge, t.org+"/*")
		var err error
		if t.jwt, err = r.stack.Token("agent@"+t.org, t.org, nil, []string{"billing:" + t.org}); err != nil {
			return fmt.Errorf("seed: %w", err)
		}
		if t.balance > 0 {
			if err := r.stack.Ledger.Credit(ctx, t.org, t.balance, "soak"); err != nil {
				return fmt.Errorf("seed: %w", err)
			}
		}
		r.tenants = append(r.tenants, t)
	}
	return nil
}

func (r *run) stop() {
	if r.stack != nil {
		r.stack.Stop()
	}
	for _, d := range r.daemonList() {
		d.Stop()
	}
	if r.client != nil {
		r.client.http.CloseIdleConnections()
	}
}

// operations are the mixed load: route and body for one (repo) request.
var operations = []struct {
	op, route string
	body      func(repo string) map[string]any
}{
	{"hover", "/v1/lsp/hover", func(repo string) map[string]any {
		return map[string]any{"repo": repo, "path": "main.go", "line": 10, "character": 20}
	}},
	{"locate", "/v1/lsp/locate", func(repo string) map[string]any {
		return map[string]any{"repo": repo, "path": "main.go", "line": 10, "character": 20}
	}},
	{"symbols", "/v1/lsp/symbols", func(repo string) map[string]any {
		return map[string]any{"repo": repo, "path": "greet/greet.go"}
	}},
	{"diagnostics", "/v1/lsp/diagnostics", func(repo string) map[string]any {
		return map[string]any{"repo": repo, "path": "calc/calc.go"}
	}},
	{"complete", "/v1/lsp/complete", func(repo string) map[string]any {
		return map[string]any{"repo": repo, "path": "main.go", "line": 10, "character": 19}
	}},
}

// opRequest is operation i on repo at rev ("": the default branch).
func (r *run) opRequest(t *tenant, repo, rev string, i int) req {
	o := operations[i%len(operations)]
	body := o.body(repo)
	if rev != "" {
		body["rev"] = rev
	}
	b, _ := json.Marshal(body)
	return req{route: o.route, body: b, jwt: t.jwt, forge: t.forge, org: t.org, op: o.op}
}

func (r *run) markWarm(t *tenant, repo, commit string) {
	r.warmMu.Lock()
	r.warm[[2]string{t.org, repo}] = commit
	r.warmMu.Unlock()
}

// soak runs the load, the faults and the corpus, then the end checks.
func (r *run) soak(ctx context.Context, rep *Report) error {
	start := time.Now()
	rep.LoadStart = loadavg()
	deadline := start.Add(r.cfg.Duration)
	var faultsDone atomic.Bool
	var sent atomic.Int64
	lctx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()

	var wg sync.WaitGroup
	for w := 0; w < r.cfg.Workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 9))
			for lctx.Err() == nil {
				if time.Now().After(deadline) && (faultsDone.Load() || !r.cfg.Faults) {
					return
				}
				if sent.Add(1) > r.cfg.MaxRequests {
					return
				}
				t := r.tenants[rng.IntN(len(r.tenants))]
				repo := t.repos[rng.IntN(len(t.repos))]
				rctx, cancel := context.WithTimeout(lctx, 90*time.Second)
				_, a, _ := r.client.do(rctx, r.opRequest(t, repo, "", rng.IntN(len(operations))))
				cancel()
				if a.status == http.StatusOK {
					r.markWarm(t, repo, a.commit)
				}
			}
		}(w)
	}
	// The committer and the sampler run until the workers are done.
	actx, stopAux := context.WithCancel(lctx)
	defer stopAux()
	var aux sync.WaitGroup
	// New revisions: cold prepares throughout, and orgs running out.
	if r.cfg.CommitEvery > 0 {
		aux.Add(1)
		go func() {
			defer aux.Done()
			rng := rand.New(rand.NewPCG(77, 1))
			tick := time.NewTicker(r.cfg.CommitEvery)
			defer tick.Stop()
			for n := 1; ; n++ {
				select {
				case <-actx.Done():
					return
				case <-tick.C:
				}
				if time.Now().After(deadline) {
					return
				}
				t := r.tenants[rng.IntN(len(r.tenants))]
				repo := t.repos[rng.IntN(len(t.repos))]
				if _, err := devforge.CreateRepo(r.stack.ForgeRoot, t.org, repo, goRepo(t.org+"/"+repo, n), "soak"); err != nil {
					r.cfg.Log.Warn("soak commit", "err", err)
				}
			}
		}()
	}
	// Daemon memory, sampled.
	aux.Add(1)
	go func() {
		defer aux.Done()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			r.sampleRSS()
			select {
			case <-actx.Done():
				return
			case <-tick.C:
			}
		}
	}()

	// The hostile corpus, once the ordinary repositories are warm.
	var side sync.WaitGroup
	if r.cfg.Hostile {
		side.Add(1)
		go func() {
			defer side.Done()
			r.hostile = r.runHostile(lctx)
		}()
	}
	if r.cfg.Faults {
		side.Add(1)
		go func() {
			defer side.Done()
			defer faultsDone.Store(true)
			r.faults = r.runFaults(lctx, start, deadline)
		}()
	}
	side.Wait()
	// Wait for the workers to reach the deadline (they stop on their own).
	for time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
	}
	faultsDone.Store(true)
	waitDone(&wg, stopLoad, deadline.Sub(start)+2*time.Minute)
	rep.Elapsed = time.Since(start)
	rep.LoadEnd = loadavg()
	stopAux()
	aux.Wait()

	// Nothing is wedged: the service answers as before.
	rep.Healthy = r.healthy(ctx)

	// Holds a prepare could not settle (its daemon was down at that
	// instant) are decided by the proxy's settler once their prepare is
	// over: wait for it, bounded, before stopping the proxy.
	r.awaitSettled(ctx, rep)

	// The proxy's graceful stop waits for every detached prepare, so after it
	// every hold that will ever be captured or released by a proxy has been.
	if err := r.stack.StopProxy(); err != nil && !errors.Is(err, context.Canceled) {
		rep.Failures = append(rep.Failures, fmt.Sprintf("proxy shutdown: %v", err))
	}
	r.sampleRSS()
	r.rssMu.Lock()
	rep.DaemonRSSMaxKiB, rep.TreeRSSMaxKiB = r.daemonRSSMax, r.treeRSSMax
	rep.ServerRSSMaxKiB = append([]int64(nil), r.serverRSSMax...)
	if slices.ContainsFunc(r.poolChargedMax, func(k int64) bool { return k > 0 }) {
		rep.PoolChargedMaxKiB = append([]int64(nil), r.poolChargedMax...)
	}
	r.rssMu.Unlock()
	rep.Disk = r.disk
	rep.OutsideRequests = r.npm.Count() + r.outside.Count()
	rep.DaemonRSSEndKiB, rep.TreeRSSEndKiB, rep.LanguageServers = r.daemonRSS()
	rep.Outcomes = r.client.outcomes
	rep.Faults, rep.Hostile, rep.Leavers = r.faults, r.hostile, r.leavers
	return r.ledgerChecks(ctx, rep)
}

// waitDone waits for wg, cancelling the load if it overruns its bound.
func waitDone(wg *sync.WaitGroup, cancel context.CancelFunc, bound time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(bound):
		cancel()
		<-done
	}
}

// healthy reports whether /healthz, /readyz and a warm request of every
// warm workspace answer 200 (retrying while the last fault settles).
func (r *run) healthy(ctx context.Context) bool {
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if r.probeAll(ctx) {
			for _, p := range []string{"/healthz", "/readyz"} {
				resp, err := r.client.http.Get(r.stack.ProxyURL + p)
				if err != nil {
					return false
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					return false
				}
			}
			return true
		}
		time.Sleep(500 * time.Millisecond)
	}
	return false
}

// probeAll sends one hover to every workspace that has answered before and
// reports whether all answered 200.
func (r *run) probeAll(ctx context.Context) bool {
	r.warmMu.Lock()
	var pairs [][3]string
	for p, commit := range r.warm {
		pairs = append(pairs, [3]string{p[0], p[1], commit})
	}
	r.warmMu.Unlock()
	ok := true
	for _, p := range pairs {
		t := r.tenantOf(p[0])
		pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		_, a, _ := r.client.do(pctx, r.opRequest(t, p[1], p[2], 0))
		cancel()
		if a.status != http.StatusOK {
			ok = false
		}
	}
	return ok
}

func (r *run) tenantOf(org string) *tenant {
	for _, t := range r.tenants {
		if t.org == org {
			return t
		}
	}
	r.warmMu.Lock()
	defer r.warmMu.Unlock()
	if h := r.hostileTenant; h != nil && h.org == org {
		return h
	}
	return nil
}

// daemonPIDs finds the daemon processes: children of this process started
// from the daemon binary with one of our roots.
func (r *run) daemonPIDs() []int {
	var out []int
	me := os.Getpid()
	ds := r.daemonList()
	for _, p := range processes() {
		if p.ppid != me {
			continue
		}
		for _, d := range ds {
			if environHas(p.pid, "LSP_DAEMON_ROOT="+d.Root) {
				out = append(out, p.pid)
			}
		}
	}
	return out
}

func (r *run) daemonList() []*devstack.Daemon {
	r.daemonsMu.Lock()
	defer r.daemonsMu.Unlock()
	return append([]*devstack.Daemon(nil), r.daemons...)
}

func (r *run) daemonRSS() (daemons, tree int64, servers int) {
	d, t, servers := r.daemonRSSBy()
	for i := range d {
		daemons += d[i]
		tree += d[i] + t[i]
	}
	return daemons, tree, servers
}

// daemonRSSBy measures each daemon (by index): its own resident set and
// the sum over its descendants (language servers, and the jail's
// launchers around them), and counts the descendants.
func (r *run) daemonRSSBy() (own, servers []int64, n int) {
	ds := r.daemonList()
	own, servers = make([]int64, len(ds)), make([]int64, len(ds))
	me := os.Getpid()
	for _, p := range processes() {
		if p.ppid != me {
			continue
		}
		for i, d := range ds {
			if !environHas(p.pid, "LSP_DAEMON_ROOT="+d.Root) {
				continue
			}
			own[i] += rssKiB(p.pid)
			r.notePoolCharge(i, p.pid)
			for _, k := range descendants(p.pid) {
				servers[i] += rssKiB(k)
				n++
			}
		}
	}
	return own, servers, n
}

func (r *run) sampleRSS() {
	d, t, _ := r.daemonRSSBy()
	var own, tree int64
	for i := range d {
		own += d[i]
		tree += d[i] + t[i]
	}
	r.rssMu.Lock()
	r.daemonRSSMax = max(r.daemonRSSMax, own)
	r.treeRSSMax = max(r.treeRSSMax, tree)
	for i := range t {
		if i < len(r.serverRSSMax) {
			r.serverRSSMax[i] = max(r.serverRSSMax[i], t[i])
		}
	}
	r.rssMu.Unlock()
}

// settle waits for this process's goroutines and files to come back to
// what they were before the run (transports and pools wind down
// asynchronously) and returns what it found at the end.
func settle(before Resources) Resources {
	deadline := time.Now().Add(20 * time.Second)
	for {
		now := snapshot()
		if now.Goroutines <= before.Goroutines+leakSlack && now.OpenFiles <= before.OpenFiles+leakSlack &&
			now.Children <= before.Children || time.Now().After(deadline) {
			return now
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// leakSlack absorbs the runtime's own late goroutines and files (the
// signal watcher, a timer), not a leak that grows with the load.
const leakSlack = 4

// settleInterval is how often the soak's proxy settles the holds prepares
// left unsettled; soakRequestTimeout its LSP_REQUEST_TIMEOUT.
const (
	settleInterval     = 2 * time.Second
	soakRequestTimeout = 45 * time.Second
)

// awaitSettled waits until no hold is live or expired — the proxy's
// settler decides those a prepare left (CONTRACT §5) once PrepareTimeout
// plus the request timeout has passed since the hold — or until that
// bound, plus two settle rounds, has passed since the load ended.
func (r *run) awaitSettled(ctx context.Context, rep *Report) {
	deadline := time.Now().Add(r.cfg.PrepareTimeout + soakRequestTimeout + 2*settleInterval + 5*time.Second)
	for {
		var n int
		if err := r.stack.Ledger.Pool().QueryRow(ctx, `SELECT count(*) FROM holds WHERE state IN ('live', 'expired')`).Scan(&n); err != nil {
			rep.Failures = append(rep.Failures, fmt.Sprintf("counting unsettled holds: %v", err))
			return
		}
		rep.UnsettledAtEnd = n
		if n == 0 || time.Now().After(deadline) {
			return
		}
		sleepCtx(ctx, time.Second)
	}
}
