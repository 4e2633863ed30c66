package rpc

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hanzoai/lsp/daemon/internal/pool"
	"github.com/hanzoai/lsp/daemon/internal/query"
	"github.com/hanzoai/lsp/daemon/internal/runtime"
	"github.com/hanzoai/lsp/daemon/internal/uri"
	"github.com/hanzoai/lsp/daemon/internal/workspace"
	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// daemonLog keeps what the daemon logged (warnings and up).
var daemonLog lockedBuffer

type lockedBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// The whole test binary shares one daemon: a real gRPC server on a unix
// socket in a temporary directory, over a real pool and store, starting the
// pinned gopls with the unjailed spawner. Tests isolate themselves by
// workspace key.
var fx *fixture

type fixture struct {
	root   string
	store  *workspace.Store
	pool   *pool.Pool
	runner *query.Runner
	grpc   *grpc.Server
	conn   *grpc.ClientConn
	client daemonv1.DaemonClient
	gopls  string // "" when no gopls is available
	// typescript is set when the reviewed TypeScript server runs too.
	typescript bool
	clangd     bool // the pinned clangd runs too (make deps installs it)
	served     chan error
}

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	// As the daemon does: orphans of a server's process group are reaped
	// here, so none can outlive the test unseen.
	if err := runtime.BecomeSubreaper(); err != nil {
		fmt.Fprintln(os.Stderr, "rpc test:", err)
		return 1
	}
	root, err := os.MkdirTemp("", "rpc-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer removeTree(root)
	fx, err = startFixture(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rpc test:", err)
		return 1
	}
	code := m.Run()
	fx.stop()
	if code != 0 {
		return code
	}
	// Everything was stopped: no goroutine and no server process remains.
	if err := goleak.Find(goleak.IgnoreTopFunction("github.com/hanzoai/lsp/daemon/internal/runtime.spawnLoop")); err != nil {
		fmt.Fprintln(os.Stderr, "goroutine leak:", err)
		return 1
	}
	if kids := children(); len(kids) > 0 {
		fmt.Fprintf(os.Stderr, "processes survived the pool's Close: %v\n", kids)
		return 1
	}
	return 0
}

