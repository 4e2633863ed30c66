// Command lsp-bench prints the performance table of `make bench`.
//
// --sections limits the run to some figures; --profile DIR writes, for each
// measured throughput phase through the proxy, a CPU profile of this process
// (which runs the proxy) and of the daemon (over its loopback debug
// endpoint), and at the end the proxy's mutex and block profiles.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/bench"
	"github.com/hanzoai/lsp/proxy/internal/devstack"
)

func main() {
	gopls := flag.String("gopls", ".bin/gopls", "the pinned gopls")
	daemonBin := flag.String("daemon-bin", ".bin/lsp-daemon", "the lsp-daemon binary")
	typescript := flag.String("typescript", "", "the reviewed TypeScript install (make deps: .bin/ts); empty leaves TypeScript out")
	n := flag.Int("n", 500, "measured requests per figure")
	large := flag.String("large", bench.DefaultLargeTarget, "the module of the large-prepare figure (aws-sdk-go or x-tools)")
	largeRuns := flag.Int("large-runs", 3, "cold runs per side of the large-prepare figure")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the bench process (which runs the proxy) to this file")
	sections := flag.String("sections", "", "comma-separated figures to run (latency,diagnostics,throughput,ledger,usage,push,typescript,pool,jail,large-prepare); empty runs all")
	unjailed := flag.Bool("unjailed", false, "run the language servers without the jail, to measure what it costs (never the product's figures)")
	reconcileRows := flag.Int("reconcile-rows", bench.DefaultReconcileRows, "rows in the ledger the usage figure reconciles")
	profile := flag.String("profile", "", "directory for proxy and daemon profiles of the measured throughput phases")
	baselineDaemon := flag.String("baseline-daemon-bin", "", "an earlier lsp-daemon build, priced beside the current one in the jail figure")
	benchDaemon := flag.String("bench-daemon-bin", "", "an lsp-daemon built with -tags lspbench (make bench: .bin/lsp-daemon-bench), for the jail figure; empty leaves it out")
	daemonEnv := flag.String("daemon-env", "", "comma-separated LSP_*=value settings for every daemon the bench starts, to price one (LSP_JAIL_MEMORY=12G); never the product's figures unless the product sets them")
	goplsEnv := flag.String("gopls-env", "", "comma-separated NAME=value settings added to gopls's reviewed entry in the stack's daemon (GOMAXPROCS=1), to price one; never the product's figures unless the entry sets them")
	flag.Parse()
	extraEnv, err := devstack.ParseDaemonEnv(*daemonEnv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "lsp-bench:", err)
		os.Exit(2)
	}
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
	o := bench.Options{Dir: dir, Gopls: *gopls, DaemonBin: *daemonBin, TypeScript: absOrEmpty(*typescript), N: *n, Out: os.Stdout,
		LargeTarget: *large, LargeRuns: *largeRuns, Unjailed: *unjailed, ReconcileRows: *reconcileRows, BenchDaemonBin: absOrEmpty(*benchDaemon), BaselineDaemonBin: absOrEmpty(*baselineDaemon)}
	if *sections != "" {
		o.Sections = map[string]bool{}
		for _, s := range strings.Split(*sections, ",") {
			o.Sections[strings.TrimSpace(s)] = true
		}
	}
	if err == nil && *profile != "" && *cpuprofile == "" {
		err = setupProfiles(&o, *profile)
		if err == nil {
			defer writeProfile(*profile, "proxy-mutex", "mutex")
			defer writeProfile(*profile, "proxy-block", "block")
		}
	}
	if *goplsEnv != "" {
		o.GoplsEnv = strings.Split(*goplsEnv, ",")
	}
	if len(extraEnv) > 0 {
		if o.DaemonEnv == nil {
			o.DaemonEnv = map[string]string{}
		}
		for k, v := range extraEnv {
			o.DaemonEnv[k] = v
		}
	}
	if err == nil {
		fmt.Printf("lsp-bench on %s\n", bench.Describe())
		if len(extraEnv) > 0 {
			fmt.Printf("daemon settings: %s\n", *daemonEnv)
		}
		if *goplsEnv != "" {
			fmt.Printf("gopls settings: %s\n", *goplsEnv)
		}
		if *unjailed {
			fmt.Println("UNJAILED (LSP_UNJAILED=1): language servers run without the jail; these are not the product's figures")
		}
		err = bench.Run(ctx, o)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "lsp-bench:", err)
		os.Exit(1)
	}
}

