package app

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/hanzoai/lsp/daemon/internal/config"
	"github.com/hanzoai/lsp/daemon/internal/jail"
	"github.com/hanzoai/lsp/daemon/internal/runtime"
	"github.com/hanzoai/lsp/daemon/internal/uri"
)

// newSpawner returns what runs the language servers: the jail, once its
// self-test has proven the boundary on this machine, or — only with
// LSP_UNJAILED=1 — plain child processes. The pinned TypeScript packages
// (tsLibs) are toolchain the jail must show read-only.
func newSpawner(ctx context.Context, env *config.Env, tsLibs []uri.External, log *slog.Logger) (runtime.Spawner, func(), error) {
	if env.Unjailed {
		if env.PoolMaxRSS > 0 {
			log.Warn("LSP_UNJAILED=1: LSP_POOL_MAX_RSS is held by sampling and eviction only; no cgroup makes it a hard limit", "budget", env.PoolMaxRSS)
		}
		return runtime.Unjailed(log), func() {}, nil
	}
	refuse := func(err error) error {
		return fmt.Errorf("refusing to serve without the language-server jail (LSP_UNJAILED=1 runs without it, for development only): %w", err)
	}
	opts, err := jail.OptionsFromEnv(os.Getenv)
	if err != nil {
		return nil, nil, refuse(err)
	}
	for _, l := range tsLibs {
		opts.ReadOnly = append(opts.ReadOnly, l.Dir)
	}
	opts.StateDir = filepath.Join(env.Root, "jail")
	// The pool's memory budget becomes the limit of the cgroup holding
	// every jail: the kernel enforces what the pool's sampling only
	// approaches.
	opts.PoolMemory = env.PoolMaxRSS
	sp, err := jail.New(opts, log)
	if err != nil {
		return nil, nil, refuse(err)
	}
	// Besides its built-in list, the canary must not see the daemon's own
	// trees, homes, caches, staging (trees being written, homes being
	// removed), executables, state, configuration or socket.
	hidden := []string{
		filepath.Join(env.Root, "trees"), filepath.Join(env.Root, "homes"),
		filepath.Join(env.Root, "caches"), filepath.Join(env.Root, "staging"),
		filepath.Join(env.Root, "bin"), opts.StateDir, env.ConfigFile,
	}
	if sock, ok := strings.CutPrefix(env.Listen, "unix://"); ok {
		hidden = append(hidden, sock)
	}
	if err := jail.SelfTest(ctx, sp, jail.SelfTestParams{Scratch: filepath.Join(env.Root, "selftest"), Hidden: hidden}); err != nil {
		_ = sp.Close()
		return nil, nil, refuse(err)
	}
	log.Info("language servers run jailed", "jail", sp.Describe())
	return sp, func() {
		if err := sp.Close(); err != nil {
			log.Warn("jail cleanup", "err", err)
		}
	}, nil
}
