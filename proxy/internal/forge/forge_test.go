package forge

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/devforge"
	"go.uber.org/goleak"
)

// TestMain runs the tests with a private TMPDIR and fails the run if a
// temporary repository outlived its operation or a goroutine leaked.
func TestMain(m *testing.M) {
	tmp, err := os.MkdirTemp("", "forge-test-")
	if err != nil {
		panic(err)
	}
	os.Setenv("TMPDIR", tmp)
	code := m.Run()
	ReleaseHeld()
	if left, _ := filepath.Glob(filepath.Join(tmp, "lsp-forge-*")); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "temporary repositories left behind: %v\n", left)
		code = 1
	}
	os.RemoveAll(tmp)
	if err := goleak.Find(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

const (
	readerToken = "tok-reader-5b1f0c"  // may read acme/*
	otherToken  = "tok-other-93ad2e"   // may read other/x only
	basicToken  = "tok-basic-77e1c4aa" // may read acme/app, sent as basic auth
)

// fixture is a devforge with repositories, served over real HTTP.
type fixture struct {
	root   string
	forge  *devforge.Server
	server *httptest.Server
	logs   *syncBuffer
	client *http.Client

	c0, c1, c2, c3 string // main, oldest first; c3 is the tip; c0 is no ref's tip
	feature        string // tip of branch "feature"
	dupBranch      string // tip of branch "dup"
	dupTag         string // commit of tag "dup"
	hexBranch      string // tip of branch "cafe", a name that is also hex
	dangling       string // a commit in acme/app reachable from no ref
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// musts returns a helper that unwraps (string, error) or fails t.
func musts(t testing.TB) func(string, error) string {
	return func(s string, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
}

// newFixture builds acme/app:
//
//	main:    c0 ─ c1 ─ c2 ─ c3   (tag v1 → c1, lightweight; tag v2 → c2, annotated)
//	feature: its own root commit
//	dup:     a branch and a tag of the same name on different commits
//	cafe:    a branch whose name is valid hex (and tag add → c1)
//
// plus a dangling commit that no ref reaches.
func newFixture(t testing.TB, wrap func(http.Handler) http.Handler) *fixture {
	t.Helper()
	must := musts(t)
	fx := &fixture{root: t.TempDir(), logs: &syncBuffer{}}
	fx.c0 = must(devforge.CreateRepo(fx.root, "acme", "app", map[string]string{"main.go": "package main // 0\n"}, "zero"))
	fx.c1 = must(devforge.CreateRepo(fx.root, "acme", "app", map[string]string{"main.go": "package main // 1\n"}, "one"))
	fx.c2 = must(devforge.CreateRepo(fx.root, "acme", "app", map[string]string{"main.go": "package main // 2\n"}, "two"))
	fx.c3 = must(devforge.CreateRepo(fx.root, "acme", "app", map[string]string{"main.go": "package main // 3\n"}, "three"))
	fx.feature = must(devforge.Commit(fx.root, "acme", "app", "feature", map[string]string{"f.go": "package f\n"}, "feature"))
	fx.dupBranch = must(devforge.Commit(fx.root, "acme", "app", "dup", map[string]string{"d.go": "package d\n"}, "dup branch"))
	fx.hexBranch = must(devforge.Commit(fx.root, "acme", "app", "cafe", map[string]string{"c.go": "package c\n"}, "hex branch"))
	fx.dupTag = fx.c1
	for _, tag := range []struct{ name, target, msg string }{
		{"v1", fx.c1, ""}, {"v2", fx.c2, "release two"}, {"dup", fx.dupTag, ""}, {"add", fx.c1, ""},
	} {
		if err := devforge.Tag(fx.root, "acme", "app", tag.name, tag.target, tag.msg); err != nil {
			t.Fatal(err)
		}
	}
	fx.dangling = gitIn(t, filepath.Join(fx.root, "acme", "app.git"), "commit-tree", "-m", "dangling", fx.c1+"^{tree}")
	must(devforge.CreateRepo(fx.root, "other", "x", map[string]string{"x": "x"}, "x"))

	srv, err := devforge.New(fx.root, "", slog.New(slog.NewTextHandler(fx.logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	srv.Grant(readerToken, "acme/*")
	srv.Grant(otherToken, "other/x")
	srv.Grant(basicToken, "acme/app")
	fx.forge = srv
	var h http.Handler = srv
	if wrap != nil {
		h = wrap(h)
	}
	fx.server = httptest.NewServer(h)
	t.Cleanup(fx.server.Close)
	fx.client = &http.Client{Transport: &http.Transport{}}
	t.Cleanup(fx.client.CloseIdleConnections)
	return fx
}

// newForge returns the git forge client logging into fx.logs.
func (fx *fixture) newForge(gitBinary string) Forge {
	return NewGit(fx.server.URL, fx.client, gitBinary, Limits{}, slog.New(slog.NewTextHandler(fx.logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
}

func gitIn(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v: %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func bearer(tok string) Credential { return Credential{Token: tok} }

func mustRev(t *testing.T, s string) Rev {
	t.Helper()
	r, err := ParseRev(s)
	if err != nil {
		t.Fatalf("ParseRev(%q): %v", s, err)
	}
	return r
}

// stripProtocol makes the forge answer protocol v0 only, like an old server.
func stripProtocol(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Del("Git-Protocol")
		h.ServeHTTP(w, r)
	})
}

func TestResolveRevForms(t *testing.T) {
	for _, proto := range []struct {
		name string
		wrap func(http.Handler) http.Handler
	}{{"v2", nil}, {"v0", stripProtocol}} {
		t.Run(proto.name, func(t *testing.T) {
			fx := newFixture(t, proto.wrap)
			f := fx.newForge("")
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
				{fx.c3, fx.c3}, // a tip's sha
				{strings.ToUpper(fx.c3), fx.c3},
				{fx.c2, fx.c2},         // not a tip, but v2 peels to it
				{"cafe", fx.hexBranch}, // hex-looking names are refs first, as git resolves them
				{"add", fx.c1},
			} {
				got, err := f.Resolve(ctx, bearer(readerToken), "acme", "app", mustRev(t, tc.rev))
				if err != nil || got != tc.want {
					t.Errorf("Resolve(%q) = %q, %v; want %q", tc.rev, got, err, tc.want)
				}
			}
			// Resolving refs and tips downloads nothing.
			if n := fx.forge.PackDownloads("acme", "app"); n != 0 {
				t.Errorf("PackDownloads after resolving refs = %d, want 0", n)
			}
			for _, rev := range []string{"nope", "refs/heads/v1", "refs/tags/main", "feature/x"} {
				_, err := f.Resolve(ctx, bearer(readerToken), "acme", "app", mustRev(t, rev))
				if !errors.Is(err, ErrNotFound) || err.Error() != "resolve: revision not found" {
					t.Errorf("Resolve(%q) error = %v, want revision not found", rev, err)
				}
			}
			// A short sha that names no ref is refused, even one that is
			// the prefix of a real commit: the forge expands no sha.
			for _, rev := range []string{fx.c3[:7], fx.c1[:12], "beef"} {
				_, err := f.Resolve(ctx, bearer(readerToken), "acme", "app", mustRev(t, rev))
				if !errors.Is(err, ErrBadRev) || !strings.Contains(err.Error(), "full") {
					t.Errorf("Resolve(%q) error = %v, want ErrBadRev asking for the full sha", rev, err)
				}
			}
		})
	}
}

func TestResolveOlderSHA(t *testing.T) {
	for _, tc := range []struct {
		name           string
		allowReachable bool
		allowFilter    bool
		wrap           func(http.Handler) http.Handler
	}{
		{"reachable-in-want", true, true, nil},
		{"tips-filtered", false, true, nil},
		{"tips-unfiltered", false, false, nil},
		{"v0-forge-reachable-in-want", true, true, stripProtocol},
		{"v0-forge-tips", false, true, stripProtocol},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx := newFixture(t, tc.wrap)
			if err := fx.forge.SetAllowReachableSHA1InWant("acme", "app", tc.allowReachable); err != nil {
				t.Fatal(err)
			}
			if err := fx.forge.SetAllowFilter("acme", "app", tc.allowFilter); err != nil {
				t.Fatal(err)
			}
			f := fx.newForge("")
			ctx := context.Background()
			got, err := f.Resolve(ctx, bearer(readerToken), "acme", "app", mustRev(t, fx.c0))
			if err != nil || got != fx.c0 {
				t.Fatalf("Resolve(older sha) = %q, %v; want %q", got, err, fx.c0)
			}
			// A commit the repository holds but no ref reaches is not
			// reachable, although a protocol v2 fetch would hand it out.
			for _, sha := range []string{fx.dangling, strings.Repeat("ab", 20)} {
				_, err = f.Resolve(ctx, bearer(readerToken), "acme", "app", mustRev(t, sha))
				if !errors.Is(err, ErrNotFound) || err.Error() != "resolve: revision not found" {
					t.Errorf("Resolve(%s) error = %v, want revision not found", sha, err)
				}
			}
			// And a token without access learns nothing about it.
			_, err = f.Resolve(ctx, bearer(otherToken), "acme", "app", mustRev(t, fx.c0))
			if !errors.Is(err, ErrNotFound) || err.Error() != "resolve: repository not found" {
				t.Errorf("Resolve without access = %v, want repository not found", err)
			}
			// Proved once, the commit is proved for another credential
			// with access without a download (provenTTL).
			downloads := fx.forge.PackDownloads("acme", "app")
			got, err = f.Resolve(ctx, Credential{Mode: "basic", Token: basicToken}, "acme", "app", mustRev(t, fx.c0))
			if err != nil || got != fx.c0 {
				t.Fatalf("Resolve(older sha) with another credential = %q, %v", got, err)
			}
			if n := fx.forge.PackDownloads("acme", "app") - downloads; n != 0 {
				t.Errorf("a commit proved a moment ago was downloaded again %d times", n)
			}
		})
	}
}

func TestNotFoundIsIdentical(t *testing.T) {
	fx := newFixture(t, nil)
	f := fx.newForge("")
	ctx := context.Background()
	rev := mustRev(t, "main")
	cases := []struct {
		name  string
		cred  Credential
		owner string
		repo  string
	}{
		{"no access", bearer(otherToken), "acme", "app"},
		{"missing repo", bearer(readerToken), "acme", "missing"},
		{"missing owner", bearer(readerToken), "nobody", "app"},
		{"unknown token", bearer("tok-unknown-0000"), "acme", "app"},
		{"basic, no access", Credential{Mode: "basic", Token: basicToken}, "acme", "secret"},
		{"escaped name", bearer(readerToken), "acme", "../other/x"},
	}
	var resolveMsg, fetchMsg string
	for _, tc := range cases {
		_, err := f.Resolve(ctx, tc.cred, tc.owner, tc.repo, rev)
		if !errors.Is(err, ErrNotFound) {
			t.Fatalf("%s: Resolve error = %v, want ErrNotFound", tc.name, err)
		}
		if resolveMsg == "" {
			resolveMsg = err.Error()
		} else if err.Error() != resolveMsg {
			t.Errorf("%s: Resolve message %q differs from %q", tc.name, err.Error(), resolveMsg)
		}
		_, err = f.Fetch(ctx, tc.cred, tc.owner, tc.repo, fx.c3, Limits{})
		if !errors.Is(err, ErrNotFound) {
			t.Fatalf("%s: Fetch error = %v, want ErrNotFound", tc.name, err)
		}
		if fetchMsg == "" {
			fetchMsg = err.Error()
		} else if err.Error() != fetchMsg {
			t.Errorf("%s: Fetch message %q differs from %q", tc.name, err.Error(), fetchMsg)
		}
	}
	// Basic auth with access works.
	got, err := f.Resolve(ctx, Credential{Mode: "basic", Token: basicToken}, "acme", "app", rev)
	if err != nil || got != fx.c3 {
		t.Errorf("basic Resolve = %q, %v", got, err)
	}
	if n := fx.forge.PackDownloads("acme", "app"); n != 0 {
		t.Errorf("refused requests downloaded %d packs", n)
	}
}

func TestCredentialRequired(t *testing.T) {
	fx := newFixture(t, nil)
	f := fx.newForge("")
	for _, cred := range []Credential{{}, {Token: "has space"}, {Token: "line\nbreak"}, {Mode: "basic"}} {
		_, err := f.Resolve(context.Background(), cred, "acme", "app", Rev{})
		if !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("Resolve(%v) = %v, want ErrUnauthenticated", cred, err)
		}
		_, err = f.Fetch(context.Background(), cred, "acme", "app", fx.c3, Limits{})
		if !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("Fetch(%v) = %v, want ErrUnauthenticated", cred, err)
		}
	}
	if _, err := f.Resolve(context.Background(), Credential{Mode: "sudo", Token: readerToken}, "acme", "app", Rev{}); err == nil {
		t.Error("an unsupported mode was accepted")
	}
}

func TestResolveIsNotAFetch(t *testing.T) {
	fx := newFixture(t, nil)
	f := fx.newForge("")
	ctx := context.Background()
	commit, err := f.Resolve(ctx, bearer(readerToken), "acme", "app", Rev{})
	if err != nil {
		t.Fatal(err)
	}
	if n := fx.forge.PackDownloads("acme", "app"); n != 0 {
		t.Fatalf("PackDownloads after Resolve = %d, want 0", n)
	}
	tree, err := f.Fetch(ctx, bearer(readerToken), "acme", "app", commit, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if len(tree.Files) != 1 || string(tree.Files[0].Data) != "package main // 3\n" {
		t.Fatalf("Fetch tree = %+v", tree.Files)
	}
	if n := fx.forge.PackDownloads("acme", "app"); n == 0 {
		t.Fatal("Fetch downloaded no pack")
	}
}

func TestFetchOlderCommit(t *testing.T) {
	for _, tc := range []struct {
		name           string
		allowReachable bool
		allowFilter    bool
	}{
		{"reachable-in-want", true, true},
		{"tips-filtered", false, true},
		{"tips-unfiltered", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx := newFixture(t, nil)
			if err := fx.forge.SetAllowReachableSHA1InWant("acme", "app", tc.allowReachable); err != nil {
				t.Fatal(err)
			}
			if err := fx.forge.SetAllowFilter("acme", "app", tc.allowFilter); err != nil {
				t.Fatal(err)
			}
			f := fx.newForge("")
			ctx := context.Background()
			for _, c := range []struct{ commit, want string }{
				{fx.c0, "package main // 0\n"},
				{fx.c1, "package main // 1\n"},
				{fx.c2, "package main // 2\n"},
				{fx.c3, "package main // 3\n"},
			} {
				tree, err := f.Fetch(ctx, bearer(readerToken), "acme", "app", c.commit, Limits{})
				if err != nil {
					t.Fatalf("Fetch(%s): %v", c.commit, err)
				}
				if len(tree.Files) != 1 || tree.Files[0].Path != "main.go" || string(tree.Files[0].Data) != c.want {
					t.Fatalf("Fetch(%s) = %+v", c.commit, tree.Files)
				}
			}
			_, err := f.Fetch(ctx, bearer(readerToken), "acme", "app", fx.dangling, Limits{})
			if !errors.Is(err, ErrNotFound) {
				t.Errorf("Fetch(dangling) = %v, want ErrNotFound", err)
			}
			if _, err := f.Fetch(ctx, bearer(readerToken), "acme", "app", fx.c1[:12], Limits{}); !errors.Is(err, ErrBadRev) {
				t.Errorf("Fetch(short sha) = %v, want ErrBadRev", err)
			}
		})
	}
}

func TestFetchNormalisation(t *testing.T) {
	must := musts(t)
	fx := newFixture(t, nil)
	lfs := "version https://git-lfs.github.com/spec/v1\noid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 12345\n"
	commit := must(devforge.CreateRepo(fx.root, "acme", "tree", map[string]string{
		"README.md":        "hello\n",
		"bin/run.sh":       devforge.ExecPrefix + "#!/bin/sh\necho hi\n",
		"src/x.go":         "package src\n",
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
	}, "tree"))
	f := fx.newForge("")
	tree, err := f.Fetch(context.Background(), bearer(readerToken), "acme", "tree", commit, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	type file struct {
		path, data string
		exec       bool
	}
	want := []file{
		{"README.md", "hello\n", false},
		{"bin/run.sh", "#!/bin/sh\necho hi\n", true},
		{"chain", "hello\n", false},
		{"docs/link-up", "hello\n", false},
		{"exec-link", "#!/bin/sh\necho hi\n", true},
		{"link-in", "hello\n", false},
		{"src/x.go", "package src\n", false},
		{"via-dir", "package src\n", false},
	}
	var got []file
	for _, fl := range tree.Files {
		got = append(got, file{fl.Path, string(fl.Data), fl.Executable})
		if fl.SHA256 != sha256Hex(fl.Data) {
			t.Errorf("%s: SHA256 %s does not match its data", fl.Path, fl.SHA256)
		}
	}
	if !equalSlices(got, want) {
		t.Errorf("files:\n got %v\nwant %v", got, want)
	}
	wantWarnings := []string{
		"dropped dangling symlink: dangling",
		"dropped dangling symlink: file-as-dir",
		"dropped git-lfs pointer: assets/big.bin",
		"dropped submodule: vendor/sub",
		"dropped symlink loop: loop1",
		"dropped symlink loop: loop2",
		"dropped symlink out of tree: abs",
		"dropped symlink out of tree: docs/escape-back",
		"dropped symlink out of tree: out",
		"dropped symlink to directory: dirlink",
		"dropped symlink to git-lfs pointer: lfs-link",
		"dropped symlink to submodule: sublink",
	}
	if !equalSlices(tree.Warnings, wantWarnings) {
		t.Errorf("warnings:\n got %q\nwant %q", tree.Warnings, wantWarnings)
	}
	// Every entry of the tree is either sent or named in a warning.
	if n := len(tree.Files) + len(tree.Warnings); n != 20 {
		t.Errorf("files + warnings = %d, want the 20 entries of the tree", n)
	}
}

func TestFetchLimits(t *testing.T) {
	must := musts(t)
	fx := newFixture(t, nil)
	commit := must(devforge.CreateRepo(fx.root, "acme", "limits", map[string]string{
		"a/b/c/deep.txt": "0123456789",
		"big.txt":        strings.Repeat("x", 1000),
		"small.txt":      "s",
		"link":           devforge.SymlinkPrefix + "big.txt", // a copy counts in total_bytes
	}, "limits"))
	f := fx.newForge("")
	for _, tc := range []struct {
		name  string
		lim   Limits
		bound string
		limit int64
	}{
		{"files", Limits{MaxFiles: 3}, "files", 3},
		{"depth", Limits{MaxDepth: 3}, "depth", 3},
		{"file_bytes", Limits{MaxFileBytes: 999}, "file_bytes", 999},
		{"total_bytes", Limits{MaxTotalBytes: 2010}, "total_bytes", 2010},
		{"directories", Limits{MaxDirs: 2}, "directories", 2},
		{"all fit", Limits{MaxFiles: 4, MaxDepth: 4, MaxFileBytes: 1000, MaxTotalBytes: 2011, MaxDirs: 3}, "", 0},
		{"defaults", Limits{}, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tree, err := f.Fetch(context.Background(), bearer(readerToken), "acme", "limits", commit, tc.lim)
			if tc.bound == "" {
				if err != nil || len(tree.Files) != 4 {
					t.Fatalf("Fetch = %v, %v; want 4 files", tree, err)
				}
				return
			}
			var tl *TooLargeError
			if !errors.As(err, &tl) || tl.Bound != tc.bound || tl.Limit != tc.limit {
				t.Fatalf("Fetch error = %v, want TooLargeError{%s, %d}", err, tc.bound, tc.limit)
			}
		})
	}
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func equalSlices[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestSHA256Repository(t *testing.T) {
	must := musts(t)
	fx := newFixture(t, nil)
	dir := filepath.Join(fx.root, "acme", "modern.git")
	gitIn(t, fx.root, "init", "--quiet", "--bare", "--object-format=sha256", "--initial-branch=main", dir)
	old := must(devforge.CreateRepo(fx.root, "acme", "modern", map[string]string{"a.go": "package a // old\n"}, "old"))
	tip := must(devforge.CreateRepo(fx.root, "acme", "modern", map[string]string{"a.go": "package a // new\n"}, "new"))
	if len(tip) != 64 {
		t.Fatalf("not a sha256 repository: %s", tip)
	}
	f := fx.newForge("")
	ctx := context.Background()
	for _, rev := range []string{"", "main", tip, old} {
		want := tip
		if rev == old {
			want = old
		}
		got, err := f.Resolve(ctx, bearer(readerToken), "acme", "modern", mustRev(t, rev))
		if err != nil || got != want {
			t.Errorf("Resolve(%q) = %q, %v; want %q", rev, got, err, want)
		}
	}
	for commit, want := range map[string]string{tip: "package a // new\n", old: "package a // old\n"} {
		tree, err := f.Fetch(ctx, bearer(readerToken), "acme", "modern", commit, Limits{})
		if err != nil || len(tree.Files) != 1 || string(tree.Files[0].Data) != want {
			t.Errorf("Fetch(%s) = %+v, %v", commit, tree, err)
		}
	}
	// A sha1 sha in a sha256 repository names nothing.
	if _, err := f.Resolve(ctx, bearer(readerToken), "acme", "modern", mustRev(t, fx.c1)); !errors.Is(err, ErrNotFound) {
		t.Errorf("Resolve: sha1 in a sha256 repository: %v", err)
	}
	if _, err := f.Fetch(ctx, bearer(readerToken), "acme", "modern", fx.c1, Limits{}); !errors.Is(err, ErrNotFound) {
		t.Errorf("Fetch: sha1 in a sha256 repository: %v", err)
	}
}

// TestFetchStreamed: a streamed tree (Limits.Stream) holds in memory only
// the blobs small enough to be a git-lfs pointer, and Stream hands over
// exactly the files, bytes and order of the same tree fetched whole; an
// error of the consumer stops it.
func TestFetchStreamed(t *testing.T) {
	must := musts(t)
	fx := newFixture(t, nil)
	big := strings.Repeat("0123456789abcdef", 64<<10) // 1 MiB
	lfs := "version https://git-lfs.github.com/spec/v1\noid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 12345\n"
	commit := must(devforge.CreateRepo(fx.root, "acme", "stream", map[string]string{
		"README.md":      "hello\n",
		"a/big.bin":      big,
		"a/big-copy.bin": big,
		"b/run.sh":       devforge.ExecPrefix + "#!/bin/sh\n" + strings.Repeat("#", 4000) + "\n",
		"c/edge.txt":     strings.Repeat("x", 1023),
		"c/edge2.txt":    strings.Repeat("y", 1024),
		"lfs-like.txt":   "version https://git-lfs.github.com/spec/v1\n" + strings.Repeat("z", 2000),
		"assets/p.bin":   lfs,
		"link-big":       devforge.SymlinkPrefix + "a/big.bin",
		"z.go":           "package z\n",
		// The gitea kind's archive lacks it: it comes raw as it is pushed.
		"a/ignored.bin":  strings.Repeat("fedcba9876543210", 64<<10),
		".gitattributes": "a/ignored.bin export-ignore\n",
	}, "stream"))
	for _, kind := range []struct {
		name string
		f    Forge
	}{{"git", fx.newForge("")}, {"gitea", fx.newGitea()}} {
		t.Run(kind.name, func(t *testing.T) { testFetchStreamed(t, kind.f, commit) })
	}
}

func testFetchStreamed(t *testing.T, f Forge, commit string) {
	whole, err := f.Fetch(context.Background(), bearer(readerToken), "acme", "stream", commit, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	tree, err := f.Fetch(context.Background(), bearer(readerToken), "acme", "stream", commit, Limits{Stream: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tree.Close()
	if !equalSlices(tree.Warnings, whole.Warnings) {
		t.Errorf("warnings: streamed %q, whole %q", tree.Warnings, whole.Warnings)
	}
	if len(tree.Files) != len(whole.Files) {
		t.Fatalf("streamed tree has %d files, whole %d", len(tree.Files), len(whole.Files))
	}
	inMemory := 0
	for i, fl := range tree.Files {
		w := whole.Files[i]
		if fl.Path != w.Path || fl.Executable != w.Executable || fl.Size != int64(len(w.Data)) {
			t.Errorf("file %d: streamed %q exec=%v size=%d, whole %q exec=%v size=%d", i, fl.Path, fl.Executable, fl.Size, w.Path, w.Executable, len(w.Data))
		}
		if fl.Data != nil {
			inMemory++
			if fl.Size >= maxLFSPointer {
				t.Errorf("%s: %d bytes kept in memory by a streamed tree", fl.Path, fl.Size)
			}
		}
	}
	if inMemory == 0 || inMemory == len(tree.Files) {
		t.Errorf("%d of %d files in memory; want the small ones only", inMemory, len(tree.Files))
	}
	next := 0
	err = tree.Stream(context.Background(), func(i int, data []byte) error {
		if i != next {
			t.Fatalf("Stream handed file %d over in position %d", i, next)
		}
		next++
		if w := whole.Files[i]; string(data) != string(w.Data) || sha256Hex(data) != w.SHA256 {
			t.Errorf("%s: streamed bytes differ from the whole tree's", w.Path)
		}
		return nil
	})
	if err != nil || next != len(whole.Files) {
		t.Fatalf("Stream: %v after %d of %d files", err, next, len(whole.Files))
	}
	// A consumer's error stops the stream and comes back as is.
	stop := errors.New("stop")
	calls := 0
	if err := tree.Stream(context.Background(), func(i int, data []byte) error {
		calls++
		if whole.Files[i].Path == "a/big.bin" {
			return stop
		}
		return nil
	}); !errors.Is(err, stop) {
		t.Fatalf("Stream with a failing consumer: %v, want %v", err, stop)
	}
	if calls >= len(whole.Files) {
		t.Fatalf("Stream went on after its consumer failed (%d calls)", calls)
	}
}

// TestFetchTakesTheProofsDownload: on a forge that cannot filter, the
// proof of an older commit downloads its tree before the payment gate; the
// fetch that follows with the same credential reads that download instead
// of downloading again, and a fetch with another credential does not.
func TestFetchTakesTheProofsDownload(t *testing.T) {
	for _, allowReachable := range []bool{true, false} {
		t.Run(fmt.Sprintf("reachable-in-want=%v", allowReachable), func(t *testing.T) {
			fx := newFixture(t, nil)
			if err := fx.forge.SetAllowReachableSHA1InWant("acme", "app", allowReachable); err != nil {
				t.Fatal(err)
			}
			if err := fx.forge.SetAllowFilter("acme", "app", false); err != nil {
				t.Fatal(err)
			}
			f := fx.newForge("")
			ctx := context.Background()
			fetch := func(cred Credential, commit, want string) (downloads int) {
				t.Helper()
				before := fx.forge.PackDownloads("acme", "app")
				tree, err := f.Fetch(ctx, cred, "acme", "app", commit, Limits{})
				if err != nil {
					t.Fatalf("Fetch(%s): %v", commit, err)
				}
				defer tree.Close()
				if len(tree.Files) != 1 || tree.Files[0].Path != "main.go" || string(tree.Files[0].Data) != want {
					t.Fatalf("Fetch(%s) = %+v", commit, tree.Files)
				}
				return fx.forge.PackDownloads("acme", "app") - before
			}
			if _, err := f.Resolve(ctx, bearer(readerToken), "acme", "app", mustRev(t, fx.c0)); err != nil {
				t.Fatal(err)
			}
			if n := fetch(bearer(readerToken), fx.c0, "package main // 0\n"); n != 0 {
				t.Errorf("the fetch after the proof downloaded %d more times", n)
			}
			// Taken once: the next fetch downloads.
			if n := fetch(bearer(readerToken), fx.c0, "package main // 0\n"); n == 0 {
				t.Error("a second fetch found the proof's download again")
			}
			if _, err := f.Resolve(ctx, bearer(readerToken), "acme", "app", mustRev(t, fx.c1)); err != nil {
				t.Fatal(err)
			}
			if n := fetch(Credential{Mode: "basic", Token: basicToken}, fx.c1, "package main // 1\n"); n == 0 {
				t.Error("a fetch with another credential took the proof's download")
			}
		})
	}
}

// TestProofCutShortIsNotNotFound: a request that ends while its proof
// checks what it downloaded (between the fetch and `git cat-file`) is
// "did not answer in time", not a "revision not found" the resolve cache
// would keep for its negative TTL: the next request proves the commit.
func TestProofCutShortIsNotNotFound(t *testing.T) {
	realGit, err := exec.LookPath("git")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	hang, reached := filepath.Join(dir, "hang"), filepath.Join(dir, "reached")
	wrapper := filepath.Join(dir, "git")
	script := fmt.Sprintf("#!/bin/sh\ncase \"$*\" in *cat-file*) if [ -e %s ]; then : > %s; exec sleep 30; fi;; esac\nexec %s \"$@\"\n", hang, reached, realGit)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(hang, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	fx := newFixture(t, nil)
	if err := fx.forge.SetAllowReachableSHA1InWant("acme", "app", true); err != nil {
		t.Fatal(err)
	}
	f := NewCache(fx.newForge(wrapper), time.Minute, time.Minute, nil)

	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for {
			if _, err := os.Stat(reached); err == nil {
				cancel()
				return
			}
			if ctx.Err() != nil {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	_, err = f.Resolve(ctx, bearer(readerToken), "acme", "app", mustRev(t, fx.c0))
	cancel()
	if _, serr := os.Stat(reached); serr != nil {
		t.Fatalf("the proof never checked its download (%v); Resolve: %v", serr, err)
	}
	if errors.Is(err, ErrNotFound) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Resolve cut short = %v, want the forge's lateness, not a not-found", err)
	}
	if err := os.Remove(hang); err != nil {
		t.Fatal(err)
	}
	if got, err := f.Resolve(context.Background(), bearer(readerToken), "acme", "app", mustRev(t, fx.c0)); err != nil || got != fx.c0 {
		t.Fatalf("Resolve after the cut-short one = %q, %v; want %q", got, err, fx.c0)
	}
}
