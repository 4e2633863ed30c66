// Package devstack brings up the whole service on one machine from real
// parts: a throwaway Postgres, a development git forge serving bare
// repositories over smart HTTP with token-based access, the daemon as its
// own process running the pinned gopls, and the proxy. `lspctl dev` (make
// run), the end-to-end tests and the bench all use it, so what a new user
// runs is what the tests prove.
package devstack

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/app"
	"github.com/hanzoai/lsp/proxy/internal/auth"
	"github.com/hanzoai/lsp/proxy/internal/config"
	"github.com/hanzoai/lsp/proxy/internal/devforge"
	"github.com/hanzoai/lsp/proxy/internal/ledger"
	"github.com/hanzoai/lsp/proxy/internal/pgcluster"
)

// Options configure a stack.
type Options struct {
	Dir       string // everything lives below it
	DaemonBin string // the lsp-daemon binary
	Gopls     string // the pinned gopls binary
	// ServerFile, when set, is the reviewed-server file the daemons run
	// (make deps: .bin/servers.json, production's template rendered with
	// the dev install's paths); Gopls and TypeScript are then unused.
	ServerFile string
	// TypeScript, when set, is the reviewed TypeScript server's install
	// directory (make deps: .bin/ts); the daemon then serves .ts, .tsx, .js
	// and .jsx too. Node runs it (default: node on PATH).
	TypeScript string
	Node       string
	// GoplsEnv adds variables to gopls's reviewed entry (the jail-price
	// bench's GOMEMLIMIT).
	GoplsEnv []string
	Listen   string // proxy listen address (default 127.0.0.1:0)
	// Unjailed runs the daemons with LSP_UNJAILED=1. The default is the
	// product's own configuration: every language server jailed.
	Unjailed bool
	// DaemonEnv adds LSP_* variables to the stack's own daemon (pool
	// budgets, dependency mirrors).
	DaemonEnv map[string]string
	// DaemonUID, when not 0, runs the daemons as that uid and gid, as
	// production runs them (deploy/k8s: 65532, no capabilities): their
	// directories are given to it, and the binaries, server installs and
	// mirrors they read must be reachable by it.
	DaemonUID int
	// DatabaseURL, when set, is used instead of a throwaway cluster.
	DatabaseURL string
	// ProxyEnv overrides proxy configuration (LSP_* names).
	ProxyEnv map[string]string
	// Daemons, when set, are the daemon addresses the proxy uses
	// (LSP_DAEMONS); the stack then starts no daemon of its own, and the
	// caller runs them (StartDaemon).
	Daemons []string
	// ForgeWrap, when set, wraps the forge's handler (tests gate or watch
	// the forge with it).
	ForgeWrap func(http.Handler) http.Handler
	Log       *slog.Logger
}

// Stack is a running stack.
type Stack struct {
	opts Options

	PG          *pgcluster.Cluster
	PGDir       string // the cluster's directory, under the system temp dir
	DatabaseURL string
	Ledger      *ledger.Ledger // the test's view of the ledger

	Forge     *devforge.Server
	ForgeURL  string
	ForgeRoot string
	forgeSrv  *http.Server

	Daemon     *Daemon // the stack's own daemon (nil with Options.Daemons)
	DaemonSock string
	DaemonRoot string

	ProxyURL    string
	proxyEnv    map[string]string
	proxyCancel context.CancelFunc
	proxyDone   chan error

	KeyFile    string // the dev signing key (private)
	PubKeyFile string

	stopOnce sync.Once
}

// Audience is the dev stack's JWT audience.
const Audience = "lsp-dev"

// Start brings the stack up. On error everything started is stopped.
func Start(ctx context.Context, o Options) (_ *Stack, err error) {
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if o.Listen == "" {
		o.Listen = "127.0.0.1:0"
	}
	s := &Stack{opts: o}
	defer func() {
		if err != nil {
			s.Stop()
		}
	}()
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	for _, d := range []string{"keys", "forge", "daemon"} {
		if err := os.MkdirAll(filepath.Join(o.Dir, d), 0o755); err != nil {
			return nil, err
		}
	}

	// Postgres runs as its own user (as root), which must be able to search
	// every parent of its directory, and a checkout may sit anywhere (root's
	// home is 0700). So its state lives in a fresh directory under the
	// system temp dir, whatever o.Dir is, and is removed by Stop.
	s.DatabaseURL = o.DatabaseURL
	if s.DatabaseURL == "" {
		if s.PGDir, err = os.MkdirTemp("", "lsp-dev-pg-"); err != nil {
			return nil, fmt.Errorf("postgres: %w", err)
		}
		if s.PG, err = pgcluster.Start(ctx, s.PGDir, o.Log); err != nil {
			return nil, fmt.Errorf("postgres: %w", err)
		}
		if err := s.PG.CreateDatabase(ctx, "lsp"); err != nil {
			return nil, fmt.Errorf("postgres: %w", err)
		}
		s.DatabaseURL = s.PG.URL("lsp")
	}
	if s.Ledger, err = ledger.Open(ctx, s.DatabaseURL, o.Log); err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}

	// The forge.
	s.ForgeRoot = filepath.Join(o.Dir, "forge")
	if s.Forge, err = devforge.New(s.ForgeRoot, "git", o.Log); err != nil {
		return nil, fmt.Errorf("forge: %w", err)
	}
	fl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s.ForgeURL = "http://" + fl.Addr().String()
	var forgeHandler http.Handler = s.Forge
	if o.ForgeWrap != nil {
		forgeHandler = o.ForgeWrap(forgeHandler)
	}
	s.forgeSrv = &http.Server{Handler: forgeHandler, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.forgeSrv.Serve(fl) }()

	// Keys: fresh per stack, never built in.
	if s.KeyFile, s.PubKeyFile, err = auth.GenerateDevKey(filepath.Join(o.Dir, "keys")); err != nil {
		return nil, fmt.Errorf("dev key: %w", err)
	}

	// The daemon, unless the caller runs its own.
	if len(o.Daemons) == 0 {
		if err := s.startDaemon(ctx); err != nil {
			return nil, err
		}
	}

	// The proxy, in-process.
	env := map[string]string{
		"LSP_LISTEN":            o.Listen,
		"LSP_DATABASE_URL":      s.DatabaseURL,
		"LSP_DAEMONS":           "unix://" + s.DaemonSock,
		"LSP_JWT_KEYS":          s.PubKeyFile,
		"LSP_JWT_AUDIENCE":      Audience,
		"LSP_TENANT_KEY_SECRET": "dev-tenant-key-secret",
		"LSP_FORGE_URL":         s.ForgeURL,
		"LSP_LOG_LEVEL":         "warn",
		// One process writes every row here: list them at once (the default
		// stays behind the settle horizon that exact paging needs).
		"LSP_LEDGER_SETTLE": "0s",
	}
	if len(o.Daemons) > 0 {
		env["LSP_DAEMONS"] = strings.Join(o.Daemons, ",")
	}
	for k, v := range o.ProxyEnv {
		env[k] = v
	}
	s.proxyEnv = env
	r, err := s.StartReplica(ctx, nil)
	if err != nil {
		return nil, err
	}
	s.ProxyURL, s.proxyCancel, s.proxyDone = r.URL, r.cancel, r.done
	return s, nil
}

