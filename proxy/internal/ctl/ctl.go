// Package ctl is lspctl: the operator's commands (ledger credits,
// balances, daily caps, rows and reconciliation; migrations; deleting a
// workspace on the daemons), `dev`, which runs
// the whole stack locally for `make run`, and the client commands
// (hover, locate, … prepare) that speak the service's HTTP API for a
// person or a script.
package ctl

import (
	"context"
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
	case "dev-token":
		err = devToken(args[1:], stdout)
	case "servers":
		err = serversCmd(args[1:])
	case "workspaces":
		err = workspacesCmd(ctx, args[1:], os.Getenv, stdout, stderr)
	case "hover", "locate", "symbols", "diagnostics", "complete", "signature", "calls", "types", "prepare", "read":
		err = queryCmd(ctx, args[0], args[1:], os.Getenv, stdout, stderr)
	case "lsp":
		err = lspCmd(ctx, args[1:], os.Getenv, os.Stdin, stdout, stderr)
	case "help", "-h", "--help":
		usage(stdout)
		return 0
	default:
		fmt.Fprintf(stderr, "lspctl: unknown command %q\n", args[0])
		usage(stderr)
		return 2
	}
	if err != nil {
		fmt.Fprintln(stderr, "lspctl:", err)
		return exitCode(err)
	}
	return 0
}

type usageError string

func (u usageError) Error() string { return string(u) }

func usage(w io.Writer) {
	fmt.Fprint(w, `usage: lspctl COMMAND [flags]

  dev                                  run the whole stack locally (make run)
  servers --bin .bin --out F           render the reviewed-server template for a dev install (make deps)
  migrate                              apply the ledger schema (LSP_DATABASE_URL)
  ledger credit --org ORG --cents N    credit an org (prints the new balance)
  ledger balance --org ORG             show an org's balance
  ledger cap --org ORG --cents N|none  set (or remove) an org's daily prepare spend cap (402 spend_cap_exceeded)
  ledger rows --org ORG [--csv]        print an org's rows (--from, --to, --model, --repo, --after, --limit)
  ledger reconcile [--margin 1h]       check every balance, hold and prepare id; exit 1 on a problem
  dev-token --key FILE --owner ORG     sign a development JWT with make run's key (--sub, --orgs, --roles, --ttl)
  workspaces delete --org ORG --repo NAME --commit SHA
                                       delete an org's workspace of a full commit on its shard and every other
                                       live shard; run with the proxy's environment (LSP_TENANT_KEY_SECRET,
                                       LSP_DAEMONS, daemon TLS). The re-prepare grace is NOT ended: the org's
                                       next prepare of that commit stays free within it. Exit 1 if a shard failed

client commands (LSP_URL, LSP_TOKEN, LSP_FORGE_TOKEN, optional LSP_ORG):
  prepare     --repo R [--rev REV] [--progress]   (a progress bar on a terminal; --progress forces it)
  hover       --repo R [--rev REV] --path P --line L --character C   (or --at P:LINE:COL, 1-based)
              or --symbol NAME [--path P] (NewRandom, Client.Do, uuid.NewRandom), or --path P --line L --text T
  signature   position as for hover
  locate      position [--relation definition|declaration|type|implementation|reference] [--include-declaration] [--context N]
  complete    position
  calls       position --direction incoming|outgoing
  types       position --direction supertypes|subtypes
  symbols     --repo R (--path P | --query Q [--language L]) [--include-body] [--context N]
  read        --repo R [--rev REV] --path P [--start L] [--end L] [--module M] [--prepare]   lines of a prepared revision's file
              (0-based, inclusive; free: a cold revision is not_prepared unless --prepare)
  diagnostics --repo R --path P
  list commands take --limit N and --cursor C; every client command takes --json.
  lsp         --repo R [--rev REV] [--root DIR] [--log FILE]   a language server on stdio for an editor
  --line and --character are the API's 0-based LSP position; output is PATH:LINE:COL, 1-based.
  --context N (0-50; calls and types too) prints N lines of code around each location.
  exit: 0 ok · 1 the service answered an error · 2 usage · 3 transport failure · 4 insufficient funds or spend cap
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
