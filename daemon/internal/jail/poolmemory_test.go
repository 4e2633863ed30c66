//go:build linux

package jail

import (
	"bufio"
	"context"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
)

// TestPoolMemoryLimit proves the pool's memory budget is a hard bound where
// the daemon has a memory cgroup: jails that each stay well under their own
// limit but together allocate far past the pool's are held under it by the
// kernel — the peak of the jails' parent cgroup never exceeds the budget,
// at least one of them is OOM-killed inside the pool (the test binary, the
// daemon here, is untouched), and afterwards the same spawner serves a real
// gopls under the same limit.
func TestPoolMemoryLimit(t *testing.T) {
	const (
		budget = 256 << 20
		each   = 64 << 20 // four of them: 256 MiB plus four Go runtimes wanted
		n      = 4
	)
	gopls := goplsPath(t)
	s := newSpawner(t, Options{Memory: 1 << 30, PoolMemory: budget})
	if s.cg == nil {
		t.Skip("no memory cgroup for this daemon: the pool's budget is soft only (sampling and eviction)")
	}
	mp, ok := s.cg.memoryParent()
	if !ok {
		t.Fatal("no memory parent cgroup")
	}
	limitFile, peakFile := "memory.limit_in_bytes", "memory.max_usage_in_bytes"
	if mp.v2 {
		limitFile, peakFile = "memory.max", "memory.peak"
	}
	if got := readInt(t, mp.dir, limitFile); got != poolCgroupLimit(budget) || got > budget {
		t.Fatalf("%s of the pool cgroup = %d, want %d", limitFile, got, poolCgroupLimit(budget))
	}
	t.Log(s.Describe())

	ws := newLayout(t).workspace(t, "tenant", map[string]string{"a.txt": "a\n"})
	ctx := context.Background()
	type holder struct {
		proc runtime.Process
		held atomic.Bool
	}
	holders := make([]*holder, n)
	var wg sync.WaitGroup
	for i := range holders {
		p, err := s.Spawn(ctx, runtime.Spec{
			ID: "hold-" + strconv.Itoa(i), Language: "plaintext", Executable: testExecutable(t),
			Env: []string{serverEnv + "=hold", "JAILTEST_ALLOC=" + strconv.Itoa(each)},
		}, ws)
		if err != nil {
			t.Fatal(err)
		}
		h := &holder{proc: p}
		holders[i] = h
		wg.Add(1)
		go func() {
			// A line means the holder got all its memory; EOF without one
			// means it died first (the OOM killer). The kernel may let the
			// pool overshoot for a moment and kill only once the charges
			// are in (seen on cgroup v1: every holder said "allocated",
			// then one was killed), so a holder holds only while its
			// stdout stays open.
			r := bufio.NewReader(p.Stdout())
			line, _ := r.ReadString('\n')
			h.held.Store(strings.HasPrefix(line, "allocated"))
			wg.Done()
			_, _ = io.Copy(io.Discard, r)
			h.held.Store(false)
		}()
	}
	wg.Wait()
	held := func() int {
		n := 0
		for _, h := range holders {
			if h.held.Load() {
				n++
			}
		}
		return n
	}
	// The OOM killer's verdict comes within moments; wait for it, not for
	// a fixed time.
	heldN := held()
	for deadline := time.Now().Add(5 * time.Second); heldN == n && time.Now().Before(deadline); heldN = held() {
		time.Sleep(50 * time.Millisecond)
	}
	peak := readInt(t, mp.dir, peakFile)
	t.Logf("%d of %d holders got %d MiB each; pool peak %d bytes, budget %d", heldN, n, each>>20, peak, budget)
	if peak > budget {
		t.Errorf("the jails together peaked at %d bytes, over the pool's %d", peak, budget)
	}
	if heldN == n {
		t.Errorf("all %d holders got %d bytes each under a %d-byte pool", n, each, budget)
	}
	// How many survive is the kernel's choice: the OOM killer takes the
	// largest task of the pool, and with all of them growing at once it
	// may take more than one before the first victim's memory is freed.
	for _, h := range holders {
		_ = h.proc.Stdin().Close()
		_ = h.proc.Wait()
		assertGone(t, h.proc.Pid())
	}

	// The pool serves again under the same limit.
	other := newLayout(t).workspace(t, "other", goModule)
	srv := start(t, s, runtime.Spec{ID: "gopls", Language: "go", Executable: gopls, Args: []string{"serve"}}, other)
	h, err := hoverAt(ctx, srv, other, "app/app.go", "shapes.Describe(3)", len("shapes."))
	if err != nil || h == nil || !strings.Contains(h.Markdown, "func shapes.Describe") {
		t.Fatalf("gopls after the pool's OOM: %+v, %v", h, err)
	}
	if err := srv.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if peak := readInt(t, mp.dir, peakFile); peak > budget {
		t.Errorf("the pool peaked at %d bytes, over its %d", peak, budget)
	}
	assertNoJailCgroups(t, s)
}

func readInt(t *testing.T, dir, file string) int64 {
	t.Helper()
	b, err := os.ReadFile(dir + "/" + file)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatalf("%s/%s: %v", dir, file, err)
	}
	return n
}
