// Package bench measures the service against its baselines in one run, on
// this machine, and prints the table `make bench` shows. Every figure is a
// ratio or a difference against a baseline measured in the same run on the
// same inputs, because absolute times on these machines are noisy
// (shared/BASELINES.md). Nothing here asserts: it reports.
package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/devforge"
	"github.com/hanzoai/lsp/proxy/internal/devstack"
	"github.com/hanzoai/lsp/proxy/internal/lspdirect"
)

// Options configure a run.
type Options struct {
	Dir       string
	Gopls     string
	DaemonBin string
	// TypeScript is the reviewed TypeScript install (make deps: .bin/ts);
	// empty leaves the TypeScript figures out.
	TypeScript string
	N          int // measured requests per figure
	Warmup     int
	Out        io.Writer
	// Sections, when not empty, limits the run to these figures (latency,
	// diagnostics, throughput, ledger, usage, push, typescript, pool), so a change
	// on the hot path can be measured before and after in minutes.
	Sections map[string]bool
	// DaemonEnv adds LSP_* variables to the daemon (LSP_DAEMON_DEBUG_LISTEN
	// to profile it while the bench runs).
	DaemonEnv map[string]string
	// GoplsEnv adds variables to gopls's reviewed entry (its env), to
	// price a setting of the server itself; never the product's figures
	// unless the reviewed entry sets them.
	GoplsEnv []string
	// Unjailed runs the language servers without the jail (LSP_UNJAILED=1),
	// to measure what the jail costs; the table says so.
	Unjailed bool
	// Measured, when set, is called as a measured throughput phase through
	// the proxy starts (named, lasting about d); the function it returns is
	// called when the phase ends. lsp-bench --profile takes profiles of
	// just those phases with it.
	Measured func(phase string, d time.Duration) (stop func())
	// LargeTarget names the LargeTargets entry of the large-prepare figure
	// (default DefaultLargeTarget); LargeRuns is its cold runs per side
	// (default 3); CacheDir keeps its downloads between runs (default
	// $XDG_CACHE_HOME/lsp-bench).
	LargeTarget string
	LargeRuns   int
	CacheDir    string
	// ReconcileRows is the size of the ledger the usage figure reconciles
	// (default DefaultReconcileRows).
	ReconcileRows int
	// BenchDaemonBin is an lsp-daemon built with -tags lspbench, whose
	// jail can switch single pieces off (LSP_BENCH_JAIL_OFF) for the jail
	// figure; empty leaves that figure out.
	BenchDaemonBin string
	// BaselineDaemonBin, when set, adds to the jail figure a daemon of an
	// earlier build in the production jail: the same interleaved CPU per
	// request shows what a change to the daemon's hot path bought.
	BaselineDaemonBin string
}

func (o Options) on(section string) bool { return len(o.Sections) == 0 || o.Sections[section] }