func startFixture(root string) (*fixture, error) {
	log := slog.New(slog.NewTextHandler(io.MultiWriter(os.Stderr, &daemonLog), &slog.HandlerOptions{Level: slog.LevelWarn}))
	store, err := workspace.NewStore(filepath.Join(root, "daemon"), workspace.DefaultLimits())
	if err != nil {
		return nil, err
	}
	f := &fixture{root: root, store: store, gopls: findGopls(), served: make(chan error, 1)}
	var specs []pool.Spec
	if f.gopls != "" {
		// As app.qualify builds it from the reviewed configuration.
		specs = append(specs, pool.Spec{
			Spec: runtime.Spec{
				ID: "gopls", Language: "go", Extensions: []string{".go"},
				Executable: f.gopls, Args: []string{"serve"}, RequestTimeout: 60 * time.Second,
			},
			Extensions: []string{".go"},
		})
	}
	if ts := findTypeScript(); ts != "" {
		// As the reviewed entry runs it: the pinned tsserver, one
		// semantic server, no type acquisition.
		opts := fmt.Sprintf(`{"tsserver":{"path":%q,"useSyntaxServer":"never"},"disableAutomaticTypingAcquisition":true}`,
			filepath.Join(ts, "node_modules", "typescript", "lib", "tsserver.js"))
		node, _ := exec.LookPath("node")
		specs = append(specs, pool.Spec{
			Spec: runtime.Spec{
				ID: "typescript-language-server", Language: "typescript", Extensions: []string{".ts"},
				Executable: node, Args: []string{filepath.Join(ts, "node_modules", "typescript-language-server", "lib", "cli.mjs"), "--stdio"},
				InitializationOptions: []byte(opts), RequestTimeout: 60 * time.Second,
			},
			Extensions: []string{".ts"},
		})
		f.typescript = true
	}
	if _, err := os.Stat(pinnedClangd); err == nil {
		// As the reviewed entry runs it (deploy/images/servers.json.in).
		specs = append(specs, pool.Spec{
			Spec: runtime.Spec{
				ID: "clangd", Language: "c", Extensions: []string{".c", ".h"},
				Executable: pinnedClangd, Args: []string{"--background-index", "--enable-config=0", "--log=error", "--header-insertion=never", "--pch-storage=memory", "-j=2"},
				RequestTimeout: 60 * time.Second,
			},
			Extensions: []string{".c", ".h"},
		})
		f.clangd = true
	}
	f.pool = pool.New(store, specs, runtime.Unjailed(log), log)
	goroot := strings.TrimSpace(goEnv("GOROOT"))
	runner := &query.Runner{
		Pool:        f.pool,
		MaxDocument: 8 << 20,
		Externals: func(w *pool.Workspace) []uri.External {
			ex := []uri.External{{Dir: runtime.ModCache(runtime.Workspace{Root: w.Dir, Home: w.Home})}}
			if goroot != "" {
				ex = append(ex, uri.External{Dir: filepath.Join(goroot, "src"), Module: "std@" + strings.TrimSpace(goEnv("GOVERSION"))})
			}
			return ex
		},
	}
	sock := filepath.Join(root, "d.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return nil, err
	}
	// Stop waits for the handlers it cancels: the leak check after the
	// pool's Close must not race one still starting a server.
	f.grpc = grpc.NewServer(append(ServerOptions(), grpc.WaitForHandlers(true))...)
	f.runner = runner
	// Long enough that a test sees the deferred servers wait for the
	// first answer, not for the grace (TestPrepareFocus).
	(&Server{Pool: f.pool, Runner: runner, Log: log, DeferGrace: time.Minute}).Register(f.grpc)
	go func() { f.served <- f.grpc.Serve(ln) }()
	f.conn, err = grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		f.grpc.Stop()
		return nil, err
	}
	f.client = daemonv1.NewDaemonClient(f.conn)
	return f, nil
}

func (f *fixture) stop() {
	_ = f.conn.Close()
	f.grpc.Stop()
	<-f.served
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f.pool.Close(ctx)
}

// findTypeScript is $LSP_TEST_TYPESCRIPT (the directory make deps installs
// typescript-language-server and typescript into) when it and node exist.
func findTypeScript() string {
	dir := os.Getenv("LSP_TEST_TYPESCRIPT")
	if dir == "" {
		return ""
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return ""
	}
	if _, err := os.Stat(filepath.Join(abs, "node_modules", "typescript-language-server", "lib", "cli.mjs")); err != nil {
		return ""
	}
	if _, err := exec.LookPath("node"); err != nil {
		return ""
	}
	return abs
}

// pinnedClangd is the reviewed entry's clangd (Debian clangd-19).
const pinnedClangd = "/usr/lib/llvm-19/bin/clangd"

// findGopls prefers $LSP_TEST_GOPLS, then the pinned install.
func findGopls() string {
	for _, p := range []string{os.Getenv("LSP_TEST_GOPLS"), "/root/go/bin/gopls"} {
		if p == "" {
			continue
		}
		if abs, err := filepath.Abs(p); err == nil {
			if fi, err := os.Stat(abs); err == nil && fi.Mode().IsRegular() {
				return abs
			}
		}
	}
	return ""
}

func goEnv(name string) string {
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		return ""
	}
	return string(out)
}

// children lists the live processes whose parent is this test binary.
func children() []string {
	self := strconv.Itoa(os.Getpid())
	entries, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid …; comm may hold spaces and parentheses.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 1 && f[1] == self {
			out = append(out, e.Name()+" "+s[:i+1])
		}
	}
	return out
}

// removeTree deletes a directory the store and gopls made read-only.
func removeTree(root string) {
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	_ = os.RemoveAll(root)
}

var keySeq atomic.Int64

