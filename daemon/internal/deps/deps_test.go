package deps

import (
	"context"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hanzoai/lsp/daemon/internal/deps/depstest"
	"github.com/hanzoai/lsp/daemon/internal/runtime"
	"github.com/hanzoai/lsp/daemon/internal/workspace"
)

var dep = depstest.Module{Path: "example.com/dep", Version: "v1.0.0", Files: map[string]string{
	"go.mod": "module example.com/dep\n\ngo 1.22\n",
	"dep.go": "// Package dep is a dependency.\npackage dep\n\n// Hello greets.\nfunc Hello() string { return \"hello\" }\n",
}}

// mirrorDir writes dep (and private, absent on purpose) and returns the
// directory and dep's go.sum lines.
func mirrorDir(t *testing.T) (string, string) {
	t.Helper()
	dir := t.TempDir()
	sum, err := depstest.Write(dir, dep)
	if err != nil {
		t.Fatal(err)
	}
	return dir, sum
}

// countingMirror serves dir over HTTP and counts every request.
func countingMirror(t *testing.T, dir string) (*url.URL, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	fsrv := http.FileServer(http.Dir(dir))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		fsrv.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	return u, &n
}

// repo writes a repository tree and returns a workspace over it.
func repo(t *testing.T, files map[string]string) runtime.Workspace {
	t.Helper()
	// The store's layout: the tree is <commit>/tree, npm packages go to
	// its node_modules, the phase's indexes beside it.
	// Canonical paths: servers report files by their real path.
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	root, home := filepath.Join(base, "tree"), t.TempDir()
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = workspace.RemoveAll(filepath.Dir(root)) })
	writeTree(t, root, files, 0o444)
	t.Cleanup(func() { _ = workspace.RemoveAll(home) })
	return runtime.Workspace{Root: root, Home: home}
}

// writeTree writes files (slash paths under root) with their directories.
func writeTree(t *testing.T, root string, files map[string]string, perm os.FileMode) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), perm); err != nil {
			t.Fatal(err)
		}
	}
}

