package soak

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// findGopls prefers the Makefile's pinned build.
func findGopls(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("LSP_TEST_GOPLS"), "../../../.bin/gopls"} {
		if p == "" {
			continue
		}
		if abs, err := filepath.Abs(p); err == nil {
			if _, err := os.Stat(abs); err == nil {
				return abs
			}
		}
	}
	if p, err := exec.LookPath("gopls"); err == nil {
		return p
	}
	t.Fatal("gopls not found: run `make test`, which installs the pinned gopls")
	return ""
}

// findTypeScript is the pinned TypeScript install make test passes
// (LSP_TEST_TYPESCRIPT, or the Makefile's .bin/ts); "" when absent, and the
// soak then serves Go only (the lockfile cases still run: the daemon checks
// lockfiles whatever languages it serves).
func findTypeScript(t *testing.T) string {
	for _, p := range []string{os.Getenv("LSP_TEST_TYPESCRIPT"), "../../../.bin/ts"} {
		if p == "" {
			continue
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(abs, "node_modules", "typescript-language-server", "lib", "cli.mjs")); err == nil && nodeOnPath() {
			return abs
		}
	}
	t.Log("TypeScript not installed (make deps): the soak serves Go only")
	return ""
}

func nodeOnPath() bool {
	_, err := exec.LookPath("node")
	return err == nil
}

// TestSoak is the 30-second soak: the mixed load with every fault and the
// hostile corpus, asserting invariants only — no lost or double rows, a
// clean reconcile, contract codes only, every hostile input refused as the
// contract says, nothing leaked. Fault timing changes the figures, never
// the verdict: no duration is asserted.
func TestSoak(t *testing.T) {
	dir, err := os.MkdirTemp("", "lsp-soak-test-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	// Postgres runs as its own user and must reach its data directory.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	gopls := findGopls(t)
	// LSP_SOAK_DAEMON_BIN runs a daemon built elsewhere (make build's);
	// by default the test builds the one of this tree.
	daemonBin := os.Getenv("LSP_SOAK_DAEMON_BIN")
	if daemonBin == "" {
		daemonBin = filepath.Join(dir, "lsp-daemon")
		build := exec.Command("go", "build", "-o", daemonBin, "github.com/hanzoai/lsp/daemon/cmd/lsp-daemon")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			t.Fatalf("build lsp-daemon: %v", err)
		}
	}
	// The stack logs every failed request at error level, and the faults
	// make many; the report says what matters.
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 4}))
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Config{
		Dir: filepath.Join(dir, "run"), DaemonBin: daemonBin, Gopls: gopls,
		Duration: 30 * time.Second, Workers: 4, Orgs: 4, Repos: 2,
		Faults: true, Hostile: true, PrepareTimeout: 10 * time.Second, Log: log,
		TypeScript: findTypeScript(t),
	})
	if rep != nil {
		t.Logf("soak report:\n%s", rep.Markdown())
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range rep.Failures {
		t.Error(f)
	}
	if len(rep.Outcomes) == 0 {
		t.Fatal("no request was answered")
	}
}
