package pool

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
)

// TestLateDependencyPhase: a tree prepared with late is live before its
// dependency phase ends, which begins only once Warm has started the
// focus's server. Meanwhile a server that reads no dependencies starts,
// one that does waits for the phase (and its caller's deadline ends the
// wait, starting nothing), nothing derived from the phase's output is
// cached, and the workspace's warnings are the tree's own; once the phase
// ends the other server starts, and the phase's warnings (which repeat
// the tree's) are kept, on disk too.
func TestLateDependencyPhase(t *testing.T) {
	// A second gopls stands for a server that reads no dependencies.
	p, needs := testPool(t, Budget{}, Spec{Spec: runtime.Spec{ID: "early", Language: "text", Executable: goplsPath, Args: []string{"serve"},
		RequestTimeout: time.Minute}, Extensions: []string{".mod"}, NoDependencies: true})
	reads, store := &p.Specs()[1], p.store

	k := key("a", "r", 0)
	files, content := tinyTree()
	release := make(chan struct{})
	var began atomic.Bool
	tree := []string{"dropped dangling symlink: a"}
	want := append(slices.Clone(tree), "a package was left out")
	phase := func(ctx context.Context, ws runtime.Workspace) []string {
		began.Store(true)
		if ws.Root != store.TreeDir(k) {
			t.Errorf("the phase ran on %s, want the published tree %s", ws.Root, store.TreeDir(k))
		}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return slices.Clone(want)
	}
	prepared, _, err := p.Prepare(context.Background(), k, genID(1), files, bytes.NewReader(content), phase, &Late{Warnings: tree})
	if err != nil || !prepared {
		t.Fatalf("prepare: %v, %v", prepared, err)
	}
	w, done, ok := p.Acquire(k)
	if !ok {
		t.Fatal("the tree is not live while its phase runs")
	}
	defer done()
	time.Sleep(200 * time.Millisecond)
	if began.Load() {
		t.Fatal("the phase began before the focus's server was started")
	}
	if infos, warnings, _ := w.Warm(context.Background(), files, "go.mod"); len(infos) == 0 || infos[0].Server.ID != reads.ID || warnings != nil {
		t.Fatalf("warm: %v, %q", infos, warnings)
	}
	if w.DepsDone() || !slices.Equal(w.PrepareWarnings(), tree) {
		t.Fatalf("the phase is still running: done %v, warnings %q (want the tree's own, %q)", w.DepsDone(), w.PrepareWarnings(), tree)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err = w.Server(ctx, needs)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a server that reads dependencies started before the phase ended: %v", err)
	}
	if got := len(w.Running()); got != 1 {
		t.Fatalf("%d servers run, want the one that reads no dependencies", got)
	}
	calls := 0
	derive := func() any { calls++; return calls }
	w.DerivedFromDeps("k", derive)
	w.DerivedFromDeps("k", derive)
	if calls != 2 {
		t.Fatalf("derived %d times while the phase ran: a value was cached before what it reads was there", calls)
	}

	close(release)
	select {
	case <-w.deps:
	case <-time.After(30 * time.Second):
		t.Fatal("the phase did not end")
	}
	if _, err := w.Server(context.Background(), needs); err != nil {
		t.Fatalf("after the phase: %v", err)
	}
	if got := w.PrepareWarnings(); !slices.Equal(got, want) {
		t.Fatalf("warnings %q, want %q", got, want)
	}
	if got, err := store.Warnings(k); err != nil || !slices.Equal(got, want) {
		t.Fatalf("warnings on disk %q, %v, want %q", got, err, want)
	}
	w.DerivedFromDeps("k", derive)
	w.DerivedFromDeps("k", derive)
	if calls != 3 {
		t.Fatalf("derived %d times in all, want 3: once the phase ended the value is cached", calls)
	}
}

// TestLateDependencyPhaseDeleted: a Delete while a late phase runs ends the
// phase (its context) and deletes the tree, with what the phase wrote.
func TestLateDependencyPhaseDeleted(t *testing.T) {
	p, store := serverless(t)
	k := key("a", "r", 0)
	files, content := tinyTree()
	started, ended := make(chan struct{}), make(chan error, 1)
	phase := func(ctx context.Context, ws runtime.Workspace) []string {
		if err := os.Mkdir(runtime.NodeModules(ws), 0o700); err != nil {
			t.Error(err)
		}
		close(started)
		<-ctx.Done()
		ended <- ctx.Err()
		return nil
	}
	if _, _, err := p.Prepare(context.Background(), k, genID(1), files, bytes.NewReader(content), phase, &Late{}); err != nil {
		t.Fatal(err)
	}
	w, done, ok := p.Acquire(k)
	if !ok {
		t.Fatal("not live")
	}
	w.Warm(context.Background(), files, "")
	done()
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if deleted, err := p.Delete(ctx, k); err != nil || !deleted {
		t.Fatalf("delete: %v, %v", deleted, err)
	}
	if err := <-ended; !errors.Is(err, context.Canceled) {
		t.Fatalf("the phase ended with %v, want canceled", err)
	}
	if _, err := os.Stat(filepath.Dir(store.TreeDir(k))); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the workspace is still on disk: %v", err)
	}
	if _, _, ok := p.Acquire(k); ok {
		t.Fatal("a deleted workspace is still served")
	}
}