func fetcher(cfg Config) *Fetcher {
	if cfg.MaxModules == 0 {
		cfg.MaxModules = DefaultMaxModules
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.MaxZip == 0 {
		cfg.MaxZip = DefaultMaxZip
	}
	return New(cfg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
}

const mainGo = "package main\n\nimport \"example.com/dep\"\n\nfunc main() { println(dep.Hello()) }\n"

// TestFetchGoFile: from a file:// mirror the module lands in the go
// command's layout, and the real go command builds the repository offline
// from it, as gopls loads it while serving.
func TestFetchGoFile(t *testing.T) {
	dir, sum := mirrorDir(t)
	ws := repo(t, map[string]string{
		"go.mod":  "module example.com/app\n\ngo 1.22\n\nrequire example.com/dep v1.0.0\n",
		"go.sum":  sum,
		"main.go": mainGo,
	})
	u, _ := url.Parse("file://" + dir)
	f := fetcher(Config{GoProxies: []*url.URL{u}})
	if w := f.Fetch(context.Background(), ws); len(w) != 0 {
		t.Fatalf("warnings %q", w)
	}
	mc := runtime.ModCache(ws)
	for _, p := range []string{"list", "v1.0.0.info", "v1.0.0.mod", "v1.0.0.zip", "v1.0.0.ziphash"} {
		if _, err := os.Stat(filepath.Join(mc, "cache/download/example.com/dep/@v", p)); err != nil {
			t.Errorf("cache file: %v", err)
		}
	}
	fi, err := os.Stat(filepath.Join(mc, "example.com/dep@v1.0.0/dep.go"))
	if err != nil || fi.Mode().Perm()&0o222 != 0 {
		t.Fatalf("extracted file %v %v: want read-only", fi, err)
	}
	// Again: everything is in place, nothing is fetched twice.
	if w := f.Fetch(context.Background(), ws); len(w) != 0 {
		t.Fatalf("second fetch warnings %q", w)
	}
	goList(t, ws)
}

// goList loads the repository with the serving environment: offline.
func goList(t *testing.T, ws runtime.Workspace) {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	// Loading, not compiling: the go command resolves the module graph and
	// checks go.sum against the cache as gopls does.
	cmd := exec.Command(gobin, "list", "-deps", ".")
	cmd.Dir = ws.Root
	cmd.Env = append(runtime.Environment(runtime.Spec{Executable: gobin}, ws), "PATH="+filepath.Dir(gobin))
	if err := os.MkdirAll(filepath.Join(ws.Home, "tmp"), 0o700); err != nil {
		t.Fatal(err)
	}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "example.com/dep\n") {
		t.Fatalf("go list offline: %v\n%s", err, out)
	}
}

// TestFetchGoRefusals: each refusal is a warning, and those that need no
// request make none.
func TestFetchGoRefusals(t *testing.T) {
	dir, sum := mirrorDir(t)
	req := "module example.com/app\n\ngo 1.22\n\nrequire example.com/dep v1.0.0\n"
	badZip := strings.Replace(sum, "example.com/dep v1.0.0 h1:", "example.com/dep v1.0.0 h1:AAAA", 1)
	modOnly := sum[strings.Index(sum, "\n")+1:]
	cases := []struct {
		name     string
		files    map[string]string
		cfg      Config
		want     string
		requests bool // whether the case may reach the mirror
		noCache  bool
	}{
		{"go.sum mismatch", map[string]string{"go.mod": req, "go.sum": badZip}, Config{}, "example.com/dep@v1.0.0: does not match its go.sum hash", true, true},
		// The mirror serves no checksum database here: nothing vouches.
		{"no go.sum line", map[string]string{"go.mod": req, "go.sum": modOnly}, Config{}, "example.com/dep@v1.0.0: go.sum has no hash for it and the checksum database could not verify it; it was not fetched (no trust on first use)", true, true},
		{"no go.sum", map[string]string{"go.mod": req}, Config{}, "no trust on first use", true, true},
		{"no go.sum line, no checksum database", map[string]string{"go.mod": req, "go.sum": modOnly}, Config{GoSumDB: "off"}, "example.com/dep@v1.0.0: go.sum has no hash for it; it was not fetched (no trust on first use)", false, true},
		{"toolchain newer than local", map[string]string{"go.mod": "module example.com/app\n\ngo 1.22\n\ntoolchain go1.99.0\n\nrequire example.com/dep v1.0.0\n", "go.sum": sum}, Config{}, "go.mod asks for toolchain go1.99.0, newer than the local", false, true},
		{"go line newer than local", map[string]string{"go.mod": "module example.com/app\n\ngo 1.99\n\nrequire example.com/dep v1.0.0\n", "go.sum": sum}, Config{}, "go.mod requires go 1.99, newer than the local", false, true},
		{"private module", map[string]string{"go.mod": "module example.com/app\n\ngo 1.22\n\nrequire corp.example/private v1.2.3\n", "go.sum": "corp.example/private v1.2.3 h1:x\ncorp.example/private v1.2.3/go.mod h1:y\n"}, Config{}, "corp.example/private@v1.2.3: go.mod is not served by the mirror (a private or missing module; no credential is ever used)", true, true},
		{"zip over its bound", map[string]string{"go.mod": req, "go.sum": sum}, Config{MaxZip: 64}, "example.com/dep@v1.0.0: is over the size bound", true, true},
		{"module count", map[string]string{"go.mod": req, "go.sum": sum + "example.com/old v0.1.0/go.mod h1:z\n"}, Config{MaxModules: 1}, "2 Go module versions are needed, over the bound of 1", true, false},
		{"go.mod does not parse", map[string]string{"go.mod": "module\n"}, Config{}, "go.mod does not parse", false, true},
		{"directory replacement", map[string]string{"go.mod": req + "replace example.com/dep => ./dep\n", "dep/go.mod": "module example.com/dep\n"}, Config{}, "", false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			u, n := countingMirror(t, dir)
			c.cfg.GoProxies = []*url.URL{u}
			ws := repo(t, c.files)
			w := fetcher(c.cfg).Fetch(context.Background(), ws)
			if c.want == "" {
				if len(w) != 0 {
					t.Fatalf("warnings %q", w)
				}
			} else if len(w) == 0 || !strings.Contains(strings.Join(w, "\n"), c.want) {
				t.Fatalf("warnings %q, want one with %q", w, c.want)
			}
			if !c.requests && n.Load() != 0 {
				t.Fatalf("%d requests reached the mirror, want none", n.Load())
			}
			if _, err := os.Stat(filepath.Join(runtime.ModCache(ws), "example.com/dep@v1.0.0")); c.noCache && err == nil {
				t.Fatal("the refused module was extracted")
			}
			for _, s := range w {
				if strings.Contains(s, ws.Home) || strings.Contains(s, dir) || strings.Contains(s, u.Host) {
					t.Fatalf("warning %q shows a host path or the mirror", s)
				}
			}
		})
	}
}

