package forge

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"

	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
	"github.com/hanzoai/lsp/proxy/internal/devforge"
)

// The gitea kind is tested against the dev forge's Gitea API, whose answers
// come from real git over the same bare repositories the git kind reads
// through git http-backend: so both kinds can be asked about the very same
// commits.

const (
	adminToken = "tok-admin-0c4e71"
	aliceToken = "tok-alice-6d2b90"
)

// newGitea returns the gitea forge client for fx, logging into fx.logs.
func (fx *fixture) newGitea() Forge {
	return NewGitea(fx.server.URL, fx.client, slog.New(slog.NewTextHandler(fx.logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
}

// addUsers gives the fixture Gitea accounts: root (administrator, holding
// adminToken), alice (reads acme/*), bob (reads nothing) and admin2 (another
// administrator).
func (fx *fixture) addUsers() {
	fx.forge.AddUser("root", true, adminToken)
	fx.forge.AddUser("alice", false, aliceToken, "acme/*")
	fx.forge.AddUser("bob", false, "")
	fx.forge.AddUser("admin2", true, "")
}

func TestGiteaResolveRevForms(t *testing.T) {
	fx := newFixture(t, nil)
	f := fx.newGitea()
	ctx := context.Background()
	for _, tc := range []struct {
		rev  string
		want string
	}{
		{"", fx.c3},
		{"HEAD", fx.c3},
		{"main", fx.c3},
		{"refs/heads/main", fx.c3},
		{"feature", fx.feature},
		{"refs/heads/feature", fx.feature},
		{"v1", fx.c1},
		{"refs/tags/v1", fx.c1},
		{"v2", fx.c2}, // annotated: peeled to the commit
		{"refs/tags/v2", fx.c2},
		{"dup", fx.dupBranch}, // branch before tag
		{"refs/tags/dup", fx.dupTag},
		{fx.c3, fx.c3},
		{strings.ToUpper(fx.c3), fx.c3},
		{fx.c0, fx.c0},
		{"cafe", fx.hexBranch}, // hex-looking names are refs first
		{"add", fx.c1},
	} {
		got, err := f.Resolve(ctx, bearer(readerToken), "acme", "app", mustRev(t, tc.rev))
		if err != nil || got != tc.want {
			t.Errorf("Resolve(%q) = %q, %v; want %q", tc.rev, got, err, tc.want)
		}
	}
	// Resolving downloads nothing.
	if n := fx.forge.PackDownloads("acme", "app"); n != 0 {
		t.Errorf("downloads after resolving = %d, want 0", n)
	}
	for _, rev := range []string{"nope", "refs/heads/v1", "refs/tags/feature", strings.Repeat("ab", 20)} {
		if _, err := f.Resolve(ctx, bearer(readerToken), "acme", "app", mustRev(t, rev)); !errors.Is(err, ErrNotFound) {
			t.Errorf("Resolve(%q) = %v, want ErrNotFound", rev, err)
		}
	}
	for _, rev := range []string{fx.c3[:7], "beef"} {
		if _, err := f.Resolve(ctx, bearer(readerToken), "acme", "app", mustRev(t, rev)); !errors.Is(err, ErrBadRev) {
			t.Errorf("Resolve(%q) = %v, want ErrBadRev (an abbreviated sha no ref names)", rev, err)
		}
	}
}

func TestGiteaNotFoundIsIdentical(t *testing.T) {
	fx := newFixture(t, nil)
	f := fx.newGitea()
	ctx := context.Background()
	_, hidden := f.Resolve(ctx, bearer(otherToken), "acme", "app", mustRev(t, ""))
	_, missing := f.Resolve(ctx, bearer(otherToken), "acme", "nope", mustRev(t, ""))
	_, hiddenFetch := f.Fetch(ctx, bearer(otherToken), "acme", "app", fx.c3, Limits{})
	for _, err := range []error{hidden, missing, hiddenFetch} {
		if !errors.Is(err, ErrNotFound) {
			t.Fatalf("error = %v, want ErrNotFound", err)
		}
	}
	if hidden.Error() != missing.Error() {
		t.Errorf("hidden %q and missing %q differ", hidden, missing)
	}
	// A token the forge does not know is refused (401, as Gitea does)
	// before any repository is looked at: the same for every one.
	_, unknown := f.Resolve(ctx, bearer("tok-unknown"), "acme", "app", mustRev(t, fx.c3))
	_, unknownMissing := f.Resolve(ctx, bearer("tok-unknown"), "acme", "nope", mustRev(t, fx.c3))
	for _, err := range []error{unknown, unknownMissing} {
		if d, _ := DetailOf(err); !errors.Is(err, ErrUnauthenticated) || !d.Refused || err.Error() != unknown.Error() {
			t.Errorf("unknown token: %v; want the forge's refusal, alike for both", err)
		}
	}
	if n := fx.forge.PackDownloads("acme", "app"); n != 0 {
		t.Errorf("a refused caller caused %d downloads", n)
	}
}

// treeRepo is a tree with every kind of entry normalisation decides about.
func treeRepo() map[string]string {
	lfs := "version https://git-lfs.github.com/spec/v1\noid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 12345\n"
	return map[string]string{
		"README.md":        "hello\n",
		"empty.txt":        "",
		"bin/run.sh":       devforge.ExecPrefix + "#!/bin/sh\necho hi\n",
		"src/x.go":         "package src\n",
		"src/deep/a/b.go":  "package b\n",
		"ünïcödé/名前.go":    "package x\n",
		"with space.txt":   "s p a c e\n",
		"link-in":          devforge.SymlinkPrefix + "README.md",
		"docs/link-up":     devforge.SymlinkPrefix + "../README.md",
		"chain":            devforge.SymlinkPrefix + "link-in",
		"dirlink":          devforge.SymlinkPrefix + "src",
		"via-dir":          devforge.SymlinkPrefix + "dirlink/x.go",
		"exec-link":        devforge.SymlinkPrefix + "bin/run.sh",
		"out":              devforge.SymlinkPrefix + "../../etc/passwd",
		"abs":              devforge.SymlinkPrefix + "/etc/passwd",
		"docs/escape-back": devforge.SymlinkPrefix + "../../tree/README.md",
		"dangling":         devforge.SymlinkPrefix + "nope",
		"file-as-dir":      devforge.SymlinkPrefix + "README.md/x",
		"loop1":            devforge.SymlinkPrefix + "loop2",
		"loop2":            devforge.SymlinkPrefix + "loop1",
		"vendor/sub":       devforge.SubmodulePrefix + strings.Repeat("1", 40),
		"sublink":          devforge.SymlinkPrefix + "vendor/sub",
		"assets/big.bin":   lfs,
		"lfs-link":         devforge.SymlinkPrefix + "assets/big.bin",
		"long/" + strings.Repeat("n", 150) + "/" + strings.Repeat("m", 120) + ".go": "package long\n",
	}
}

// TestBothKindsYieldTheSameTree fetches the same commits through git smart
// HTTP and through the Gitea archive and compares the normalised trees
// entry by entry, warnings included.
func TestBothKindsYieldTheSameTree(t *testing.T) {
	must := musts(t)
	fx := newFixture(t, nil)
	treeCommit := must(devforge.CreateRepo(fx.root, "acme", "tree", treeRepo(), "tree"))
	// A repository whose name has upper case: Gitea's prefix is its lower
	// case on-disk name.
	mixed := must(devforge.CreateRepo(fx.root, "acme", "MixedCase", map[string]string{"m.go": "package m\n"}, "mixed"))
	dir := filepath.Join(fx.root, "acme", "modern.git")
	gitIn(t, fx.root, "init", "--quiet", "--bare", "--object-format=sha256", "--initial-branch=main", dir)
	modern := must(devforge.CreateRepo(fx.root, "acme", "modern", map[string]string{"a.go": "package a\n", "l": devforge.SymlinkPrefix + "a.go"}, "sha256"))

	// What `git archive` — Gitea's archive — leaves out or rewrites: paths
	// .gitattributes marks export-ignore, $Format$ in an export-subst file.
	attrs := must(devforge.CreateRepo(fx.root, "acme", "attrs", map[string]string{
		".gitattributes":   "/tests export-ignore\n.gitattributes export-ignore\nversion.go export-subst\nlink export-ignore\n",
		"tests/a_test.go":  "package tests\n",
		"tests/deep/b.txt": "b\n",
		"version.go":       "package app\n\nconst commit = \"$Format:%H$\"\n",
		"main.go":          "package app\n",
		"link":             devforge.SymlinkPrefix + "main.go",
	}, "attrs"))

	git, gitea := fx.newForge(""), fx.newGitea()
	ctx := context.Background()
	for _, tc := range []struct {
		repo, commit string
		perPage      int
	}{
		{"tree", treeCommit, 0}, {"app", fx.c0, 0}, {"app", fx.c3, 0}, {"app", fx.feature, 0}, {"MixedCase", mixed, 0}, {"modern", modern, 0},
		{"attrs", attrs, 0},
		// A forge whose listing comes in pages of 4.
		{"tree", treeCommit, 4},
	} {
		t.Run(fmt.Sprintf("%s@%s/%d", tc.repo, tc.commit[:8], tc.perPage), func(t *testing.T) {
			fx.forge.SetTreesPerPage(tc.perPage)
			defer fx.forge.SetTreesPerPage(0)
			want, err := git.Fetch(ctx, bearer(readerToken), "acme", tc.repo, tc.commit, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			got, err := gitea.Fetch(ctx, bearer(readerToken), "acme", tc.repo, tc.commit, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("gitea tree differs from git tree:\n gitea %s\n git   %s", describe(got), describe(want))
			}
			if len(want.Files) == 0 {
				t.Fatal("an empty tree proves nothing")
			}
		})
	}
	// The tree repository exercises what it should.
	tree, _ := gitea.Fetch(ctx, bearer(readerToken), "acme", "tree", treeCommit, Limits{})
	if n := len(tree.Files) + len(tree.Warnings); n != len(treeRepo()) {
		t.Errorf("files + warnings = %d, want the %d entries of the tree", n, len(treeRepo()))
	}
	if !contains(tree.Warnings, "dropped submodule: vendor/sub") || !contains(tree.Warnings, "dropped symlink to submodule: sublink") {
		t.Errorf("warnings %q do not name the submodule", tree.Warnings)
	}
	if n := fx.forge.PackDownloads("acme", "tree"); n == 0 {
		t.Error("the archive downloads were not counted")
	}
}

func describe(t *Tree) string {
	var b strings.Builder
	for _, f := range t.Files {
		b.WriteString(f.Path)
		if f.Executable {
			b.WriteString("*")
		}
		b.WriteString("=" + f.SHA256[:8] + " ")
	}
	b.WriteString("warnings: " + strings.Join(t.Warnings, "; "))
	return b.String()
}

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

// TestGiteaFetchLimits: the same bounds give the same verdicts as the git
// kind (TestFetchLimits).
func TestGiteaFetchLimits(t *testing.T) {
	must := musts(t)
	fx := newFixture(t, nil)
	commit := must(devforge.CreateRepo(fx.root, "acme", "limits", map[string]string{
		"a/b/c/deep.txt": "0123456789",
		"big.txt":        strings.Repeat("x", 1000),
		"small.txt":      "s",
		"link":           devforge.SymlinkPrefix + "big.txt", // a copy counts in total_bytes
	}, "limits"))
	git, gitea := fx.newForge(""), fx.newGitea()
	for _, lim := range []Limits{
		{MaxFiles: 3}, {MaxDepth: 3}, {MaxFileBytes: 999}, {MaxTotalBytes: 2010}, {MaxTotalBytes: 1005},
		{MaxFiles: 3, MaxTotalBytes: 10}, {MaxDirs: 2}, {MaxFiles: 4, MaxDepth: 4, MaxFileBytes: 1000, MaxTotalBytes: 2011, MaxDirs: 3}, {},
	} {
		want, werr := git.Fetch(context.Background(), bearer(readerToken), "acme", "limits", commit, lim)
		got, gerr := gitea.Fetch(context.Background(), bearer(readerToken), "acme", "limits", commit, lim)
		var wtl, gtl *TooLargeError
		errors.As(werr, &wtl)
		errors.As(gerr, &gtl)
		switch {
		case (werr == nil) != (gerr == nil):
			t.Errorf("%+v: git %v, gitea %v", lim, werr, gerr)
		case werr != nil && (wtl == nil || gtl == nil || *wtl != *gtl):
			t.Errorf("%+v: git %v, gitea %v; want the same bound", lim, werr, gerr)
		case werr == nil && !reflect.DeepEqual(got, want):
			t.Errorf("%+v: trees differ", lim)
		}
	}
}

func TestGiteaSudo(t *testing.T) {
	fx := newFixture(t, nil)
	fx.addUsers()
	f := fx.newGitea()
	ctx := context.Background()
	sudo := func(login string) Credential { return Credential{Mode: "sudo", Token: adminToken, User: login} }

	got, err := f.Resolve(ctx, sudo("alice"), "acme", "app", mustRev(t, ""))
	if err != nil || got != fx.c3 {
		t.Fatalf("sudo alice: %q, %v", got, err)
	}
	if tree, err := f.Fetch(ctx, sudo("alice"), "acme", "app", fx.c3, Limits{}); err != nil || len(tree.Files) != 1 {
		t.Fatalf("sudo alice fetch: %v, %v", tree, err)
	}
	// bob exists but reads nothing; carol does not exist: the same 404.
	_, bob := f.Resolve(ctx, sudo("bob"), "acme", "app", mustRev(t, ""))
	_, carol := f.Resolve(ctx, sudo("carol"), "acme", "app", mustRev(t, ""))
	if !errors.Is(bob, ErrNotFound) || !errors.Is(carol, ErrNotFound) || bob.Error() != carol.Error() {
		t.Errorf("sudo bob = %v, sudo carol = %v; want the same not found", bob, carol)
	}
	// An administrator is never acted as, whatever the case of the login.
	for _, login := range []string{"root", "ADMIN2"} {
		if _, err := f.Resolve(ctx, sudo(login), "acme", "app", mustRev(t, "")); !errors.Is(err, ErrForbidden) {
			t.Errorf("sudo %s = %v, want ErrForbidden", login, err)
		}
		if _, err := f.Fetch(ctx, sudo(login), "acme", "app", fx.c3, Limits{}); !errors.Is(err, ErrForbidden) {
			t.Errorf("fetch as sudo %s = %v, want ErrForbidden", login, err)
		}
	}
	// A login that is not a forge login never reaches the forge.
	for _, login := range []string{"", "a b", "x\r\nSudo: root", strings.Repeat("a", 41), "-lead"} {
		if _, err := f.Resolve(ctx, sudo(login), "acme", "app", mustRev(t, "")); !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("sudo %q = %v, want ErrUnauthenticated", login, err)
		}
	}
	// A sudo token that is not an administrator's acts as nobody.
	notAdmin := Credential{Mode: "sudo", Token: aliceToken, User: "alice"}
	if _, err := f.Resolve(ctx, notAdmin, "acme", "app", mustRev(t, "")); err == nil {
		t.Error("sudo with a non-administrator token succeeded")
	}
	// The git kind refuses sudo rather than sending the admin token bare.
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer srv.Close()
	if _, err := NewGit(srv.URL, nil, "", Limits{}, nil).Resolve(ctx, sudo("alice"), "acme", "app", mustRev(t, "")); err == nil || hits.Load() != 0 {
		t.Errorf("git kind with sudo: %v after %d requests; want an error and no request", err, hits.Load())
	}
	assertNoSecret(t, "log", fx.logs.String(), adminToken)
}

func TestGiteaJWTAndBasic(t *testing.T) {
	fx := newFixture(t, nil)
	fx.forge.Grant("eyJ.forwarded.jwt", "acme/app")
	f := fx.newGitea()
	ctx := context.Background()
	for _, cred := range []Credential{
		{Mode: "jwt", Token: "eyJ.forwarded.jwt"},
		{Mode: "basic", Token: basicToken},
		{Mode: "bearer", Token: readerToken},
	} {
		if got, err := f.Resolve(ctx, cred, "acme", "app", mustRev(t, "main")); err != nil || got != fx.c3 {
			t.Errorf("%s: Resolve = %q, %v", cred.Mode, got, err)
		}
	}
	if _, err := f.Resolve(ctx, Credential{}, "acme", "app", mustRev(t, "main")); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("no credential: %v, want ErrUnauthenticated", err)
	}
}

// TestGiteaHostileAnswers: redirects are not followed, an archive that is
// not the commit's is refused, and one git could not have written loses
// only what no checkout could hold.
func TestGiteaHostileAnswers(t *testing.T) {
	var elsewhere atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { elsewhere.Add(1) }))
	defer other.Close()
	var mode atomic.Value
	mode.Store("")
	var fx *fixture
	// A listing git could never have written: "a" a file of 200 bytes
	// and a directory of "a/b".
	big, sha1Zero := strings.Repeat("x", 200), strings.Repeat("0", 40)
	shadowed := map[string]any{"page": 1, "total_count": 3, "truncated": false, "tree": []map[string]any{
		{"path": "a", "mode": "100644", "type": "blob", "size": len(big), "sha": blobID(sha1Zero, []byte(big))},
		{"path": "a", "mode": "040000", "type": "tree", "size": 0, "sha": strings.Repeat("1", 40)},
		{"path": "a/b", "mode": "100644", "type": "blob", "size": 1, "sha": blobID(sha1Zero, []byte("y"))},
	}}
	fx = newFixture(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			m := mode.Load().(string)
			switch {
			case strings.Contains(r.URL.Path, "/git/trees/") && m == "both":
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(shadowed)
				return
			case strings.Contains(r.URL.Path, "/git/trees/") && (m == "pages" || m == "oid"):
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, r)
				var pg map[string]any
				_ = json.Unmarshal(rec.Body.Bytes(), &pg)
				if m == "pages" {
					pg["total_count"] = pg["total_count"].(float64) + 1
				} else {
					pg["tree"].([]any)[0].(map[string]any)["sha"] = "../../../users/root"
				}
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(pg)
				return
			case strings.Contains(r.URL.Path, "/raw/") && m == "raw-lies":
				_, _ = w.Write([]byte("not the blob\n"))
				return
			case !strings.Contains(r.URL.Path, "/archive/"):
				h.ServeHTTP(w, r)
				return
			}
			switch m {
			case "raw-lies":
				// An archive with nothing in it: every file comes raw.
				_, _ = w.Write(tarGz(t, []tarEntry{{name: "app/", dir: true}}))
			case "redirect":
				http.Redirect(w, r, other.URL+"/x.tar.gz", http.StatusFound)
			case "garbage":
				_, _ = w.Write([]byte("this is not gzip"))
			case "other-commit":
				// The archive of c1, served for whatever was asked.
				r2 := r.Clone(r.Context())
				r2.URL.Path = strings.Replace(r.URL.Path, filepath.Base(r.URL.Path), fx.c1+".tar.gz", 1)
				h.ServeHTTP(w, r2)
			case "escape":
				w.Header().Set("Content-Type", "application/octet-stream")
				_, _ = w.Write(tarGz(t, []tarEntry{{name: "app/", dir: true}, {name: "app/ok.go", data: "package ok\n"}, {name: "evil.go", data: "x"}}))
			case "both":
				_, _ = w.Write(tarGz(t, []tarEntry{{name: "app/", dir: true}, {name: "app/a", data: big}, {name: "app/a/b", data: "y"}}))
			default:
				h.ServeHTTP(w, r)
			}
		})
	})
	f := fx.newGitea()
	ctx := context.Background()
	for _, m := range []string{"redirect", "garbage", "other-commit", "escape", "pages", "oid", "raw-lies"} {
		mode.Store(m)
		if _, err := f.Fetch(ctx, bearer(readerToken), "acme", "app", fx.c3, Limits{}); !errors.Is(err, ErrUnavailable) {
			t.Errorf("%s: Fetch = %v, want ErrUnavailable", m, err)
		}
	}
	// A path that is a file and a directory: the file is dropped and said
	// so, as the git kind does (TestListingFileAlsoDirectory), also when
	// it is over a byte bound (the archive's contents once stopped there,
	// and a/b's went missing: 502 for good).
	mode.Store("both")
	for _, lim := range []Limits{{}, {MaxFileBytes: 128}, {MaxTotalBytes: 150}} {
		if tree, err := f.Fetch(ctx, bearer(readerToken), "acme", "app", fx.c3, lim); err != nil || len(tree.Files) != 1 || tree.Files[0].Path != "a/b" ||
			string(tree.Files[0].Data) != "y" || !contains(tree.Warnings, "dropped a file that is also a directory: a") {
			t.Errorf("both, %+v: Fetch = %v, %v; want a/b alone and a warning", lim, tree, err)
		}
	}
	if elsewhere.Load() != 0 {
		t.Error("a redirect was followed")
	}
	mode.Store("")
	if _, err := f.Fetch(ctx, bearer(readerToken), "acme", "app", fx.c3, Limits{}); err != nil {
		t.Errorf("honest forge: %v", err)
	}
	assertNoSecret(t, "log", fx.logs.String(), readerToken)
}

