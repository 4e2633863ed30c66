package deps

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha1"
	"crypto/sha512"
	"encoding/base64"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
	"github.com/hanzoai/lsp/daemon/internal/servertest"
	"github.com/hanzoai/lsp/daemon/internal/uri"
	"github.com/hanzoai/lsp/daemon/internal/workspace"
)

// tarEntry is one member of a test tarball; typ 0 is a regular file.
type tarEntry struct {
	name, body string
	typ        byte
	link       string
	// size, when set, is a regular file of that many zero bytes.
	size int64
}

// tgz builds a gzip tar in memory, as npm pack would (or as an attacker
// would not).
func tgz(t testing.TB, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: 0o644, Typeflag: e.typ, Linkname: e.link}
		body := []byte(e.body)
		if e.size > 0 {
			body = make([]byte, e.size)
		}
		switch e.typ {
		case 0:
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(body))
		case tar.TypeDir:
			h.Mode = 0o755
		case tar.TypeChar:
			h.Devmajor, h.Devminor = 1, 3
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(body); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func sri(data []byte) string {
	s := sha512.Sum512(data)
	return "sha512-" + base64.StdEncoding.EncodeToString(s[:])
}

// registry is an httptest npm registry serving tarballs from memory and
// counting every request.
type registry struct {
	url   *url.URL
	mu    sync.Mutex
	files map[string][]byte
	n     atomic.Int64
}

func newRegistry(t *testing.T) *registry {
	t.Helper()
	r := &registry{files: map[string][]byte{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.n.Add(1)
		r.mu.Lock()
		b, ok := r.files[req.URL.Path]
		r.mu.Unlock()
		if !ok {
			http.NotFound(w, req)
			return
		}
		_, _ = w.Write(b)
	}))
	t.Cleanup(srv.Close)
	r.url, _ = url.Parse(srv.URL + "/npm")
	return r
}

// add serves data as name@version's tarball and returns its lockfile
// entry, with the integrity of data.
func (r *registry) add(name, version string, data []byte) map[string]any {
	base := name[strings.LastIndex(name, "/")+1:]
	p := "/npm/" + name + "/-/" + base + "-" + version + ".tgz"
	r.mu.Lock()
	r.files[p] = data
	r.mu.Unlock()
	return map[string]any{"version": version, "resolved": r.url.Scheme + "://" + r.url.Host + p, "integrity": sri(data)}
}

const greetDTS = "/** Greets someone by name. */\nexport declare function greet(name: string): string;\n"

// fixture is a registry with a package, a @types package (whose top
// directory is not package/, as in DefinitelyTyped's tarballs), a nested
// package and an optional one for no platform, and the lockfile over them.
func fixture(t *testing.T) (*registry, string) {
	t.Helper()
	r := newRegistry(t)
	greet := r.add("greet", "1.0.0", tgz(t,
		tarEntry{name: "package/", typ: tar.TypeDir},
		tarEntry{name: "package/package.json", body: `{"name":"greet","version":"1.0.0","types":"index.d.ts","main":"index.js"}`},
		tarEntry{name: "package/index.d.ts", body: greetDTS},
		tarEntry{name: "package/index.js", body: "exports.greet = (n) => 'hello ' + n;\n"},
		tarEntry{name: "./package//lib/deep/x.js", body: "module.exports = 1;\n"}, // as some packers write it
		tarEntry{name: "README", body: "beside the top directory: not installed"},
	))
	greet["dev"] = true // devDependencies are installed too: types live there
	shout := r.add("@types/shout", "2.0.0", tgz(t,
		tarEntry{name: "shout/package.json", body: `{"name":"@types/shout","version":"2.0.0","types":"index.d.ts"}`},
		tarEntry{name: "shout/index.d.ts", body: "/** Shouts. */\nexport declare function shout(s: string): string;\n"},
	))
	inner := r.add("inner", "0.1.0", tgz(t,
		tarEntry{name: "package/package.json", body: `{"name":"inner","version":"0.1.0"}`},
		tarEntry{name: "package/index.d.ts", body: "export declare const inner: number;\n"},
	))
	other := r.add("other-os", "1.0.0", tgz(t, tarEntry{name: "package/package.json", body: "{}"}))
	other["optional"] = true
	other["os"] = []string{"!" + npmPlatform()}
	return r, lock(map[string]any{
		"":                                      map[string]any{"name": "app", "devDependencies": map[string]string{"greet": "^1.0.0", "@types/shout": "^2.0.0"}},
		"node_modules/greet":                    greet,
		"node_modules/@types/shout":             shout,
		"node_modules/greet/node_modules/inner": inner,
		"node_modules/other-os":                 other,
	})
}

