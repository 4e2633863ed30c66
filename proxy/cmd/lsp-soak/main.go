// Command lsp-soak is `make soak`: the reliability run of package soak
// against a whole stack on this machine, printing its table.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/soak"
)

func main() {
	def := 5 * time.Minute
	if v := os.Getenv("SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			fmt.Fprintf(os.Stderr, "lsp-soak: SOAK_DURATION=%q: not a positive duration\n", v)
			os.Exit(2)
		}
		def = d
	}
	duration := flag.Duration("duration", def, "how long the load runs (SOAK_DURATION)")
	gopls := flag.String("gopls", "", "the pinned gopls binary")
	daemonBin := flag.String("daemon-bin", "", "the lsp-daemon binary")
	workers := flag.Int("workers", 6, "concurrent clients")
	orgs := flag.Int("orgs", 6, "tenants")
	repos := flag.Int("repos", 2, "repositories per tenant")
	commitEvery := flag.Duration("commit-every", 20*time.Second, "a new revision of some repository this often")
	out := flag.String("out", "", "also write the table to this file")
	keep := flag.Bool("keep", false, "keep the run's directory (logs, the daemons' roots)")
	verbose := flag.Bool("v", false, "log the faults as they are injected, and the stack's own log")
	flag.Parse()
	if *gopls == "" || *daemonBin == "" {
		fmt.Fprintln(os.Stderr, "lsp-soak: --gopls and --daemon-bin are required")
		os.Exit(2)
	}
	// The stack logs every failed request at error level and the faults make
	// many; the table says what matters.
	level := slog.LevelError + 4
	if *verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	dir, err := os.MkdirTemp("", "lsp-soak-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "lsp-soak:", err)
		os.Exit(1)
	}
	if !*keep {
		defer os.RemoveAll(dir)
	}
	// Postgres runs as its own user and must reach its data directory.
	if err := os.Chmod(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "lsp-soak:", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := soak.Run(ctx, soak.Config{
		Dir: dir, DaemonBin: *daemonBin, Gopls: *gopls, Duration: *duration,
		Workers: *workers, Orgs: *orgs, Repos: *repos, CommitEvery: *commitEvery,
		Faults: true, Hostile: true, Log: log,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "lsp-soak:", err)
		if rep != nil {
			fmt.Print(rep.Markdown())
		}
		os.Exit(1)
	}
	table := rep.Markdown()
	fmt.Print(table)
	if *out != "" {
		if err := os.WriteFile(*out, []byte(table), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "lsp-soak:", err)
		}
	}
	if *keep {
		fmt.Fprintln(os.Stderr, "lsp-soak: kept", dir)
	}
	if !rep.OK() {
		os.Exit(1)
	}
}
