package ctl

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/hanzoai/lsp/proxy/internal/devforge"
	"github.com/hanzoai/lsp/proxy/internal/devstack"
)

// dev runs the stack until ctx ends and prints a curl to paste.
func dev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	dir := fs.String("dir", ".dev", "where the stack keeps its state (recreated on every run)")
	gopls := fs.String("gopls", ".bin/gopls", "the pinned gopls binary")
	daemonBin := fs.String("daemon-bin", ".bin/lsp-daemon", "the lsp-daemon binary")
	typescript := fs.String("typescript", "", "the reviewed TypeScript install (make deps: .bin/ts); empty serves Go only")
	listen := fs.String("listen", "127.0.0.1:8080", "proxy listen address")
	if err := fs.Parse(args); err != nil {
		return usageError(err.Error())
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(abs); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	fmt.Fprintln(stdout, "starting Postgres, the dev forge, the daemon (gopls) and the proxy…")
	ts := ""
	if *typescript != "" {
		if ts, err = filepath.Abs(*typescript); err != nil {
			return err
		}
	}
	s, err := devstack.Start(ctx, devstack.Options{Dir: abs, DaemonBin: *daemonBin, Gopls: *gopls, TypeScript: ts, Listen: *listen, Log: log})
	if err != nil {
		return err
	}
	defer s.Stop()

	const org, repo, forgeToken = "dev", "hello", "dev-forge-token"
	commit, err := devforge.CreateRepo(s.ForgeRoot, org, repo, devstack.SampleRepo, "sample repository")
	if err != nil {
		return err
	}
	s.Forge.Grant(forgeToken, org+"/*")
	if err := s.Ledger.Credit(ctx, org, 1000, "make run"); err != nil {
		return err
	}
	tok, err := s.Token("dev-user", org, nil, []string{"billing:" + org})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, `
The LSP service is up; every language server runs in the daemon's jail.
  proxy    %s
  forge    %s  (repository %s/%s at %s)
  ledger   org %q credited 1000¢; a prepare costs 2¢
  state    %s  (Postgres in %s)
  key      %s  (sign more dev tokens: lspctl dev-token --key %s --owner %s)

Hover over greet.Hello in main.go (the first call prepares and is charged 2¢):

curl -sS %s/v1/lsp/hover \
  -H 'Authorization: Bearer %s' \
  -H 'X-Forge-Token: %s' \
  -H 'Content-Type: application/json' \
  -d '{"repo":"%s","path":"main.go","line":10,"character":20}'

Or with lspctl (in another shell):

export LSP_URL=%s LSP_FORGE_TOKEN=%s
export LSP_TOKEN=%s
lspctl hover --repo %s --at main.go:11:21

MCP clients: %s/v1/lsp/mcp (Streamable HTTP, the same bearer token).

Ctrl-C stops everything.
`, s.ProxyURL, s.ForgeURL, org, repo, commit[:12], org, abs, s.PGDir, s.KeyFile, s.KeyFile, org,
		s.ProxyURL, tok, forgeToken, repo,
		s.ProxyURL, forgeToken, tok, repo, s.ProxyURL)
	<-ctx.Done()
	fmt.Fprintln(stdout, "\nstopping…")
	return nil
}
