package rpc

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// textTree is a tree no configured server serves, so preparing it starts
// no language server.
var textTree = []file{
	{"README.md", []byte("# readme\n")},
	{"docs/guide.txt", bytes.Repeat([]byte("guide line\n"), 40)},
	{"docs/deep/er/notes.txt", []byte("ünïcødé 😀\n")},
	{"empty.txt", nil},
	{"%2e%2e/literal-name.txt", []byte("a file whose name only looks encoded\n")},
}

func TestHello(t *testing.T) {
	ctx := ctxT(t)
	cur := uint32(daemonv1.ProtocolVersion_PROTOCOL_VERSION_CURRENT)
	resp, err := fx.client.Hello(ctx, &daemonv1.HelloRequest{ProtocolVersion: cur})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetProtocolVersion() != cur || resp.GetDaemonVersion() != Version || resp.GetJailed() {
		t.Fatalf("hello: %v", resp)
	}
	for _, v := range []uint32{0, cur + 1, 1 << 31} {
		_, err := fx.client.Hello(ctx, &daemonv1.HelloRequest{ProtocolVersion: v})
		st := status.Convert(err)
		if st.Code() != codes.FailedPrecondition {
			t.Fatalf("version %d: %v", v, err)
		}
		for _, n := range []uint32{v, cur} {
			if !strings.Contains(st.Message(), " "+strconv.FormatUint(uint64(n), 10)) {
				t.Fatalf("version %d: message %q does not name %d", v, st.Message(), n)
			}
		}
	}
}

// TestQueryUnknownAndInvalid: a well-formed key the daemon does not hold is
// NEEDS_TREE, not an error; a malformed key or path is INVALID_REQUEST.
func TestQueryUnknownAndInvalid(t *testing.T) {
	ctx := ctxT(t)
	k := keyFor(t, "unknown")
	resp, err := fx.client.Query(ctx, &daemonv1.QueryRequest{Workspace: k, Op: daemonv1.Op_OP_HOVER, Path: "a.go", Position: &daemonv1.Position{}})
	if err != nil || resp.GetStatus() != daemonv1.Status_STATUS_NEEDS_TREE {
		t.Fatalf("unknown workspace: %v, %v", resp, err)
	}
	with := func(f func(k *daemonv1.WorkspaceKey)) *daemonv1.WorkspaceKey {
		c := &daemonv1.WorkspaceKey{TenantKey: k.TenantKey, Repo: k.Repo, Commit: k.Commit}
		f(c)
		return c
	}
	cases := map[string]*daemonv1.QueryRequest{
		"no key":           {Op: daemonv1.Op_OP_HOVER, Path: "a.go"},
		"short tenant key": {Workspace: with(func(k *daemonv1.WorkspaceKey) { k.TenantKey = k.TenantKey[:63] }), Op: daemonv1.Op_OP_HOVER, Path: "a.go"},
		"uppercase tenant": {Workspace: with(func(k *daemonv1.WorkspaceKey) { k.TenantKey = strings.ToUpper(k.TenantKey) }), Op: daemonv1.Op_OP_HOVER, Path: "a.go"},
		"tenant is an org": {Workspace: with(func(k *daemonv1.WorkspaceKey) { k.TenantKey = "acme" }), Op: daemonv1.Op_OP_HOVER, Path: "a.go"},
		"repo ..":          {Workspace: with(func(k *daemonv1.WorkspaceKey) { k.Repo = ".." }), Op: daemonv1.Op_OP_HOVER, Path: "a.go"},
		"repo .":           {Workspace: with(func(k *daemonv1.WorkspaceKey) { k.Repo = "." }), Op: daemonv1.Op_OP_HOVER, Path: "a.go"},
		"repo with slash":  {Workspace: with(func(k *daemonv1.WorkspaceKey) { k.Repo = "a/b" }), Op: daemonv1.Op_OP_HOVER, Path: "a.go"},
		"empty repo":       {Workspace: with(func(k *daemonv1.WorkspaceKey) { k.Repo = "" }), Op: daemonv1.Op_OP_HOVER, Path: "a.go"},
		"short commit":     {Workspace: with(func(k *daemonv1.WorkspaceKey) { k.Commit = k.Commit[:12] }), Op: daemonv1.Op_OP_HOVER, Path: "a.go"},
		"uppercase commit": {Workspace: with(func(k *daemonv1.WorkspaceKey) { k.Commit = strings.ToUpper(k.Commit) }), Op: daemonv1.Op_OP_HOVER, Path: "a.go"},
		"path ..":          {Workspace: k, Op: daemonv1.Op_OP_HOVER, Path: "../a.go"},
		"absolute path":    {Workspace: k, Op: daemonv1.Op_OP_HOVER, Path: "/etc/passwd"},
		"path with NUL":    {Workspace: k, Op: daemonv1.Op_OP_HOVER, Path: "a\x00.go"},
		// Refused before the workspace is looked at (the key is unknown:
		// NEEDS_TREE would cost the caller a prepare first).
		"query over the bound": {Workspace: k, Op: daemonv1.Op_OP_WORKSPACE_SYMBOLS, Query: strings.Repeat("q", daemonv1.MaxQueryBytes+1)},
		"path with backslash":  {Workspace: k, Op: daemonv1.Op_OP_HOVER, Path: `a\b.go`},
		"path empty segment":   {Workspace: k, Op: daemonv1.Op_OP_HOVER, Path: "a//b.go"},
	}
	for name, req := range cases {
		t.Run(name, func(t *testing.T) {
			resp, err := fx.client.Query(ctx, req)
			if err != nil {
				t.Fatalf("error instead of a status: %v", err)
			}
			if resp.GetStatus() != daemonv1.Status_STATUS_INVALID_REQUEST || resp.GetMessage() == "" {
				t.Fatalf("answer %v", resp)
			}
		})
	}
	// Capabilities and DeleteWorkspace refuse bad keys as errors.
	bad := with(func(k *daemonv1.WorkspaceKey) { k.Repo = ".." })
	if _, err := fx.client.Capabilities(ctx, &daemonv1.CapabilitiesRequest{Workspace: bad}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("capabilities with a bad key: %v", err)
	}
	if _, err := fx.client.DeleteWorkspace(ctx, &daemonv1.DeleteWorkspaceRequest{Workspace: bad}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("delete with a bad key: %v", err)
	}
}

