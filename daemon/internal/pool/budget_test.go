package pool

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hanzoai/lsp/daemon/internal/lsp"
	"github.com/hanzoai/lsp/daemon/internal/runtime"
	"github.com/hanzoai/lsp/daemon/internal/workspace"
	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
)

// goplsPath is the gopls the real-server tests run: make test's pinned one
// (LSP_TEST_GOPLS), else a go-installed one.
var goplsPath = func() string {
	if p := os.Getenv("LSP_TEST_GOPLS"); p != "" {
		return p
	}
	return "/root/go/bin/gopls"
}()

// testPool is a pool over a fresh store, running the real gopls unjailed
// (the budget logic is the same over the jail's Spawner; TreeRSS covers
// both process shapes), with extra specs after it.
func testPool(t *testing.T, b Budget, extra ...Spec) (*Pool, *Spec) {
	t.Helper()
	return poolOf(t, b, append([]Spec{goplsSpec()}, extra...))
}

// goplsSpec is the reviewed entry of the real gopls, unjailed.
func goplsSpec() Spec {
	return Spec{Spec: runtime.Spec{
		ID: "gopls", Language: "go", Executable: goplsPath, Args: []string{"serve"},
		RequestTimeout: 2 * time.Minute,
	}, Extensions: []string{".go"}}
}

// poolOf is testPool with specs of the test's own, the first of them
// returned.
func poolOf(t *testing.T, b Budget, specs []Spec) (*Pool, *Spec) {
	t.Helper()
	if _, err := os.Stat(goplsPath); err != nil {
		t.Skipf("gopls is not installed at %s: the pool tests run it", goplsPath)
	}
	store, err := workspace.NewStore(t.TempDir(), workspace.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	p := New(store, specs, runtime.Unjailed(log), log)
	p.SetBudget(b)
	t.Cleanup(func() { p.Close(context.Background()) })
	return p, &p.Specs()[0]
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

func tenant(name string) string {
	sum := sha256.Sum256([]byte(name))
	return hex.EncodeToString(sum[:])
}

func key(tn, repo string, i int) workspace.Key {
	sum := sha256.Sum256([]byte(fmt.Sprint(tn, repo, i)))
	return workspace.Key{TenantKey: tenant(tn), Repo: repo, Commit: hex.EncodeToString(sum[:20])}
}

// prepare pushes a tiny Go module (plus pad bytes of filler) under k.
func prepare(t *testing.T, p *Pool, k workspace.Key, pad int) {
	t.Helper()
	if err := tryPrepare(p, k, pad); err != nil {
		t.Fatalf("prepare %s: %v", k, err)
	}
}

// tryPrepare is prepare, reporting its error.
func tryPrepare(p *Pool, k workspace.Key, pad int) error {
	files := map[string]string{
		"go.mod":  "module example.com/m\n\ngo 1.22\n",
		"main.go": "package main\n\nimport \"fmt\"\n\nfunc Greet(name string) string { return \"hello \" + name }\n\nfunc main() { fmt.Println(Greet(\"x\")) }\n",
	}
	if pad > 0 {
		files["pad.txt"] = strings.Repeat("x", pad)
	}
	var entries []*daemonv1.FileEntry
	var body bytes.Buffer
	for _, name := range []string{"go.mod", "main.go", "pad.txt"} {
		s, ok := files[name]
		if !ok {
			continue
		}
		sum := sha256.Sum256([]byte(s))
		entries = append(entries, &daemonv1.FileEntry{Path: name, Size: uint64(len(s)), Sha256: hex.EncodeToString(sum[:])})
		body.WriteString(s)
	}
	id := "00000000-0000-4000-8000-" + k.Commit[:12]
	_, _, err := p.Prepare(context.Background(), k, id, entries, &body, nil, nil)
	return err
}

// use runs one request on k's gopls, as a query does: Acquire, start the
// server, wait for the package to load (a hover answers only then).
func use(t *testing.T, p *Pool, s *Spec, k workspace.Key) error {
	t.Helper()
	w, release, ok := p.Acquire(k)
	if !ok {
		t.Fatalf("%s is not held", k)
	}
	defer release()
	srv, err := w.Server(context.Background(), s)
	if err != nil {
		return err
	}
	return srv.Do(context.Background(), func(ctx context.Context, c *lsp.Client, _ uint64) error {
		doc, err := w.Document("main.go", 1<<20)
		if err != nil {
			return err
		}
		uri := srv.URI("main.go")
		if !c.IsOpen(uri) {
			if err := c.DidOpen(ctx, uri, "go", string(doc.Text)); err != nil {
				return err
			}
		}
		h, err := c.Hover(ctx, uri, lsp.Position{Line: 4, Character: 6})
		if err != nil {
			return err
		}
		if h == nil || !strings.Contains(h.Markdown, "func Greet") {
			return fmt.Errorf("hover: %+v", h)
		}
		return nil
	})
}

// goplsLive counts the gopls processes of this test binary, read from /proc
// independently of the pool's own bookkeeping, and sums their VmRSS.
func goplsLive(t *testing.T) (n int, rss int64) {
	t.Helper()
	procs, err := runtime.ListProcs()
	if err != nil {
		t.Fatal(err)
	}
	for _, pr := range procs {
		if pr.State == 'Z' {
			continue
		}
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pr.PID))
		if err != nil || exe != goplsPath {
			continue
		}
		if pr.PPID == os.Getpid() {
			n++
			rss += vmRSS(pr)
		}
	}
	return n, rss
}