// Replica is one more proxy process (in-process) over the same Postgres,
// forge and daemons: what several replicas behind a load balancer are.
type Replica struct {
	URL    string
	cancel context.CancelFunc
	done   chan error
}

// Stop shuts the replica down gracefully.
func (r *Replica) Stop() {
	r.cancel()
	err := <-r.done
	r.done <- err
}

// StartReplica starts a proxy with the stack's configuration, overridden
// by env (LSP_* names). It listens on a fresh loopback port unless env
// names one.
func (s *Stack) StartReplica(ctx context.Context, env map[string]string) (*Replica, error) {
	return s.StartReplicaWith(ctx, env, app.Options{})
}

// StartReplicaWith is StartReplica with the app's seams.
func (s *Stack) StartReplicaWith(ctx context.Context, env map[string]string, opts app.Options) (*Replica, error) {
	merged := map[string]string{}
	for k, v := range s.proxyEnv {
		merged[k] = v
	}
	if env != nil {
		merged["LSP_LISTEN"] = "127.0.0.1:0"
	}
	for k, v := range env {
		merged[k] = v
	}
	cfg, err := config.Load(func(k string) string { return merged[k] })
	if err != nil {
		return nil, fmt.Errorf("proxy config: %w", err)
	}
	pctx, cancel := context.WithCancel(context.Background())
	r := &Replica{cancel: cancel, done: make(chan error, 1)}
	addr := make(chan string, 1)
	go func() { r.done <- app.RunWith(pctx, cfg, s.opts.Log, func(a string) { addr <- a }, opts) }()
	select {
	case a := <-addr:
		r.URL = "http://" + a
		return r, nil
	case err := <-r.done:
		cancel()
		return nil, fmt.Errorf("proxy: %w", err)
	case <-ctx.Done():
		cancel()
		<-r.done
		return nil, ctx.Err()
	}
}

// startDaemon runs the stack's own daemon on a unix socket.
func (s *Stack) startDaemon(ctx context.Context) error {
	dir := filepath.Join(s.opts.Dir, "daemon")
	d, err := StartDaemon(ctx, DaemonOptions{
		Bin: s.opts.DaemonBin, Dir: dir, Listen: "unix://" + filepath.Join(dir, "daemon.sock"),
		Servers: s.opts, Env: s.opts.DaemonEnv,
	})
	if d != nil {
		s.Daemon, s.DaemonSock, s.DaemonRoot = d, filepath.Join(dir, "daemon.sock"), d.Root
	}
	return err
}

// RestartDaemon (re)starts the stack's daemon; its workspaces on disk
// survive, its language servers do not.
func (s *Stack) RestartDaemon(ctx context.Context) error { return s.Daemon.Start(ctx) }

// StopDaemon stops the stack's daemon gracefully, then kills its process group.
func (s *Stack) StopDaemon() {
	if s.Daemon != nil {
		s.Daemon.Stop()
	}
}

// Stop stops everything and leaves no process behind.
func (s *Stack) Stop() {
	s.stopOnce.Do(func() {
		if s.proxyCancel != nil {
			s.proxyCancel()
			<-s.proxyDone
		}
		s.StopDaemon()
		if s.forgeSrv != nil {
			_ = s.forgeSrv.Close()
		}
		if s.Ledger != nil {
			s.Ledger.Close()
		}
		if s.PG != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_ = s.PG.Stop(ctx)
			cancel()
		}
		if s.PGDir != "" {
			_ = os.RemoveAll(s.PGDir)
		}
	})
}

// Token signs a dev JWT for subject in owner (plus orgs and roles).
func (s *Stack) Token(subject, owner string, orgs, roles []string) (string, error) {
	return auth.SignDevToken(s.KeyFile, auth.DevClaims{
		Subject: subject, Owner: owner, Orgs: orgs, Roles: roles, Audience: Audience,
	}, 24*time.Hour)
}

// logTail is the end of a log file, for start-up errors.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > 2048 {
		b = b[len(b)-2048:]
	}
	return string(b)
}