// TestPrepareStreaming: a tree pushed in many small chunks is published
// whole, and a second push of the same key says it did not prepare and
// names the first push's id — also when the daemon answers before it has
// read the second push's bytes.
func TestPrepareStreaming(t *testing.T) {
	k := keyFor(t, "tree")
	first := newID()
	resp := prepareTree(t, k, first, textTree...)
	if len(resp.GetLanguages()) != 0 || len(resp.GetWarnings()) != 0 {
		t.Fatalf("a text tree started servers: %v", resp)
	}
	dir := fx.store.TreeDir(parseKey(t, k))
	got := readTree(t, dir)
	// The prepare id is kept beside the tree, never inside it.
	if held, err := fx.store.PrepareID(parseKey(t, k)); err != nil || held != first {
		t.Fatalf("stored prepare id = %q, %v; want %q", held, err, first)
	}
	want := append([]file(nil), textTree...)
	sortFiles(want)
	if len(got) != len(want) {
		t.Fatalf("tree on disk has %d files, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].path != want[i].path || !bytes.Equal(got[i].data, want[i].data) {
			t.Fatalf("tree on disk: %q (%d bytes), want %q (%d bytes)", got[i].path, len(got[i].data), want[i].path, len(want[i].data))
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "README.md")); err != nil || fi.Mode().Perm()&0o222 != 0 {
		t.Fatalf("published file is writable: %v %v", fi.Mode(), err)
	}

	// The second push: a different, larger tree under the same key. The
	// daemon holds the key and answers at once.
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<19) // 8 MiB
	entries, data := treeOf(file{"big.bin", big})
	ctx := ctxT(t)
	r := push(ctx, append([]*daemonv1.PrepareRequest{headerMsg(k, newID(), entries)}, dataMsgs(data, 256<<10)...)...)
	if r.err != nil {
		t.Fatalf("second push: %v", r.err)
	}
	if r.resp.GetPrepared() || r.resp.GetPrepareId() != first {
		t.Fatalf("second push answered prepared=%v id=%q, want false %q", r.resp.GetPrepared(), r.resp.GetPrepareId(), first)
	}
	t.Logf("the second push's Send saw io.EOF: %v", r.eof)
	if _, err := os.Stat(filepath.Join(dir, "big.bin")); err == nil {
		t.Fatal("the second push changed the published tree")
	}
	// An identical second push is no different.
	entries, data = treeOf(textTree...)
	r = push(ctx, append([]*daemonv1.PrepareRequest{headerMsg(k, newID(), entries)}, dataMsgs(data, 3)...)...)
	if r.err != nil || r.resp.GetPrepared() || r.resp.GetPrepareId() != first {
		t.Fatalf("third push: %v, %v", r.resp, r.err)
	}
	caps, err := fx.client.Capabilities(ctx, &daemonv1.CapabilitiesRequest{Workspace: k})
	if err != nil || !caps.GetWarm() || caps.GetPrepareId() != first {
		t.Fatalf("capabilities after prepare: %v, %v", caps, err)
	}
}

