// Command lsp-corpus prints the agreement table of `make corpus`: every
// repository of the corpus prepared through the service (daemon jailed)
// and compared with the same pinned server run directly on a normal
// checkout. It exits 1 when any tool of any repository is below the target.
//
//	lsp-corpus [-repo uuid,axios] [-json disagreements.json] [-large=false]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/corpus"
	"github.com/hanzoai/lsp/proxy/internal/devstack"
)

func main() {
	servers := flag.String("servers", ".bin/servers.json", "the reviewed-server file both sides run (make deps renders it); a repository whose language it lacks is skipped")
	daemonBin := flag.String("daemon-bin", ".bin/lsp-daemon", "the lsp-daemon binary")
	corpusDir := flag.String("corpus", "", "the snapshots' directory (default: ../shared/corpus beside the checkout)")
	cacheDir := flag.String("cache", "", "downloads kept between runs (default: $XDG_CACHE_HOME/lsp-corpus)")
	repos := flag.String("repo", "", "comma-separated repositories to run (default: all); names: "+names())
	large := flag.Bool("large", true, "include the large repositories")
	positions := flag.Int("positions", 40, "positions per repository")
	jailCC := flag.String("jail-cc", "", "the daemon's LSP_JAIL_CC (off: Go servers run without a C compiler, CGO_ENABLED=0; the answers in cgo packages must then say partial)")
	coldWait := flag.Duration("cold-wait", 2*time.Minute, "how long to wait for the service's first useful answer before querying anyway")
	next := flag.Bool("next", true, "also prepare each repository's next commit (the same tree, a new revision) and print its time")
	keep := flag.Bool("keep", false, "keep the scratch directory (checkouts, the stack's logs) and print where it is")
	jsonOut := flag.String("json", "", "write every result with its disagreements per position to this file (- for stdout)")
	daemonEnv := flag.String("daemon-env", "", "comma-separated LSP_*=value settings for the service's daemon (LSP_LOG_LEVEL=info to read its prepare's parts with -keep); never the product's figures unless the product sets them")
	daemonUID := flag.Int("daemon-uid", 0, "run the service's daemon as this uid and gid, as production does (65532, deploy/k8s); the binaries, servers and -cache must be reachable by it")
	flag.Parse()
	env, err := devstack.ParseDaemonEnv(*daemonEnv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "lsp-corpus:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	o := corpus.Options{
		Servers: *servers, DaemonBin: *daemonBin, CorpusDir: *corpusDir, CacheDir: *cacheDir,
		PerRepo: *positions, Keep: *keep, ColdWait: *coldWait, JailCC: *jailCC, DaemonEnv: env, DaemonUID: *daemonUID, NextCommit: *next,
	}
	if err := run(ctx, o, *repos, *large, *jsonOut); err != nil {
		fmt.Fprintln(os.Stderr, "lsp-corpus:", err)
		os.Exit(1)
	}
}

func names() string {
	var n []string
	for _, r := range corpus.Repos {
		n = append(n, r.Name)
	}
	return strings.Join(n, ", ")
}

// run runs the repositories the -repo and -large flags select with o
// (the other flags) and prints the table.
func run(ctx context.Context, o corpus.Options, repos string, large bool, jsonOut string) error {
	var sel []corpus.Repo
	if repos == "" {
		for _, r := range corpus.Repos {
			if large || !r.Large {
				sel = append(sel, r)
			}
		}
	} else {
		for _, n := range strings.Split(repos, ",") {
			r, ok := corpus.Lookup(strings.TrimSpace(n))
			if !ok {
				return fmt.Errorf("unknown repository %q (have %s)", n, names())
			}
			sel = append(sel, r)
		}
	}
	var err error
	if o.CorpusDir == "" {
		if o.CorpusDir, err = findShared(); err != nil {
			return err
		}
	}
	if o.CacheDir == "" {
		d, err := os.UserCacheDir()
		if err != nil {
			return err
		}
		o.CacheDir = filepath.Join(d, "lsp-corpus")
	}
	for _, p := range []*string{&o.Servers, &o.DaemonBin, &o.CorpusDir, &o.CacheDir} {
		if *p != "" {
			if *p, err = filepath.Abs(*p); err != nil {
				return err
			}
		}
	}
	dir, err := os.MkdirTemp("", "lsp-corpus-")
	if err != nil {
		return err
	}
	if o.DaemonUID != 0 {
		// The daemon's own directory below it is given to its uid; this
		// one it only passes through.
		if err := os.Chmod(dir, 0o711); err != nil {
			return err
		}
	}
	if o.Keep {
		fmt.Fprintln(os.Stderr, "scratch directory kept:", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	start := time.Now()
	var done []*corpus.Result
	writeJSON := func() error {
		if jsonOut == "" {
			return nil
		}
		b, _ := json.MarshalIndent(done, "", "  ")
		if jsonOut == "-" {
			_, err := os.Stdout.Write(append(b, '\n'))
			return err
		}
		return os.WriteFile(jsonOut, b, 0o644)
	}
	o.Dir, o.Repos = dir, sel
	o.OnResult = func(r *corpus.Result) {
		done = append(done, r)
		if jsonOut != "-" {
			_ = writeJSON() // a partial file survives an interrupted run
		}
	}
	o.Log = func(f string, a ...any) {
		fmt.Fprintf(os.Stderr, "%6.1fs "+f+"\n", append([]any{time.Since(start).Seconds()}, a...)...)
	}
	results, err := corpus.Run(ctx, o)
	if err != nil {
		return err
	}
	fmt.Println()
	corpus.PrintTable(os.Stdout, results)
	if err := writeJSON(); err != nil {
		return err
	}
	var missed []string
	for _, r := range results {
		if !r.Met() {
			missed = append(missed, r.Repo)
		}
	}
	if len(missed) > 0 {
		return fmt.Errorf("below %.0f%% agreement: %s", corpus.Target, strings.Join(missed, ", "))
	}
	return nil
}

// findShared is ../shared/corpus beside the checkout that holds the
// working directory (CI lays shared/ beside its clone).
func findShared() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.work")); err == nil {
			p := filepath.Join(filepath.Dir(d), "shared", "corpus")
			if _, err := os.Stat(p); err != nil {
				return "", fmt.Errorf("no snapshots at %s: pass -corpus", p)
			}
			return p, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("no go.work above the working directory: pass -corpus")
		}
		d = parent
	}
}
