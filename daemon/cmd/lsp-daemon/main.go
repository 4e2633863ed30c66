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
	"syscall"

	"github.com/hanzoai/lsp/daemon/internal/app"
	"github.com/hanzoai/lsp/daemon/internal/config"
)

func main() {
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