// followMsgs is a push whose digests follow: the manifest without them,
// the bytes in chunks of n, then a trailer of sums (entries' digests when
// nil).
func followMsgs(k *daemonv1.WorkspaceKey, entries []*daemonv1.FileEntry, data []byte, n int, sums []string) []*daemonv1.PrepareRequest {
	bare := make([]*daemonv1.FileEntry, len(entries))
	if sums == nil {
		sums = make([]string, len(entries))
		for i, e := range entries {
			sums[i] = e.Sha256
		}
	}
	for i, e := range entries {
		bare[i] = &daemonv1.FileEntry{Path: e.Path, Size: e.Size, Executable: e.Executable}
	}
	h := headerMsg(k, newID(), bare)
	h.GetHeader().DigestsFollow = true
	msgs := append([]*daemonv1.PrepareRequest{h}, dataMsgs(data, n)...)
	return append(msgs, trailerMsg(sums))
}

func trailerMsg(sums []string) *daemonv1.PrepareRequest {
	return &daemonv1.PrepareRequest{Part: &daemonv1.PrepareRequest_Trailer{Trailer: &daemonv1.PrepareTrailer{Sha256: sums}}}
}

// TestPrepareDigestsFollow: a tree whose digests come in the trailer is
// published whole once they match, with the manifest's digests filled in.
func TestPrepareDigestsFollow(t *testing.T) {
	k := keyFor(t, "follow")
	entries, data := treeOf(textTree...)
	r := push(ctxT(t), followMsgs(k, entries, data, 7, nil)...)
	if r.err != nil || !r.resp.GetPrepared() {
		t.Fatalf("push with digests following: %v, %v", r.resp, r.err)
	}
	got := readTree(t, fx.store.TreeDir(parseKey(t, k)))
	want := append([]file(nil), textTree...)
	sortFiles(want)
	if len(got) != len(want) {
		t.Fatalf("tree on disk has %d files, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].path != want[i].path || !bytes.Equal(got[i].data, want[i].data) {
			t.Fatalf("tree on disk: %q, want %q", got[i].path, want[i].path)
		}
	}
	// An empty tree's trailer comes right after the header.
	k2 := keyFor(t, "follow-empty")
	e, _ := treeOf(file{"empty.txt", nil})
	if r := push(ctxT(t), followMsgs(k2, e, nil, 1, nil)...); r.err != nil || !r.resp.GetPrepared() {
		t.Fatalf("empty file with digests following: %v, %v", r.resp, r.err)
	}
}

func sortFiles(fs []file) {
	for i := 1; i < len(fs); i++ {
		for j := i; j > 0 && fs[j].path < fs[j-1].path; j-- {
			fs[j], fs[j-1] = fs[j-1], fs[j]
		}
	}
}