// TestFetchSkipped: with no mirror configured nothing happens, silently.
func TestFetchSkipped(t *testing.T) {
	ws := repo(t, map[string]string{"go.mod": "module a\n\ngo 1.99\n", "package-lock.json": "{}"})
	if w := fetcher(Config{}).Fetch(context.Background(), ws); len(w) != 0 {
		t.Fatalf("warnings %q", w)
	}
	var nilF *Fetcher
	if w := nilF.Fetch(context.Background(), ws); w != nil {
		t.Fatal(w)
	}
	if _, err := os.Stat(runtime.ModCache(ws)); err == nil {
		t.Fatal("a module cache was made")
	}
}

// TestRedirectAway: the mirror cannot send the phase elsewhere.
func TestRedirectAway(t *testing.T) {
	var elsewhere atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { elsewhere.Add(1) }))
	defer other.Close()
	mirror := httptest.NewServer(http.RedirectHandler(other.URL+"/x", http.StatusFound))
	defer mirror.Close()
	u, _ := url.Parse(mirror.URL)
	_, sum := mirrorDir(t)
	ws := repo(t, map[string]string{"go.mod": "module a\n\ngo 1.22\n\nrequire example.com/dep v1.0.0\n", "go.sum": sum})
	w := fetcher(Config{GoProxies: []*url.URL{u}}).Fetch(context.Background(), ws)
	if len(w) == 0 || elsewhere.Load() != 0 {
		t.Fatalf("warnings %q, %d requests elsewhere", w, elsewhere.Load())
	}
}

func TestFromEnv(t *testing.T) {
	cases := []struct {
		env map[string]string
		ok  bool
	}{
		{map[string]string{}, true},
		{map[string]string{"LSP_DEPS_GO_PROXY": "https://proxy.example/go,file:///srv/mirror"}, true},
		{map[string]string{"LSP_DEPS_GO_PROXY": "https://proxy.example,direct"}, false},
		{map[string]string{"LSP_DEPS_GO_PROXY": "off"}, false},
		{map[string]string{"LSP_DEPS_GO_PROXY": "https://user:pw@proxy.example"}, false},
		{map[string]string{"LSP_DEPS_GO_PROXY": "ftp://proxy.example"}, false},
		{map[string]string{"LSP_DEPS_GO_PROXY": "file://host/x"}, false},
		{map[string]string{"LSP_DEPS_NPM_REGISTRY": "https://npm.example/registry/"}, true},
		{map[string]string{"LSP_DEPS_NPM_REGISTRY": "https://npm.example/?q=1"}, false},
		{map[string]string{"LSP_DEPS_MAX_MODULES": "0"}, false},
		{map[string]string{"LSP_DEPS_MAX_BYTES": "-1"}, false},
		{map[string]string{"LSP_DEPS_TIMEOUT": "90s", "LSP_DEPS_MAX_ZIP_BYTES": "1000"}, true},
		{map[string]string{"LSP_DEPS_MAX_PHASES": "2"}, true},
		{map[string]string{"LSP_DEPS_MAX_PHASES": "0"}, false},
		{map[string]string{"LSP_DEPS_MAX_PHASES": "65"}, false},
	}
	for _, c := range cases {
		cfg, err := FromEnv(func(k string) string { return c.env[k] })
		if (err == nil) != c.ok {
			t.Errorf("%v: err %v", c.env, err)
		}
		if err == nil && c.env["LSP_DEPS_NPM_REGISTRY"] != "" && cfg.NPMRegistry.Path != "/registry" {
			t.Errorf("registry path %q", cfg.NPMRegistry.Path)
		}
	}
}

func TestNewerGo(t *testing.T) {
	cases := []struct {
		want, have string
		newer      bool
	}{
		{"1.22", "go1.26.8", false},
		{"1.26", "go1.26.8", false},
		{"1.26.8", "go1.26.8", false},
		{"1.26.9", "go1.26.8", true},
		{"1.27rc1", "go1.26.8", true},
		{"1.27", "go1.26.8", true},
		{"go1.99.0", "go1.26.8", true},
		{"go1.21.0-custom", "go1.26.8", false},
		{"1.26rc1", "go1.26.0", false},
		{"1.26.0", "go1.26rc2", true},
		{"2", "go1.26.8", true},
		{"garbage", "go1.26.8", true},
		{"1.99", "devel +abc", false},
	}
	for _, c := range cases {
		if got := newerGo(c.want, c.have); got != c.newer {
			t.Errorf("newerGo(%q, %q) = %v", c.want, c.have, got)
		}
	}
}

// walkClean: only directories and regular files, all inside dir.
func walkClean(t *testing.T, dir string) {
	t.Helper()
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if !d.IsDir() && !d.Type().IsRegular() {
			t.Fatalf("%s is neither a directory nor a regular file", p)
		}
		return nil
	})
}