func hasServers(p *Pool, k workspace.Key) bool {
	p.mu.Lock()
	w, ok := p.live[k]
	p.mu.Unlock()
	return ok && w.serverCount() > 0
}

func TestServerBudgetLRU(t *testing.T) {
	p, s := testPool(t, Budget{MaxServers: 2})
	var keys []workspace.Key
	for i := range 4 {
		k := key("a", "repo", i)
		keys = append(keys, k)
		prepare(t, p, k, 0)
	}
	for i, k := range keys {
		if err := use(t, p, s, k); err != nil {
			t.Fatalf("use %d: %v", i, err)
		}
		if n, _ := goplsLive(t); n > 2 {
			t.Fatalf("after workspace %d: %d gopls processes live, budget 2", i, n)
		}
		if u := p.Usage(); u.Servers > 2 {
			t.Fatalf("after workspace %d: %d servers reserved", i, u.Servers)
		}
	}
	// 0 and 1 went, in LRU order, for 2 and 3.
	for i, want := range []bool{false, false, true, true} {
		if got := hasServers(p, keys[i]); got != want {
			t.Errorf("workspace %d has servers = %v, want %v", i, got, want)
		}
	}
	// Touch 2, then start 0 again: 3 is now the least recently used.
	if err := use(t, p, s, keys[2]); err != nil {
		t.Fatal(err)
	}
	if err := use(t, p, s, keys[0]); err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, false, true, false} {
		if got := hasServers(p, keys[i]); got != want {
			t.Errorf("after touching 2: workspace %d has servers = %v, want %v", i, got, want)
		}
	}
	// Evicted servers leave the tree: every workspace still answers.
	for _, k := range keys {
		if !p.store.Published(k) {
			t.Errorf("%s lost its tree to the server budget", k)
		}
	}
}

