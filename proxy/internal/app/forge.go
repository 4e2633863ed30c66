package app

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/hanzoai/lsp/proxy/internal/config"
	"github.com/hanzoai/lsp/proxy/internal/daemonclient"
	"github.com/hanzoai/lsp/proxy/internal/forge"
)

// newForge builds the configured forge kind behind the access cache.
// Nothing about the forge reaches the daemons: the forge lives here, the
// daemons get trees.
func newForge(cfg *config.Config, cacheSecret []byte, log *slog.Logger) forge.Forge {
	var f forge.Forge
	switch cfg.ForgeKind {
	case "gitea":
		f = forge.NewGitea(cfg.ForgeURL, forgeHTTPClient(), log)
	default:
		// The tree limits also bound what Resolve may download to prove
		// an older commit reachable, before the payment gate.
		f = forge.NewGit(cfg.ForgeURL, forgeHTTPClient(), "git", treeLimits(cfg), log)
	}
	// The gate is inside the cache: a cached answer takes no slot.
	f = forge.NewGate(f, cfg.ForgeMaxDownloads, cfg.ForgeMaxDownloadsPerOrg, cfg.ForgeHistoryProofsPerMinute)
	return forge.NewCache(f, cfg.ForgeCacheTTL, cfg.ForgeNegativeCacheTTL, cacheSecret)
}

// treeLimits are the configured bounds on a fetched tree.
func treeLimits(cfg *config.Config) forge.Limits {
	return forge.Limits{
		MaxFiles: cfg.TreeMaxFiles, MaxTotalBytes: cfg.TreeMaxBytes,
		MaxFileBytes: cfg.TreeMaxFileBytes, MaxDepth: cfg.TreeMaxDepth, MaxDirs: cfg.TreeMaxDirs,
	}
}

// sudoToken reads the proxy's forge admin token (LSP_FORGE_AUTH=sudo). The
// file must be private to this process's user.
func sudoToken(cfg *config.Config) (string, error) {
	if cfg.ForgeAuth != "sudo" {
		return "", nil
	}
	fi, err := os.Stat(cfg.ForgeSudoTokenFile)
	if err != nil {
		return "", fmt.Errorf("LSP_FORGE_SUDO_TOKEN_FILE: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("LSP_FORGE_SUDO_TOKEN_FILE: %s is readable by others (mode %v); make it 0600", cfg.ForgeSudoTokenFile, fi.Mode().Perm())
	}
	b, err := os.ReadFile(cfg.ForgeSudoTokenFile)
	if err != nil {
		return "", fmt.Errorf("LSP_FORGE_SUDO_TOKEN_FILE: %w", err)
	}
	tok := strings.TrimRight(string(b), "\r\n")
	if tok == "" || strings.ContainsAny(tok, " \t\r\n") || len(tok) > 4096 {
		return "", errors.New("LSP_FORGE_SUDO_TOKEN_FILE: the file does not hold one token")
	}
	return tok, nil
}

// DaemonOptions are the shard pool's transport and health options, the
// proxy's and lspctl's (which dials the proxy's daemons as it does).
func DaemonOptions(cfg *config.Config, log *slog.Logger) (daemonclient.Options, error) {
	o := daemonclient.Options{HealthInterval: cfg.DaemonHealthInterval, Log: log}
	if cfg.DaemonTLSCert != "" {
		t, err := daemonclient.LoadTLS(cfg.DaemonTLSCert, cfg.DaemonTLSKey, cfg.DaemonTLSCA)
		if err != nil {
			return o, err
		}
		o.TLS = t
	}
	return o, nil
}