// Run brings up the stack, measures, and prints the table.
func Run(ctx context.Context, o Options) error {
	var err error
	if o.Gopls, err = filepath.Abs(o.Gopls); err != nil {
		return err
	}
	if o.N == 0 {
		o.N = 500
	}
	if o.Warmup == 0 {
		o.Warmup = 50
	}
	if o.LargeTarget == "" {
		o.LargeTarget = DefaultLargeTarget
	}
	if o.LargeRuns == 0 {
		o.LargeRuns = 3
	}
	if len(o.Sections) == 1 && o.Sections["usage"] {
		// Needs only Postgres: no stack.
		uf, err := runUsage(ctx, o)
		if err != nil {
			return fmt.Errorf("usage: %w", err)
		}
		printUsage(o.Out, uf)
		return nil
	}
	if len(o.Sections) == 1 && o.Sections["jail"] {
		return runJailSection(ctx, o)
	}
	if len(o.Sections) == 1 && o.Sections["large-prepare"] {
		// The one figure with a stack of its own: skip the shared one.
		return runLargeSection(ctx, o)
	}
	s, err := devstack.Start(ctx, devstack.Options{Dir: filepath.Join(o.Dir, "stack"), DaemonBin: o.DaemonBin, Gopls: o.Gopls, GoplsEnv: o.GoplsEnv, TypeScript: o.TypeScript, DaemonEnv: o.DaemonEnv, Unjailed: o.Unjailed, ProxyEnv: noRateLimit})
	if err != nil {
		return err
	}
	defer s.Stop()
	awaitSeed(ctx, o, s.Daemon, "the stack")
	const org = "bench"
	if _, err := devforge.CreateRepo(s.ForgeRoot, org, "hello", devstack.SampleRepo, "bench"); err != nil {
		return err
	}
	s.Forge.Grant("bench-forge", org+"/*")
	if err := s.Ledger.Credit(ctx, org, 100, "bench"); err != nil {
		return err
	}
	tok, err := s.Token("bench", org, nil, nil)
	if err != nil {
		return err
	}
	client := newClient(s.ProxyURL, tok, "bench-forge")

	// Cold: the first request prepares (clone, push, gopls cold start).
	coldStart := time.Now()
	if _, err := client.do(ctx, "/hover", hoverBody); err != nil {
		return fmt.Errorf("cold hover: %w", err)
	}
	cold := time.Since(coldStart)

	// The baseline: gopls spoken to directly, on its own checkout with its
	// own warm caches, same files and positions.
	direct, err := startDirect(ctx, o.Dir, o.Gopls)
	if err != nil {
		return err
	}
	defer direct.Close()

	if o.on("latency") {
		if err := runLatency(ctx, o, s, client, direct, cold); err != nil {
			return err
		}
	}
	if o.on("diagnostics") {
		if err := runDiagnostics(ctx, o, client); err != nil {
			return err
		}
	}
	if o.on("throughput") {
		if err := runThroughput(ctx, o, s, client, direct); err != nil {
			return err
		}
	}
	if o.on("ledger") {
		lf, err := runLedger(ctx, o, s, client)
		if err != nil {
			return fmt.Errorf("ledger: %w", err)
		}
		printLedger(o.Out, lf)
	}
	if o.on("usage") {
		uf, err := runUsage(ctx, o)
		if err != nil {
			return fmt.Errorf("usage: %w", err)
		}
		printUsage(o.Out, uf)
	}
	if o.on("push") {
		pf, err := runPush(ctx, s.DaemonSock)
		if err != nil {
			return fmt.Errorf("push: %w", err)
		}
		printPush(o.Out, pf)
	}
	if o.TypeScript != "" && o.on("typescript") {
		n, err := runTypeScriptRSS(ctx, s, client, org)
		if err != nil {
			return fmt.Errorf("typescript: %w", err)
		}
		printTypeScriptRSS(o.Out, n)
	}
	s.Stop()

	if o.on("pool") {
		poolf, err := runPool(ctx, o)
		if err != nil {
			return fmt.Errorf("pool: %w", err)
		}
		printPool(o.Out, poolf)
	}
	if o.on("jail") && o.BenchDaemonBin != "" {
		if err := runJailSection(ctx, o); err != nil {
			return err
		}
	}
	if o.on("large-prepare") {
		return runLargeSection(ctx, o)
	}
	return nil
}

func runJailSection(ctx context.Context, o Options) error {
	runs, err := runJail(ctx, o)
	if err != nil {
		return fmt.Errorf("jail: %w", err)
	}
	printJail(o.Out, runs)
	return nil
}

func runLargeSection(ctx context.Context, o Options) error {
	lf, err := runLargePrepare(ctx, o)
	if err != nil {
		return fmt.Errorf("large prepare: %w", err)
	}
	printLargePrepare(o.Out, lf)
	return nil
}

// runLatency prints the per-tool warm latency table and the per-stage
// budget beside the floor of each piece, measured in the same run.
func runLatency(ctx context.Context, o Options, s *devstack.Stack, client *proxyClient, direct *lspdirect.Server, cold time.Duration) error {
	var rows []row
	raw := map[string]json.RawMessage{}
	fs, err := newFloorSampler(ctx, s.DaemonSock, s.DatabaseURL)
	if err != nil {
		return err
	}
	defer fs.close()
	for _, f := range tools(direct) {
		viaProxy := func(ctx context.Context) error {
			_, err := client.do(ctx, f.route, f.body)
			return err
		}
		// Warm up first, so the stage means cover the measured calls only.
		if _, _, err := interleave(ctx, o.Warmup, 0, f.direct, viaProxy, nil); err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
		settle(ctx, f.name)
		before := scrapeStages(client)
		d, p, err := interleave(ctx, o.N, 0, f.direct, viaProxy, fs.sample)
		if err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
		var r json.RawMessage
		if err := direct.Call(ctx, f.method, f.params, &r); err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
		raw[f.name] = r
		rows = append(rows, row{f.name, d, p, stageMeans(before, scrapeStages(client))})
	}
	printTable(o.Out, rows, cold, o.N)
	printBudget(o.Out, rows, fs.floors(o.N, raw))
	return nil
}

