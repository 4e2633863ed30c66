//go:build linux

package jail

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hanzoai/lsp/daemon/internal/lsp"
	"github.com/hanzoai/lsp/daemon/internal/runtime"
	"github.com/hanzoai/lsp/daemon/internal/servertest"
)

// goplsPath is the reviewed gopls (servertest).
func goplsPath(t *testing.T) string { return servertest.Gopls(t) }

// goModule is a tiny module: app calls shapes.Describe.
var goModule = map[string]string{
	"go.mod":           "module example.com/fixture\n\ngo 1.21\n",
	"shapes/shapes.go": "package shapes\n\n// Describe gives a one-line description of n.\nfunc Describe(n int) string {\n\treturn \"shape\"\n}\n",
	"app/app.go":       "package app\n\nimport \"example.com/fixture/shapes\"\n\nfunc Run() string {\n\treturn shapes.Describe(3)\n}\n",
}

// layout is a daemon root in miniature: trees and homes per tenant, as
// workspace.Store lays them out (0700 directories above read-only trees).
type layout struct{ root string }

func newLayout(t *testing.T) layout {
	t.Helper()
	root := filepath.Join(t.TempDir(), "root")
	if err := os.MkdirAll(root, 0o700); err != nil {
		t.Fatal(err)
	}
	return layout{root: root}
}

// workspace writes files as tenant's tree (read-only) and makes its home.
func (l layout) workspace(t *testing.T, tenant string, files map[string]string) runtime.Workspace {
	t.Helper()
	ws := runtime.Workspace{
		Root: filepath.Join(l.root, "trees", tenant, "repo", "c0"),
		Home: filepath.Join(l.root, "homes", tenant, "repo"),
	}
	writeWorkspace(t, ws, files)
	// A tree is read-only and the module cache too: make them removable.
	t.Cleanup(func() { _ = removeTree(l.root) })
	return ws
}

// recorder keeps every process a spawner started.
type recorder struct {
	runtime.Spawner
	mu    sync.Mutex
	procs []runtime.Process
}

func (r *recorder) Spawn(ctx context.Context, spec runtime.Spec, ws runtime.Workspace) (runtime.Process, error) {
	p, err := r.Spawner.Spawn(ctx, spec, ws)
	if err == nil {
		r.mu.Lock()
		r.procs = append(r.procs, p)
		r.mu.Unlock()
	}
	return p, err
}

func (r *recorder) all() []runtime.Process {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]runtime.Process(nil), r.procs...)
}

func start(t *testing.T, sp runtime.Spawner, spec runtime.Spec, ws runtime.Workspace) *runtime.Server {
	t.Helper()
	if spec.RequestTimeout == 0 {
		// The first request waits for gopls's initial load.
		spec.RequestTimeout = 2 * time.Minute
	}
	srv, err := runtime.Start(context.Background(), sp, spec, ws, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close(context.Background()) })
	return srv
}

// hoverAt hovers over needle (plus offset) in rel, which it opens first.
func hoverAt(ctx context.Context, srv *runtime.Server, ws runtime.Workspace, rel, needle string, offset int) (*lsp.Hover, error) {
	b, err := os.ReadFile(filepath.Join(ws.Root, rel))
	if err != nil {
		return nil, err
	}
	i := strings.Index(string(b), needle)
	if i < 0 {
		return nil, fmt.Errorf("%q not in %s", needle, rel)
	}
	i += offset
	pos := lsp.Position{Line: uint32(strings.Count(string(b[:i]), "\n")), Character: uint32(i - (strings.LastIndex(string(b[:i]), "\n") + 1))}
	var h *lsp.Hover
	err = srv.Do(ctx, func(ctx context.Context, c *lsp.Client, _ uint64) error {
		if err := c.DidOpen(ctx, srv.URI(rel), srv.Spec().Language, string(b)); err != nil {
			return err
		}
		h, err = c.Hover(ctx, srv.URI(rel), pos)
		return err
	})
	return h, err
}

// hoverLine hovers over line of rel without opening it (the adversary
// does not care).
func hoverLine(ctx context.Context, srv *runtime.Server, rel string, line int) (*lsp.Hover, error) {
	var h *lsp.Hover
	err := srv.Do(ctx, func(ctx context.Context, c *lsp.Client, _ uint64) error {
		var err error
		h, err = c.Hover(ctx, srv.URI(rel), lsp.Position{Line: uint32(line)})
		return err
	})
	return h, err
}

// assertGone fails when a process of group pgid is left, zombies
// included. (Other zombie children may exist for a moment: parallel tests'
// processes being reaped; TestMain checks that none survives the run.)
func assertGone(t *testing.T, pgid int) {
	t.Helper()
	procs, err := runtime.ListProcs()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if p.PGRP == pgid {
			t.Errorf("process %d (state %c, parent %d) of group %d survived", p.PID, p.State, p.PPID, pgid)
		}

	}
}

// assertNoJailCgroups fails when s still has a jail cgroup.
func assertNoJailCgroups(t *testing.T, s *Spawner) {
	t.Helper()
	if s.cg == nil {
		return
	}
	for _, p := range s.cg.parents {
		entries, err := os.ReadDir(p.dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.IsDir() {
				t.Errorf("jail cgroup %s left behind", filepath.Join(p.dir, e.Name()))
			}
		}
	}
}

// processesWith lists the pids whose command line holds marker.
func processesWith(marker string) []int {
	procs, _ := runtime.ListProcs()
	var out []int
	for _, p := range procs {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.PID))
		if strings.Contains(string(b), marker) {
			out = append(out, p.PID)
		}
	}
	return out
}

// waitFor polls cond; the bound only keeps a broken test from hanging.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// writeWorkspace writes files as ws's tree, read-only like a published one,
// and makes its home.
func writeWorkspace(t *testing.T, ws runtime.Workspace, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(ws.Root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	var dirs []string
	_ = filepath.WalkDir(ws.Root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	sort.Sort(sort.Reverse(sort.StringSlice(dirs)))
	for _, d := range dirs {
		if err := os.Chmod(d, 0o555); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(ws.Home, 0o700); err != nil {
		t.Fatal(err)
	}
}
