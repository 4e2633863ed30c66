package corpus

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/devstack"
	"github.com/hanzoai/lsp/proxy/internal/lspdirect"
)

// npmArch is the machine's architecture as npm's platform packages name it.
func npmArch() string {
	if goruntime.GOARCH == "amd64" {
		return "x64"
	}
	return goruntime.GOARCH
}

// Pinned tools of the ground truth's JavaScript installs (npm is the
// machine's). pnpm 12.4.2 is the newest that runs on the machine's Node 20
// (pnpm 11 needs node:sqlite); the Yarn Berry repository brings its own.
const (
	pnpmVersion = "pnpm@12.4.2"
	yarnVersion = "yarn@1.22.22"
)

// ModCache is the Go module cache the downloads go into, below the cache
// directory; its cache/download folder is laid out as a GOPROXY and is the
// mirror both sides fetch from.
func modCache(cacheDir string) string { return filepath.Join(cacheDir, "modcache") }

func goMirror(cacheDir string) string {
	return "file://" + filepath.Join(modCache(cacheDir), "cache", "download")
}

// daemonGoProxies are the daemon's Go mirrors: the local one, then the
// machine's module proxy. The local mirror is the go command's download
// cache, which holds the checksum database's lookups but only the tiles
// the go command read, for the tree it knew: a daemon verifying a go.sum
// line the repository lacks (logrus-nosum's) asks for the tiles of the
// lookup's own tree, which come from the proxy behind it, as they would
// from an operator's mirror of both (deploy/README.md).
func daemonGoProxies(cacheDir string) string {
	out, err := exec.Command("go", "env", "GOPROXY").Output()
	if err != nil {
		return goMirror(cacheDir)
	}
	proxies := []string{goMirror(cacheDir)}
	for _, p := range strings.FieldsFunc(strings.TrimSpace(string(out)), func(r rune) bool { return r == ',' || r == '|' }) {
		if strings.HasPrefix(p, "https://") {
			proxies = append(proxies, p)
		}
	}
	return strings.Join(proxies, ",")
}

// downloadEnv is the machine's environment (its GOPROXY) with the module
// cache moved into cacheDir and nothing of the checkout's workspace.
func downloadEnv(cacheDir string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "GOMODCACHE", "GOFLAGS", "GOWORK", "GOTOOLCHAIN", "GOPATH":
			continue
		}
		env = append(env, kv)
	}
	return append(env, "GOMODCACHE="+modCache(cacheDir), "GOPATH="+filepath.Join(cacheDir, "gopath"),
		"GOFLAGS=-modcacherw", "GOTOOLCHAIN=local", "npm_config_cache="+filepath.Join(cacheDir, "npm-cache"))
}