// TestPrepareRefused: every malformed push is InvalidArgument and leaves
// nothing published, nothing staged, and the workspace still unknown.
func TestPrepareRefused(t *testing.T) {
	entries, data := treeOf(textTree...)
	half := len(data) / 2
	other := sha256.Sum256([]byte("other"))
	withEntries := func(f func(e []*daemonv1.FileEntry) []*daemonv1.FileEntry) []*daemonv1.FileEntry {
		var c []*daemonv1.FileEntry
		for _, e := range entries {
			c = append(c, &daemonv1.FileEntry{Path: e.Path, Size: e.Size, Sha256: e.Sha256, Executable: e.Executable})
		}
		return f(c)
	}
	cases := []struct {
		name string
		msgs func(k *daemonv1.WorkspaceKey) []*daemonv1.PrepareRequest
	}{
		{"digest mismatch", func(k *daemonv1.WorkspaceKey) []*daemonv1.PrepareRequest {
			e := withEntries(func(e []*daemonv1.FileEntry) []*daemonv1.FileEntry {
				e[1].Sha256 = hex.EncodeToString(other[:])
				return e
			})
			return append([]*daemonv1.PrepareRequest{headerMsg(k, newID(), e)}, dataMsgs(data, 5)...)
		}},
		{"one flipped byte", func(k *daemonv1.WorkspaceKey) []*daemonv1.PrepareRequest {
			d := bytes.Clone(data)
			d[len(d)-2] ^= 1
			return append([]*daemonv1.PrepareRequest{headerMsg(k, newID(), entries)}, dataMsgs(d, 5)...)
		}},
		{"file used as a directory", func(k *daemonv1.WorkspaceKey) []*daemonv1.PrepareRequest {
			e, d := treeOf(file{"a", []byte("x")}, file{"a/b", []byte("y")})
			return append([]*daemonv1.PrepareRequest{headerMsg(k, newID(), e)}, dataMsgs(d, 1)...)
		}},
		{"dot-dot path", func(k *daemonv1.WorkspaceKey) []*daemonv1.PrepareRequest {
			e, d := treeOf(file{"../escape.txt", []byte("x")})
			return append([]*daemonv1.PrepareRequest{headerMsg(k, newID(), e)}, dataMsgs(d, 1)...)
		}},
		{"inner dot-dot path", func(k *daemonv1.WorkspaceKey) []*daemonv1.PrepareRequest {
			e, d := treeOf(file{"a/../../escape.txt", []byte("x")})
			return append([]*daemonv1.PrepareRequest{headerMsg(k, newID(), e)}, dataMsgs(d, 1)...)
		}},
		{"absolute path", func(k *daemonv1.WorkspaceKey) []*daemonv1.PrepareRequest {
			e, d := treeOf(file{"/tmp/escape.txt", []byte("x")})
			return append([]*daemonv1.PrepareRequest{headerMsg(k, newID(), e)}, dataMsgs(d, 1)...)
		}},
		{"repeated path", func(k *daemonv1.WorkspaceKey) []*daemonv1.PrepareRequest {
			e, d := treeOf(file{"a.txt", []byte("x")}, file{"a.txt", []byte("x")})
			return append([]*daemonv1.PrepareRequest{headerMsg(k, newID(), e)}, dataMsgs(d, 1)...)
		}},
		{"focus path out of the tree", func(k *daemonv1.WorkspaceKey) []*daemonv1.PrepareRequest {
			hdr := &daemonv1.PrepareHeader{Workspace: k, PrepareId: newID(), Files: entries, FocusPath: "../main.go"}
			return append([]*daemonv1.PrepareRequest{{Part: &daemonv1.PrepareRequest_Header{Header: hdr}}}, dataMsgs(data, 5)...)
		}},
		{"malformed digest", func(k *daemonv1.WorkspaceKey) []*daemonv1.PrepareRequest {
			e := withEntries(func(e []*daemonv1.FileEntry) []*daemonv1.FileEntry {
				e[0].Sha256 = strings.ToUpper(e[0].Sha256)
				return e
			})
			return append([]*daemonv1.PrepareRequest{headerMsg(k, newID(), e)}, dataMsgs(data, 5)...)
		}},
		{"second header mid-stream", func(k *daemonv1.WorkspaceKey) []*daemonv1.PrepareRequest {
			msgs := []*daemonv1.PrepareRequest{headerMsg(k, newID(), entries)}
			msgs = append(msgs, dataMsgs(data[:half], 5)...)
			msgs = append(msgs, headerMsg(k, newID(), entries))
			return append(msgs, dataMsgs(data[half:], 5)...)
		}},
		{"second header after the data", func(k *daemonv1.WorkspaceKey) []*daemonv1.PrepareRequest {
			msgs := append([]*daemonv1.PrepareRequest{headerMsg(k, newID(), entries)}, dataMsgs(data, 5)...)
			return append(msgs, headerMsg(k, newID(), entries))
		}},
		{"more bytes than the manifest", func(k *daemonv1.WorkspaceKey) []*daemonv1.PrepareRequest {
			msgs := append([]*daemonv1.PrepareRequest{headerMsg(k, newID(), entries)}, dataMsgs(data, 5)...)
			return append(msgs, dataMsgs([]byte("!"), 1)...)
		}},
		{"more bytes in the last message", func(k *daemonv1.WorkspaceKey) []*daemonv1.PrepareRequest {
			msgs := append([]*daemonv1.PrepareRequest{headerMsg(k, newID(), entries)}, dataMsgs(data[:len(data)-3], 5)...)
			return append(msgs, dataMsgs(append(bytes.Clone(data[len(data)-3:]), "!!"...), 64)...)
		}},
		{"a data message over the chunk bound", func(k *daemonv1.WorkspaceKey) []*daemonv1.PrepareRequest {
			big := bytes.Repeat([]byte("z"), daemonv1.MaxPushChunkBytes+1)
			e, d := treeOf(file{"big.bin", big})
			return append([]*daemonv1.PrepareRequest{headerMsg(k, newID(), e)}, dataMsgs(d, len(d))...)
		}},
		{"bytes after an empty manifest", func(k *daemonv1.WorkspaceKey) []*daemonv1.PrepareRequest {
			e, _ := treeOf(file{"empty.txt", nil})
			return append([]*daemonv1.PrepareRequest{headerMsg(k, newID(), e)}, dataMsgs([]byte("x"), 1)...)
		}},
		{"second header after an empty manifest", func(k *daemonv1.WorkspaceKey) []*daemonv1.PrepareRequest {
			e, _ := treeOf(file{"empty.txt", nil})
			return []*daemonv1.PrepareRequest{headerMsg(k, newID(), e), headerMsg(k, newID(), e)}
		}},
		{"fewer bytes than the manifest", func(k *daemonv1.WorkspaceKey) []*daemonv1.PrepareRequest {
			return append([]*daemonv1.PrepareRequest{headerMsg(k, newID(), entries)}, dataMsgs(data[:len(data)-1], 5)...)
		}},
		{"data before the header", func(k *daemonv1.WorkspaceKey) []*daemonv1.PrepareRequest {
			return append(dataMsgs(data, 5), headerMsg(k, newID(), entries))
		}},
		{"empty stream", func(k *daemonv1.WorkspaceKey) []*daemonv1.PrepareRequest { return nil }},
		{"empty message first", func(k *daemonv1.WorkspaceKey) []*daemonv1.PrepareRequest {
			return []*daemonv1.PrepareRequest{{}, headerMsg(k, newID(), entries)}
		}},
		{"prepare id not a UUID", func(k *daemonv1.WorkspaceKey) []*daemonv1.PrepareRequest {
			return append([]*daemonv1.PrepareRequest{headerMsg(k, "not-a-uuid", entries)}, dataMsgs(data, 5)...)
		}},
		{"prepare id with a path in it", func(k *daemonv1.WorkspaceKey) []*daemonv1.PrepareRequest {
			return append([]*daemonv1.PrepareRequest{headerMsg(k, "../../00000000-0000-4000-8000-000000000001", entries)}, dataMsgs(data, 5)...)
		}},
		{"bad tenant key", func(k *daemonv1.WorkspaceKey) []*daemonv1.PrepareRequest {
			bad := &daemonv1.WorkspaceKey{TenantKey: "acme", Repo: k.Repo, Commit: k.Commit}
			return append([]*daemonv1.PrepareRequest{headerMsg(bad, newID(), entries)}, dataMsgs(data, 5)...)
		}},
		{"digests follow: trailer mismatch", func(k *daemonv1.WorkspaceKey) []*daemonv1.PrepareRequest {
			sums := make([]string, len(entries))
			for i, e := range entries {
				sums[i] = e.Sha256
			}
			sums[len(sums)-1] = hex.EncodeToString(other[:])
			return followMsgs(k, entries, data, 5, sums)
		}},
		{"digests follow: one flipped byte", func(k *daemonv1.WorkspaceKey) []*daemonv1.PrepareRequest {
			d := bytes.Clone(data)
			d[1] ^= 1
			return followMsgs(k, entries, d, 5, nil)
		}},
		{"digests follow: no trailer", func(k *daemonv1.WorkspaceKey) []*daemonv1.PrepareRequest {
			msgs := followMsgs(k, entries, data, 5, nil)
			return msgs[:len(msgs)-1]
		}},
		{"digests follow: too few digests", func(k *daemonv1.WorkspaceKey) []*daemonv1.PrepareRequest {
			sums := make([]string, len(entries)-1)
			for i := range sums {
				sums[i] = entries[i].Sha256
			}
			return followMsgs(k, entries, data, 5, sums)
		}},
		{"digests follow: trailer before the last byte", func(k *daemonv1.WorkspaceKey) []*daemonv1.PrepareRequest {
			msgs := followMsgs(k, entries, data[:half], 5, nil)
			return append(msgs, dataMsgs(data[half:], 5)...)
		}},
		{"digests follow: bytes after the trailer", func(k *daemonv1.WorkspaceKey) []*daemonv1.PrepareRequest {
			return append(followMsgs(k, entries, data, 5, nil), dataMsgs([]byte("!"), 1)...)
		}},
		{"digests follow: a second trailer", func(k *daemonv1.WorkspaceKey) []*daemonv1.PrepareRequest {
			msgs := followMsgs(k, entries, data, 5, nil)
			return append(msgs, msgs[len(msgs)-1])
		}},
		{"digests follow: a digest in the manifest", func(k *daemonv1.WorkspaceKey) []*daemonv1.PrepareRequest {
			msgs := followMsgs(k, entries, data, 5, nil)
			msgs[0].GetHeader().Files[0].Sha256 = entries[0].Sha256
			return msgs
		}},
		{"trailer without digests following", func(k *daemonv1.WorkspaceKey) []*daemonv1.PrepareRequest {
			msgs := append([]*daemonv1.PrepareRequest{headerMsg(k, newID(), entries)}, dataMsgs(data, 5)...)
			return append(msgs, trailerMsg([]string{entries[0].Sha256}))
		}},
		{"bad repo", func(k *daemonv1.WorkspaceKey) []*daemonv1.PrepareRequest {
			bad := &daemonv1.WorkspaceKey{TenantKey: k.TenantKey, Repo: "..", Commit: k.Commit}
			return append([]*daemonv1.PrepareRequest{headerMsg(bad, newID(), entries)}, dataMsgs(data, 5)...)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			k := keyFor(t, "refused")
			ctx := ctxT(t)
			r := push(ctx, c.msgs(k)...)
			if status.Code(r.err) != codes.InvalidArgument {
				t.Fatalf("answer %v, %v; want InvalidArgument", r.resp, r.err)
			}
			if msg := status.Convert(r.err).Message(); strings.Contains(msg, fx.root) {
				t.Fatalf("the error names a host path: %q", msg)
			}
			assertUnknown(t, k)
			// The same key can still be prepared properly.
			prepareTree(t, k, newID(), textTree...)
		})
	}
}

