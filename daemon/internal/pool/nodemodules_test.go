package pool

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
)

// TestDiskCountsNodeModules: the npm packages the dependency phase
// installs beside a tree count toward the disk budget even when the tree
// was measured before they appeared, and deleting the workspace deletes
// them.
func TestDiskCountsNodeModules(t *testing.T) {
	p, _ := testPool(t, Budget{})
	k := key("a", "npm", 0)
	prepare(t, p, k, 0)
	before := p.treeSize(k).bytes
	nm := runtime.NodeModules(runtime.Workspace{Root: p.store.TreeDir(k)})
	const size = 4 << 20
	if err := os.MkdirAll(filepath.Join(nm, "big"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Random-free but incompressible enough for any filesystem: allocated
	// blocks are what the budget counts.
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i*7 + i>>8)
	}
	if err := os.WriteFile(filepath.Join(nm, "big", "index.js"), data, 0o444); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(nm, "big"), 0o555); err != nil {
		t.Fatal(err)
	}
	if after := p.treeSize(k).bytes; after < before+size {
		t.Fatalf("tree measured %d before and %d after %d bytes of packages appeared", before, after, size)
	}
	if ok, err := p.Delete(context.Background(), k); err != nil || !ok {
		t.Fatalf("delete: %v, %v", ok, err)
	}
	if _, err := os.Lstat(nm); err == nil {
		t.Fatal("the workspace's node_modules outlived it")
	}
}
