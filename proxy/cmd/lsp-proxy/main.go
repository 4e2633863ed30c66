// Command lsp-proxy is the public face of the LSP service: the /v1/lsp HTTP
// API. See README.md for its LSP_* configuration.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/hanzoai/lsp/proxy/internal/app"
	"github.com/hanzoai/lsp/proxy/internal/config"
)

func main() {
	cfg, err := config.Load(os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "lsp-proxy: configuration:", err)
		os.Exit(2)
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: app.ParseLevel(cfg.LogLevel)}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := app.Run(ctx, cfg, log, nil); err != nil {
		log.Error("lsp-proxy", "err", err)
		os.Exit(1)
	}
}
