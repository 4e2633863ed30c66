package pool

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
	"github.com/hanzoai/lsp/daemon/internal/workspace"
)

// TestPrepareWarningsKept: what the push that published a tree found
// while preparing it is the workspace's, from that push and from the tree
// on disk after a restart (a later prepare answer for the revision names
// it); a tree published with nothing to say has none, and a warnings file
// that is a link is never followed.
func TestPrepareWarningsKept(t *testing.T) {
	p, store := serverless(t)
	root, log := store.Root(), slog.New(slog.DiscardHandler)
	files, content := tinyTree()
	want := []string{"dropped dangling symlink: a", "dropped submodule: b\nwith a newline"}
	k, quiet := key("a", "r", 0), key("a", "r", 1)
	if _, _, err := p.Prepare(context.Background(), k, genID(1), files, bytes.NewReader(content),
		func(context.Context, runtime.Workspace) []string { return slices.Clone(want) }, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.Prepare(context.Background(), quiet, genID(2), files, bytes.NewReader(content), nil, nil); err != nil {
		t.Fatal(err)
	}
	warnings := func(p *Pool, k workspace.Key) []string {
		t.Helper()
		w, release, ok := p.Acquire(k)
		if !ok {
			t.Fatalf("%s not held", k)
		}
		defer release()
		return w.PrepareWarnings()
	}
	if got := warnings(p, k); !slices.Equal(got, want) {
		t.Fatalf("after the push: %q, want %q", got, want)
	}
	// A new daemon on the same root adopts the trees with their warnings.
	again := New(store, nil, runtime.Unjailed(log), log)
	t.Cleanup(func() { again.Close(context.Background()) })
	if got := warnings(again, k); !slices.Equal(got, want) {
		t.Fatalf("adopted: %q, want %q", got, want)
	}
	if got := warnings(again, quiet); got != nil {
		t.Fatalf("a tree published without warnings: %q", got)
	}
	// A link in the file's place is refused, not read through.
	secret := filepath.Join(root, "secret.json")
	if err := os.WriteFile(secret, []byte(`["planted"]`), 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(filepath.Dir(store.TreeDir(quiet)), "warnings")
	if err := os.Symlink(secret, file); err != nil {
		t.Fatal(err)
	}
	if got, err := store.Warnings(quiet); err == nil || got != nil {
		t.Fatalf("through a link: %q, %v", got, err)
	}
}

// TestPreparePhaseSeesTheCache: the dependency phase is given the
// repository's cache directory, the daemon's own beside its home: every
// revision of one repository the same, another repository's not.
func TestPreparePhaseSeesTheCache(t *testing.T) {
	p, store := serverless(t)
	files, content := tinyTree()
	seen := map[workspace.Key]runtime.Workspace{}
	keys := []workspace.Key{key("a", "r", 0), key("a", "r", 1), key("a", "other", 0)}
	for i, k := range keys {
		if _, _, err := p.Prepare(context.Background(), k, genID(int64(i+1)), files, bytes.NewReader(content),
			func(_ context.Context, ws runtime.Workspace) []string { seen[k] = ws; return nil }, nil); err != nil {
			t.Fatal(err)
		}
	}
	first, next, other := seen[keys[0]], seen[keys[1]], seen[keys[2]]
	if first.Cache == "" || first.Cache != store.CacheDir(keys[0]) || next.Cache != first.Cache {
		t.Fatalf("revisions of one repository got caches %q and %q, want %q", first.Cache, next.Cache, store.CacheDir(keys[0]))
	}
	if other.Cache == first.Cache {
		t.Fatal("two repositories share a cache")
	}
	if rel, err := filepath.Rel(first.Home, first.Cache); err != nil || !filepath.IsAbs(first.Cache) || rel == "." || !strings.HasPrefix(rel, "..") {
		t.Fatalf("the cache %s is inside the home %s, which jails bind", first.Cache, first.Home)
	}
}

// serverless is a pool configured with no server over a fresh store,
// closed with the test.
func serverless(t *testing.T) (*Pool, *workspace.Store) {
	t.Helper()
	store, err := workspace.NewStore(t.TempDir(), workspace.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	p := New(store, nil, runtime.Unjailed(log), log)
	t.Cleanup(func() { p.Close(context.Background()) })
	return p, store
}