type tarEntry struct {
	name, data, link string
	dir              bool
	typ              byte
	mode             int64
}

func tarGz(t testing.TB, entries []tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: 0o664, Size: int64(len(e.data)), Typeflag: tar.TypeReg}
		switch {
		case e.dir:
			h.Typeflag, h.Size, h.Mode = tar.TypeDir, 0, 0o775
		case e.link != "":
			h.Typeflag, h.Linkname, h.Size = tar.TypeSymlink, e.link, 0
		case e.typ != 0:
			h.Typeflag, h.Size = e.typ, 0
		}
		if e.mode != 0 {
			h.Mode = e.mode
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			if _, err := tw.Write([]byte(e.data)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestReadArchiveEdges: the archive brings contents only, and only those
// that are what the listing says; what git archive never writes but a
// forge might send is refused or passed over.
func TestReadArchiveEdges(t *testing.T) {
	commit := strings.Repeat("a", 40)
	file := func(p, data string) *entry {
		return &entry{path: p, kind: kindFile, oid: blobID(commit, []byte(data)), size: int64(len(data))}
	}
	want := map[string]*entry{
		"a":        file("a", "a\n"),
		"same":     file("same", "a\n"),
		"subst":    file("subst", "$Format:%H$\n"),
		"big":      file("big", strings.Repeat("b", 100)),
		"l":        {path: "l", kind: kindSymlink, oid: blobID(commit, []byte("a")), size: 1},
		"not-link": file("not-link", "nl"),
	}
	for _, tc := range []struct {
		name    string
		entries []tarEntry
		keep    int64
		kept    []string // paths whose contents are kept
		err     error
	}{
		{"no prefix", []tarEntry{{name: "a", data: "a\n"}}, 1 << 20, nil, errArchive},
		{"empty", nil, 1 << 20, nil, errArchive},
		{"escape", []tarEntry{{name: "r/", dir: true}, {name: "r/a", data: "a\n"}, {name: "evil", data: "x"}}, 1 << 20, nil, errArchive},
		{"what the listing says", []tarEntry{{name: "r/", dir: true}, {name: "r/a", data: "a\n"}, {name: "r/l", link: "a"}, {name: "r/big", data: strings.Repeat("b", 100)}}, 1 << 20,
			[]string{"a", "same", "l", "big"}, nil},
		{"export-subst rewrote it", []tarEntry{{name: "r/", dir: true}, {name: "r/subst", data: "0123456789a\n"}}, 1 << 20, nil, nil},
		{"other kinds, sizes, paths", []tarEntry{{name: "r/", dir: true}, {name: "r/not-link", link: "nl"}, {name: "r/l", data: "a"}, {name: "r/a", data: "a\nb"},
			{name: "r/x", data: "a\n"}, {name: "r/h", typ: tar.TypeLink}, {name: "r/../a", data: "a\n"}}, 1 << 20, nil, nil},
		{"within keep", []tarEntry{{name: "r/", dir: true}, {name: "r/big", data: strings.Repeat("b", 100)}, {name: "r/a", data: "a\n"}}, 101, []string{"big"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kept, keep := keepVerified(tc.keep)
			err := readArchive(bytes.NewReader(tarGz(t, tc.entries)), "r", commit, want, DefaultLimits(), keep)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err = %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for p, e := range want {
				if data, ok := kept[e.oid]; ok {
					if blobID(e.oid, data) != e.oid {
						t.Errorf("%s: kept bytes that are not its blob", p)
					}
					got = append(got, p)
				}
			}
			sort.Strings(got)
			sort.Strings(tc.kept)
			if !equalSlices(got, tc.kept) {
				t.Errorf("kept %q, want %q", got, tc.kept)
			}
		})
	}
}

// keepVerified is a keep function for readArchive that holds, in memory,
// the contents that are their entry's blob, at most most bytes of files.
func keepVerified(most int64) (map[string][]byte, func(*entry, io.Reader) (bool, error)) {
	kept := map[string][]byte{}
	return kept, func(e *entry, r io.Reader) (bool, error) {
		if e.kind == kindFile && e.size > most {
			return false, nil
		}
		data, err := io.ReadAll(r)
		if err != nil || blobID(e.oid, data) != e.oid {
			return false, err
		}
		if e.kind == kindFile {
			most -= e.size
		}
		kept[e.oid] = data
		return true, nil
	}
}

// FuzzReadArchive: whatever a forge sends as an archive, reading it
// offers only contents of the listing's kind and size for the entries it
// named, or fails; it never panics.
func FuzzReadArchive(f *testing.F) {
	commit := strings.Repeat("b", 40)
	files := map[string]string{"a.go": "package a\n", "d/e.txt": "e", "big": strings.Repeat("z", 300)}
	f.Add(tarGz(f, []tarEntry{{name: "r/", dir: true}, {name: "r/a.go", data: "package a\n"}, {name: "r/s", link: "a.go"}, {name: "r/sub/", dir: true}}))
	f.Add(tarGz(f, []tarEntry{{name: "r/", dir: true}, {name: "r/x/../../y", data: "y"}, {name: "r/big", data: files["big"]}}))
	if git, err := exec.LookPath("git"); err == nil {
		// A real git archive, with a global header naming its commit.
		root := f.TempDir()
		repoFiles := map[string]string{"s": devforge.SymlinkPrefix + "a.go"}
		maps.Copy(repoFiles, files)
		c, err := devforge.CreateRepo(root, "o", "r", repoFiles, "m")
		if err == nil {
			commit = c
			cmd := exec.Command(git, "archive", "--format=tar.gz", "--prefix=r/", c)
			cmd.Dir = filepath.Join(root, "o", "r.git")
			if out, err := cmd.Output(); err == nil {
				f.Add(out)
			}
		}
	}
	want := map[string]*entry{"s": {path: "s", kind: kindSymlink, oid: blobID(commit, []byte("a.go")), size: 4}}
	for p, data := range files {
		want[p] = &entry{path: p, kind: kindFile, oid: blobID(commit, []byte(data)), size: int64(len(data))}
	}
	lim := Limits{MaxFiles: 8, MaxTotalBytes: 256, MaxFileBytes: 128, MaxDepth: 4}.withDefaults()
	f.Fuzz(func(t *testing.T, data []byte) {
		offered := map[string]bool{}
		_ = readArchive(bytes.NewReader(data), "r", commit, want, lim, func(e *entry, r io.Reader) (bool, error) {
			if want[e.path] != e || offered[e.oid] {
				t.Fatalf("offered %q (%s), not the listing's or twice", e.path, e.oid)
			}
			offered[e.oid] = true
			b, err := io.ReadAll(io.LimitReader(r, 1<<20))
			if err == nil && int64(len(b)) != e.size {
				t.Fatalf("%s: offered %d bytes for size %d", e.path, len(b), e.size)
			}
			return err == nil && blobID(e.oid, b) == e.oid, err
		})
	})
}

// checkTreeBounds: a tree kept within lim sends only valid paths, once
// each and sorted, with their own bytes, and few enough warnings.
func checkTreeBounds(t *testing.T, tree *Tree, lim Limits) {
	t.Helper()
	var total int64
	for i, fl := range tree.Files {
		if !validPath(fl.Path) || strings.Count(fl.Path, "/")+1 > lim.MaxDepth {
			t.Fatalf("invalid path sent: %q", fl.Path)
		}
		if int64(len(fl.Data)) > lim.MaxFileBytes || fl.SHA256 != sha256Hex(fl.Data) || fl.Size != int64(len(fl.Data)) {
			t.Fatalf("%s: over the file bound or wrong sum", fl.Path)
		}
		if i > 0 && tree.Files[i-1].Path >= fl.Path {
			t.Fatalf("files not sorted or repeated at %q", fl.Path)
		}
		total += int64(len(fl.Data))
	}
	if total > lim.MaxTotalBytes || len(tree.Files) > lim.MaxFiles || len(tree.Warnings) > daemonv1.MaxTreeWarnings {
		t.Fatalf("tree over its bounds: %d bytes, %d files, %d warnings", total, len(tree.Files), len(tree.Warnings))
	}
	// The daemon refuses a tree in which a path is a file and a directory.
	files := map[string]bool{}
	for _, fl := range tree.Files {
		files[fl.Path] = true
	}
	for _, fl := range tree.Files {
		for d := path.Dir(fl.Path); d != "."; d = path.Dir(d) {
			if files[d] {
				t.Fatalf("%q sent as a file and as the directory of %q", d, fl.Path)
			}
		}
	}
}

// cannedGitea answers every Gitea API call with one canned JSON body: user
// for /users/{login}, api for the others; flood follows each with an
// endless run of spaces. It fails the test on a request that leaves
// acme/app (or the sudo login), and keeps how much of each body was read.
type cannedGitea struct {
	t         *testing.T
	user, api []byte
	flood     bool
	read      []*countingReader
}

type spaces struct{}

func (spaces) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	return len(p), nil
}

func (c *cannedGitea) RoundTrip(r *http.Request) (*http.Response, error) {
	p := r.URL.Path
	if r.URL.Host != "forge.test" || p != "/api/v1/users/alice" && p != "/api/v1/repos/acme/app" && !strings.HasPrefix(p, "/api/v1/repos/acme/app/") ||
		slices.Contains(strings.Split(p, "/"), "..") {
		c.t.Errorf("a request to %s", r.URL)
	}
	body := c.api
	if strings.HasPrefix(p, "/api/v1/users/") {
		body = c.user
	}
	var rd io.Reader = bytes.NewReader(body)
	if c.flood {
		rd = io.MultiReader(rd, spaces{})
	}
	cr := &countingReader{r: rd}
	c.read = append(c.read, cr)
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(cr), Request: r}, nil
}