// materialize writes the repository's tree, as it is committed, into dir.
func materialize(ctx context.Context, r Repo, corpusDir, cacheDir, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if r.Snapshot != "" {
		f := filepath.Join(corpusDir, r.Snapshot)
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("snapshot: %w", err)
		}
		_, err := run(ctx, dir, nil, "tar", "-xzf", f, "--strip-components=1", "--no-same-owner")
		return err
	}
	env := downloadEnv(cacheDir)
	for i, m := range r.Modules {
		out, err := run(ctx, cacheDir, env, "go", "mod", "download", "-json", m)
		var info struct{ Zip, Error string }
		if jerr := json.Unmarshal(out, &info); jerr != nil && err == nil {
			err = jerr
		}
		if info.Error != "" {
			err = errors.New(info.Error)
		}
		if err != nil {
			return fmt.Errorf("download %s: %w", m, err)
		}
		dest := dir
		if len(r.Dirs) > i {
			dest = filepath.Join(dir, r.Dirs[i])
		}
		if err := unzipModule(info.Zip, dest); err != nil {
			return fmt.Errorf("unzip %s: %w", m, err)
		}
	}
	if r.GoWork != "" {
		if err := os.WriteFile(filepath.Join(dir, "go.work"), []byte(r.GoWork), 0o644); err != nil {
			return err
		}
	}
	if r.Vendor {
		if _, err := run(ctx, dir, append(env, "GOWORK=off"), "go", "mod", "vendor"); err != nil {
			return err
		}
	}
	if len(r.DropSum) > 0 {
		p := filepath.Join(dir, "go.sum")
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var kept []string
		for _, l := range strings.SplitAfter(string(b), "\n") {
			drop := false
			for _, m := range r.DropSum {
				drop = drop || strings.HasPrefix(l, m+" ")
			}
			if !drop {
				kept = append(kept, l)
			}
		}
		if err := os.WriteFile(p, []byte(strings.Join(kept, "")), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// unzipModule extracts a module zip into dest, its module@version/ prefix
// stripped.
func unzipModule(zipPath, dest string) error {
	zr, err := zip.OpenReader(zipPath)
	if err != nil {
		return err
	}
	defer zr.Close()
	for _, f := range zr.File {
		// Entries are module@version/path; the module path has slashes.
		at := strings.IndexByte(f.Name, '@')
		if at < 0 || strings.HasSuffix(f.Name, "/") {
			continue
		}
		_, rel, ok := strings.Cut(f.Name[at:], "/")
		if !ok || rel == "" {
			continue
		}
		if !filepath.IsLocal(rel) {
			return fmt.Errorf("zip entry %q: not local", f.Name)
		}
		p := filepath.Join(dest, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		rc, err := f.Open()
		if err != nil {
			return err
		}
		out, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
		if err == nil {
			_, err = io.Copy(out, rc)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
		}
		rc.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// addMissingSums does, in each module of a Go checkout, what a developer
// does when the go command says a package's go.sum entry is missing (the
// checkout does not build otherwise: gopls cannot import the package and
// skips the analyzers that do not run despite errors, so logrus-nosum's
// ground truth lacked findings the service's verified overlay gives):
// `go mod download all`, which adds the build list's sums to go.sum and
// touches nothing else (the go command's own advice, `go get`, may also
// edit go.mod). It runs after the timed install: reading an error and
// answering it is not an install step of the baseline.
func addMissingSums(ctx context.Context, cacheDir, dir string) {
	env := downloadEnv(cacheDir)
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || (d.IsDir() && (d.Name() == "vendor" || d.Name() == "testdata" || d.Name() == "node_modules")) {
			return filepath.SkipDir
		}
		if d.Name() != "go.mod" {
			return nil
		}
		out, err := run(ctx, filepath.Dir(p), env, "go", "list", "-e", "-deps", "-test", "-f", "{{with .Error}}{{.Err}}{{end}}", "./...")
		if err == nil && bytes.Contains(out, []byte("missing go.sum entry")) {
			_, _ = run(ctx, filepath.Dir(p), env, "go", "mod", "download", "all")
		}
		return nil
	})
}

// install installs the checkout's dependencies the ordinary way. Its
// failure is a ground-truth warning, not an error: the direct server then
// answers on what there is, as it would for a developer.
//
// The JavaScript package managers' caches (npm's cache, pnpm's store,
// Yarn's cache) are pkgDir, which the caller makes new for each
// repository: the service meets every repository with an empty package
// cache (the daemon's is per repository, and its root is new each run),
// so the baseline downloads from the same registry too. Kept between
// runs, as they once were, a second run's installs came from a warm
// store (zustand's pnpm install 13.6 s in one run, 1.1 s in the next)
// and the ratio compared a warm machine with a cold service. Go's module
// cache stays shared: both sides fetch modules from the same local
// mirror in cacheDir.
func install(ctx context.Context, r Repo, cacheDir, pkgDir, dir string) error {
	env := append(downloadEnv(cacheDir), "npm_config_cache="+filepath.Join(pkgDir, "npm-cache"))
	switch r.Install {
	case "none":
		return nil
	case "go":
		var firstErr error
		_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || (d.IsDir() && (d.Name() == "vendor" || d.Name() == "testdata")) {
				return filepath.SkipDir
			}
			if d.Name() == "go.mod" {
				if _, err := run(ctx, filepath.Dir(p), env, "go", "mod", "download"); err != nil && firstErr == nil {
					firstErr = err
				}
			}
			return nil
		})
		return firstErr
	case "npm":
		_, err := run(ctx, dir, env, "npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error")
		return err
	case "pnpm":
		bin, err := jsTool(ctx, cacheDir, "pnpm")
		if err != nil {
			return err
		}
		_, err = run(ctx, dir, append(env, "npm_config_manage_package_manager_versions=false"), bin, "install", "--frozen-lockfile", "--ignore-scripts",
			"--store-dir", filepath.Join(pkgDir, "pnpm-store"))
		return err
	case "yarn":
		bin, err := jsTool(ctx, cacheDir, "yarn")
		if err != nil {
			return err
		}
		// --ignore-engines: packages declaring a newer Node than the
		// machine's (as typescript-language-server itself does) install.
		_, err = run(ctx, dir, env, bin, "install", "--frozen-lockfile", "--ignore-scripts", "--ignore-engines", "--non-interactive",
			"--cache-folder", filepath.Join(pkgDir, "yarn-cache"))
		return err
	case "berry":
		rel, err := filepath.Glob(filepath.Join(dir, ".yarn", "releases", "yarn-*.cjs"))
		if err != nil || len(rel) != 1 {
			return fmt.Errorf("berry: want one .yarn/releases/yarn-*.cjs, have %v", rel)
		}
		_, err = run(ctx, dir, append(env, "YARN_ENABLE_SCRIPTS=0", "YARN_ENABLE_TELEMETRY=0", "YARN_ENABLE_GLOBAL_CACHE=0"),
			"node", rel[0], "install", "--immutable")
		return err
	case "cmake":
		return installCMake(ctx, dir)
	case "autotools":
		return installAutotools(ctx, dir, r.Configure...)
	}
	return fmt.Errorf("unknown install %q", r.Install)
}

// jsTool installs the pinned pnpm and Yarn v1 into cacheDir/tools once and
// returns the named one's binary.
func jsTool(ctx context.Context, cacheDir, name string) (string, error) {
	tools := filepath.Join(cacheDir, "tools")
	bin := filepath.Join(tools, "node_modules", ".bin", name)
	if name == "pnpm" {
		// pnpm 12 ships as a native binary in a platform package; its
		// install script only links it, and no install script runs here.
		bin = filepath.Join(tools, "node_modules", "@pnpm", "exe."+goruntime.GOOS+"-"+npmArch(), "pnpm")
	}
	stamp := filepath.Join(tools, "installed-"+pnpmVersion+"-"+yarnVersion)
	if _, err := os.Stat(stamp); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(tools, 0o755); err != nil {
		return "", err
	}
	if _, err := run(ctx, tools, downloadEnv(cacheDir), "npm", "install", "--save-exact", "--ignore-scripts", "--no-audit", "--no-fund",
		"--loglevel=error", pnpmVersion, yarnVersion); err != nil {
		return "", fmt.Errorf("install %s %s: %w", pnpmVersion, yarnVersion, err)
	}
	return bin, os.WriteFile(stamp, []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644)
}

// commitTree makes dir a git repository with one commit of everything in
// it (ignored files too: the tree is the repository's content) and returns
// the commit.
func commitTree(ctx context.Context, dir string) (string, error) {
	env := gitEnv()
	for _, args := range [][]string{
		{"init", "--quiet", "--initial-branch=main"},
		{"add", "-A", "-f", "."},
		{"commit", "--quiet", "--no-verify", "-m", "import"},
	} {
		if _, err := run(ctx, dir, env, "git", args...); err != nil {
			return "", err
		}
	}
	out, err := run(ctx, dir, env, "git", "rev-parse", "HEAD")
	return strings.TrimSpace(string(out)), err
}

// pushToForge clones the committed tree bare into the forge's root as
// owner/name, as the dev forge's own repositories are (partial fetches
// allowed).
func pushToForge(ctx context.Context, src, forgeRoot, owner, name string) error {
	bare := filepath.Join(forgeRoot, owner, name+".git")
	if err := os.MkdirAll(filepath.Dir(bare), 0o755); err != nil {
		return err
	}
	_ = os.RemoveAll(bare)
	env := gitEnv()
	if _, err := run(ctx, filepath.Dir(bare), env, "git", "clone", "--quiet", "--bare", "--no-local", src, bare); err != nil {
		return err
	}
	_, err := run(ctx, bare, env, "git", "config", "uploadpack.allowFilter", "true")
	return err
}

func gitEnv() []string {
	return []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_TERMINAL_PROMPT=0", "GIT_AUTHOR_NAME=lsp-corpus", "GIT_AUTHOR_EMAIL=corpus@localhost",
		"GIT_COMMITTER_NAME=lsp-corpus", "GIT_COMMITTER_EMAIL=corpus@localhost", "LC_ALL=C"}
}

