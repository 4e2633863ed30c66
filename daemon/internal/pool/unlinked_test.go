package pool

import (
	"context"
	"strconv"
	"testing"

	"github.com/hanzoai/lsp/daemon/internal/workspace"
)

// TestDiskCountsUnlinkedFiles: a file a server deleted while it still holds
// it open takes disk no walk of a home finds. The disk budget charges it
// to the server's tenant and evicts that tenant's workspace, which stops
// the server and so frees the file; the other tenant keeps its own.
func TestDiskCountsUnlinkedFiles(t *testing.T) {
	const hog = 32 << 20
	// gopls, started by a shell that first writes hog bytes into a file of
	// the home and deletes it, keeping it open: gopls inherits the
	// descriptor. Only the home of the repository named "hog" does so.
	s := goplsSpec()
	s.Executable, s.Args = "/bin/sh", []string{"-c", `case "$HOME" in */hog)
	exec 3>"$HOME/hog.bin" && rm "$HOME/hog.bin" && head -c ` + strconv.Itoa(hog) + ` /dev/zero >&3 || exit 1;;
esac
exec "$0" serve`, goplsPath}
	p, spec := poolOf(t, Budget{}, []Spec{s})
	ka, kb := key("a", "hog", 0), key("b", "calm", 0)
	prepare(t, p, ka, 0)
	if err := use(t, p, spec, ka); err != nil {
		t.Fatal(err)
	}
	prepare(t, p, kb, 0)
	if err := use(t, p, spec, kb); err != nil {
		t.Fatal(err)
	}
	unlinked := p.unlinkedByWorkspace()
	if n := unlinked[ka]; n < hog {
		t.Fatalf("tenant a's server holds %d bytes of unlinked files, want at least %d", n, hog)
	}
	if n := unlinked[kb]; n != 0 {
		t.Fatalf("tenant b's server holds %d bytes of unlinked files, want none", n)
	}

	// A budget the walked trees and homes fit with room to spare, but not
	// with the hog's file.
	var walked int64
	homes, _ := p.store.Homes()
	for _, h := range homes {
		walked += homeBytes(t, p.store, h)
	}
	for _, k := range []workspace.Key{ka, kb} {
		walked += p.store.TreeBytes(k)
	}
	p.SetBudget(Budget{MaxDisk: walked + hog/2})
	p.enforceDisk(context.Background(), 0)
	if p.store.Published(ka) {
		t.Fatal("the workspace whose server holds an unlinked 32 MiB file was not evicted: the disk budget did not see it")
	}
	if !p.store.Published(kb) {
		t.Fatal("the other tenant's workspace was evicted")
	}
	if n := p.unlinkedByWorkspace()[ka]; n != 0 {
		t.Fatalf("%d bytes of unlinked files still held after the eviction", n)
	}
}