func TestBusyWorkspaceNotEvicted(t *testing.T) {
	p, s := testPool(t, Budget{MaxServers: 1})
	a, b := key("a", "repo", 0), key("a", "repo", 1)
	prepare(t, p, a, 0)
	prepare(t, p, b, 0)
	if err := use(t, p, s, a); err != nil {
		t.Fatal(err)
	}
	// a is busy: hold its request open while b wants a server.
	_, release, ok := p.Acquire(a)
	if !ok {
		t.Fatal("a not held")
	}
	err := use(t, p, s, b)
	if !errors.Is(err, ErrBudget) {
		t.Fatalf("b started a server past the budget while a was busy: %v", err)
	}
	if !hasServers(p, a) {
		t.Fatal("the busy workspace lost its server")
	}
	// Nor under the disk budget, nor the RSS one.
	p.SetBudget(Budget{MaxServers: 1, MaxDisk: 1, MaxRSS: 1})
	p.Enforce(context.Background())
	if !hasServers(p, a) || !p.store.Published(a) {
		t.Fatal("enforcement evicted a busy workspace")
	}
	release()
	p.SetBudget(Budget{MaxServers: 1})
	if !p.store.Published(b) { // b was idle: the disk budget took it
		prepare(t, p, b, 0)
	}
	if err := use(t, p, s, b); err != nil {
		t.Fatalf("once a was released: %v", err)
	}
	if hasServers(p, a) {
		t.Fatal("a kept its server past the budget once idle")
	}
}

func TestTenantFairness(t *testing.T) {
	p, s := testPool(t, Budget{MaxServers: 3})
	bKey := key("b", "only", 0)
	prepare(t, p, bKey, 0)
	// b's workspace is the oldest: plain LRU would evict it first.
	if err := use(t, p, s, bKey); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		k := key("a", "many", i)
		prepare(t, p, k, 0)
		if err := use(t, p, s, k); err != nil {
			t.Fatalf("a %d: %v", i, err)
		}
		if !hasServers(p, bKey) {
			t.Fatalf("tenant a's workspace %d evicted tenant b's only one", i)
		}
		if n, _ := goplsLive(t); n > 3 {
			t.Fatalf("%d gopls live, budget 3", n)
		}
	}
}

func TestRSSBudget(t *testing.T) {
	p, s := testPool(t, Budget{})
	// Two warm gopls, measured from /proc (the first's RSS right after its
	// load is not what a warm one keeps).
	for i := range 2 {
		k := key("a", "rss", i)
		prepare(t, p, k, 0)
		if err := use(t, p, s, k); err != nil {
			t.Fatal(err)
		}
	}
	_, two := goplsLive(t)
	if two <= 0 {
		t.Fatal("no RSS measured for warm gopls")
	}
	budget := two * 5 / 4 // room for two, not three
	p.SetBudget(Budget{MaxRSS: budget})
	t.Logf("two warm gopls: %d MiB; budget %d MiB", two>>20, budget>>20)
	maxSeen := int64(0)
	for i := 2; i < 8; i++ {
		k := key("a", "rss", i)
		prepare(t, p, k, 0)
		if err := use(t, p, s, k); err != nil {
			t.Fatalf("use %d: %v", i, err)
		}
		p.Enforce(context.Background())
		n, total := goplsLive(t)
		maxSeen = max(maxSeen, total)
		t.Logf("after workspace %d and enforcement: %d gopls, %d MiB", i, n, total>>20)
		if total > budget {
			t.Fatalf("after enforcement: %d bytes of gopls RSS, budget %d", total, budget)
		}
		if u := p.Usage(); u.RSS > budget {
			t.Fatalf("the pool measures %d, budget %d", u.RSS, budget)
		}
	}
	t.Logf("max observed %d MiB, budget %d MiB", maxSeen>>20, budget>>20)
	if n, _ := goplsLive(t); n >= 8 {
		t.Fatalf("%d gopls live for 8 workspaces: the RSS budget evicted nothing", n)
	}
}

