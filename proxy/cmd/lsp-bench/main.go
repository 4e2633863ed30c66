// Command lsp-bench prints the performance table of `make bench`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"syscall"

	"github.com/hanzoai/lsp/proxy/internal/bench"
)

func main() {
	gopls := flag.String("gopls", ".bin/gopls", "the pinned gopls")
	daemonBin := flag.String("daemon-bin", ".bin/lsp-daemon", "the lsp-daemon binary")
	typescript := flag.String("typescript", "", "the reviewed TypeScript install (make deps: .bin/ts); empty leaves TypeScript out")
	n := flag.Int("n", 500, "measured requests per figure")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the bench process (which runs the proxy) to this file")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dir, err := os.MkdirTemp("", "lsp-bench-")
	if err == nil {
		defer os.RemoveAll(dir)
		err = os.Chmod(dir, 0o755) // Postgres runs as its own user
	}
	if err == nil && *cpuprofile != "" {
		var f *os.File
		if f, err = os.Create(*cpuprofile); err == nil {
			defer f.Close()
			if err = pprof.StartCPUProfile(f); err == nil {
				defer pprof.StopCPUProfile()
			}
		}
	}
	if err == nil {
		fmt.Printf("lsp-bench on %s\n", bench.Describe())
		err = bench.Run(ctx, bench.Options{Dir: dir, Gopls: *gopls, DaemonBin: *daemonBin, TypeScript: absOrEmpty(*typescript), N: *n, Out: os.Stdout})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "lsp-bench:", err)
		os.Exit(1)
	}
}

func absOrEmpty(p string) string {
	if p == "" {
		return ""
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return abs
}