// TestFetchAsAnOrdinaryUID: the phase's installs as the daemon runs in
// production, an ordinary uid (deploy/k8s). Moving a read-only directory
// to another parent rewrites its "..", which root's permission override
// hid: as uid 65534 every npm install failed to move its packages into the
// tree and every Go module failed its extraction ("rename …: permission
// denied"), so Go and TypeScript answers lost their dependencies.
func TestFetchAsAnOrdinaryUID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the tests run as this ordinary uid already")
	}
	servertest.AsNobody(t, "TestInstallNPM", "TestFetchGoFile", "TestFetchGoTransitive")
}

// TestRepositoryNodeModulesKept: a repository that commits its own
// node_modules is served as committed (a tree never changes): nothing is
// fetched, no package is named as an external root, and a warning says
// why the lockfile's packages are not there.
func TestRepositoryNodeModulesKept(t *testing.T) {
	r, lf := fixture(t)
	const own = "export declare function greet(): void;\n"
	ws := repo(t, map[string]string{"package-lock.json": lf, "node_modules/greet/index.d.ts": own})
	w := fetcher(Config{NPMRegistry: r.url}).Fetch(context.Background(), ws)
	if len(w) != 1 || !strings.Contains(w[0], "node_modules of its own") {
		t.Fatalf("warnings %q", w)
	}
	if n := r.n.Load(); n != 0 {
		t.Errorf("%d registry requests", n)
	}
	if b, err := os.ReadFile(filepath.Join(runtime.NodeModules(ws), "greet", "index.d.ts")); err != nil || string(b) != own {
		t.Errorf("the repository's file: %q, %v", b, err)
	}
	if ex := NPMExternals(ws); len(ex) != 0 {
		t.Errorf("external roots %v", ex)
	}
}

