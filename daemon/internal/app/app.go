// Package app wires the daemon: reviewed servers qualified and pinned, the
// workspace store and pool, the query runner and the gRPC server on a unix
// socket or, for shards, a TCP address with mutual TLS. cmd/lsp-daemon is a
// thin main around Run.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/hanzoai/lsp/daemon/internal/config"
	"github.com/hanzoai/lsp/daemon/internal/deps"
	"github.com/hanzoai/lsp/daemon/internal/jail"
	"github.com/hanzoai/lsp/daemon/internal/pool"
	"github.com/hanzoai/lsp/daemon/internal/qualify"
	"github.com/hanzoai/lsp/daemon/internal/query"
	"github.com/hanzoai/lsp/daemon/internal/rpc"
	"github.com/hanzoai/lsp/daemon/internal/runtime"
	"github.com/hanzoai/lsp/daemon/internal/uri"
	"github.com/hanzoai/lsp/daemon/internal/workspace"
	"google.golang.org/grpc"
)

// Run serves until ctx ends.
func Run(ctx context.Context, env *config.Env, log *slog.Logger) error {
	if env.Unjailed {
		log.Warn("LSP_UNJAILED=1: LANGUAGE SERVERS RUN WITHOUT A JAIL — development only, never with untrusted repositories")
	}

	if err := runtime.BecomeSubreaper(); err != nil {
		log.Warn("cannot become a child subreaper; orphans of language servers are reaped only through their process groups", "err", err)
	}
	cf, err := config.LoadFile(env.ConfigFile)
	if err != nil {
		return err
	}
	if err := cf.CheckDaemonRoot(env.Root); err != nil {
		return err
	}
	specs, err := qualify.Specs(cf, filepath.Join(env.Root, "bin"))
	if err != nil {
		return err
	}
	// A language's workspace folders (Go: one per module, with its flags)
	// come from what its dependency phase prepared.
	for i := range specs {
		specs[i].Folders = deps.Folders(specs[i].Language)
		// clangd's compilation database, when the phase synthesized one,
		// and the note that makes its answers partial.
		specs[i].Init = deps.Init(specs[i].Language)
		specs[i].Problems = deps.Problems(specs[i].Language)
	}
	tsLibs, err := qualify.TypeScriptExternals(cf)
	if err != nil {
		return err
	}
	// Directories outside the workspace the reviewed entries name, whose
	// locations answers keep by module (system headers, Rust's std).
	var configured []uri.External
	for _, s := range cf.Servers {
		for _, x := range s.ExternalRoots {
			configured = append(configured, uri.External{Dir: x.Dir, Module: x.Module})
		}
	}
	serverPkgs := qualify.ServerPackageExternals(cf)
	store, err := workspace.NewStore(env.Root, workspace.DefaultLimits())
	if err != nil {
		return err
	}
	goroot, goversion := goToolchain()
	depsCfg, err := deps.FromEnv(os.Getenv)
	if err != nil {
		return err
	}
	depsCfg.GoVersion = goversion
	fetcher := deps.New(depsCfg, log)
	if !fetcher.Enabled() {
		log.Info("no LSP_DEPS_GO_PROXY or LSP_DEPS_NPM_REGISTRY: workspaces get no dependencies")
	}
	// Unset, the memory budget is what the daemon's cgroup or machine
	// allows less its own share: a server past it is evicted, not killed
	// by the container's limit (jailed, it is the jails' cgroup limit too).
	if env.PoolMaxRSS <= 0 {
		if limit, from := jail.MemoryLimit(); config.PoolRSSFor(limit) > 0 {
			env.PoolMaxRSS = config.PoolRSSFor(limit)
			log.Info("no LSP_POOL_MAX_RSS: the pool's memory budget follows the daemon's memory", "limit", limit, "from", from, "budget", env.PoolMaxRSS)
		}
	}
	// Without LSP_UNJAILED: the jail, proven by its self-test, or no service.
	spawner, closeSpawner, err := newSpawner(ctx, env, tsLibs, log)
	if err != nil {
		return err
	}
	defer closeSpawner()
	// New Go homes start with the standard library's build cache, made
	// now in the background with the Go servers' own environment.
	if seed := startBuildSeed(ctx, env.Root, specs, spawner, log); seed != nil {
		fetcher.SetBuildSeed(seed)
	}
	p := pool.New(store, specs, spawner, log)
	p.SetBudget(pool.Budget{MaxServers: env.PoolMaxServers, MaxRSS: env.PoolMaxRSS, MaxDisk: env.PoolMaxDisk})
	// Unbounded is the default for a developer's machine; a deployment
	// that forgot them fills its disk and meets its memory limit's killer.
	if env.PoolMaxRSS <= 0 {
		log.Warn("no LSP_POOL_MAX_RSS, and the daemon's memory is unknown or under 128 MiB: language servers are never evicted for memory")
	}
	if env.PoolMaxDisk <= 0 {
		log.Warn("no LSP_POOL_MAX_DISK: trees and homes are evicted only to keep 5% of LSP_DAEMON_ROOT's filesystem free")
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		p.Close(cctx)
		cancel()
	}()
	runner := &query.Runner{
		Pool:        p,
		MaxDocument: 8 << 20,
		Externals: func(w *pool.Workspace) []uri.External {
			var ex []uri.External
			if goroot != "" {
				ex = append(ex, uri.External{Dir: filepath.Join(goroot, "src"), Module: "std@" + goversion})
			}
			ex = append(ex, tsLibs...)
			ex = append(ex, configured...)
			ex = append(ex, serverPkgs...)
			ws := runtime.Workspace{Root: w.Dir, Home: w.Home}
			// The npm packages the dependency phase installed, each its
			// own root named name@version.
			ex = append(ex, deps.NPMExternals(ws)...)
			return append(ex, uri.External{Dir: runtime.ModCache(ws)})
		},
	}

	ln, err := listen(env.Listen)
	if err != nil {
		return err
	}
	opts, err := serverOptions(env, log)
	if err != nil {
		ln.Close()
		return err
	}
	g := grpc.NewServer(append(opts, rpc.ServerOptions()...)...)
	(&rpc.Server{Pool: p, Runner: runner, Jailed: !env.Unjailed, Log: log, Deps: fetcher, MaxPrepares: env.MaxPrepares}).Register(g)
	log.Info("daemon listening", "addr", env.Listen, "servers", len(specs), "config", cf.Source)

	go sweep(ctx, p, env.WorkspaceTTL, log)
	if env.DebugListen != "" {
		go serveDebug(ctx, env.DebugListen, log)
	}
	// Budgets hold on every server start and prepare; this catches growth.
	go p.Watch(ctx, time.Second)
	errc := make(chan error, 1)
	go func() { errc <- g.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("daemon shutting down")
	stopped := make(chan struct{})
	go func() { g.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(env.ShutdownGrace):
		g.Stop()
	}
	return nil
}

// startBuildSeed starts the standard library's build cache
// (deps.BuildSeed) for the first server of specs that serves Go, in the
// environment sp gives it; nil when none does.
func startBuildSeed(ctx context.Context, root string, specs []pool.Spec, sp runtime.Spawner, log *slog.Logger) *deps.BuildSeed {
	for _, s := range specs {
		if s.Language != "go" {
			continue
		}
		dir := filepath.Join(root, "gobuild-seed")
		ws := runtime.Workspace{Root: dir, Home: dir}
		env := runtime.Environment(s.Spec, ws)
		if se, ok := sp.(interface {
			ServerEnv(runtime.Spec, runtime.Workspace) []string
		}); ok {
			env = se.ServerEnv(s.Spec, ws)
		}
		return deps.NewBuildSeed(ctx, dir, env, log)
	}
	return nil
}

// goToolchain finds GOROOT and the Go version the servers will use, to name
// standard-library locations std@<version>.
func goToolchain() (goroot, version string) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = "/usr/local/go/bin/go"
	}
	out, err := exec.Command(gobin, "env", "GOROOT", "GOVERSION").Output()
	if err != nil {
		return "", ""
	}
	f := strings.Fields(string(out))
	if len(f) != 2 {
		return "", ""
	}
	return f[0], f[1]
}

// listen opens the daemon's socket: a unix socket only its owner can use,
// or a TCP address served with mutual TLS only (serverOptions).
func listen(addr string) (net.Listener, error) {
	path, ok := strings.CutPrefix(addr, "unix://")
	if !ok {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("listen: %w", err)
		}
		return ln, nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	old := umask(0o177)
	ln, err := net.Listen("unix", path)
	umask(old)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	return ln, nil
}

func sweep(ctx context.Context, p *pool.Pool, ttl time.Duration, log *slog.Logger) {
	every := min(ttl/10, time.Minute)
	t := time.NewTicker(max(every, time.Second))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if n := p.Sweep(ctx, ttl); n > 0 {
				log.Info("deleted idle workspaces", "count", n)
			}
		}
	}
}