// assertUnknown checks that the daemon holds nothing for k.
func assertUnknown(t *testing.T, k *daemonv1.WorkspaceKey) {
	t.Helper()
	if fx.store.Published(parseKey(t, k)) {
		t.Fatal("a tree was published")
	}
	if _, err := os.Stat(fx.store.TreeDir(parseKey(t, k))); !os.IsNotExist(err) {
		t.Fatalf("the tree directory exists: %v", err)
	}
	staged, err := os.ReadDir(filepath.Join(fx.root, "daemon", "staging"))
	if err != nil || len(staged) != 0 {
		t.Fatalf("staging is not empty: %d entries, %v", len(staged), err)
	}
	resp, err := fx.client.Query(ctxT(t), &daemonv1.QueryRequest{Workspace: k, Op: daemonv1.Op_OP_DOCUMENT_SYMBOLS, Path: "README.md"})
	if err != nil || resp.GetStatus() != daemonv1.Status_STATUS_NEEDS_TREE {
		t.Fatalf("query: %v, %v", resp, err)
	}
	caps, err := fx.client.Capabilities(ctxT(t), &daemonv1.CapabilitiesRequest{Workspace: k})
	if err != nil || caps.GetWarm() || caps.GetPrepareId() != "" {
		t.Fatalf("capabilities: %v, %v", caps, err)
	}
}