// TestInstallNPM: the packages land in the tree's node_modules in npm's
// layout, moved whole into the read-only tree, read-only, name their
// modules, and a second prepare fetches nothing.
func TestInstallNPM(t *testing.T) {
	r, lf := fixture(t)
	ws := repo(t, map[string]string{"package-lock.json": lf, "src/main.ts": "import { greet } from 'greet';\n"})
	// Published trees are read-only (workspace.Store).
	if err := workspace.MakeReadOnly(ws.Root); err != nil {
		t.Fatal(err)
	}
	f := fetcher(Config{NPMRegistry: r.url})
	if w := f.Fetch(context.Background(), ws); len(w) != 0 {
		t.Fatalf("warnings %q", w)
	}
	if got := r.n.Load(); got != 3 {
		t.Fatalf("%d requests, want 3 (the other platform's optional package is skipped)", got)
	}
	nm := runtime.NodeModules(ws)
	if nm != filepath.Join(ws.Root, "node_modules") {
		t.Fatalf("node_modules at %s", nm)
	}
	for p, want := range map[string]string{
		"greet/index.d.ts":                    greetDTS,
		"greet/lib/deep/x.js":                 "module.exports = 1;\n",
		"@types/shout/index.d.ts":             "/** Shouts. */\nexport declare function shout(s: string): string;\n",
		"greet/node_modules/inner/index.d.ts": "export declare const inner: number;\n",
	} {
		b, err := os.ReadFile(filepath.Join(nm, p))
		if err != nil || string(b) != want {
			t.Errorf("%s: %q, %v", p, b, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(nm, "other-os")); err == nil {
		t.Error("the other platform's optional package was installed")
	}
	// The tree is read-only again, holds nothing else new, and beside it
	// is the index alone (no staging left).
	if fi, err := os.Stat(ws.Root); err != nil || fi.Mode().Perm() != 0o555 {
		t.Errorf("the tree's mode after the install: %v, %v", fi.Mode(), err)
	}
	if top, _ := os.ReadDir(ws.Root); len(top) != 3 {
		t.Errorf("the tree holds %v, want node_modules, package-lock.json and src", top)
	}
	beside, _ := os.ReadDir(filepath.Dir(ws.Root))
	if len(beside) != 2 || beside[0].Name() != filepath.Base(runtime.NPMIndex(ws)) || beside[1].Name() != "tree" {
		t.Errorf("beside the tree: %v, want the index and the tree", beside)
	}
	_ = filepath.WalkDir(nm, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := d.Info()
		switch {
		case d.IsDir() && fi.Mode().Perm() != 0o555, !d.IsDir() && fi.Mode().Perm() != 0o444:
			t.Errorf("%s: mode %v, want read-only", p, fi.Mode())
		case !d.IsDir() && !fi.Mode().IsRegular():
			t.Errorf("%s is not a regular file", p)
		}
		return nil
	})

	ex := NPMExternals(ws)
	pol := uri.Policy{Root: ws.Root, Externals: ex}
	for file, want := range map[string]uri.Location{
		"greet/index.d.ts":                    {Path: "index.d.ts", External: true, Module: "greet@1.0.0"},
		"@types/shout/index.d.ts":             {Path: "index.d.ts", External: true, Module: "@types/shout@2.0.0"},
		"greet/node_modules/inner/index.d.ts": {Path: "index.d.ts", External: true, Module: "inner@0.1.0"},
		"greet/lib/deep/x.js":                 {Path: "lib/deep/x.js", External: true, Module: "greet@1.0.0"},
	} {
		got, err := pol.Map("file://" + filepath.Join(nm, file))
		if err != nil || got != want {
			t.Errorf("%s maps to %+v, %v; want %+v", file, got, err, want)
		}
	}
	// What is in node_modules but in no package is the tree's.
	if got, err := pol.Map("file://" + filepath.Join(nm, "greet")); err != nil || got != (uri.Location{Path: "node_modules/greet"}) {
		t.Errorf("a package's own directory maps to %+v, %v", got, err)
	}

	// The same tree prepared again: everything is in place.
	before := r.n.Load()
	if w := f.Fetch(context.Background(), ws); len(w) != 0 {
		t.Fatalf("second fetch warnings %q", w)
	}
	if r.n.Load() != before {
		t.Fatal("the second prepare fetched again")
	}
}

// TestInstallIntegrityMismatch: bytes that do not hash to the lockfile's
// integrity are never extracted.
func TestInstallIntegrityMismatch(t *testing.T) {
	r := newRegistry(t)
	e := r.add("greet", "1.0.0", tgz(t, tarEntry{name: "package/index.d.ts", body: greetDTS}))
	e["integrity"] = sri([]byte("other bytes"))
	ws := repo(t, map[string]string{"package-lock.json": lock(map[string]any{"node_modules/greet": e})})
	w := fetcher(Config{NPMRegistry: r.url}).Fetch(context.Background(), ws)
	if len(w) != 1 || !strings.Contains(w[0], "greet@1.0.0: the tarball does not match its lockfile integrity; it was not installed") {
		t.Fatalf("warnings %q", w)
	}
	if r.n.Load() != 1 {
		t.Fatalf("%d requests, want 1", r.n.Load())
	}
	onlyTree(t, ws)
}

// onlyTree: nothing but the tree is beside it (no node_modules, no
// staging left).
func onlyTree(t *testing.T, ws runtime.Workspace) {
	t.Helper()
	beside, _ := os.ReadDir(filepath.Dir(ws.Root))
	if len(beside) != 1 || beside[0].Name() != "tree" {
		t.Fatalf("beside the tree: %v", beside)
	}
}

// TestInstallHostileTarballs: a tarball that is verified but hostile is
// refused whole, and nothing of it is written anywhere.
func TestInstallHostileTarballs(t *testing.T) {
	cases := []struct {
		name    string
		entries []tarEntry
		want    string
	}{
		{"dot-dot path", []tarEntry{{name: "package/index.d.ts", body: "x"}, {name: "package/../../escape.js", body: "x"}}, "a path climbs out"},
		{"absolute path", []tarEntry{{name: "/etc/cron.d/x", body: "x"}}, "a path is absolute"},
		{"symlink", []tarEntry{{name: "package/index.d.ts", typ: tar.TypeSymlink, link: "/etc/passwd"}}, "it holds a link"},
		{"hardlink", []tarEntry{{name: "package/a", body: "x"}, {name: "package/b", typ: tar.TypeLink, link: "package/a"}}, "it holds a link"},
		{"device", []tarEntry{{name: "package/null", typ: tar.TypeChar}}, "it holds an entry that is neither a file nor a directory"},
		{"oversized member", []tarEntry{{name: "package/big.js", size: 1 << 20}}, "over the size bound"},
		{"too deep", []tarEntry{{name: "package/" + strings.Repeat("d/", maxTarDepth) + "x", body: "x"}}, "a path is too deep"},
		{"directory over file", []tarEntry{{name: "package/a", body: "x"}, {name: "package/a/b", body: "y"}}, "a directory is also a file"},
		{"file over directory", []tarEntry{{name: "package/a/b", body: "x"}, {name: "package/a", body: "y"}}, "a file is also a directory"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRegistry(t)
			data := tgz(t, c.entries...)
			ws := repo(t, map[string]string{"package-lock.json": lock(map[string]any{"node_modules/bad": r.add("bad", "1.0.0", data)})})
			w := fetcher(Config{NPMRegistry: r.url, MaxZip: 64 << 10}).Fetch(context.Background(), ws)
			if len(w) != 1 || !strings.Contains(w[0], "bad@1.0.0: tarball refused: "+c.want) {
				t.Fatalf("warnings %q, want %q", w, c.want)
			}
			onlyTree(t, ws)
			if _, err := os.Lstat(filepath.Join(filepath.Dir(filepath.Dir(ws.Root)), "escape.js")); err == nil {
				t.Fatal("a member escaped")
			}
		})
	}
}

