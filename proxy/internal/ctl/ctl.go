// Package ctl is lspctl: the operator's commands (ledger credits,
// balances, rows and reconciliation; migrations) and `dev`, which runs
// the whole stack locally for `make run`.
package ctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/hanzoai/lsp/proxy/internal/ledger"
)

// Main runs lspctl with args (without the program name).
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	var err error
	switch args[0] {
	case "dev":
		err = dev(ctx, args[1:], stdout, stderr)
	case "ledger":
		err = ledgerCmd(ctx, args[1:], stdout)
	case "migrate":
		err = migrate(ctx)
	case "help", "-h", "--help":
		usage(stdout)
		return 0
	default:
		fmt.Fprintf(stderr, "lspctl: unknown command %q\n", args[0])
		usage(stderr)
		return 2
	}
	if err != nil {
		var ue usageError
		if errors.As(err, &ue) {
			fmt.Fprintln(stderr, "lspctl:", err)
			return 2
		}
		fmt.Fprintln(stderr, "lspctl:", err)
		return 1
	}
	return 0
}

type usageError string

func (u usageError) Error() string { return string(u) }

func usage(w io.Writer) {
	fmt.Fprint(w, `usage: lspctl COMMAND [flags]

  dev                                  run the whole stack locally (make run)
  migrate                              apply the ledger schema (LSP_DATABASE_URL)
  ledger credit --org ORG --cents N    credit an org (prints the new balance)
  ledger balance --org ORG             show an org's balance
  ledger rows --org ORG [--csv]        print an org's rows (--from, --to, --model, --repo, --after, --limit)
  ledger reconcile [--margin 1h]       check every balance, hold and prepare id; exit 1 on a problem
`)
}

func openLedger(ctx context.Context) (*ledger.Ledger, error) {
	url := os.Getenv("LSP_DATABASE_URL")
	if url == "" {
		return nil, usageError("LSP_DATABASE_URL is required")
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return ledger.Open(ctx, url, log)
}

func migrate(ctx context.Context) error {
	l, err := openLedger(ctx)
	if err != nil {
		return err
	}
	l.Close()
	return nil
}
