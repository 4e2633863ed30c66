package workspace

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
)

// treePathSeeds are paths at the rule's edges, both sides of it.
var treePathSeeds = []string{
	"a.go", "dir/sub/a.go", "a b/ü.go", ".git/config", "-rf", "*", "C:x", "a:b", "%2e%2e/x",
	strings.Repeat("n", daemonv1.MaxTreeNameBytes),
	strings.Repeat("d/", 300) + "x", // deeper than MaxDepth: a bound, not the rule
	strings.Repeat(strings.Repeat("n", 200)+"/", 5) + strings.Repeat("x", 20),
	`a\b.go`, strings.Repeat("x", 1025), "a//b", "\xff",
}

// TestStoreWritesEveryValidPath: the daemon writes and publishes a tree
// holding any path the shared rule accepts (within the depth bound); the
// paths the proxy now drops are exactly those it refuses.
func TestStoreWritesEveryValidPath(t *testing.T) {
	for _, p := range treePathSeeds {
		storeAccepts(t, p)
	}
}

// FuzzStoreTreePath: for any path, the store's verdict is the rule's, and
// a path the rule accepts is written where it says.
func FuzzStoreTreePath(f *testing.F) {
	for _, p := range treePathSeeds {
		f.Add(p)
	}
	f.Fuzz(storeAccepts)
}

func storeAccepts(t *testing.T, p string) {
	lim := DefaultLimits()
	valid := daemonv1.ValidTreePath(p)
	if valid && strings.Count(p, "/")+1 > lim.MaxDepth {
		return // over the depth bound: the proxy refuses the tree (413) too
	}
	s, err := NewStore(t.TempDir(), lim)
	if err != nil {
		t.Fatal(err)
	}
	es, body := manifest([2]string{p, "x"})
	ok, err := s.Write(testKey, "p1", es, body, nil)
	if !valid {
		if err == nil {
			t.Fatalf("%q: refused by the rule, written by the store", p)
		}
		return
	}
	if err != nil || !ok {
		t.Fatalf("%q: accepted by the rule, refused by the store: %v", p, err)
	}
	b, err := os.ReadFile(filepath.Join(s.TreeDir(testKey), filepath.FromSlash(p)))
	if err != nil || string(b) != "x" {
		t.Fatalf("%q: %q, %v", p, b, err)
	}
	_ = s.Delete(testKey)
}