// TestPrepareEmptyFiles: a tree whose files are all empty reads no data,
// and empty data messages carry nothing.
func TestPrepareEmptyFiles(t *testing.T) {
	k := keyFor(t, "empty")
	e, _ := treeOf(file{"a.txt", nil}, file{"b/c.txt", nil})
	id := newID()
	r := push(ctxT(t), headerMsg(k, id, e), &daemonv1.PrepareRequest{Part: &daemonv1.PrepareRequest_Data{}})
	if r.err != nil || !r.resp.GetPrepared() || r.resp.GetPrepareId() != id {
		t.Fatalf("empty tree: %v, %v", r.resp, r.err)
	}
	if got := readTree(t, fx.store.TreeDir(parseKey(t, k))); len(got) != 2 {
		t.Fatalf("tree on disk: %d files", len(got))
	}
}

// TestPrepareConcurrent: N pushes of one key at once; exactly one
// prepares, and every other answer names the winner's id.
func TestPrepareConcurrent(t *testing.T) {
	const n = 8
	k := keyFor(t, "race")
	entries, data := treeOf(textTree...)
	ctx := ctxT(t)
	ids := make([]string, n)
	results := make([]pushResult, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		ids[i] = newID()
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i] = push(ctx, append([]*daemonv1.PrepareRequest{headerMsg(k, ids[i], entries)}, dataMsgs(data, 11)...)...)
		}()
	}
	close(start)
	wg.Wait()
	winner := ""
	for i, r := range results {
		if r.err != nil {
			t.Fatalf("push %d: %v", i, r.err)
		}
		if r.resp.GetPrepared() {
			if winner != "" {
				t.Fatalf("two pushes prepared: %s and %s", winner, ids[i])
			}
			winner = ids[i]
			if r.resp.GetPrepareId() != ids[i] {
				t.Fatalf("the winner answered id %q, its own is %q", r.resp.GetPrepareId(), ids[i])
			}
		}
	}
	if winner == "" {
		t.Fatal("no push prepared")
	}
	for i, r := range results {
		if r.resp.GetPrepareId() != winner {
			t.Fatalf("push %d answered id %q, the winner is %q", i, r.resp.GetPrepareId(), winner)
		}
	}
	held, err := fx.store.PrepareID(parseKey(t, k))
	if err != nil || held != winner {
		t.Fatalf("the tree holds id %q (%v), the winner is %q", held, err, winner)
	}
	if got := readTree(t, fx.store.TreeDir(parseKey(t, k))); len(got) != len(textTree) {
		t.Fatalf("the tree has %d files", len(got))
	}
}