// FuzzGiteaResolve: whatever JSON a Gitea answers, Resolve never panics,
// asks only about the repository (a default branch it names cannot take a
// call elsewhere), and returns a full sha (the one asked for, for a sha)
// or a forge error; in sudo mode, only after the forge said the login is
// not an administrator.
func FuzzGiteaResolve(f *testing.F) {
	sha := strings.Repeat("c", 40)
	user := `{"login":"alice","is_admin":false}`
	for _, s := range []struct{ user, api, rev string }{
		{user, `{"default_branch":"main","empty":false,"commit":{"id":"` + sha + `"}}`, ""},
		{user, `{"sha":"` + strings.ToUpper(sha) + `"}`, sha},
		{user, `{"name":"v1","commit":{"sha":"` + sha + `","id":"` + sha + `"}}`, "refs/tags/v1"},
		{`{"login":"ALICE","is_admin":true}`, `{"commit":{"id":"` + sha + `"}}`, "main"},
		{`{"login":"alice"}`, `{"default_branch":"../../users/root"}`, "cafe"},
		{`{"login":"alice","is_admin":"no"}`, `{"default_branch":"a/b","commit":{"id":"` + sha[:39] + `"}}`, ""},
		{`[]`, `null`, "refs/heads/x"},
	} {
		f.Add([]byte(s.user), []byte(s.api), s.rev, false)
		f.Add([]byte(s.user), []byte(s.api), s.rev, true)
	}
	f.Fuzz(func(t *testing.T, userBody, apiBody []byte, revText string, sudo bool) {
		rev, err := ParseRev(revText)
		if err != nil {
			return
		}
		canned := &cannedGitea{t: t, user: userBody, api: apiBody}
		g := NewGitea("http://forge.test", &http.Client{Transport: canned}, nil)
		cred := bearer(readerToken)
		if sudo {
			cred = Credential{Mode: "sudo", Token: adminToken, User: "alice"}
		}
		commit, err := g.Resolve(context.Background(), cred, "acme", "app", rev)
		if err != nil {
			if !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrUnavailable) && !errors.Is(err, ErrForbidden) && !errors.Is(err, ErrBadRev) {
				t.Fatalf("Resolve: %v", err)
			}
			return
		}
		if want, ok := rev.Commit(); !isFullSHA(commit) || ok && commit != want {
			t.Fatalf("Resolve(%q) = %q", revText, commit)
		}
		var u struct {
			Login   string `json:"login"`
			IsAdmin *bool  `json:"is_admin"`
		}
		if sudo && (json.Unmarshal(userBody, &u) != nil || u.IsAdmin == nil || *u.IsAdmin || !strings.EqualFold(u.Login, "alice")) {
			t.Fatalf("acted as alice after the user answer %q", userBody)
		}
	})
}

