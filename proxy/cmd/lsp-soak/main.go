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
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/soak"
)

func main() { os.Exit(run()) }

// run is main's body; it returns the exit code so that its deferred
// cleanup (the run's directory) happens before the process exits.
func run() int {
	def := 5 * time.Minute
	if v := os.Getenv("SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			fmt.Fprintf(os.Stderr, "lsp-soak: SOAK_DURATION=%q: not a positive duration\n", v)
			return 2
		}
		def = d
	}
	duration := flag.Duration("duration", def, "how long the load runs (SOAK_DURATION)")
	gopls := flag.String("gopls", "", "the pinned gopls binary")
	typescript := flag.String("typescript", "", "the pinned TypeScript install (make deps: .bin/ts); empty serves Go only")
	unjailed := flag.Bool("unjailed", false, "run the language servers unjailed (LSP_UNJAILED=1); by default they run in the jail")
	maxServers := flag.Int("max-servers", 0, "LSP_POOL_MAX_SERVERS of each daemon (0: the soak's default, -1: none)")
	maxRSS := flag.String("max-rss", "", "LSP_POOL_MAX_RSS of each daemon, e.g. 2GiB (empty: the soak's default, -1: none)")
	maxDisk := flag.String("max-disk", "", "LSP_POOL_MAX_DISK of each daemon, e.g. 256MiB (empty: the soak's default, -1: none)")
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
		return 2
	}
	rss, err1 := parseSize(*maxRSS)
	disk, err2 := parseSize(*maxDisk)
	if err1 != nil || err2 != nil {
		fmt.Fprintln(os.Stderr, "lsp-soak: --max-rss and --max-disk take a size such as 2GiB, 256MiB or a byte count")
		return 2
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
		return 1
	}
	if !*keep {
		defer os.RemoveAll(dir)
	}
	// Postgres runs as its own user and must reach its data directory.
	if err := os.Chmod(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "lsp-soak:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := soak.Run(ctx, soak.Config{
		Dir: dir, DaemonBin: *daemonBin, Gopls: *gopls, Duration: *duration,
		Workers: *workers, Orgs: *orgs, Repos: *repos, CommitEvery: *commitEvery,
		Faults: true, Hostile: true, Log: log,
		TypeScript: *typescript, Unjailed: *unjailed, MaxServers: *maxServers, MaxRSS: rss, MaxDisk: disk,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "lsp-soak:", err)
		if rep != nil {
			fmt.Print(rep.Markdown())
		}
		return 1
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
		return 1
	}
	return 0
}

// parseSize reads "", "-1", a byte count, or a count with KiB, MiB or GiB.
func parseSize(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	mult := int64(1)
	for suf, m := range map[string]int64{"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30} {
		if v, ok := strings.CutSuffix(s, suf); ok {
			s, mult = v, m
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, err
	}
	return n * mult, nil
}