// TestTreeOverDiskBudget: a tree larger than the whole disk budget is
// refused before a byte is written, and nothing already held is evicted
// to make room it could never have.
func TestTreeOverDiskBudget(t *testing.T) {
	p, _ := testPool(t, Budget{})
	k0, k1 := key("a", "over", 0), key("a", "over", 1)
	prepare(t, p, k0, 0)
	p.SetBudget(Budget{MaxDisk: 1 << 20})
	files := []*daemonv1.FileEntry{{Path: "big.bin", Size: 2 << 20, Sha256: strings.Repeat("0", 64)}}
	_, _, err := p.Prepare(context.Background(), k1, "00000000-0000-4000-8000-000000000001", files, strings.NewReader(""), nil, nil)
	if !errors.Is(err, ErrTreeOverBudget) {
		t.Fatalf("prepare of a tree over the budget: %v", err)
	}
	if p.store.Published(k1) || !p.store.Published(k0) {
		t.Fatalf("published: over-budget tree %v, held tree %v", p.store.Published(k1), p.store.Published(k0))
	}
}

// TestTreeOverDiskBudgetOnDisk: a tree is held to the disk budget by what
// it will take on disk, as the budget measures published trees (allocated
// blocks), not by the bytes its manifest declares: 1,000 one-byte files
// declare 1,000 bytes, within a budget of 1 MiB, and take 4 MiB.
func TestTreeOverDiskBudgetOnDisk(t *testing.T) {
	p, _ := testPool(t, Budget{MaxDisk: 1 << 20})
	k := key("a", "tiny", 0)
	sum := sha256.Sum256([]byte("x"))
	var files []*daemonv1.FileEntry
	for i := range 1000 {
		files = append(files, &daemonv1.FileEntry{Path: fmt.Sprintf("f%04d", i), Size: 1, Sha256: hex.EncodeToString(sum[:])})
	}
	_, _, err := p.Prepare(context.Background(), k, "00000000-0000-4000-8000-000000000002", files, strings.NewReader(strings.Repeat("x", len(files))), nil, nil)
	if !errors.Is(err, ErrTreeOverBudget) {
		t.Fatalf("prepare of 1,000 one-byte files under a 1 MiB disk budget: %v", err)
	}
	if p.store.Published(k) {
		t.Fatal("a tree over the budget was published")
	}
	// A tree being written is reserved the same way: one byte is a block,
	// and the tree's directory another.
	k1 := key("a", "tiny", 1)
	pw, prepared := blockedPrepare(t, p, k1, "one.txt", "x")
	p.mu.Lock()
	reserved := p.incoming[k1]
	p.mu.Unlock()
	if _, err := io.WriteString(pw, "x"); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	if err := <-prepared; err != nil {
		t.Fatalf("prepare %s: %v", k1, err)
	}
	if reserved != 2*4096 {
		t.Fatalf("a one-byte tree being written reserved %d bytes, want %d", reserved, 2*4096)
	}
}

// TestTreeDiskEstimate: files by whole blocks, a block for each distinct
// directory and the tree's own.
func TestTreeDiskEstimate(t *testing.T) {
	const b = 4096
	for _, tc := range []struct {
		files map[string]uint64
		want  int64
	}{
		{map[string]uint64{"empty": 0}, b},
		{map[string]uint64{"one": 1}, 2 * b},
		{map[string]uint64{"block": b, "over": b + 1}, 4 * b},
		{map[string]uint64{"a/b/x": 1, "a/b/y": 1, "a/c/z": b + 1, "a/w": 0}, (1+1+2)*b + (1+3)*b},
		{map[string]uint64{"d0/a/a/a/f": 0, "d1/a/a/a/f": 0}, (1 + 8) * b},
	} {
		var files []*daemonv1.FileEntry
		for p, n := range tc.files {
			files = append(files, &daemonv1.FileEntry{Path: p, Size: n})
		}
		if got := treeDiskEstimate(files); got != tc.want {
			t.Errorf("treeDiskEstimate(%v) = %d, want %d", tc.files, got, tc.want)
		}
	}
}

