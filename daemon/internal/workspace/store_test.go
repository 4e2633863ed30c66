package workspace

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
)

var testKey = Key{TenantKey: strings.Repeat("ab", 32), Repo: "demo", Commit: strings.Repeat("1", 40)}

func entry(path, data string) (*daemonv1.FileEntry, string) {
	sum := sha256.Sum256([]byte(data))
	return &daemonv1.FileEntry{Path: path, Size: uint64(len(data)), Sha256: hex.EncodeToString(sum[:])}, data
}

func manifest(files ...[2]string) ([]*daemonv1.FileEntry, *bytes.Buffer) {
	var es []*daemonv1.FileEntry
	var buf bytes.Buffer
	for _, f := range files {
		e, d := entry(f[0], f[1])
		es = append(es, e)
		buf.WriteString(d)
	}
	return es, &buf
}

func TestWritePublishesAtomically(t *testing.T) {
	s, err := NewStore(t.TempDir(), DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	es, body := manifest([2]string{"go.mod", "module x\n"}, [2]string{"a/b.go", "package a\n"})
	ok, err := s.Write(testKey, "p1", es, body, nil)
	if err != nil || !ok {
		t.Fatalf("Write = %v, %v", ok, err)
	}
	got, err := os.ReadFile(filepath.Join(s.TreeDir(testKey), "a", "b.go"))
	if err != nil || string(got) != "package a\n" {
		t.Fatalf("tree file = %q, %v", got, err)
	}
	if id, _ := s.PrepareID(testKey); id != "p1" {
		t.Fatalf("prepare id = %q", id)
	}
	// A second push of the same key is discarded and keeps the first id.
	es, body = manifest([2]string{"go.mod", "module y\n"})
	ok, err = s.Write(testKey, "p2", es, body, nil)
	if err != nil || ok {
		t.Fatalf("second Write = %v, %v; want false, nil", ok, err)
	}
	if id, _ := s.PrepareID(testKey); id != "p1" {
		t.Fatalf("prepare id after race = %q", id)
	}
	if err := s.Delete(testKey); err != nil || s.Published(testKey) {
		t.Fatalf("Delete = %v, published=%v", err, s.Published(testKey))
	}
}

// TestPendingTreeNotKept: a tree published before its dependency phase
// (WriteBeforeDeps) is published; FinishDeps keeps the phase's warnings
// with it; one a stop left pending is deleted when the store opens again,
// the finished one kept.
func TestPendingTreeNotKept(t *testing.T) {
	root := t.TempDir()
	s, err := NewStore(root, DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	done, cut := testKey, testKey
	cut.Commit = strings.Repeat("2", 40)
	for _, k := range []Key{done, cut} {
		es, body := manifest([2]string{"go.mod", "module x\n"})
		if ok, err := s.WriteBeforeDeps(k, "p1", es, body); err != nil || !ok {
			t.Fatalf("WriteBeforeDeps = %v, %v", ok, err)
		}
		if !s.Published(k) {
			t.Fatal("a tree written before its phase is not published")
		}
	}
	if err := s.FinishDeps(done, []string{"left out: x"}); err != nil {
		t.Fatal(err)
	}
	if w, err := s.Warnings(done); err != nil || len(w) != 1 || w[0] != "left out: x" {
		t.Fatalf("warnings = %q, %v", w, err)
	}
	if err := s.FinishDeps(done, nil); err == nil {
		t.Fatal("a second FinishDeps rewrote the warnings")
	}
	s, err = NewStore(root, DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	if !s.Published(done) || s.Published(cut) {
		t.Fatalf("after a restart: finished published %v (want true), cut short published %v (want false)", s.Published(done), s.Published(cut))
	}
}

// TestOlderLayoutNotKept: a tree an older daemon laid out, its npm
// packages in node_modules beside it (which the jails no longer show), is
// deleted when the store opens; one whose packages are in it is kept.
func TestOlderLayoutNotKept(t *testing.T) {
	root := t.TempDir()
	s, err := NewStore(root, DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	older, current := testKey, testKey
	older.Commit = strings.Repeat("3", 40)
	for _, k := range []Key{older, current} {
		es, body := manifest([2]string{"package.json", "{}\n"})
		if ok, err := s.Write(k, "p1", es, body, nil); err != nil || !ok {
			t.Fatalf("Write = %v, %v", ok, err)
		}
	}
	for _, d := range []string{filepath.Join(s.workspaceDir(older), "node_modules", "greet"), filepath.Join(s.TreeDir(current), "node_modules", "greet")} {
		if err := os.Chmod(filepath.Dir(filepath.Dir(d)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if s, err = NewStore(root, DefaultLimits()); err != nil {
		t.Fatal(err)
	}
	if s.Published(older) || !s.Published(current) {
		t.Fatalf("after a restart: the older layout published %v (want false), the current one %v (want true)", s.Published(older), s.Published(current))
	}
}

func TestWriteRefusesBadTrees(t *testing.T) {
	good, _ := entry("a.go", "package a\n")
	bad := &daemonv1.FileEntry{Path: good.Path, Size: good.Size, Sha256: strings.Repeat("0", 64)}
	for _, tc := range []struct {
		name  string
		files []*daemonv1.FileEntry
		body  string
	}{
		{"absolute", []*daemonv1.FileEntry{{Path: "/etc/passwd", Sha256: good.Sha256}}, ""},
		{"dotdot", []*daemonv1.FileEntry{{Path: "a/../../x", Sha256: good.Sha256}}, ""},
		{"dot", []*daemonv1.FileEntry{{Path: "./x", Sha256: good.Sha256}}, ""},
		{"empty segment", []*daemonv1.FileEntry{{Path: "a//x", Sha256: good.Sha256}}, ""},
		{"nul", []*daemonv1.FileEntry{{Path: "a\x00x", Sha256: good.Sha256}}, ""},
		{"repeat", []*daemonv1.FileEntry{good, good}, "package a\npackage a\n"},
		{"file as dir", []*daemonv1.FileEntry{good, {Path: "a.go/x", Size: 0, Sha256: good.Sha256}}, "package a\n"},
		{"digest mismatch", []*daemonv1.FileEntry{bad}, "package a\n"},
		{"short stream", []*daemonv1.FileEntry{good}, "pack"},
		{"long stream", []*daemonv1.FileEntry{good}, "package a\nmore"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := NewStore(t.TempDir(), DefaultLimits())
			if err != nil {
				t.Fatal(err)
			}
			ok, err := s.Write(testKey, "p", tc.files, strings.NewReader(tc.body), nil)
			if ok || !errors.Is(err, ErrInvalid) {
				t.Fatalf("Write = %v, %v; want ErrInvalid", ok, err)
			}
			if s.Published(testKey) {
				t.Fatal("a refused tree was published")
			}
			left, _ := os.ReadDir(filepath.Join(s.root, "staging"))
			if len(left) != 0 {
				t.Fatalf("staging not cleaned: %v", left)
			}
		})
	}
}

func TestParseKey(t *testing.T) {
	good := &daemonv1.WorkspaceKey{TenantKey: testKey.TenantKey, Repo: "demo", Commit: testKey.Commit}
	if _, err := ParseKey(good); err != nil {
		t.Fatal(err)
	}
	for _, w := range []*daemonv1.WorkspaceKey{
		nil,
		{TenantKey: "AB" + testKey.TenantKey[2:], Repo: "demo", Commit: testKey.Commit},
		{TenantKey: testKey.TenantKey, Repo: "..", Commit: testKey.Commit},
		{TenantKey: testKey.TenantKey, Repo: "a/b", Commit: testKey.Commit},
		{TenantKey: testKey.TenantKey, Repo: "demo", Commit: "abc123"},
	} {
		if _, err := ParseKey(w); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseKey(%v) = %v; want ErrInvalid", w, err)
		}
	}
}

func FuzzCheckPath(f *testing.F) {
	for _, s := range []string{"a/b.go", "../x", "/abs", "a//b", "a/./b", "é/ü.go", "a\x00b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if CheckPath(p, 1024) != nil {
			return
		}
		// Anything accepted must stay inside the root once joined.
		root := "/ws"
		j := filepath.Join(root, filepath.FromSlash(p))
		if !strings.HasPrefix(j, root+"/") || filepath.Clean(j) != j {
			t.Fatalf("accepted %q escapes or is unclean: %q", p, j)
		}
	})
}

// A repository's own files can never collide with the daemon's metadata.
func TestMetadataLivesBesideTheTree(t *testing.T) {
	s, err := NewStore(t.TempDir(), DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	es, body := manifest([2]string{"prepare-id", "mine\n"}, [2]string{".lsp-prepare-id", "also mine\n"}, [2]string{"tree/x", "x"})
	if ok, err := s.Write(testKey, "p1", es, body, nil); err != nil || !ok {
		t.Fatalf("Write = %v, %v", ok, err)
	}
	if id, _ := s.PrepareID(testKey); id != "p1" {
		t.Fatalf("prepare id = %q; want p1", id)
	}
	got, err := os.ReadFile(filepath.Join(s.TreeDir(testKey), "prepare-id"))
	if err != nil || string(got) != "mine\n" {
		t.Fatalf("the repository's own prepare-id = %q, %v", got, err)
	}
}

// TestCacheCountsWithTheHome: the daemon's cache for a repository is
// outside its home (no jail binds it), is counted with the home for the
// disk budget (what it shares with a tree, once), and is deleted with it.
func TestCacheCountsWithTheHome(t *testing.T) {
	s, err := NewStore(t.TempDir(), DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	es, body := manifest([2]string{"go.mod", "module x\n"})
	if _, err := s.Write(testKey, "p1", es, body, nil); err != nil {
		t.Fatal(err)
	}
	home, cache := s.HomeDir(testKey), s.CacheDir(testKey)
	if rel, err := filepath.Rel(home, cache); err != nil || !strings.HasPrefix(rel, "..") {
		t.Fatalf("cache %s is inside the home %s", cache, home)
	}
	h := Home{TenantKey: testKey.TenantKey, Repo: testKey.Repo}
	before := homeBytes(t, s, h)
	if err := os.MkdirAll(filepath.Join(cache, "npm"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cache, "npm", "x.tgz"), make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := homeBytes(t, s, h); got < before+1<<20 {
		t.Fatalf("home bytes %d with a 1 MiB cache entry, %d without", got, before)
	}
	// Linked into a tree's node_modules, the entry is the tree's to count:
	// counted once, not twice.
	nm := filepath.Join(filepath.Dir(s.TreeDir(testKey)), "node_modules")
	if err := os.Mkdir(nm, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(cache, "npm", "x.tgz"), filepath.Join(nm, "x.tgz")); err != nil {
		t.Fatal(err)
	}
	if got, tree := homeBytes(t, s, h), s.TreeBytes(testKey); got >= before+1<<20 || tree < 1<<20 {
		t.Fatalf("a shared 1 MiB file: home bytes %d (%d without it), tree bytes %d", got, before, tree)
	}
	if err := os.Remove(filepath.Join(nm, "x.tgz")); err != nil {
		t.Fatal(err)
	}
	if got := homeBytes(t, s, h); got < before+1<<20 {
		t.Fatalf("no tree links it any more: home bytes %d, %d without it", got, before)
	}
	if err := s.DeleteHome(h); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{home, cache} {
		if _, err := os.Lstat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s survived DeleteHome: %v", d, err)
		}
	}
}

// FuzzKeyPatterns holds the key's and the manifest's hand-written checks
// to the regular expressions they replace.
func FuzzKeyPatterns(f *testing.F) {
	for _, s := range []string{testKey.TenantKey, testKey.Commit, "demo", "a.b_c-d", ".x", "AB", "", strings.Repeat("a", 100), strings.Repeat("a", 101), strings.Repeat("f", 40), "é"} {
		f.Add(s)
	}
	tenant := regexp.MustCompile(`^[0-9a-f]{64}$`)
	repo := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$`)
	commit := regexp.MustCompile(`^(?:[0-9a-f]{40}|[0-9a-f]{64})$`)
	f.Fuzz(func(t *testing.T, s string) {
		if isTenantKey(s) != tenant.MatchString(s) || isSHA256(s) != tenant.MatchString(s) {
			t.Fatalf("%q: tenant key/sha256 %v, the expression %v", s, isTenantKey(s), tenant.MatchString(s))
		}
		if isRepoSlug(s) != repo.MatchString(s) {
			t.Fatalf("%q: repo %v, the expression %v", s, isRepoSlug(s), repo.MatchString(s))
		}
		if isCommit(s) != commit.MatchString(s) {
			t.Fatalf("%q: commit %v, the expression %v", s, isCommit(s), commit.MatchString(s))
		}
	})
}
