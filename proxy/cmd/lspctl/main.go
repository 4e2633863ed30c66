// Command lspctl is the operator's and developer's CLI for the LSP service.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/hanzoai/lsp/proxy/internal/ctl"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := ctl.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