func TestDiskBudget(t *testing.T) {
	p, s := testPool(t, Budget{})
	const pad = 8 << 20 // large beside what gopls's caches grow by meanwhile
	k0, k1, k2 := key("a", "disk", 0), key("a", "disk", 1), key("a", "disk", 2)
	prepare(t, p, k0, pad)
	if err := use(t, p, s, k0); err != nil {
		t.Fatal(err)
	}
	prepare(t, p, k1, pad)
	one := p.store.TreeBytes(k0)
	homes, _ := p.store.Homes()
	var homesBytes int64
	for _, h := range homes {
		homesBytes += homeBytes(t, p.store, h)
	}
	// Room for the home and two trees, not three.
	p.SetBudget(Budget{MaxDisk: homesBytes + 2*one + one/2})
	if err := use(t, p, s, k1); err != nil { // k1 is now more recent than k0
		t.Fatal(err)
	}
	homesBytes = 0
	for _, h := range homes {
		homesBytes += homeBytes(t, p.store, h)
	}
	p.SetBudget(Budget{MaxDisk: homesBytes + 2*one + one/2})
	prepare(t, p, k2, pad)
	if p.store.Published(k0) {
		t.Fatal("the least recently used tree survived the disk budget")
	}
	if !p.store.Published(k1) || !p.store.Published(k2) {
		t.Fatal("a recent tree was evicted")
	}
	if _, _, ok := p.Acquire(k0); ok {
		t.Fatal("an evicted workspace is still held: the query would not answer NEEDS_TREE")
	}
	if n, _ := goplsLive(t); n != 1 {
		t.Fatalf("%d gopls live; the evicted workspace's server must have stopped", n)
	}
	// The proxy prepares it again; it serves.
	prepare(t, p, k0, pad)
	if err := use(t, p, s, k0); err != nil {
		t.Fatal(err)
	}
}

// TestRSSEstimateReserves: a spec's reviewed estimate is reserved even
// where the peak measured so far is smaller (before any server of it ran,
// the peak is nothing): starting one more server evicts what the estimate
// does not fit beside.
func TestRSSEstimateReserves(t *testing.T) {
	p, s := testPool(t, Budget{})
	startOverEstimate(t, p, s, "estimate")
	if n, _ := goplsLive(t); n != 1 {
		t.Fatalf("%d gopls live: the estimate reserved nothing", n)
	}
}

// startOverEstimate starts the servers of two workspaces of name: k0's,
// then, under a budget of three measured servers and an estimate that
// fills it (only the RSS budget set), k1's, which evicts k0's for memory.
func startOverEstimate(t *testing.T, p *Pool, s *Spec, name string) (k0, k1 workspace.Key) {
	t.Helper()
	k0, k1 = key("a", name, 0), key("a", name, 1)
	prepare(t, p, k0, 0)
	if err := use(t, p, s, k0); err != nil {
		t.Fatal(err)
	}
	_, one := goplsLive(t)
	if one <= 0 {
		t.Fatal("no RSS measured for gopls")
	}
	p.SetBudget(Budget{MaxRSS: 3 * one})
	p.mu.Lock()
	p.specs[0].RSSEstimate = 3 * one
	p.mu.Unlock()
	s.RSSEstimate = 3 * one
	prepare(t, p, k1, 0)
	if err := use(t, p, s, k1); err != nil {
		t.Fatal(err)
	}
	return k0, k1
}

// TestRSSEvictionKills: a server evicted for memory is killed, never asked
// to shut down. Given its shutdown grace it would go on holding its memory,
// counted by the kernel though no longer by the pool, while the server it
// makes room for grows.
func TestRSSEvictionKills(t *testing.T) {
	p, s := testPool(t, Budget{})
	tap := &stdinTap{Spawner: p.spawner, sent: map[string]*bytes.Buffer{}}
	p.spawner = tap // no server has started yet
	k0, _ := startOverEstimate(t, p, s, "kill")
	if hasServers(p, k0) {
		t.Fatal("k0's server was not evicted")
	}
	w0, release, ok := p.Acquire(k0)
	if !ok {
		t.Fatal("k0 is not held")
	}
	release()
	if !tap.saw(w0.Dir, "initialize") {
		t.Fatal("the tap saw nothing sent to k0's server")
	}
	for _, m := range []string{"shutdown", "exit"} {
		if tap.saw(w0.Dir, m) {
			t.Errorf("the server evicted for memory was sent %q: it was given its shutdown grace, not killed", m)
		}
	}
}