// TestInstallRepeatedMember: a path a tarball holds twice as a regular file
// is installed with its later copy, as npm extracts it.
func TestInstallRepeatedMember(t *testing.T) {
	r := newRegistry(t)
	data := tgz(t, tarEntry{name: "package/index.d.ts", body: "export const v = 1;\n"}, tarEntry{name: "package/index.d.ts", body: "export const v = 2;\n"})
	ws := repo(t, map[string]string{"package-lock.json": lock(map[string]any{"node_modules/twice": r.add("twice", "1.0.0", data)})})
	if w := fetcher(Config{NPMRegistry: r.url}).Fetch(context.Background(), ws); len(w) != 0 {
		t.Fatalf("warnings %q", w)
	}
	b, err := os.ReadFile(filepath.Join(runtime.NodeModules(ws), "twice", "index.d.ts"))
	if err != nil || string(b) != "export const v = 2;\n" {
		t.Fatalf("index.d.ts = %q, %v; want the later copy", b, err)
	}
}

// TestInstallPartial: one refused package leaves the others installed and
// its nested packages out; a package the registry does not serve is a
// warning.
func TestInstallPartial(t *testing.T) {
	r := newRegistry(t)
	good := r.add("good", "1.0.0", tgz(t, tarEntry{name: "package/index.d.ts", body: "export {};\n"}))
	bad := r.add("bad", "1.0.0", tgz(t, tarEntry{name: "package/x", typ: tar.TypeSymlink, link: "/"}))
	child := r.add("child", "1.0.0", tgz(t, tarEntry{name: "package/index.d.ts", body: "export {};\n"}))
	missing := map[string]any{"version": "1.0.0", "resolved": r.url.String() + "/missing/-/missing-1.0.0.tgz", "integrity": integrity}
	ws := repo(t, map[string]string{"package-lock.json": lock(map[string]any{
		"node_modules/good": good, "node_modules/bad": bad, "node_modules/bad/node_modules/child": child, "node_modules/missing": missing,
	})})
	w := fetcher(Config{NPMRegistry: r.url}).Fetch(context.Background(), ws)
	all := strings.Join(w, "\n")
	if len(w) != 2 || !strings.Contains(all, "bad@1.0.0: tarball refused: it holds a link") || !strings.Contains(all, "missing@1.0.0: is not served by the registry") {
		t.Fatalf("warnings %q", w)
	}
	nm := runtime.NodeModules(ws)
	if _, err := os.Stat(filepath.Join(nm, "good/index.d.ts")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"bad", "missing"} {
		if _, err := os.Lstat(filepath.Join(nm, p)); err == nil {
			t.Errorf("%s was installed", p)
		}
	}
	for _, s := range w {
		if strings.Contains(s, ws.Root) || strings.Contains(s, r.url.Host) {
			t.Fatalf("warning %q shows a host path or the registry", s)
		}
	}
}

