package ctl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/app"
	"github.com/hanzoai/lsp/proxy/internal/auth"
	"github.com/hanzoai/lsp/proxy/internal/config"
	"github.com/hanzoai/lsp/proxy/internal/daemonclient"
	"github.com/hanzoai/lsp/proxy/internal/forge"
)

// workspacesCmd is `lspctl workspaces delete`: an operator deletes an
// org's workspace of one commit on the daemons, as the tenant's
// DELETE /v1/lsp/workspaces does, without a forge resolve (the operator
// is not a caller and names the full commit) and without ending the
// revision's re-prepare grace (the deletion is not the tenant's choice:
// its next prepare stays free within the grace). It runs where the proxy
// runs, with the proxy's environment: the tenant key comes from
// LSP_TENANT_KEY_SECRET and the daemons from LSP_DAEMONS and the proxy's
// daemon TLS.
func workspacesCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "delete" {
		return usageError("workspaces: want delete")
	}
	fs := flag.NewFlagSet("workspaces delete", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // the error is reported once, by Main
	org := fs.String("org", "", "the org")
	repo := fs.String("repo", "", "the repository's name inside the org, as the API takes it")
	commit := fs.String("commit", "", "the full 40- or 64-hex commit")
	if err := fs.Parse(args[1:]); err != nil {
		return usageError("workspaces delete: " + err.Error())
	}
	if fs.NArg() > 0 {
		return usageError("workspaces delete: unexpected argument " + strconv.Quote(fs.Arg(0)))
	}
	sha, err := checkWorkspace(*org, *repo, *commit)
	if err != nil {
		return err
	}
	cfg, err := config.Load(getenv)
	if err != nil {
		return usageError("the proxy's configuration: " + err.Error())
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	opts, err := app.DaemonOptions(cfg, log)
	if err != nil {
		return fmt.Errorf("daemons: %w", err)
	}
	pool, err := daemonclient.New(cfg.Daemons, opts)
	if err != nil {
		return fmt.Errorf("daemons: %w", err)
	}
	defer pool.Close()

	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	// The proxy picks among the shards it sees live; so must this.
	pool.CheckAll(ctx)
	key := daemonclient.Key{TenantKey: auth.TenantKey([]byte(cfg.TenantKeySecret), *org), Repo: *repo, Commit: sha}
	ds, ownErr := daemonclient.DeleteEverywhere(ctx, pool, key)
	var failed []string
	for _, d := range ds {
		role := "copy"
		if d.Own {
			role = "own"
		}
		var line string
		switch {
		case d.Err != nil:
			failed = append(failed, d.Addr)
			line = fmt.Sprintf("error=%q", d.Err.Error())
		case !d.Asked && !d.Own && ownErr != nil:
			line = "skipped=own_shard_failed"
		case !d.Asked:
			line = "skipped=down" // a copy there goes with LSP_WORKSPACE_TTL
		default:
			line = "deleted=" + strconv.FormatBool(d.Deleted)
		}
		if _, err := fmt.Fprintf(stdout, "shard=%s role=%s %s\n", d.Addr, role, line); err != nil {
			return err
		}
	}
	result := "deleted=" + strconv.FormatBool(ds.Deleted())
	if len(failed) > 0 {
		result = "failed"
	}
	if _, err := fmt.Fprintf(stdout, "org=%s repo=%s commit=%s %s\n", *org, *repo, sha, result); err != nil {
		return err
	}
	if ownErr != nil {
		return fmt.Errorf("delete on the key's shard %s: %w", ds[0].Addr, ownErr)
	}
	if len(failed) > 0 {
		// An operator's deletion means every copy: a copy left on a live
		// shard is a failure to report, though the own shard's is gone.
		return errors.New("delete a copy failed on " + strings.Join(failed, ", ") + "; run the command again")
	}
	return nil
}

// checkWorkspace validates the flags and returns the commit, lowercased.
func checkWorkspace(org, repo, commit string) (string, error) {
	if !auth.ValidOrg(org) {
		return "", usageError("--org must be an org name (lowercase letters, digits, '.', '_', '-'; 1-64)")
	}
	if strings.Contains(repo, "/") {
		return "", usageError("--repo is the repository's name inside the org, as the API takes it (--repo app, not --repo acme/app)")
	}
	if !auth.ValidRepo(repo) {
		return "", usageError("--repo must be a repository name (letters, digits, '.', '_', '-')")
	}
	rev, err := forge.ParseRev(commit)
	sha, full := rev.Commit()
	if err != nil || !full {
		return "", usageError("--commit must be a full 40- or 64-hex commit sha")
	}
	return sha, nil
}
