package bench

import (
	"archive/zip"
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf16"

	"github.com/hanzoai/lsp/proxy/internal/devstack"
	"github.com/hanzoai/lsp/proxy/internal/lspdirect"
)

// defaultJailCC is the daemon's C compiler when LSP_JAIL_CC is unset and it
// exists (daemon/internal/jail.DefaultCC; the proxy cannot import it).
const defaultJailCC = "/usr/bin/gcc"

// baselineCgo is the direct side's cgo setting: the one the service's jail
// gives gopls for the daemon's LSP_JAIL_CC (jailCC; "" its default), so that
// both sides load the same files. With a C compiler, gopls's first load runs
// cgo for the standard library's cgo packages (net, os/user, runtime/cgo) on
// an empty build cache: 2–3 s of go list's time on aws-sdk-go here, which
// the service paid and a baseline with CGO_ENABLED=0 did not.
func baselineCgo(jailCC string) []string {
	cc := jailCC
	switch jailCC {
	case "off":
		return []string{"CGO_ENABLED=0"}
	case "":
		if _, err := os.Stat(defaultJailCC); err != nil {
			return []string{"CGO_ENABLED=0"}
		}
		cc = defaultJailCC
	}
	return []string{"CGO_ENABLED=1", "CC=" + cc}
}

// LargeTarget is a module the large-prepare figure imports, and the call
// site the first hover asks about.
type LargeTarget struct {
	Module string // path@version, served by the machine's GOPROXY
	File   string // module-relative file holding the call
	Needle string // text of the line holding the call
	Symbol string // the called function: the hover must name it
}

// LargeTargets are the modules the figure knows. The default is the one
// nearest 5,000 files among the large modules tried (golang.org/x/tools has
// about 1,600 since gopls left it; k8s.io/client-go about 2,200).
var LargeTargets = map[string]LargeTarget{
	"aws-sdk-go": {Module: "github.com/aws/aws-sdk-go@v1.55.5", File: "aws/session/session.go",
		Needle: "sharedCfg, err := loadSharedConfig(envCfg.Profile, cfgFiles, envCfg.EnableSharedConfig)", Symbol: "loadSharedConfig"},
	"x-tools": {Module: "golang.org/x/tools@v0.52.0", File: "go/packages/packages.go",
		Needle: "return ld.refine(response)", Symbol: "refine"},
}

// DefaultLargeTarget names the entry of LargeTargets `make bench` uses.
const DefaultLargeTarget = "aws-sdk-go"

// largeFigures is what the large-prepare figure measured.
type largeFigures struct {
	target        LargeTarget
	files         int
	bytes         int64
	ours, direct  []time.Duration
	oursParts     []string // where each of our runs spent its time
	directParts   []string
	retriesOurs   int // answers that did not name the symbol yet
	retriesDirect int
	warnings      []string // distinct warnings in our answers (a dependency not served, ...)
}