// TestExtractChargesEntries: files and directories cost a block each
// beyond their bytes, so a tarball of empty entries cannot fill a disk or
// its inodes for free; and a refused tarball gives the phase's budget back,
// so one hostile package does not starve the others.
func TestExtractChargesEntries(t *testing.T) {
	var empties []tarEntry
	for i := range 64 {
		empties = append(empties, tarEntry{name: fmt.Sprintf("package/d%d/", i), typ: tar.TypeDir}, tarEntry{name: fmt.Sprintf("package/d%d/e", i)})
	}
	left := &atomic.Int64{}
	left.Store(1 << 20)
	// 128 entries of 0 bytes, but 512 KiB of blocks: over a 256 KiB bound.
	err := extractTarball(bytes.NewReader(tgz(t, empties...)), t.TempDir(), tarLimits{maxBytes: 256 << 10, left: left})
	if err == nil || !strings.Contains(err.Error(), "over the size bound") {
		t.Fatalf("empty entries over the bound: %v", err)
	}
	if left.Load() != 1<<20 {
		t.Fatalf("a refused tarball kept %d bytes of the phase's budget", 1<<20-left.Load())
	}
	// The same within the bound is extracted, and charged.
	dir := t.TempDir()
	if err := extractTarball(bytes.NewReader(tgz(t, empties...)), dir, tarLimits{maxBytes: 1 << 20, left: left}); err != nil {
		t.Fatal(err)
	}
	if used := 1<<20 - left.Load(); used != 128*entryCost {
		t.Fatalf("charged %d bytes for 128 empty entries, want %d", used, 128*entryCost)
	}
	if _, err := os.Stat(filepath.Join(dir, "d63", "e")); err != nil {
		t.Fatal(err)
	}
}

// TestInstallSHA1Pinned: a package the lockfile pins by sha1 alone (old
// lockfiles, as axios's) is installed when its tarball matches that sha1,
// as npm ci installs it; a wrong sha1 is an integrity failure, and an
// integrity of no accepted algorithm is never fetched.
func TestInstallSHA1Pinned(t *testing.T) {
	r := newRegistry(t)
	good := r.add("good", "1.0.0", tgz(t, tarEntry{name: "package/index.d.ts", body: "export {};\n"}))
	oldTar := tgz(t, tarEntry{name: "package/index.d.ts", body: "export const old = 1;\n"})
	old := r.add("old", "1.0.0", oldTar)
	sum := sha1.Sum(oldTar)
	old["integrity"] = "sha1-" + base64.StdEncoding.EncodeToString(sum[:])
	child := r.add("child", "1.0.0", tgz(t, tarEntry{name: "package/index.d.ts", body: "export {};\n"}))
	wrong := r.add("wrong", "1.0.0", tgz(t, tarEntry{name: "package/index.d.ts", body: "export {};\n"}))
	wrong["integrity"] = "sha1-2jmj7l5rSw0yVb/vlWAYkK/YBwk=" // the empty file's
	weak := r.add("weak", "1.0.0", tgz(t, tarEntry{name: "package/index.d.ts", body: "export {};\n"}))
	weak["integrity"] = "md5-1B2M2Y8AsgTpgAmY7PhCfg=="
	ws := repo(t, map[string]string{"package-lock.json": lock(map[string]any{
		"node_modules/good": good, "node_modules/old": old, "node_modules/old/node_modules/child": child,
		"node_modules/wrong": wrong, "node_modules/weak": weak,
	})})
	w := fetcher(Config{NPMRegistry: r.url}).Fetch(context.Background(), ws)
	joined := strings.Join(w, "\n")
	if len(w) != 2 || !strings.Contains(joined, "weak@1.0.0: no sha512 or sha1 integrity in the lockfile; not installed") || !strings.Contains(joined, "wrong@1.0.0") {
		t.Fatalf("warnings %q", w)
	}
	if n := r.n.Load(); n != 4 {
		t.Fatalf("%d requests, want 4 (weak is never fetched)", n)
	}
	nm := runtime.NodeModules(ws)
	for _, p := range []string{"good/index.d.ts", "old/index.d.ts", "old/node_modules/child/index.d.ts"} {
		if _, err := os.Stat(filepath.Join(nm, p)); err != nil {
			t.Error(err)
		}
	}
	for _, p := range []string{"wrong", "weak"} {
		if _, err := os.Lstat(filepath.Join(nm, p)); err == nil {
			t.Errorf("%s was installed", p)
		}
	}
}