// setupProfiles turns on the daemon's debug endpoint and the proxy's mutex
// and block profiles, and profiles the CPU of both during each measured
// phase.
func setupProfiles(o *bench.Options, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	addr := l.Addr().String()
	l.Close()
	o.DaemonEnv = map[string]string{"LSP_DAEMON_DEBUG_LISTEN": addr}
	runtime.SetMutexProfileFraction(5)
	runtime.SetBlockProfileRate(int(10 * time.Microsecond))
	o.Measured = func(phase string, d time.Duration) func() {
		done := make(chan struct{})
		go func() {
			defer close(done)
			secs := max(1, int(d.Round(time.Second)/time.Second))
			resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, secs))
			if err != nil {
				fmt.Fprintln(os.Stderr, "daemon profile:", err)
				return
			}
			defer resp.Body.Close()
			f, err := os.Create(filepath.Join(dir, "daemon-cpu-"+phase+".pprof"))
			if err != nil {
				return
			}
			defer f.Close()
			_, _ = io.Copy(f, resp.Body)
		}()
		f, err := os.Create(filepath.Join(dir, "proxy-cpu-"+phase+".pprof"))
		if err == nil && pprof.StartCPUProfile(f) != nil {
			f.Close()
			f = nil
		}
		before, start := cpuByProcess(), time.Now()
		return func() {
			if f != nil {
				pprof.StopCPUProfile()
				f.Close()
			}
			printCPU(phase, before, cpuByProcess(), time.Since(start))
			<-done
			// The daemon's allocations so far (cumulative since it started).
			if resp, err := http.Get("http://" + addr + "/debug/pprof/allocs"); err == nil {
				if f, err := os.Create(filepath.Join(dir, "daemon-allocs-"+phase+".pprof")); err == nil {
					_, _ = io.Copy(f, resp.Body)
					f.Close()
				}
				resp.Body.Close()
			}
		}
	}
	return nil
}

// procCPU is one process's command name and CPU time (user + system, in
// clock ticks).
type procCPU struct {
	cmd   string
	ticks int64
}

// cpuByProcess reads the CPU time of every process on the machine: where a
// phase's CPU went, across the proxy, the daemon, the language servers,
// Postgres and everyone else.
func cpuByProcess() map[string]procCPU {
	out := map[string]procCPU{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		f := strings.Fields(s[end+1:])
		if len(f) < 13 {
			continue
		}
		var ut, st int64
		fmt.Sscan(f[11], &ut)
		fmt.Sscan(f[12], &st)
		out[e.Name()] = procCPU{s[open+1 : end], ut + st}
	}
	return out
}

// printCPU prints the CPU each command used during a phase, in cores
// (processes that ended during the phase are missed).
func printCPU(phase string, before, after map[string]procCPU, d time.Duration) {
	byCmd := map[string]int64{}
	for pid, a := range after {
		byCmd[a.cmd] += a.ticks - before[pid].ticks
	}
	type use struct {
		cmd   string
		cores float64
	}
	var uses []use
	var total float64
	for cmd, t := range byCmd {
		if c := float64(t) / 100 / d.Seconds(); c >= 0.02 {
			uses = append(uses, use{cmd, c})
			total += c
		}
	}
	sort.Slice(uses, func(i, j int) bool { return uses[i].cores > uses[j].cores })
	var parts []string
	for _, u := range uses {
		parts = append(parts, fmt.Sprintf("%s %.2f", u.cmd, u.cores))
	}
	fmt.Fprintf(os.Stderr, "cpu during %s (cores; total %.2f): %s\n", phase, total, strings.Join(parts, ", "))
}

func writeProfile(dir, name, profile string) {
	f, err := os.Create(filepath.Join(dir, name+".pprof"))
	if err != nil {
		return
	}
	defer f.Close()
	_ = pprof.Lookup(profile).WriteTo(f, 0)
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