// runDiagnostics prints the clean-file diagnostics figure.
func runDiagnostics(ctx context.Context, o Options, client *proxyClient) error {
	// Clean-file diagnostics: the answer must come promptly, not after a
	// publish timeout.
	diag := make([]time.Duration, 0, 20)
	for i := 0; i < 20; i++ {
		t := time.Now()
		if _, err := client.do(ctx, "/diagnostics", map[string]any{"repo": "hello", "path": "greet/greet.go"}); err != nil {
			return fmt.Errorf("diagnostics: %w", err)
		}
		diag = append(diag, time.Since(t))
	}
	verdict := "met"
	if pct(diag, .99) >= time.Second {
		verdict = "MISSED"
	}
	fmt.Fprintf(o.Out, "\nClean-file diagnostics through the proxy (n=20): p50 %s ms, p99 %s ms (target < 1 s) %s\n", ms(pct(diag, .5)), ms(pct(diag, .99)), verdict)
	return nil
}

// runThroughput prints warm throughput with 4 clients, proxy vs. direct,
// and, to say where the difference goes, the daemon alone (its gRPC
// socket asked as the proxy asks it: no HTTP, JWT, forge check or ledger
// row), one after the other on the same machine.
func runThroughput(ctx context.Context, o Options, s *devstack.Stack, client *proxyClient, direct *lspdirect.Server) error {
	const clients = 4
	defRoute, defBody, defDirect := tools(direct)[1].route, tools(direct)[1].body, tools(direct)[1].direct
	shard, q, closeShard, err := sampleDefinition(ctx, s.DaemonSock)
	if err != nil {
		return fmt.Errorf("throughput: the daemon alone: %w", err)
	}
	defer closeShard()
	defDaemon := func(ctx context.Context) error {
		ans, err := shard.Query(ctx, q)
		if err == nil && len(ans.GetLocations().GetItems()) == 0 {
			err = fmt.Errorf("no definition: %s %s", ans.GetStatus(), ans.GetMessage())
		}
		return err
	}
	// Every side warm (with -sections throughput alone, nothing else
	// has asked the direct server yet; the daemon's own workspace waits
	// for its gopls's load).
	for i := 0; i < max(o.Warmup, 50); i++ {
		_ = defDirect(ctx)
		_, _ = client.do(ctx, defRoute, defBody)
		_ = defDaemon(ctx)
	}
	if err := defDaemon(ctx); err != nil {
		return fmt.Errorf("throughput: the daemon alone: %w", err)
	}
	settle(ctx, "throughput, direct")
	stop := o.measured("throughput-direct", 3*time.Second)
	dq := throughput(ctx, clients, 3*time.Second, defDirect)
	stop()
	settle(ctx, "throughput, proxy")
	stop = o.measured("throughput", 3*time.Second)
	pq := throughput(ctx, clients, 3*time.Second, func(ctx context.Context) error {
		_, err := client.do(ctx, defRoute, defBody)
		return err
	})
	stop()
	settle(ctx, "throughput, the daemon alone")
	aq := throughput(ctx, clients, 3*time.Second, defDaemon)
	verdict := "met"
	if pq < 0.6*dq {
		verdict = "MISSED"
	}
	fmt.Fprintf(o.Out, "\nWarm throughput, %d clients, definition, 3 s each: direct %.0f/s, proxy %.0f/s, ratio %.0f %% (target ≥ 60 %%) %s\n", clients, dq, pq, 100*pq/dq, verdict)
	fmt.Fprintf(o.Out, "  the daemon alone (its socket, as the proxy asks it; no HTTP, JWT, forge check or ledger row): %.0f/s, %.0f %% of direct\n", aq, 100*aq/dq)
	return nil
}

func (o Options) measured(phase string, d time.Duration) (stop func()) {
	if o.Measured != nil {
		return o.Measured(phase, d)
	}
	return func() {}
}

var hoverBody = map[string]any{"repo": "hello", "path": "main.go", "line": 10, "character": 20}

