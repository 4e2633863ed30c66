package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/devforge"
	"github.com/hanzoai/lsp/proxy/internal/devstack"
)

// poolFigures is what the pool bench measured.
type poolFigures struct {
	perWorkspace   int64 // RSS of one warm Go workspace's server tree
	budget         int64
	fit, requested int
	maxObserved    int64 // highest RSS of the servers' trees (the daemon's tree less the daemon) while requesting
	daemonRSS      int64 // the daemon process itself, at the end
	evictions      int
	served         int
}

// runPool starts a daemon with an RSS budget and asks it for three times
// more workspaces than fit, sampling the RSS of the daemon's whole process
// tree (daemon, jails, servers) all along.
func runPool(ctx context.Context, o Options) (*poolFigures, error) {
	const budget = 640 << 20
	s, err := devstack.Start(ctx, devstack.Options{
		Dir: filepath.Join(o.Dir, "pool"), DaemonBin: o.DaemonBin, Gopls: o.Gopls,
		DaemonEnv: map[string]string{"LSP_POOL_MAX_RSS": strconv.Itoa(budget), "LSP_LOG_LEVEL": "info"},
		ProxyEnv:  noRateLimit,
	})
	if err != nil {
		return nil, err
	}
	defer s.Stop()
	awaitSeed(ctx, o, s.Daemon, "pool")
	const org = "pool"
	s.Forge.Grant("pool-forge", org+"/*")
	if err := s.Ledger.Credit(ctx, org, 1000, "bench"); err != nil {
		return nil, err
	}
	tok, err := s.Token("bench", org, nil, nil)
	if err != nil {
		return nil, err
	}
	client := newClient(s.ProxyURL, tok, "pool-forge")
	daemon := s.Daemon.Pid()
	// What the budget governs: every process under the daemon, not the
	// daemon itself.
	servers := func() int64 { return devstack.TreeRSS(daemon) - devstack.ProcRSS(daemon) }
	base := servers()

	hover := func(repo string) error {
		files := map[string]string{}
		for k, v := range devstack.SampleRepo {
			files[k] = v
		}
		files["README.md"] = "# " + repo + "\n"
		if _, err := devforge.CreateRepo(s.ForgeRoot, org, repo, files, "bench"); err != nil {
			return err
		}
		body := map[string]any{"repo": repo, "path": "main.go", "line": 10, "character": 20}
		_, err := client.do(ctx, "/hover", body)
		return err
	}
	// One workspace alone: what a warm Go workspace costs.
	if err := hover("w0"); err != nil {
		return nil, err
	}
	time.Sleep(time.Second)
	f := &poolFigures{budget: budget, perWorkspace: servers() - base}
	if f.perWorkspace <= 0 {
		return nil, fmt.Errorf("could not measure a workspace's RSS")
	}
	f.fit = int(budget / f.perWorkspace)
	f.requested = 3 * max(f.fit, 1)
	f.maxObserved = servers()

	// Sample while requesting the rest.
	stop := make(chan struct{})
	peak := make(chan int64)
	go func() {
		m := f.maxObserved
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				peak <- m
				return
			case <-t.C:
				m = max(m, servers())
			}
		}
	}()
	f.served = 1
	for i := 1; i < f.requested; i++ {
		if err := hover(fmt.Sprintf("w%d", i)); err == nil {
			f.served++
		}
	}
	time.Sleep(6 * time.Second) // one enforcement period
	close(stop)
	f.maxObserved = <-peak
	f.daemonRSS = devstack.ProcRSS(daemon)
	if b, err := os.ReadFile(s.Daemon.LogFile); err == nil {
		f.evictions = bytes.Count(b, []byte("evicted language servers"))
	}
	return f, nil
}

func printPool(w io.Writer, f *poolFigures) {
	fmt.Fprintf(w, "\nWarm pool under an RSS budget (jailed gopls, one process tree per workspace)\n")
	fmt.Fprintf(w, "  RSS of one warm Go workspace (its server tree)  %d MiB\n", f.perWorkspace>>20)
	fmt.Fprintf(w, "  budget LSP_POOL_MAX_RSS                        %d MiB (fits %d)\n", f.budget>>20, f.fit)
	fmt.Fprintf(w, "  workspaces requested / answered                %d / %d\n", f.requested, f.served)
	verdict := "met"
	if f.maxObserved > f.budget {
		verdict = "MISSED"
	}
	fmt.Fprintf(w, "  highest RSS of all servers, sampled every 20 ms %d MiB (target: never above budget) %s\n", f.maxObserved>>20, verdict)
	fmt.Fprintf(w, "  the daemon process itself                      %d MiB\n", f.daemonRSS>>20)
	fmt.Fprintf(w, "  evictions                                      %d\n", f.evictions)
}