func run(ctx context.Context, dir string, env []string, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	if env != nil {
		cmd.Env = env
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 1500 {
			msg = "…" + msg[len(msg)-1500:]
		}
		return out, fmt.Errorf("%s %s: %w: %s", filepath.Base(name), strings.Join(args, " "), err, msg)
	}
	return out, nil
}

// removeTree removes a tree the go command made read-only.
func removeTree(dir string) {
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o755)
		}
		return nil
	})
	_ = os.RemoveAll(dir)
}

// Materialize writes the tree of the corpus entry name, as the corpus
// commits it, into dir: a module from the Go module proxy (downloaded into
// cacheDir's module cache) or a snapshot of corpusDir. Other tests use it
// to serve a real repository.
func Materialize(ctx context.Context, name, corpusDir, cacheDir, dir string) error {
	r, ok := Lookup(name)
	if !ok {
		return fmt.Errorf("corpus: no entry %q", name)
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return err
	}
	return materialize(ctx, r, corpusDir, cacheDir, dir)
}

// StartDirect starts the entry's server on checkout the way the corpus's
// ground truth does (a fresh home, the same pinned binaries), for tests
// that compare the service with the server itself; sf is the rendered
// reviewed-server file holding the entry's server.
func StartDirect(ctx context.Context, name string, sf *devstack.ServerFile, checkout, home, cacheDir string) (*lspdirect.Server, error) {
	r, ok := Lookup(name)
	if !ok {
		return nil, fmt.Errorf("corpus: no entry %q", name)
	}
	return startDirect(ctx, r, servers{file: sf}, checkout, home, cacheDir)
}
