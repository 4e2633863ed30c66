package rpc

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"weak"

	"github.com/hanzoai/lsp/daemon/internal/deps"
	"github.com/hanzoai/lsp/daemon/internal/deps/depstest"
	"github.com/hanzoai/lsp/daemon/internal/pool"
	"github.com/hanzoai/lsp/daemon/internal/query"
	"github.com/hanzoai/lsp/daemon/internal/runtime"
	"github.com/hanzoai/lsp/daemon/internal/uri"
	"github.com/hanzoai/lsp/daemon/internal/workspace"
	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// depsDaemon is a second daemon like the fixture's, with a dependency
// phase over a hermetic file:// GOPROXY; it stops with the test.
// extra specs join gopls.
func depsDaemon(t *testing.T, mirror string, extra ...pool.Spec) daemonv1.DaemonClient {
	t.Helper()
	srv := depsServer(t, mirror, extra...)
	// Not under t.TempDir: a socket's path is bounded (108 bytes), and
	// that one holds the test's name.
	dir, err := os.MkdirTemp("", "rpc-sock-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	sock := filepath.Join(dir, "d.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(append(ServerOptions(), grpc.WaitForHandlers(true))...)
	srv.Register(g)
	served := make(chan error, 1)
	go func() { served <- g.Serve(ln) }()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		g.Stop()
		<-served
	})
	return daemonv1.NewDaemonClient(conn)
}