// TestGiteaAnswersAreBounded: an answer that never ends is read up to
// maxAPIBytes and a drained tail, then refused, on every call Resolve makes.
func TestGiteaAnswersAreBounded(t *testing.T) {
	sha := strings.Repeat("c", 40)
	for _, rev := range []string{"", sha, "main"} {
		canned := &cannedGitea{t: t, user: []byte(`{"login":"alice","is_admin":false}`), api: []byte(`{"default_branch":"main","commit":{"id":"` + sha + `"},"sha":"` + sha + `"}`), flood: true}
		g := NewGitea("http://forge.test", &http.Client{Transport: canned}, nil)
		for _, cred := range []Credential{bearer(readerToken), {Mode: "sudo", Token: adminToken, User: "alice"}} {
			canned.read = nil
			if _, err := g.Resolve(context.Background(), cred, "acme", "app", mustRev(t, rev)); !errors.Is(err, ErrUnavailable) {
				t.Errorf("%q, %s: %v, want ErrUnavailable", rev, cred.Mode, err)
			}
			for _, cr := range canned.read {
				if cr.n > maxAPIBytes+1+64<<10 {
					t.Errorf("%q, %s: read %d bytes of an answer", rev, cred.Mode, cr.n)
				}
			}
			if len(canned.read) != 1 {
				t.Errorf("%q, %s: %d calls after an answer was refused", rev, cred.Mode, len(canned.read))
			}
		}
	}
}

