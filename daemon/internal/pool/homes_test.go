package pool

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
	"github.com/hanzoai/lsp/daemon/internal/workspace"
	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
)

// TestHomeWalkedOnlyWhenWritten: the disk budget walks a home again only
// when something of its repository may have written it since its last
// measure. Bytes put into the home behind the pool's back (nothing the
// daemon runs does that) show which measures were walks.
func TestHomeWalkedOnlyWhenWritten(t *testing.T) {
	p, s := testPool(t, Budget{})
	k0, k1 := key("a", "homes", 0), key("a", "homes", 1)
	prepare(t, p, k0, 0)
	h := k0.Home()
	measure := func(maxAge time.Duration) int64 { return p.homeSizes([]workspace.Home{h}, maxAge)[0].bytes }
	plant := func(name string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(p.store.HomeDir(k0), name), []byte(strings.Repeat("x", 1<<20)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	grew := func(what string, before, after int64) {
		t.Helper()
		if after < before+1<<20 {
			t.Fatalf("%s: %d bytes, then %d: the home was not walked again", what, before, after)
		}
	}

	idle := measure(0)
	plant("a")
	if n := measure(0); n != idle {
		t.Fatalf("a home nothing wrote since its measure was walked again: %d bytes, then %d", idle, n)
	}

	// A server runs: its home is walked again, then whenever its last
	// measure is older than asked.
	if err := use(t, p, s, k0); err != nil {
		t.Fatal(err)
	}
	running := measure(0)
	grew("a server started", idle, running)
	plant("b")
	if n := measure(time.Hour); n != running {
		t.Fatalf("a measure younger than its bound was not reused: %d bytes, then %d", running, n)
	}
	grew("asked afresh while its server runs", running, measure(0))

	// Its server stopped (the tree deleted; the home stays), the home is
	// walked once more, then kept.
	if _, err := p.Delete(context.Background(), k0); err != nil {
		t.Fatal(err)
	}
	stopped := measure(0)
	plant("c")
	if n := measure(0); n != stopped {
		t.Fatalf("a home idle since its server stopped was walked again: %d bytes, then %d", stopped, n)
	}

	// A prepare of another revision of the repository may write it.
	prepare(t, p, k1, 0)
	grew("a prepare of its repository", stopped, measure(0))
}

// BenchmarkDiskPass prices the disk budget's pass over many homes with
// nothing of them running: walking every home, as each pass did before
// homes were cached, against reusing their measures.
func BenchmarkDiskPass(b *testing.B) {
	store, err := workspace.NewStore(b.TempDir(), workspace.DefaultLimits())
	if err != nil {
		b.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	p := New(store, nil, runtime.Unjailed(log), log)
	defer p.Close(context.Background())
	p.SetBudget(Budget{MaxDisk: 1 << 50})
	const homes, files = 100, 1000 // a Go home's build cache holds thousands
	for i := range homes {
		dir := store.HomeDir(key("bench", fmt.Sprintf("repo%d", i), 0))
		for j := range files {
			sub := filepath.Join(dir, ".cache", fmt.Sprintf("%02x", j%256))
			if err := os.MkdirAll(sub, 0o700); err != nil {
				b.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(sub, fmt.Sprint(j)), []byte("x"), 0o600); err != nil {
				b.Fatal(err)
			}
		}
	}
	ctx := context.Background()
	b.Run("walk", func(b *testing.B) {
		for range b.N {
			p.homes.mu.Lock()
			clear(p.homes.measured)
			p.homes.mu.Unlock()
			p.enforceDisk(ctx, activeHomeMaxAge)
		}
	})
	b.Run("cached", func(b *testing.B) {
		p.enforceDisk(ctx, activeHomeMaxAge)
		b.ResetTimer()
		for range b.N {
			p.enforceDisk(ctx, activeHomeMaxAge)
		}
	})
}

// TestHomeOfAPrepareThatPublishedDuringThePass: a disk pass lists the
// trees, then measures the homes (seconds, for a Go home); a prepare of
// the repository that publishes meanwhile makes its home no orphan, though
// the pass's list has no tree of it. The home stays, and the tree with it.
func TestHomeOfAPrepareThatPublishedDuringThePass(t *testing.T) {
	p, _ := testPool(t, Budget{})
	k0, k1 := key("a", "race", 0), key("a", "race", 1)
	prepare(t, p, k0, 0)
	if _, err := p.Delete(context.Background(), k0); err != nil {
		t.Fatal(err)
	}
	// k1's prepare is writing its tree, and blocks on its bytes.
	content := "module example.com/m\n\ngo 1.22\n"
	pw, prepared := blockedPrepare(t, p, k1, "go.mod", content)
	// A pass over a budget nothing fits in: while it measures, k1 publishes.
	p.SetBudget(Budget{MaxDisk: 1})
	var once sync.Once
	p.onDiskMeasured = func() {
		once.Do(func() {
			if _, err := io.WriteString(pw, content); err != nil {
				t.Error(err)
			}
			pw.Close()
			if err := <-prepared; err != nil {
				t.Errorf("prepare %s: %v", k1, err)
			}
		})
	}
	p.enforceDisk(context.Background(), 0)
	if !p.store.Published(k1) {
		t.Fatal("the tree was not published")
	}
	if _, err := os.Stat(p.store.HomeDir(k1)); err != nil {
		t.Fatalf("the home of a tree published during the pass was deleted: %v", err)
	}
}

// blockedPrepare starts a prepare of k holding one file, name, whose bytes
// (content) it reads from the returned pipe: it returns once the prepare is
// writing the tree. The prepare's outcome arrives on the channel.
func blockedPrepare(t *testing.T, p *Pool, k workspace.Key, name, content string) (*io.PipeWriter, <-chan error) {
	t.Helper()
	sum := sha256.Sum256([]byte(content))
	files := []*daemonv1.FileEntry{{Path: name, Size: uint64(len(content)), Sha256: hex.EncodeToString(sum[:])}}
	pr, pw := io.Pipe()
	reading := make(chan struct{})
	prepared := make(chan error, 1)
	go func() {
		_, _, err := p.Prepare(context.Background(), k, "00000000-0000-4000-8000-"+k.Commit[:12], files, &firstRead{r: pr, signal: reading}, nil, nil)
		prepared <- err
	}()
	<-reading
	return pw, prepared
}

// firstRead closes signal at its first Read.
type firstRead struct {
	r      io.Reader
	signal chan struct{}
	once   sync.Once
}

func (f *firstRead) Read(b []byte) (int, error) {
	f.once.Do(func() { close(f.signal) })
	return f.r.Read(b)
}

// TestDiskCountsTreesBeingWritten: a tree being written counts on the disk
// budget before its bytes land, so a pass meanwhile (another prepare's, or
// the periodic one) makes room for it too: two prepares at once must not
// both count on the same room.
func TestDiskCountsTreesBeingWritten(t *testing.T) {
	p, _ := testPool(t, Budget{})
	k0, k1 := key("a", "incoming", 0), key("b", "incoming", 1)
	prepare(t, p, k0, 0)
	const size = 4 << 20
	content := strings.Repeat("x", size)
	pw, prepared := blockedPrepare(t, p, k1, "big.txt", content)
	// What is on disk fits, with half the incoming tree's room to spare.
	var onDisk int64
	homes, _ := p.store.Homes()
	for _, h := range homes {
		onDisk += homeBytes(t, p.store, h)
	}
	onDisk += p.store.TreeBytes(k0)
	p.SetBudget(Budget{MaxDisk: onDisk + size/2})
	p.enforceDisk(context.Background(), 0)
	evicted := !p.store.Published(k0)
	if _, err := io.WriteString(pw, content); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	if err := <-prepared; err != nil {
		t.Fatalf("prepare %s: %v", k1, err)
	}
	if !evicted {
		t.Fatal("a pass while a tree was being written left room only for what was on disk: the idle tree was kept")
	}
}

// TestCloseIsFinal: after Close no workspace goes live. A prepare still
// writing its tree when the pool closes publishes it to disk only, Acquire
// does not adopt it (it would start servers nobody stops), and a new
// prepare is refused.
func TestCloseIsFinal(t *testing.T) {
	p, _ := testPool(t, Budget{})
	k0, k1 := key("a", "close", 0), key("a", "close", 1)
	content := "module example.com/m\n\ngo 1.22\n"
	pw, prepared := blockedPrepare(t, p, k0, "go.mod", content)
	p.Close(context.Background())
	if _, err := io.WriteString(pw, content); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	if err := <-prepared; err != nil {
		t.Fatalf("the prepare writing when the pool closed: %v", err)
	}
	if !p.store.Published(k0) {
		t.Fatal("the tree written across Close is not on disk")
	}
	if _, _, ok := p.Acquire(k0); ok {
		t.Fatal("Acquire adopted a tree after Close")
	}
	p.mu.Lock()
	live := len(p.live)
	p.mu.Unlock()
	if live != 0 {
		t.Fatalf("%d workspaces live after Close", live)
	}
	sum := sha256.Sum256([]byte(content))
	files := []*daemonv1.FileEntry{{Path: "go.mod", Size: uint64(len(content)), Sha256: hex.EncodeToString(sum[:])}}
	if _, _, err := p.Prepare(context.Background(), k1, "00000000-0000-4000-8000-"+k1.Commit[:12], files, strings.NewReader(content), nil, nil); !errors.Is(err, ErrPoolClosed) {
		t.Fatalf("a prepare after Close: %v, want ErrPoolClosed", err)
	}
}

// homeBytes is h's measure, which must be complete.
func homeBytes(t *testing.T, s *workspace.Store, h workspace.Home) int64 {
	t.Helper()
	n, _, complete := s.HomeUsage(h)
	if !complete {
		t.Fatalf("home %v: too many entries to measure", h)
	}
	return n
}

// TestHomeTooLargeToMeasure: a home with more entries than the walk
// measures (a jail's millions of empty files, nearly free in bytes) counts
// as over the whole disk budget: it is deleted first, before a home left
// longer ago, which stays since the rest then fits.
func TestHomeTooLargeToMeasure(t *testing.T) {
	lim := workspace.DefaultLimits()
	lim.MaxHomeEntries = 500
	store, err := workspace.NewStore(t.TempDir(), lim)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	p := New(store, nil, runtime.Unjailed(log), log)
	t.Cleanup(func() { p.Close(context.Background()) })
	old := filepath.Join(store.Root(), "homes", tenant("b"), "old")
	wide := filepath.Join(store.Root(), "homes", tenant("a"), "wide")
	for _, dir := range []string{old, wide} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(old, "cache"), make([]byte, 64<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		if err := os.WriteFile(filepath.Join(wide, fmt.Sprint("empty", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	longAgo := time.Now().Add(-time.Hour)
	if err := os.Chtimes(old, longAgo, longAgo); err != nil {
		t.Fatal(err)
	}
	p.SetBudget(Budget{MaxDisk: 1 << 30}) // both fit a thousand times over, in bytes
	p.enforceDisk(context.Background(), 0)
	if _, err := os.Stat(wide); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the home of 1,000 empty files, over the walk's 500, is still there: %v", err)
	}
	if _, err := os.Stat(old); err != nil {
		t.Fatalf("the home left an hour ago was deleted too: %v", err)
	}

	// With a tree: the repository's workspaces go with the home, and no
	// other tenant's; while one of them is busy nothing goes, and the pass
	// ends.
	ka, kb := key("a", "wide", 0), key("b", "calm", 0)
	prepare(t, p, ka, 0)
	prepare(t, p, kb, 0)
	for i := range 1000 {
		if err := os.WriteFile(filepath.Join(wide, fmt.Sprint("empty", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p.homes.touch(ka) // as a server that wrote them does when it exits
	_, release, ok := p.Acquire(ka)
	if !ok {
		t.Fatal("a's workspace is not held")
	}
	p.enforceDisk(context.Background(), 0)
	if !p.store.Published(ka) || !p.store.Published(kb) {
		t.Fatalf("published while a's workspace is busy: a %v, b %v; want both", p.store.Published(ka), p.store.Published(kb))
	}
	release()
	p.enforceDisk(context.Background(), 0)
	if p.store.Published(ka) {
		t.Fatal("the workspace of a home too large to measure was not evicted")
	}
	if _, err := os.Stat(wide); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the home went not with its last workspace: %v", err)
	}
	if !p.store.Published(kb) {
		t.Fatal("another tenant's workspace was evicted for a home too large to measure")
	}
}

// TestDiskPassRemovesAfterItsLock: what a disk pass evicts leaves the
// store under the pass's lock but is removed only once the pass has let
// go of it: a home of a million entries takes long to remove, and every
// cold prepare waits for that lock.
func TestDiskPassRemovesAfterItsLock(t *testing.T) {
	p, _ := testPool(t, Budget{})
	home := filepath.Join(p.store.Root(), "homes", tenant("a"), "gone")
	if err := os.MkdirAll(home, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "cache"), make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	p.SetBudget(Budget{MaxDisk: 64 << 10})
	p.enforcingDisk.Lock()
	p.enforceDiskLocked(context.Background(), 64<<10, 0)
	graves := slices.Clone(p.graves)
	p.enforcingDisk.Unlock()
	if _, err := os.Stat(home); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the evicted home is still in the store: %v", err)
	}
	if len(graves) == 0 {
		t.Fatal("the pass removed what it evicted under its lock")
	}
	for _, g := range graves {
		if _, err := os.Stat(g); err != nil {
			t.Fatalf("moved aside, then gone already: %v", err)
		}
	}
	p.enforceDisk(context.Background(), 0) // the next pass removes them after its own
	p.removals.Wait()
	for _, g := range graves {
		if _, err := os.Stat(g); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s not removed after the pass: %v", g, err)
		}
	}
}

// TestDiskInodesShort: when the workspaces' filesystem runs short of
// inodes and the pool holds most of those in use, the disk pass evicts by
// inodes held, not bytes, and only until the reserve is back: tenant a's
// two workspaces, whose homes hold 1,400 empty files each (nearly free in
// bytes), against tenant b's, of more bytes and a home of 1,000 files. The
// one of a's used longest ago goes; a's other stays, though a still holds
// more inodes than b, since its removal gave the reserve back; b stays. A
// tmpfs of 4,000 inodes stands for the filesystem.
func TestDiskInodesShort(t *testing.T) {
	p, dir := tmpfsPool(t, "nr_inodes=4000,size=256m")
	store := p.store
	a1, a2, b := key("a", "many1", 0), key("a", "many2", 0), key("b", "big", 0)
	fill := func(k workspace.Key, n int) {
		t.Helper()
		home := filepath.Join(store.Root(), "homes", k.TenantKey, k.Repo)
		if err := os.MkdirAll(home, 0o755); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if err := os.WriteFile(filepath.Join(home, fmt.Sprint("empty", i)), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		p.homes.touch(k) // as a server that wrote them does when it exits
	}
	prepare(t, p, a1, 0)
	time.Sleep(10 * time.Millisecond) // a1's tree is the older
	prepare(t, p, a2, 0)
	prepare(t, p, b, 8<<20)
	fill(a1, 1400)
	fill(a2, 1400)
	fill(b, 1000)
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d of %d inodes free", fs.Ffree, fs.Files)
	p.SetBudget(Budget{MaxDisk: 1 << 30}) // all fit many times over in bytes
	p.enforceDisk(context.Background(), 0)
	if p.store.Published(a1) {
		t.Fatal("a's workspace used longest ago stayed with the filesystem's inodes short")
	}
	if !p.store.Published(a2) {
		t.Fatal("a's other workspace was evicted too: the pass went on past the reserve")
	}
	if !p.store.Published(b) {
		t.Fatal("b's workspace, more bytes and fewer inodes, was evicted")
	}
	p.removals.Wait()
	if err := unix.Statfs(dir, &fs); err != nil {
		t.Fatal(err)
	}
	if fs.Ffree < fs.Files*reservePercent/100 {
		t.Fatalf("after the pass %d of %d inodes free", fs.Ffree, fs.Files)
	}
}

// TestDiskReserveWithoutBudget: with no LSP_POOL_MAX_DISK the pool still
// keeps its filesystem's reserve of blocks. A tree that would leave under
// 5 % free evicts, before a byte of it is written, the least recently used
// workspace of the tenant holding the most bytes, and the pass stops once
// what it moved aside (removed after it) gives the reserve back. A tree
// no eviction could make room for evicts nothing.
func TestDiskReserveWithoutBudget(t *testing.T) {
	p, dir := tmpfsPool(t, "size=64m")
	a1, a2, b := key("a", "one", 0), key("a", "two", 0), key("b", "three", 0)
	prepare(t, p, a1, 24<<20)
	time.Sleep(10 * time.Millisecond) // a1's tree is the older
	prepare(t, p, a2, 24<<20)
	if !p.store.Published(a1) {
		t.Fatal("a1 was evicted with the filesystem's reserve free")
	}
	prepare(t, p, b, 13<<20) // 61 of 64 MiB: under the reserve
	if p.store.Published(a1) {
		t.Fatal("a's workspace used longest ago stayed while b's tree took the filesystem's reserve")
	}
	if !p.store.Published(a2) {
		t.Fatal("a's other workspace was evicted too: the pass went on past the reserve")
	}
	if !p.store.Published(b) {
		t.Fatal("b's workspace, the tenant holding fewer bytes, was evicted")
	}
	p.removals.Wait()
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		t.Fatal(err)
	}
	if fs.Bavail < fs.Blocks*reservePercent/100 {
		t.Fatalf("after the pass %d of %d blocks free", fs.Bavail, fs.Blocks)
	}
	// A tree that could not fit were every workspace gone fails to write
	// and takes nobody with it.
	// 63 MiB (a file's bound is 64): 27 free and 37 evictable leave 1.
	err := tryPrepare(p, key("c", "huge", 0), 63<<20)
	if err == nil || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("a 63 MiB tree with 64 MiB of room in all: %v, want ENOSPC", err)
	}
	if !p.store.Published(a2) || !p.store.Published(b) {
		t.Fatal("a tree that could never fit evicted the others")
	}
}

// tmpfsPool is a pool without servers whose store is on a tmpfs mounted
// with opts (its size, its inodes) at dir; it skips unless root.
func tmpfsPool(t *testing.T, opts string) (p *Pool, dir string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir = t.TempDir()
	if err := unix.Mount("lsp-pool-test", dir, "tmpfs", 0, opts); err != nil {
		t.Fatalf("mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	store, err := workspace.NewStore(filepath.Join(dir, "root"), workspace.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	p = New(store, nil, runtime.Unjailed(log), log)
	t.Cleanup(func() { p.Close(context.Background()) })
	return p, dir
}