type tool struct {
	name   string
	route  string
	body   map[string]any
	direct func(ctx context.Context) error
	// method and params are the direct call's, for the decode floor.
	method string
	params any
}

// tools are the per-tool figures: each asks the proxy and gopls the same
// question at the same position of the sample repository.
func tools(d *lspdirect.Server) []tool {
	doc := func(p string) map[string]any { return map[string]any{"uri": d.URI(p)} }
	at := func(p string, line, char int) map[string]any {
		return map[string]any{"textDocument": doc(p), "position": lspdirect.Position{Line: line, Character: char}}
	}
	body := func(p string, line, char int, kv ...any) map[string]any {
		m := map[string]any{"repo": "hello", "path": p, "line": line, "character": char}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	call := func(method string, params any) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			var r json.RawMessage
			return d.Call(ctx, method, params, &r)
		}
	}
	refs := at("main.go", 10, 20)
	refs["context"] = map[string]any{"includeDeclaration": true}
	mk := func(name, route string, body map[string]any, method string, params any) tool {
		return tool{name, route, body, call(method, params), method, params}
	}
	return []tool{
		mk("hover", "/hover", hoverBody, "textDocument/hover", at("main.go", 10, 20)),
		mk("definition", "/locate", hoverBody, "textDocument/definition", at("main.go", 10, 20)),
		mk("type_definition", "/locate", body("main.go", 9, 5, "relation", "type"), "textDocument/typeDefinition", at("main.go", 9, 5)),
		mk("implementation", "/locate", body("greet/greet.go", 6, 6, "relation", "implementation"), "textDocument/implementation", at("greet/greet.go", 6, 6)),
		mk("references", "/locate", body("main.go", 10, 20, "relation", "reference", "include_declaration", true), "textDocument/references", refs),
		mk("document_symbols", "/symbols", map[string]any{"repo": "hello", "path": "greet/greet.go"}, "textDocument/documentSymbol", map[string]any{"textDocument": doc("greet/greet.go")}),
		mk("workspace_symbols", "/symbols", map[string]any{"repo": "hello", "query": "Hello"}, "workspace/symbol", map[string]any{"query": "Hello"}),
		mk("completion", "/complete", body("main.go", 10, 20), "textDocument/completion", at("main.go", 10, 20)),
		mk("signature_help", "/signature", body("main.go", 10, 25), "textDocument/signatureHelp", at("main.go", 10, 25)),
	}
}

// throughput runs fn from n goroutines for d and returns calls per second.
func throughput(ctx context.Context, n int, d time.Duration, fn func(context.Context) error) float64 {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var total atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if fn(ctx) == nil {
					total.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return float64(total.Load()) / time.Since(start).Seconds()
}

type row struct {
	name          string
	direct, proxy []time.Duration
	stages        map[string]time.Duration // mean time per stage of the proxy path
}

// scrapeStages reads the proxy's per-stage sums and counts.
func scrapeStages(c *proxyClient) map[string][2]float64 {
	out := map[string][2]float64{}
	resp, err := c.http.Get(c.url + "/metrics")
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		for i, suffix := range []string{"_sum", "_count"} {
			prefix := "lsp_proxy_stage_seconds" + suffix + `{stage="`
			if rest, ok := strings.CutPrefix(line, prefix); ok {
				name, val, _ := strings.Cut(rest, `"} `)
				var v float64
				fmt.Sscan(val, &v)
				e := out[name]
				e[i] = v
				out[name] = e
			}
		}
	}
	return out
}

// stageMeans is the mean time per stage between two scrapes.
func stageMeans(before, after map[string][2]float64) map[string]time.Duration {
	out := map[string]time.Duration{}
	for st, a := range after {
		b := before[st]
		if n := a[1] - b[1]; n > 0 {
			out[st] = time.Duration((a[0] - b[0]) / n * 1e9)
		}
	}
	return out
}