// TestPhasesBounded: no more than MaxPhases phases run at once, whatever
// the prepares; one beyond the bound waits for a place, within its own
// deadline, and says so when that ends first. A revision waiting for its
// repository's home stops waiting as its context ends.
func TestPhasesBounded(t *testing.T) {
	dir, sum := mirrorDir(t)
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	fsrv := http.FileServer(http.Dir(dir))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() { close(held) })
		<-release
		fsrv.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	var releaseOnce sync.Once
	unhold := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unhold) // before the server closes, should the test fail first
	u, _ := url.Parse(srv.URL)
	f := fetcher(Config{GoProxies: []*url.URL{u}, MaxPhases: 1})

	// A phase holds the only place while the mirror holds its download.
	first := repo(t, map[string]string{
		"go.mod":  "module example.com/app\n\ngo 1.22\n\nrequire example.com/dep v1.0.0\n",
		"go.sum":  sum,
		"main.go": mainGo,
	})
	done := make(chan []string, 1)
	go func() { done <- f.Fetch(context.Background(), first) }()
	<-held

	// Another repository's phase, which fetches nothing, waits for it:
	// its deadline ends first.
	other := repo(t, map[string]string{"README.md": "nothing to fetch\n"})
	ctx, cancel := context.WithCancel(context.Background())
	waited := make(chan []string, 1)
	go func() { waited <- f.Fetch(ctx, other) }()
	cancel()
	if w := <-waited; len(w) != 1 || !strings.Contains(w[0], "did not run") {
		t.Fatalf("a phase beyond the bound: warnings %q; want it to have waited for a place", w)
	}

	// Another revision of the first's repository waits for its home; it
	// stops waiting when its context ends (a Delete of its workspace).
	again := repo(t, map[string]string{"README.md": "a later revision\n"})
	again.Home = first.Home
	ctx, cancel = context.WithCancel(context.Background())
	waited = make(chan []string, 1)
	go func() { waited <- f.Fetch(ctx, again) }()
	cancel()
	select {
	case w := <-waited:
		if len(w) != 1 || !strings.Contains(w[0], "another revision") {
			t.Fatalf("a phase waiting for its home: warnings %q", w)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a phase waiting for its repository's home did not end with its context")
	}

	unhold()
	if w := <-done; len(w) != 0 {
		t.Fatalf("the first phase: warnings %q", w)
	}
	// Its place is free again.
	if w := f.Fetch(context.Background(), other); len(w) != 0 {
		t.Fatalf("a phase after the first ended: warnings %q", w)
	}
}

// TestFetchGoUnpackedBounded: module zips are charged what they unpack to
// before a byte is written, against the phase's byte bound: three modules
// of a few KiB each that inflate to 4 MiB do not unpack 12 MiB under a
// 6 MiB bound, and each one refused says so.
func TestFetchGoUnpackedBounded(t *testing.T) {
	dir := t.TempDir()
	var req, sums strings.Builder
	req.WriteString("module example.com/app\n\ngo 1.22\n\nrequire (\n")
	for _, name := range []string{"a", "b", "c"} {
		m := depstest.Module{Path: "example.com/big" + name, Version: "v1.0.0", Files: map[string]string{
			"go.mod": "module example.com/big" + name + "\n\ngo 1.22\n",
			"big.go": "package big" + name + "\n\n//" + strings.Repeat(" ", 4<<20) + "\n",
		}}
		sum, err := depstest.Write(dir, m)
		if err != nil {
			t.Fatal(err)
		}
		sums.WriteString(sum)
		req.WriteString("\texample.com/big" + name + " v1.0.0\n")
	}
	req.WriteString(")\n")
	ws := repo(t, map[string]string{"go.mod": req.String(), "go.sum": sums.String(), "main.go": "package main\n"})
	u, _ := url.Parse("file://" + dir)
	w := fetcher(Config{GoProxies: []*url.URL{u}, MaxBytes: 6 << 20}).Fetch(context.Background(), ws)
	var unpacked int64
	mc := runtime.ModCache(ws)
	_ = filepath.WalkDir(mc, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && !strings.Contains(p, "/cache/") {
			if fi, err := d.Info(); err == nil {
				unpacked += fi.Size()
			}
		}
		return nil
	})
	if unpacked > 6<<20 {
		t.Errorf("the module zips unpacked %d bytes under a bound of %d", unpacked, 6<<20)
	}
	over := 0
	for _, s := range w {
		if strings.Contains(s, "is over the size bound") {
			over++
		}
	}
	if over != 2 || unpacked < 4<<20 {
		t.Errorf("warnings %q, %d bytes unpacked; want one module unpacked and two over the size bound", w, unpacked)
	}
}