// stdinTap keeps what the pool writes to each server's stdin, by the
// server's workspace root.
type stdinTap struct {
	runtime.Spawner
	mu   sync.Mutex
	sent map[string]*bytes.Buffer
}

func (t *stdinTap) Spawn(ctx context.Context, spec runtime.Spec, ws runtime.Workspace) (runtime.Process, error) {
	proc, err := t.Spawner.Spawn(ctx, spec, ws)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	t.sent[ws.Root] = &bytes.Buffer{}
	t.mu.Unlock()
	return tappedProcess{proc, tappedStdin{proc.Stdin(), t, ws.Root}}, nil
}

// saw reports whether the server of root was sent a message of method.
func (t *stdinTap) saw(root, method string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.sent[root]
	return b != nil && bytes.Contains(b.Bytes(), []byte(`"method":"`+method+`"`))
}

type tappedProcess struct {
	runtime.Process
	stdin tappedStdin
}

func (p tappedProcess) Stdin() io.WriteCloser { return p.stdin }

type tappedStdin struct {
	io.WriteCloser
	tap  *stdinTap
	root string
}

func (s tappedStdin) Write(b []byte) (int, error) {
	s.tap.mu.Lock()
	s.tap.sent[s.root].Write(b)
	s.tap.mu.Unlock()
	return s.WriteCloser.Write(b)
}

// SetWriteDeadline keeps the pipe's deadlines, which the connection uses.
func (s tappedStdin) SetWriteDeadline(d time.Time) error {
	if f, ok := s.WriteCloser.(interface{ SetWriteDeadline(time.Time) error }); ok {
		return f.SetWriteDeadline(d)
	}
	return os.ErrNoDeadline
}

// TestGenerationsNeverRepeat: a workspace's generations of one server go
// on across the Servers started for it — the budget stops its servers and
// a question starts a new one — and a tree adopted by a new daemon starts
// past any generation the earlier one gave. A cursor bound to a generation
// must not match a different server's pages.
func TestGenerationsNeverRepeat(t *testing.T) {
	p, spec := testPool(t, Budget{})
	k := key("a", "gens", 0)
	prepare(t, p, k, 0)
	w, release, ok := p.Acquire(k)
	if !ok {
		t.Fatal("not acquired")
	}
	defer release()
	gen := func(w *Workspace) uint64 {
		t.Helper()
		srv, err := w.Server(context.Background(), spec)
		if err != nil {
			t.Fatal(err)
		}
		return srv.Info().Generation
	}
	first := gen(w)
	// The budget stops w's servers (as for another workspace's room).
	p.mu.Lock()
	slots := w.detachLocked()
	p.mu.Unlock()
	w.stopDetached(context.Background(), slots)
	if again := gen(w); again <= first {
		t.Fatalf("a server started after the budget stopped generation %d has generation %d", first, again)
	}

	// Another daemon over the same store adopts the tree.
	p.Close(context.Background())
	log := slog.New(slog.DiscardHandler)
	q := New(p.store, p.specs, runtime.Unjailed(log), log)
	t.Cleanup(func() { q.Close(context.Background()) })
	adopted, releaseAdopted, ok := q.Acquire(k)
	if !ok {
		t.Fatal("the tree was not adopted")
	}
	defer releaseAdopted()
	if g := gen(adopted); g <= first+1 || g <= uint64(time.Now().Add(-time.Hour).Unix()) {
		t.Fatalf("the adopted tree's server has generation %d: it may repeat the earlier daemon's", g)
	}
}