// TestDeleteWorkspace: warm only between prepare and delete; after the
// delete the workspace needs its tree again.
func TestDeleteWorkspace(t *testing.T) {
	ctx := ctxT(t)
	k := keyFor(t, "delete")
	caps, err := fx.client.Capabilities(ctx, &daemonv1.CapabilitiesRequest{Workspace: k})
	if err != nil || caps.GetWarm() || caps.GetPrepareId() != "" {
		t.Fatalf("before prepare: %v, %v", caps, err)
	}
	id := newID()
	prepareTree(t, k, id, textTree...)
	caps, err = fx.client.Capabilities(ctx, &daemonv1.CapabilitiesRequest{Workspace: k})
	if err != nil || !caps.GetWarm() || caps.GetPrepareId() != id {
		t.Fatalf("after prepare: %v, %v", caps, err)
	}
	resp, err := fx.client.Query(ctx, &daemonv1.QueryRequest{Workspace: k, Op: daemonv1.Op_OP_HOVER, Path: "README.md", Position: &daemonv1.Position{}})
	if err != nil || resp.GetStatus() == daemonv1.Status_STATUS_NEEDS_TREE || resp.GetPrepareId() != id {
		t.Fatalf("query on the prepared tree: %v, %v", resp, err)
	}
	del, err := fx.client.DeleteWorkspace(ctx, &daemonv1.DeleteWorkspaceRequest{Workspace: k})
	if err != nil || !del.GetDeleted() {
		t.Fatalf("delete: %v, %v", del, err)
	}
	assertUnknown(t, k)
	del, err = fx.client.DeleteWorkspace(ctx, &daemonv1.DeleteWorkspaceRequest{Workspace: k})
	if err != nil || del.GetDeleted() {
		t.Fatalf("second delete: %v, %v", del, err)
	}
	// Prepared again, it is a new workspace with the new id.
	again := newID()
	prepareTree(t, k, again, textTree...)
	caps, err = fx.client.Capabilities(ctx, &daemonv1.CapabilitiesRequest{Workspace: k})
	if err != nil || caps.GetPrepareId() != again {
		t.Fatalf("after a new prepare: %v, %v", caps, err)
	}
}

// TestQueryWaitsForPrepareInFlight: a query that arrives while another
// push of its key is being written waits for it and answers from the tree
// it published, instead of "needs tree" (which would make a second proxy
// hold the price and fetch the same tree again).
func TestQueryWaitsForPrepareInFlight(t *testing.T) {
	k := keyFor(t, "inflight")
	id := newID()
	entries, data := treeOf(textTree...)
	msgs := dataMsgs(data, 7)
	stream, err := fx.client.Prepare(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(headerMsg(k, id, entries)); err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs[:len(msgs)-1] {
		if err := stream.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	// The store stages the tree only once the key is in flight.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		if staged, _ := os.ReadDir(filepath.Join(fx.root, "daemon", "staging")); len(staged) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the push was never staged")
		}
	}
	answered := make(chan *daemonv1.QueryResponse, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		resp, err := fx.client.Query(ctx, &daemonv1.QueryRequest{Workspace: k, Op: daemonv1.Op_OP_HOVER, Path: "README.md", Position: &daemonv1.Position{}})
		if err != nil {
			t.Error(err)
		}
		answered <- resp
	}()
	// Let the query reach the daemon while the push is still open.
	time.Sleep(300 * time.Millisecond)
	if err := stream.Send(msgs[len(msgs)-1]); err != nil {
		t.Fatal(err)
	}
	if resp, err := stream.CloseAndRecv(); err != nil || !resp.GetPrepared() {
		t.Fatalf("prepare: %v, %v", resp, err)
	}
	resp := <-answered
	if resp.GetStatus() == daemonv1.Status_STATUS_NEEDS_TREE || resp.GetPrepareId() != id {
		t.Fatalf("a query during the push answered %v", resp)
	}
}