// FuzzGiteaTreeListing: whatever a forge answers for a tree listing, the
// listing keeps only entries admit takes, within the files, depth and
// directories bounds, asks about nothing but the repository, and ends (a
// page that repeats another is refused); it never panics.
func FuzzGiteaTreeListing(f *testing.F) {
	sha := strings.Repeat("d", 40)
	f.Add([]byte(`{"page":1,"total_count":2,"truncated":false,"tree":[{"path":"a.go","mode":"100644","type":"blob","size":3,"sha":"` + sha + `"},{"path":"d","mode":"040000","type":"tree","sha":"` + sha + `"}]}`))
	f.Add([]byte(`{"page":1,"total_count":5,"truncated":true,"tree":[{"path":"../x","mode":"100644","type":"blob","size":-1,"sha":"` + sha + `"}]}`))
	f.Add([]byte(`{"page":1,"total_count":2,"truncated":false,"tree":[{"path":"s","mode":"160000","type":"commit","sha":"` + sha + `"},{"path":"l","mode":"120000","type":"blob","size":9,"sha":"xyz"}]}`))
	f.Add([]byte(`{"page":1,"total_count":1,"truncated":false,"tree":[{"path":"a/b/c/d/e/f","mode":"100755","type":"blob","size":1,"sha":"` + sha + `"}]}`))
	lim := Limits{MaxFiles: 8, MaxDepth: 4, MaxDirs: 4}.withDefaults()
	f.Fuzz(func(t *testing.T, body []byte) {
		canned := &cannedGitea{t: t, api: body}
		g := NewGitea("http://forge.test", &http.Client{Transport: canned}, nil).(*giteaForge)
		ctx := context.Background()
		c, err := g.begin(ctx, "fetch", bearer(readerToken), "acme", "app", slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		tr := &treeReader{op: "fetch", log: c.log, lim: lim, entries: make(map[string]*entry), dirs: make(map[string]bool)}
		err = c.listTree(ctx, repoPath("acme", "app"), sha, tr)
		var tl *TooLargeError
		if err != nil && !errors.As(err, &tl) && !errors.Is(err, ErrUnavailable) {
			t.Fatalf("listTree: %v", err)
		}
		if tr.count > lim.MaxFiles || len(tr.dirs) > lim.MaxDirs || len(canned.read) > 2 {
			t.Fatalf("%d entries, %d directories, %d pages", tr.count, len(tr.dirs), len(canned.read))
		}
		for p, e := range tr.entries {
			if !validPath(p) || strings.Count(p, "/")+1 > lim.MaxDepth || e.path != p || !isFullSHA(e.oid) && e.kind != kindSubmodule {
				t.Fatalf("admitted %q (%s)", p, e.oid)
			}
		}
	})
}