// depsServer is depsDaemon's Server, without gRPC; its pool closes with
// the test.
func depsServer(t *testing.T, mirror string, extra ...pool.Spec) *Server {
	t.Helper()
	root, err := os.MkdirTemp("", "rpc-deps-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeTree(root) })
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	store, err := workspace.NewStore(filepath.Join(root, "daemon"), workspace.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	p := pool.New(store, append([]pool.Spec{{
		Spec: runtime.Spec{
			ID: "gopls", Language: "go", Extensions: []string{".go"},
			Executable: fx.gopls, Args: []string{"serve"}, RequestTimeout: 60 * time.Second,
			Folders: deps.Folders("go"), // as the daemon wires it
		},
		Extensions: []string{".go"},
	}}, extra...), runtime.Unjailed(log), log)
	runner := &query.Runner{Pool: p, MaxDocument: 8 << 20, Externals: func(w *pool.Workspace) []uri.External {
		return []uri.External{{Dir: runtime.ModCache(runtime.Workspace{Root: w.Dir, Home: w.Home})}}
	}}
	cfg, err := deps.FromEnv(func(k string) string {
		if k == "LSP_DEPS_GO_PROXY" {
			if strings.HasPrefix(mirror, "http://") {
				return mirror
			}
			return (&url.URL{Scheme: "file", Path: mirror}).String()
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		p.Close(ctx)
	})
	return &Server{Pool: p, Runner: runner, Log: log, Deps: deps.New(cfg, log)}
}

// writeDep writes example.com/dep v1.0.0 (func Hello) into a GOPROXY
// directory and returns the go.sum lines for it.
func writeDep(t *testing.T, dir string) string {
	t.Helper()
	sum, err := depstest.Write(dir, depstest.Module{Path: "example.com/dep", Version: "v1.0.0", Files: map[string]string{
		"go.mod": "module example.com/dep\n\ngo 1.22\n",
		"dep.go": "// Package dep is a dependency.\npackage dep\n\n// Hello greets.\nfunc Hello() string { return \"hello\" }\n",
	}})
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

func pushTo(t *testing.T, c daemonv1.DaemonClient, k *daemonv1.WorkspaceKey, files ...file) *daemonv1.PrepareResponse {
	t.Helper()
	entries, data := treeOf(files...)
	stream, err := c.Prepare(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range append([]*daemonv1.PrepareRequest{headerMsg(k, newID(), entries)}, dataMsgs(data, 1<<16)...) {
		if err := stream.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := stream.CloseAndRecv()
	if err != nil || !resp.GetPrepared() {
		t.Fatalf("prepare: %v %v", resp, err)
	}
	return resp
}

// TestDependencyDefinition: after a prepare with a dependency phase over a
// hermetic file:// mirror, gopls (offline) resolves an import of the
// dependency, and a definition into it comes back external with its
// module. A go.sum mismatch is refused as a warning in the prepare answer.
func TestDependencyDefinition(t *testing.T) {
	if fx.gopls == "" {
		t.Skip("no gopls: set LSP_TEST_GOPLS or install it at /root/go/bin/gopls")
	}
	mirror := t.TempDir()
	sum := writeDep(t, mirror)
	c := depsDaemon(t, mirror)
	gomod := []byte("module example.com/app\n\ngo 1.22\n\nrequire example.com/dep v1.0.0\n")
	mainGo := []byte("package main\n\nimport \"example.com/dep\"\n\nfunc main() { println(dep.Hello()) }\n")

	k := keyFor(t, "good")
	if w := pushTo(t, c, k, file{"go.mod", gomod}, file{"go.sum", []byte(sum)}, file{"main.go", mainGo}).GetWarnings(); len(w) != 0 {
		t.Fatalf("prepare warnings %q", w)
	}
	resp, err := c.Query(ctxT(t), &daemonv1.QueryRequest{Workspace: k, Op: daemonv1.Op_OP_DEFINITION, Path: "main.go",
		Position: &daemonv1.Position{Line: 4, Character: uint32(strings.Index(string(mainGo[strings.Index(string(mainGo), "func main"):]), "Hello") + 1)}, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	locs := resp.GetLocations().GetItems()
	if resp.GetStatus() != daemonv1.Status_STATUS_OK || len(locs) != 1 || !locs[0].GetExternal() || locs[0].GetModule() != "example.com/dep@v1.0.0" || locs[0].GetPath() != "dep.go" {
		t.Fatalf("definition of dep.Hello: %v", resp)
	}

	// A root go.mod without a go directive, and a nested module (replace
	// ../) requiring what the root does not: through the publishing
	// rename, the nested module loads with its own requirement.
	subGo := []byte("package sub\n\nimport \"example.com/dep\"\n\nfunc S() string { return dep.Hello() }\n")
	k = keyFor(t, "nested")
	if w := pushTo(t, c, k, file{"go.mod", []byte("module example.com/app\n")}, file{"app.go", []byte("package app\n")},
		file{"sub/go.mod", []byte("module example.com/app/sub\n\ngo 1.22\n\nrequire (\n\texample.com/app v0.0.0\n\texample.com/dep v1.0.0\n)\n\nreplace example.com/app => ../\n")},
		file{"sub/go.sum", []byte(sum)}, file{"sub/sub.go", subGo}).GetWarnings(); len(w) != 0 {
		t.Fatalf("prepare warnings %q", w)
	}
	resp, err = c.Query(ctxT(t), &daemonv1.QueryRequest{Workspace: k, Op: daemonv1.Op_OP_DEFINITION, Path: "sub/sub.go",
		Position: &daemonv1.Position{Line: 4, Character: uint32(strings.Index("func S() string { return dep.Hello() }", "Hello") + 1)}, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	locs = resp.GetLocations().GetItems()
	if resp.GetStatus() != daemonv1.Status_STATUS_OK || len(locs) != 1 || locs[0].GetModule() != "example.com/dep@v1.0.0" {
		t.Fatalf("definition of dep.Hello in the nested module: %v", resp)
	}

	bad := strings.Replace(sum, "example.com/dep v1.0.0 h1:", "example.com/dep v1.0.0 h1:AAAA", 1)
	w := pushTo(t, c, keyFor(t, "mismatch"), file{"go.mod", gomod}, file{"go.sum", []byte(bad)}, file{"main.go", mainGo}).GetWarnings()
	if len(w) == 0 || !strings.Contains(w[0], "example.com/dep@v1.0.0: does not match its go.sum hash") {
		t.Fatalf("prepare warnings %q, want the go.sum mismatch", w)
	}
}

// heldMirror serves writeDep's module as a Go module mirror that holds
// every request until release (called at the latest by the test's
// clean-up); sum is the module's go.sum lines.
func heldMirror(t *testing.T) (mirror *httptest.Server, sum string, release func()) {
	t.Helper()
	dir := t.TempDir()
	sum = writeDep(t, dir)
	hold := make(chan struct{})
	files := http.FileServer(http.Dir(dir))
	mirror = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hold:
		case <-r.Context().Done():
			return
		}
		files.ServeHTTP(w, r)
	}))
	t.Cleanup(mirror.Close)
	var once sync.Once
	release = func() { once.Do(func() { close(hold) }) }
	t.Cleanup(release)
	return mirror, sum, release
}

// TestLateDependencyPhaseFocus: a prepare focused on a file whose server
// reads no dependencies answers while the dependency phase still runs
// behind it (the mirror holds every request), and says so; a question
// for the Go server meanwhile waits for the phase: once the mirror
// answers, gopls starts with the module in place and its definition
// lands in the dependency, as after a phase that ran before publishing.
func TestLateDependencyPhaseFocus(t *testing.T) {
	if fx.gopls == "" {
		t.Skip("no gopls: set LSP_TEST_GOPLS or install it at /root/go/bin/gopls")
	}
	mirror, sum, release := heldMirror(t)
	// A second gopls stands for a server that reads no dependencies (the
	// JSON, YAML and shell servers of the image): only its start matters.
	notes := pool.Spec{Spec: runtime.Spec{ID: "notes", Language: "plaintext", Extensions: []string{".txt"},
		Executable: fx.gopls, Args: []string{"serve"}, RequestTimeout: 60 * time.Second}, Extensions: []string{".txt"}, NoDependencies: true}
	c := depsDaemon(t, mirror.URL, notes)

	mainGo := []byte("package main\n\nimport \"example.com/dep\"\n\nfunc main() { println(dep.Hello()) }\n")
	k := keyFor(t, "late")
	entries, data := treeOf(file{"go.mod", []byte("module example.com/app\n\ngo 1.22\n\nrequire example.com/dep v1.0.0\n")},
		file{"go.sum", []byte(sum)}, file{"main.go", mainGo}, file{"notes.txt", []byte("read me\n")})
	stream, err := c.Prepare(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	hdr := headerMsg(k, newID(), entries)
	hdr.GetHeader().FocusPath = "notes.txt"
	hdr.GetHeader().TreeWarnings = []string{"dropped dangling symlink: link"}
	for _, m := range append([]*daemonv1.PrepareRequest{hdr}, dataMsgs(data, 1<<16)...) {
		if err := stream.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := stream.CloseAndRecv()
	if err != nil || !resp.GetPrepared() {
		t.Fatalf("prepare: %v %v", resp, err)
	}
	if !slices.ContainsFunc(resp.GetWarnings(), func(w string) bool { return strings.Contains(w, "the dependency phase was still running") }) {
		t.Fatalf("prepare warnings %q: the answer does not say the phase still runs", resp.GetWarnings())
	}
	// What a later prepare answer about the revision reads meanwhile: the
	// tree's own warnings.
	caps, err := c.Capabilities(ctxT(t), &daemonv1.CapabilitiesRequest{Workspace: k})
	if err != nil || !slices.Contains(caps.GetWarnings(), "dropped dangling symlink: link") {
		t.Fatalf("capabilities while the phase runs: %q, %v", caps.GetWarnings(), err)
	}

	type answer struct {
		resp *daemonv1.QueryResponse
		err  error
	}
	asked := make(chan answer, 1)
	go func() {
		r, err := c.Query(ctxT(t), &daemonv1.QueryRequest{Workspace: k, Op: daemonv1.Op_OP_DEFINITION, Path: "main.go",
			Position: &daemonv1.Position{Line: 4, Character: uint32(strings.Index("func main() { println(dep.Hello()) }", "Hello") + 1)}, Limit: 10})
		asked <- answer{r, err}
	}()
	// Long enough for a gopls that did not wait to have loaded the module
	// without its dependency.
	time.Sleep(time.Second)
	release()
	a := <-asked
	if a.err != nil {
		t.Fatal(a.err)
	}
	locs := a.resp.GetLocations().GetItems()
	if a.resp.GetStatus() != daemonv1.Status_STATUS_OK || len(locs) != 1 || locs[0].GetModule() != "example.com/dep@v1.0.0" {
		t.Fatalf("definition of dep.Hello after a late phase: %v", a.resp)
	}
}

// TestLateDependencyPhaseDropsTheManifest: a late dependency phase
// outlives its prepare by up to its timeout; what it keeps of the push
// must not include the decoded header, whose manifest holds an entry
// with its path for each file (up to 100,000). While the phase is held
// by the mirror, the header's first file entry is collected.
func TestLateDependencyPhaseDropsTheManifest(t *testing.T) {
	if fx.gopls == "" {
		t.Skip("no gopls: set LSP_TEST_GOPLS or install it at /root/go/bin/gopls")
	}
	mirror, sum, release := heldMirror(t)
	notes := pool.Spec{Spec: runtime.Spec{ID: "notes", Language: "plaintext", Extensions: []string{".txt"},
		Executable: fx.gopls, Args: []string{"serve"}, RequestTimeout: 60 * time.Second}, Extensions: []string{".txt"}, NoDependencies: true}
	srv := depsServer(t, mirror.URL, notes)

	k := keyFor(t, "late-manifest")
	// Built here, so that the test itself keeps no reference to the
	// header: only the weak pointer.
	stream, first := func() (*fakeStream, weak.Pointer[daemonv1.FileEntry]) {
		// No Go file: no server is deferred (startDeferred), and the
		// requirement alone makes the phase fetch.
		entries, data := treeOf(file{"go.mod", []byte("module example.com/app\n\ngo 1.22\n\nrequire example.com/dep v1.0.0\n")},
			file{"go.sum", []byte(sum)}, file{"notes.txt", []byte("read me\n")})
		hdr := headerMsg(k, newID(), entries)
		hdr.GetHeader().FocusPath = "notes.txt"
		hdr.GetHeader().TreeWarnings = []string{"dropped dangling symlink: link"}
		return &fakeStream{ctx: ctxT(t), msgs: append([]*daemonv1.PrepareRequest{hdr}, dataMsgs(data, 1<<16)...)}, weak.Make(entries[0])
	}()
	if err := srv.Prepare(stream); err != nil || !stream.resp.GetPrepared() {
		t.Fatalf("prepare: %v, %v", stream.resp, err)
	}
	w, done, ok := srv.Pool.Acquire(parseKey(t, k))
	if !ok {
		t.Fatal("the prepared workspace is not live")
	}
	ended := w.DepsEnded()
	done()
	goruntime.GC()
	goruntime.GC()
	if first.Value() != nil {
		t.Fatal("the header's manifest is still reachable while the late dependency phase runs")
	}
	select {
	case <-ended:
		t.Fatal("the dependency phase ended before the check: the mirror did not hold it")
	default:
	}
	release()
	<-ended
}