// TestCapabilitiesSayInFlight: while a push of the key is being written the
// key is not warm, but in flight, so a proxy that lost the push's reply does
// not release its hold; once published it is warm with the push's id and no
// longer in flight.
func TestCapabilitiesSayInFlight(t *testing.T) {
	k := keyFor(t, "caps-inflight")
	id := newID()
	entries, data := treeOf(textTree...)
	msgs := dataMsgs(data, 7)
	stream, err := fx.client.Prepare(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(headerMsg(k, id, entries)); err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs[:len(msgs)-1] {
		if err := stream.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		caps, err := fx.client.Capabilities(ctxT(t), &daemonv1.CapabilitiesRequest{Workspace: k})
		if err != nil {
			t.Fatal(err)
		}
		if caps.GetInFlight() {
			if caps.GetWarm() {
				t.Fatalf("warm while the first push is in flight: %v", caps)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the push never showed as in flight")
		}
	}
	if err := stream.Send(msgs[len(msgs)-1]); err != nil {
		t.Fatal(err)
	}
	if resp, err := stream.CloseAndRecv(); err != nil || !resp.GetPrepared() {
		t.Fatalf("prepare: %v, %v", resp, err)
	}
	caps, err := fx.client.Capabilities(ctxT(t), &daemonv1.CapabilitiesRequest{Workspace: k})
	if err != nil || !caps.GetWarm() || caps.GetInFlight() || caps.GetPrepareId() != id {
		t.Fatalf("after the push: %v, %v", caps, err)
	}
}

// TestTreeWarningsKept: the proxy's tree warnings travel with the push
// and every later Capabilities answer for the workspace names them (the
// proxy's prepare answer for a revision already warm says what the push
// that wrote it found); a header over their bounds is refused.
func TestTreeWarningsKept(t *testing.T) {
	entries, data := treeOf(textTree...)
	header := func(k *daemonv1.WorkspaceKey, id string, w []string) *daemonv1.PrepareRequest {
		return &daemonv1.PrepareRequest{Part: &daemonv1.PrepareRequest_Header{Header: &daemonv1.PrepareHeader{
			Workspace: k, PrepareId: id, Files: entries, TreeWarnings: w}}}
	}
	k, id := keyFor(t, "tree-warnings"), newID()
	want := []string{"dropped dangling symlink: dangling", "dropped symlink out of the tree: escape"}
	if r := push(ctxT(t), append([]*daemonv1.PrepareRequest{header(k, id, want)}, dataMsgs(data, 7)...)...); r.err != nil || !r.resp.GetPrepared() {
		t.Fatalf("push: %v, %v", r.resp, r.err)
	}
	caps, err := fx.client.Capabilities(ctxT(t), &daemonv1.CapabilitiesRequest{Workspace: k})
	if err != nil || !caps.GetWarm() {
		t.Fatalf("capabilities: %v, %v", caps, err)
	}
	for _, w := range want {
		if !contains(caps.GetWarnings(), w) {
			t.Fatalf("capabilities warnings %q lack %q", caps.GetWarnings(), w)
		}
	}
	// A second push of the revision writes nothing and changes nothing.
	if r := push(ctxT(t), append([]*daemonv1.PrepareRequest{header(k, newID(), nil)}, dataMsgs(data, 7)...)...); r.err != nil || r.resp.GetPrepared() {
		t.Fatalf("second push: %v, %v", r.resp, r.err)
	}
	if again, err := fx.client.Capabilities(ctxT(t), &daemonv1.CapabilitiesRequest{Workspace: k}); err != nil || !slices.Equal(again.GetWarnings(), caps.GetWarnings()) {
		t.Fatalf("after a second push: %q, want %q (%v)", again.GetWarnings(), caps.GetWarnings(), err)
	}
	for name, w := range map[string][]string{
		"too many": slices.Repeat([]string{"dropped submodule: s"}, daemonv1.MaxTreeWarnings+1),
		"too long": {strings.Repeat("x", daemonv1.MaxTreeWarningBytes+1)},
	} {
		bad := keyFor(t, "tree-warnings-bad")
		r := push(ctxT(t), append([]*daemonv1.PrepareRequest{header(bad, newID(), w)}, dataMsgs(data, 7)...)...)
		if status.Code(r.err) != codes.InvalidArgument {
			t.Fatalf("%s: %v, %v; want InvalidArgument", name, r.resp, r.err)
		}
	}
}

// TestPrepareLargeManifest: a manifest over gRPC's default 4 MiB message
// (25,000 files of 200-byte paths, well within the tree limits) is
// received and published; with the default bound every prepare of such a
// tree failed as too large.
func TestPrepareLargeManifest(t *testing.T) {
	k := keyFor(t, "large-manifest")
	var files []file
	for i := range 25_000 {
		files = append(files, file{path: fmt.Sprintf("d%03d/%s%05d.txt", i%100, strings.Repeat("x", 180), i)})
	}
	sortFiles(files)
	entries, data := treeOf(files...)
	if n := proto.Size(headerMsg(k, "x", entries)); n <= 4<<20 {
		t.Fatalf("the header is %d bytes: not over the old bound", n)
	}
	prepareTree(t, k, newID(), files...)
	if got := readTree(t, fx.store.TreeDir(parseKey(t, k))); len(got) != len(files) || len(data) != 0 {
		t.Fatalf("published %d files, want %d", len(got), len(files))
	}
}