// runLargePrepare measures cold prepare → first answer on a large
// repository against `git clone --depth 1` plus gopls's own cold start on
// the same repository, alternately, runs times each. Every run on either
// side starts with empty module, build and gopls caches, and both fetch the
// repository's dependencies from the same local file:// GOPROXY mirror.
func runLargePrepare(ctx context.Context, o Options) (*largeFigures, error) {
	t, ok := LargeTargets[o.LargeTarget]
	if !ok {
		return nil, fmt.Errorf("unknown large target %q", o.LargeTarget)
	}
	cache := o.CacheDir
	if cache == "" {
		var err error
		if cache, err = benchCacheDir(); err != nil {
			return nil, err
		}
	}
	src, err := fetchModule(ctx, cache, t.Module)
	if err != nil {
		return nil, err
	}
	line, char, err := findInZip(src.Zip, t)
	if err != nil {
		return nil, err
	}

	f := &largeFigures{target: t}
	daemonEnv := map[string]string{}
	for k, v := range o.DaemonEnv {
		daemonEnv[k] = v
	}
	daemonEnv["LSP_DEPS_GO_PROXY"], daemonEnv["LSP_LOG_LEVEL"] = src.Mirror, "info"
	dir := filepath.Join(o.Dir, "large")
	s, err := devstack.Start(ctx, devstack.Options{
		Dir: dir, DaemonBin: o.DaemonBin, Gopls: o.Gopls, GoplsEnv: o.GoplsEnv,
		DaemonEnv: daemonEnv, Unjailed: o.Unjailed,
		// A cold prepare of a large tree takes longer than the default
		// request deadline allows on a loaded machine.
		ProxyEnv: map[string]string{"LSP_REQUEST_TIMEOUT": "5m", "LSP_RATE_LIMIT": "0", "LSP_FORGE_MAX_DOWNLOADS_PER_ORG": "16"},
		// The daemon restarts between runs on purpose: only errors here.
		Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		return nil, err
	}
	defer s.Stop()
	awaitSeed(ctx, o, s.Daemon, "large prepare")
	const org, repo, token = "large", "large", "large-forge"
	bare, files, err := importCached(ctx, cache, src)
	if err != nil {
		return nil, err
	}
	f.files = files
	if f.bytes, err = zipBytes(src.Zip); err != nil {
		return nil, err
	}
	s.Forge.Grant(token, org+"/*")
	if err := s.Ledger.Credit(ctx, org, 1000, "bench"); err != nil {
		return nil, err
	}
	jwt, err := s.Token("bench", org, nil, nil)
	if err != nil {
		return nil, err
	}
	client := newClient(s.ProxyURL, jwt, token)

	for i := 0; i < o.LargeRuns; i++ {
		// Each run has a repository of its own (a local clone of the
		// import plus one commit), so nothing is prepared or cached for it,
		// and its branch is resolved as any branch is.
		name := fmt.Sprintf("%s-%d", repo, i)
		if err := cloneBare(ctx, bare, filepath.Join(s.ForgeRoot, org, name+".git")); err != nil {
			return nil, err
		}
		if _, err := nextCommit(ctx, filepath.Join(s.ForgeRoot, org, name+".git"), ".lsp-bench-run", fmt.Sprintf("run %d\n", i)); err != nil {
			return nil, err
		}
		cloneURL := s.ForgeURL + "/" + org + "/" + name + ".git"
		body := map[string]any{"repo": name, "path": t.File, "line": line, "character": char}
		settle(ctx, "large prepare, ours")
		before, logOff := scrapeStages(client), fileSize(s.Daemon.LogFile)
		start, prepared := time.Now(), false
		for {
			out, err := client.do(ctx, "/hover", body)
			if err != nil {
				return nil, fmt.Errorf("large prepare hover: %w", err)
			}
			var ans struct {
				Prepared bool `json:"prepared"`
				Hover    *struct {
					Markdown string `json:"markdown"`
				} `json:"hover"`
				Evidence struct {
					Warnings []string `json:"warnings"`
				} `json:"evidence"`
			}
			if err := json.Unmarshal(out, &ans); err != nil {
				return nil, fmt.Errorf("large prepare hover: %w", err)
			}
			prepared = prepared || ans.Prepared
			for _, w := range ans.Evidence.Warnings {
				if !slices.Contains(f.warnings, w) {
					f.warnings = append(f.warnings, w)
				}
			}
			if ans.Hover != nil && strings.Contains(ans.Hover.Markdown, t.Symbol) {
				break
			}
			f.retriesOurs++
			if time.Since(start) > 5*time.Minute {
				return nil, fmt.Errorf("large prepare hover: no answer naming %s: %s", t.Symbol, out)
			}
			time.Sleep(20 * time.Millisecond)
		}
		took := time.Since(start)
		if !prepared {
			return nil, fmt.Errorf("large prepare hover: run %d was not a cold prepare", i)
		}
		f.ours = append(f.ours, took)
		f.oursParts = append(f.oursParts, ourParts(took, before, scrapeStages(client), s.Daemon.LogFile, logOff))
		// Its servers must not compete with the next measurement.
		if err := s.RestartDaemon(ctx); err != nil {
			return nil, err
		}

		// The baseline: a shallow clone and gopls's own cold start.
		settle(ctx, "large prepare, direct")
		// Removed when the figure ends, as our side's workspaces are:
		// deleting a clone with its module and build caches (over a GiB)
		// just before our next window put that cleanup in our side only.
		directDir := filepath.Join(o.Dir, fmt.Sprintf("large-direct-%d", i))
		defer removeTree(directDir)
		d, parts, retries, err := directCold(ctx, directDir, cloneURL, token, o.Gopls, src.Mirror, o.DaemonEnv["LSP_JAIL_CC"], t, line, char)
		if err != nil {
			return nil, fmt.Errorf("large baseline: %w", err)
		}
		f.direct = append(f.direct, d)
		f.directParts = append(f.directParts, parts)
		f.retriesDirect += retries
	}
	return f, nil
}

// directCold clones the repository at depth 1 into dir, starts gopls there
// with empty caches, opens the file and hovers until the answer names the
// symbol. It returns the whole time and where it went; the caller removes
// dir.
func directCold(ctx context.Context, dir, cloneURL, token, gopls, mirror, jailCC string, t LargeTarget, line, char int) (time.Duration, string, int, error) {
	root, home := filepath.Join(dir, "clone"), filepath.Join(dir, "home")
	if err := os.MkdirAll(filepath.Join(home, ".config", "go", "telemetry"), 0o755); err != nil {
		return 0, "", 0, err
	}
	// As the daemon does for its servers: no telemetry child outliving gopls.
	if err := os.WriteFile(filepath.Join(home, ".config", "go", "telemetry", "mode"), []byte("off\n"), 0o644); err != nil {
		return 0, "", 0, err
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return 0, "", 0, err
	}
	env := []string{
		"PATH=" + filepath.Dir(goBin) + ":/usr/bin:/bin", "HOME=" + home,
		"XDG_CACHE_HOME=" + filepath.Join(home, ".cache"), "XDG_CONFIG_HOME=" + filepath.Join(home, ".config"),
		"GOCACHE=" + filepath.Join(home, ".cache", "go-build"), "GOPATH=" + filepath.Join(home, "go"),
		"GOMODCACHE=" + filepath.Join(home, "go", "pkg", "mod"), "GOPROXY=" + mirror, "GOSUMDB=off",
		"GOFLAGS=-mod=mod", "GOTOOLCHAIN=local", "GOTELEMETRY=off", "GOWORK=off", "LANG=C.UTF-8",
	}
	env = append(env, baselineCgo(jailCC)...)

	start := time.Now()
	if _, err := runIn(ctx, dir, nil, "git", "-c", "http.extraHeader=Authorization: Bearer "+token, "clone", "--quiet", "--depth=1", cloneURL, root); err != nil {
		return 0, "", 0, err
	}
	cloned := time.Now()
	srv, err := lspdirect.Start(ctx, root, env, gopls, "serve")
	if err != nil {
		return 0, "", 0, err
	}
	defer srv.Close()
	started := time.Now()
	if err := srv.Open(t.File, "go"); err != nil {
		return 0, "", 0, err
	}
	retries := 0
	for {
		h, err := srv.Hover(ctx, t.File, lspdirect.Position{Line: line, Character: char})
		if err == nil && strings.Contains(h, t.Symbol) {
			break
		}
		retries++
		if time.Since(start) > 5*time.Minute {
			return 0, "", 0, fmt.Errorf("no hover naming %s: %q %v", t.Symbol, h, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	took := time.Since(start)
	parts := fmt.Sprintf("clone %s, gopls start+initialize %s, open+hover %s", secs(cloned.Sub(start)), secs(started.Sub(cloned)), secs(time.Since(started)))
	return took, parts, retries, nil
}

// ourParts splits one of our cold requests: the proxy's resolve and query
// stages (its metrics), the daemon's Prepare call (its log: receive and
// verify the tree, publish, dependencies, start and initialize gopls), and
// the rest (fetch from the forge, read the tree, balance hold, ledger rows).
func ourParts(took time.Duration, before, after map[string][2]float64, log string, off int64) string {
	d := func(stage string) time.Duration {
		return time.Duration((after[stage][0] - before[stage][0]) * 1e9)
	}
	resolve, query := d("forge_resolve"), d("daemon_query")
	prepare, ph := prepareTook(log, off)
	return fmt.Sprintf("resolve %s, fetch+hold+rows %s, push+deps+gopls start (daemon Prepare) %s [receive+write %s, deps %s, publish+start %s, first load %s], hover query %s",
		secs(resolve), secs(took-resolve-query-prepare), secs(prepare),
		secs(ph.receive), secs(ph.deps), secs(ph.start), secs(ph.load), secs(query))
}

// preparePhases are the parts of a daemon Prepare call, from its log.
type preparePhases struct{ receive, deps, start, load time.Duration }

// prepareTook is the duration of the last Prepare call the daemon logged
// after offset off of its log.
func prepareTook(log string, off int64) (time.Duration, preparePhases) {
	var ph preparePhases
	f, err := os.Open(log)
	if err != nil {
		return 0, ph
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return 0, ph
	}
	var took time.Duration
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// The daemon logs JSON; a duration is in nanoseconds.
		var e struct {
			Msg     string `json:"msg"`
			Method  string `json:"method"`
			Took    int64  `json:"took"`
			Receive int64  `json:"receive_nanos"`
			Deps    int64  `json:"deps_nanos"`
			Start   int64  `json:"publish_start_nanos"`
			Load    int64  `json:"load_nanos"`
		}
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue
		}
		switch {
		case e.Msg == "rpc" && e.Method == "/lsp.daemon.v1.Daemon/Prepare":
			took = time.Duration(e.Took)
		case e.Msg == "prepare" && e.Receive > 0:
			ph = preparePhases{time.Duration(e.Receive), time.Duration(e.Deps), time.Duration(e.Start), time.Duration(e.Load)}
		}
	}
	return took, ph
}

func fileSize(p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return fi.Size()
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2fs", d.Seconds()) }

// findInZip finds the target's line in the module zip and the UTF-16
// column of its symbol there (LSP positions, zero-based).
func findInZip(zipPath string, t LargeTarget) (line, char int, err error) {
	zr, err := zip.OpenReader(zipPath)
	if err != nil {
		return 0, 0, err
	}
	defer zr.Close()
	for _, f := range zr.File {
		if !strings.HasSuffix(f.Name, "/"+t.File) {
			continue
		}
		if p, err := modulePrefix(f.Name); err != nil || p+t.File != f.Name {
			continue
		}
		r, err := f.Open()
		if err != nil {
			return 0, 0, err
		}
		b, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			return 0, 0, err
		}
		for i, l := range strings.Split(string(b), "\n") {
			if !strings.Contains(l, t.Needle) {
				continue
			}
			at := strings.Index(l, t.Needle) + strings.Index(t.Needle, t.Symbol)
			return i, len(utf16.Encode([]rune(l[:at]))) + 1, nil
		}
		return 0, 0, fmt.Errorf("%s: no line holds %q", t.File, t.Needle)
	}
	return 0, 0, fmt.Errorf("%s: not in the module zip", t.File)
}

// zipBytes is the uncompressed size of a zip's files.
func zipBytes(p string) (int64, error) {
	zr, err := zip.OpenReader(p)
	if err != nil {
		return 0, err
	}
	defer zr.Close()
	var n int64
	for _, f := range zr.File {
		n += int64(f.UncompressedSize64)
	}
	return n, nil
}

// removeTree removes a tree the go command made read-only (a module cache).
func removeTree(dir string) {
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o755)
		}
		return nil
	})
	_ = os.RemoveAll(dir)
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func printLargePrepare(w io.Writer, f *largeFigures) {
	ratio := float64(median(f.ours)) / float64(median(f.direct))
	verdict := "met"
	if ratio > 1.2 {
		verdict = "MISSED"
	}
	fmt.Fprintf(w, "\nCold prepare → first answer on a large repository vs. git clone --depth 1 + gopls's own cold start, same repository (n=%d each, alternating)\n", len(f.ours))
	fmt.Fprintf(w, "  repository: %s, %d files, %d MiB, one commit on the dev forge; hover on %s in %s\n",
		f.target.Module, f.files, f.bytes>>20, f.target.Symbol, f.target.File)
	for i := range f.ours {
		fmt.Fprintf(w, "  run %d  ours   %s  (%s)\n", i+1, secs(f.ours[i]), f.oursParts[i])
		fmt.Fprintf(w, "         direct %s  (%s)\n", secs(f.direct[i]), f.directParts[i])
	}
	fmt.Fprintf(w, "  median ours %s, direct %s, ratio %.2f× (target ≤ 1.2×) %s\n", secs(median(f.ours)), secs(median(f.direct)), ratio, verdict)
	if f.retriesOurs+f.retriesDirect > 0 {
		fmt.Fprintf(w, "  answers not naming %s yet, asked again: ours %d, direct %d\n", f.target.Symbol, f.retriesOurs, f.retriesDirect)
	}
	for _, x := range f.warnings {
		fmt.Fprintf(w, "  warning in our answers: %s\n", x)
	}
	fmt.Fprintln(w, "  note: every run on both sides starts with empty module and gopls caches and no build cache of the")
	fmt.Fprintln(w, "  repository's; ours has the daemon's standard-library build seed, which every new Go workspace gets")
	fmt.Fprintln(w, "  (made when the daemon starts, before the window), the direct side an empty build cache; both load")
	fmt.Fprintln(w, "  cgo files with the same C compiler (the daemon's LSP_JAIL_CC). Both fetch the dependencies from the")
	fmt.Fprintln(w, "  same local file:// GOPROXY mirror (filled once from the machine's GOPROXY, kept in")
	fmt.Fprintln(w, "  $XDG_CACHE_HOME/lsp-bench); ours is a fresh forge repository per run, nothing prepared before it,")
	fmt.Fprintln(w, "  and the daemon restarts after it so its gopls does not compete with the next measurement")
}
