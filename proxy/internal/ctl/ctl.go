// Package ctl is lspctl: the operator's commands (ledger credits and
// balances, migrations) and `dev`, which runs the whole stack locally for
// `make run`.
package ctl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

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
  ledger credit --org ORG --cents N    credit an org
  ledger balance --org ORG             show an org's balance
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

func ledgerCmd(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return usageError("ledger: want credit or balance")
	}
	fs := flag.NewFlagSet("ledger "+args[0], flag.ContinueOnError)
	org := fs.String("org", "", "the org")
	cents := fs.Int64("cents", 0, "cents to credit (positive)")
	subject := fs.String("subject", "lspctl", "who credits, for the row")
	if err := fs.Parse(args[1:]); err != nil {
		return usageError(err.Error())
	}
	if *org == "" {
		return usageError("--org is required")
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	l, err := openLedger(ctx)
	if err != nil {
		return err
	}
	defer l.Close()
	switch args[0] {
	case "credit":
		if *cents <= 0 {
			return usageError("--cents must be positive")
		}
		if err := l.Credit(ctx, *org, *cents, *subject); err != nil {
			return err
		}
		fallthrough
	case "balance":
		b, err := l.Balance(ctx, *org)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "org=%s balance_cents=%d held_cents=%d available_cents=%d\n", b.Org, b.BalanceCents, b.HeldCents, b.AvailableCents)
		return nil
	}
	return usageError("ledger: unknown subcommand " + strings.TrimSpace(args[0]))
}
