// Command lsp-daemon runs reviewed language servers for tenant workspaces
// and answers the proxy alone. It holds no credential, no tenant mapping and
// no ledger. See README.md for its LSP_* configuration.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/hanzoai/lsp/daemon/internal/app"
	"github.com/hanzoai/lsp/daemon/internal/config"
	"github.com/hanzoai/lsp/daemon/internal/jail"
	"github.com/hanzoai/lsp/daemon/internal/qualify"
)

func main() {
	// The jail re-executes this binary as its launcher, its in-jail init and
	// its self-test canary (internal/jail).
	if code, ok := jail.Main(os.Args); ok {
		os.Exit(code)
	}
	// `lsp-daemon status|qualify --config F`: operator commands, see
	// internal/qualify.
	if len(os.Args) > 1 && slices.Contains(qualify.Commands, os.Args[1]) {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := qualify.Main(ctx, os.Args[1], os.Args[2:], os.Getenv, os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	env, err := config.LoadEnv(os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "lsp-daemon: configuration:", err)
		os.Exit(2)
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: app.ParseLevel(env.LogLevel)}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := app.Run(ctx, env, log); err != nil {
		log.Error("lsp-daemon", "err", err)
		os.Exit(1)
	}
}