// keyFor is a workspace key of its own for each call, also when a test
// runs again in the same process (-count).
func keyFor(t *testing.T, tag string) *daemonv1.WorkspaceKey {
	t.Helper()
	name := fmt.Sprintf("%s/%s/%d", t.Name(), tag, keySeq.Add(1))
	tenant := sha256.Sum256([]byte("tenant/" + name))
	commit := sha1.Sum([]byte("commit/" + name))
	return &daemonv1.WorkspaceKey{TenantKey: hex.EncodeToString(tenant[:]), Repo: "repo", Commit: hex.EncodeToString(commit[:])}
}

func parseKey(t *testing.T, k *daemonv1.WorkspaceKey) workspace.Key {
	t.Helper()
	key, err := workspace.ParseKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

var idSeq struct {
	sync.Mutex
	n int
}

// newID is a fresh prepare id (a UUID, as the proxy sends).
func newID() string {
	idSeq.Lock()
	defer idSeq.Unlock()
	idSeq.n++
	return fmt.Sprintf("00000000-0000-4000-8000-%012x", idSeq.n)
}

// file is one file of a pushed tree.
type file struct {
	path string
	data []byte
}

// treeOf returns the manifest of files and the concatenation of their
// bytes, in the order given.
func treeOf(files ...file) ([]*daemonv1.FileEntry, []byte) {
	var entries []*daemonv1.FileEntry
	var all []byte
	for _, f := range files {
		sum := sha256.Sum256(f.data)
		entries = append(entries, &daemonv1.FileEntry{Path: f.path, Size: uint64(len(f.data)), Sha256: hex.EncodeToString(sum[:])})
		all = append(all, f.data...)
	}
	return entries, all
}

// readTree reads a directory of files into a tree, sorted by path.
func readTree(t *testing.T, dir string) []file {
	t.Helper()
	var out []file
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out = append(out, file{path: filepath.ToSlash(rel), data: b})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].path < out[j].path })
	return out
}

func headerMsg(k *daemonv1.WorkspaceKey, id string, entries []*daemonv1.FileEntry) *daemonv1.PrepareRequest {
	return &daemonv1.PrepareRequest{Part: &daemonv1.PrepareRequest_Header{Header: &daemonv1.PrepareHeader{Workspace: k, PrepareId: id, Files: entries}}}
}

// dataMsgs cuts data into messages of at most chunk bytes.
func dataMsgs(data []byte, chunk int) []*daemonv1.PrepareRequest {
	var out []*daemonv1.PrepareRequest
	for len(data) > 0 {
		n := min(chunk, len(data))
		out = append(out, &daemonv1.PrepareRequest{Part: &daemonv1.PrepareRequest_Data{Data: data[:n]}})
		data = data[n:]
	}
	return out
}

// pushResult is what one Prepare stream came to.
type pushResult struct {
	resp *daemonv1.PrepareResponse
	err  error
	eof  bool // Send returned io.EOF: the server answered before reading everything
}

// push sends msgs on one Prepare stream as a client does: a Send that
// returns io.EOF means the server has answered, and CloseAndRecv says how.
func push(ctx context.Context, msgs ...*daemonv1.PrepareRequest) pushResult {
	stream, err := fx.client.Prepare(ctx)
	if err != nil {
		return pushResult{err: err}
	}
	var r pushResult
	for _, m := range msgs {
		if err := stream.Send(m); err != nil {
			if errors.Is(err, io.EOF) {
				r.eof = true
				break
			}
			return pushResult{err: err}
		}
	}
	r.resp, r.err = stream.CloseAndRecv()
	return r
}

// prepareTree pushes a whole tree in chunks and expects it prepared.
func prepareTree(t *testing.T, k *daemonv1.WorkspaceKey, id string, files ...file) *daemonv1.PrepareResponse {
	t.Helper()
	entries, data := treeOf(files...)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r := push(ctx, append([]*daemonv1.PrepareRequest{headerMsg(k, id, entries)}, dataMsgs(data, 7)...)...)
	if r.err != nil {
		t.Fatalf("prepare: %v", r.err)
	}
	if !r.resp.GetPrepared() || r.resp.GetPrepareId() != id {
		t.Fatalf("prepare answered prepared=%v id=%q, want true %q", r.resp.GetPrepared(), r.resp.GetPrepareId(), id)
	}
	return r.resp
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}