// interleave alternates the two measurements so that load on the machine
// hits both alike, turning the order each pair; between, when not nil,
// runs untimed after each pair (the floors' sampler).
func interleave(ctx context.Context, n, warmup int, a, b func(context.Context) error, between func()) ([]time.Duration, []time.Duration, error) {
	for i := 0; i < warmup; i++ {
		if err := a(ctx); err != nil {
			return nil, nil, err
		}
		if err := b(ctx); err != nil {
			return nil, nil, err
		}
	}
	da, db := make([]time.Duration, 0, n), make([]time.Duration, 0, n)
	timed := func(f func(context.Context) error, into *[]time.Duration) error {
		t := time.Now()
		if err := f(ctx); err != nil {
			return err
		}
		*into = append(*into, time.Since(t))
		return nil
	}
	for i := 0; i < n; i++ {
		// The order turns each pair (ABBA): what one call leaves behind
		// (a server's garbage collection, a woken core) meets the next,
		// and a fixed order would hand all of it to the same side.
		first, second, df, ds := a, b, &da, &db
		if i%2 == 1 {
			first, second, df, ds = b, a, &db, &da
		}
		if err := timed(first, df); err != nil {
			return nil, nil, err
		}
		if err := timed(second, ds); err != nil {
			return nil, nil, err
		}
		if between != nil {
			between()
		}
	}
	return da, db, nil
}

func pct(ds []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d)/1e6) }

func printTable(w io.Writer, rows []row, cold time.Duration, n int) {
	fmt.Fprintf(w, "\nWarm latency through the whole proxy path vs. gopls directly (n=%d each, interleaved, same positions)\n", n)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "op\tdirect p50 ms\tproxy p50 ms\tΔ p50 ms\tratio p50\tdirect p99 ms\tproxy p99 ms\tΔ p99 ms\ttarget\t")
	for _, r := range rows {
		d50, p50 := pct(r.direct, .5), pct(r.proxy, .5)
		d99, p99 := pct(r.direct, .99), pct(r.proxy, .99)
		verdict := "met"
		if p50-d50 > 500*time.Microsecond || p99-d99 > 2*time.Millisecond {
			verdict = "MISSED"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.2f\t%s\t%s\t%s\t≤+0.5/+2 ms %s\t\n", r.name, ms(d50), ms(p50), ms(p50-d50),
			float64(p50)/float64(d50), ms(d99), ms(p99), ms(p99-d99), verdict)
	}
	tw.Flush()
	fmt.Fprintf(w, "\nCold hover (resolve, gate, fetch, push, gopls cold start, answer): %s\n", cold.Round(time.Millisecond))
}

func newClient(url, jwt, forge string) *proxyClient {
	return &proxyClient{url: url, jwt: jwt, forge: forge, http: &http.Client{
		Transport: &http.Transport{MaxIdleConnsPerHost: 8, DisableCompression: true},
	}}
}

type proxyClient struct {
	url, jwt, forge string
	http            *http.Client
}

func (c *proxyClient) do(ctx context.Context, route string, body any) ([]byte, error) {
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url+"/v1/lsp"+route, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.jwt)
	req.Header.Set("X-Forge-Token", c.forge)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %d %s", route, resp.StatusCode, out)
	}
	return out, err
}

func startDirect(ctx context.Context, dir, gopls string) (*lspdirect.Server, error) {
	root := filepath.Join(dir, "direct")
	for p, content := range devstack.SampleRepo {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			return nil, err
		}
	}
	home := filepath.Join(dir, "direct-home")
	env := []string{"PATH=/usr/local/go/bin:/usr/bin:/bin", "HOME=" + home, "GOFLAGS=-mod=mod", "GOPROXY=off",
		"GOTOOLCHAIN=local", "GOTELEMETRY=off", "CGO_ENABLED=0", "GOCACHE=" + filepath.Join(home, "go-build")}
	srv, err := lspdirect.Start(ctx, root, env, gopls, "serve")
	if err != nil {
		return nil, err
	}
	if err := srv.Open("main.go", "go"); err != nil {
		srv.Close()
		return nil, err
	}
	return srv, nil
}

// Describe names the machine for the report.
func Describe() string {
	host, _ := os.Hostname()
	b, _ := os.ReadFile("/proc/loadavg")
	return fmt.Sprintf("%s, load %s", host, strings.Join(strings.Fields(string(b))[:3], " "))
}

// noRateLimit turns the per-org rate limit off and lets one org download
// as much at once as the proxy: the bench measures how fast the service
// answers, and all of its load comes from one org.
var noRateLimit = map[string]string{"LSP_RATE_LIMIT": "0", "LSP_FORGE_MAX_DOWNLOADS_PER_ORG": "16"}
