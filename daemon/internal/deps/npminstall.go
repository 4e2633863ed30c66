package deps

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	goruntime "runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
	"github.com/hanzoai/lsp/daemon/internal/workspace"
)

// maxIndex bounds the index NPMExternals reads.
const maxIndex = 8 << 20

// npmJob is one package to install.
type npmJob struct {
	// rel is the package's directory below node_modules, from its
	// lockfile key ("a", "@s/b", "a/node_modules/b").
	rel string
	// module names it for evidence: "lodash@4.17.21", "@types/node@20.1.0".
	module    string
	resolved  string
	integrity string
	optional  bool
}

// indexEntry is one installed package in the index.
type indexEntry struct {
	Dir    string `json:"dir"`
	Module string `json:"module"`
}

// npmJobs lists the packages of a validated lockfile to install, shallow
// first: bundled packages come inside their parent's tarball, and
// optional ones for another platform are skipped, as npm skips them.
func npmJobs(pkgs map[string]lockPackage) []npmJob {
	var jobs []npmJob
	for k, p := range pkgs {
		if k == "" || p.InBundle || p.Link || p.LinkTo != "" {
			continue
		}
		if p.Optional && !(platformMatch(p.OS, npmPlatform()) && platformMatch(p.CPU, npmArch()) && (len(p.Libc) == 0 || platformMatch(p.Libc, npmLibc()))) {
			continue
		}
		rel := strings.TrimPrefix(k, "node_modules/")
		jobs = append(jobs, npmJob{
			rel: rel, module: npmModule(k, p), resolved: p.Resolved, integrity: p.Integrity, optional: p.Optional,
		})
	}
	// A package nested in one that is not installed would be left out
	// anyway: it is not fetched.
	rels := map[string]bool{}
	for _, j := range jobs {
		rels[j.rel] = true
	}
	kept := jobs[:0]
	for _, j := range jobs {
		if ancestorsPlaced(j.rel, rels) {
			kept = append(kept, j)
		}
	}
	jobs = kept
	sort.Slice(jobs, func(i, j int) bool {
		di, dj := strings.Count(jobs[i].rel, "/node_modules/"), strings.Count(jobs[j].rel, "/node_modules/")
		if di != dj {
			return di < dj
		}
		return jobs[i].rel < jobs[j].rel
	})
	return jobs
}

// npmModule is a package's name (its own, for an alias) and version.
func npmModule(key string, p lockPackage) string {
	name := key[strings.LastIndex(key, "node_modules/")+len("node_modules/"):]
	if p.Name != "" && lockPath("node_modules/"+p.Name) && !strings.Contains(p.Name, "node_modules") {
		name = p.Name
	}
	if !npmVersion(p.Version) {
		return name
	}
	return name + "@" + p.Version
}

// npmVersion: a version safe to show (semver characters, bounded).
func npmVersion(v string) bool {
	if v == "" || len(v) > 64 {
		return false
	}
	for _, c := range v {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '+') {
			return false
		}
	}
	return true
}

// platformMatch applies npm's os and cpu lists: a "!x" entry excludes x;
// other entries, when there are any, must include the value.
func platformMatch(list []string, v string) bool {
	allowed, positive := false, false
	for _, e := range list {
		if neg, ok := strings.CutPrefix(e, "!"); ok {
			if neg == v {
				return false
			}
			continue
		}
		positive = true
		if e == v {
			allowed = true
		}
	}
	return allowed || !positive
}

// npmPlatform and npmArch are node's process.platform and process.arch
// for the machine the servers run on.
func npmPlatform() string {
	switch goruntime.GOOS {
	case "windows":
		return "win32"
	case "solaris", "illumos":
		return "sunos"
	}
	return goruntime.GOOS
}

// npmLibc is the C library node reports on linux: musl where its loader
// is installed, else glibc.
func npmLibc() string {
	if m, _ := filepath.Glob("/lib/ld-musl-*"); len(m) > 0 {
		return "musl"
	}
	return "glibc"
}

func npmArch() string {
	switch goruntime.GOARCH {
	case "amd64":
		return "x64"
	case "386":
		return "ia32"
	case "ppc64le":
		return "ppc64"
	}
	return goruntime.GOARCH
}

// install puts the lockfile's packages into the tree's node_modules
// (runtime.NodeModules). pkgs is in package-lock.json's shape, which every
// lockfile parser produces: keys node_modules/…, workspace packages as
// link entries to their in-repo directory plus their own entries and
// nested packages (see hoistWorkspaces). Each tarball comes only from the
// registry, is checked against its sha512 integrity before a byte of it is
// unpacked, and is extracted under a staging directory beside the tree
// that becomes node_modules by one rename: it appears whole or not at
// all. No package script runs.
func (f *Fetcher) install(ctx context.Context, ws runtime.Workspace, pkgs map[string]lockPackage, left *atomic.Int64, w *warnings) {
	dst := runtime.NodeModules(ws)
	if _, err := os.Lstat(dst); err == nil {
		return // an earlier prepare of this same tree installed them
	}
	pkgs = hoistWorkspaces(pkgs, w)
	// A package whose integrity pins nothing (no sha512 or sha1 hash;
	// integrity.go) is never fetched: one warning names a few and counts
	// them.
	var weak []string
	for k, p := range pkgs {
		if k != "" && !p.Link && p.LinkTo == "" && !p.InBundle && !pinnedIntegrity(p.Integrity) {
			weak = append(weak, npmModule(k, p))
			delete(pkgs, k)
		}
	}
	if len(weak) > 0 {
		sort.Strings(weak)
		shown := strings.Join(weak[:min(len(weak), 3)], ", ")
		if len(weak) > 3 {
			shown += fmt.Sprintf(" and %d more", len(weak)-3)
		}
		w.add("%s: no sha512 or sha1 integrity in the lockfile; not installed", shown)
	}
	jobs, links, within := npmJobs(pkgs), npmLinks(pkgs), innerLinks(pkgs)
	if len(jobs) == 0 && len(links) == 0 {
		return
	}
	parent := filepath.Dir(ws.Root)
	clearLeftovers(parent)
	// MkdirTemp, never MkdirAll: a workspace deleted meanwhile is not
	// brought back.
	stage, err := os.MkdirTemp(parent, ".node_modules-*")
	if err != nil {
		f.log.Error("deps: npm staging", "err", err)
		w.add("npm packages could not be installed")
		return
	}
	defer workspace.RemoveAll(stage)
	work, err := os.MkdirTemp(parent, ".npm-*")
	if err != nil {
		f.log.Error("deps: npm staging", "err", err)
		w.add("npm packages could not be installed")
		return
	}
	defer workspace.RemoveAll(work)

	reg := f.cfg.NPMRegistry
	m := &mirror{bases: []*url.URL{reg}, client: f.npmClient, left: left}
	unpacked := &atomic.Int64{}
	unpacked.Store(f.cfg.MaxBytes)
	par := f.cfg.Parallel
	if par <= 0 {
		par = defaultParallel
	}
	cache := newPackageCache(npmCacheDir(ws.Cache), f.log)
	ok := make([]bool, len(jobs))
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for i, j := range jobs {
		if ctx.Err() != nil {
			w.add("the dependency phase ran out of time; some npm packages were not installed")
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			err := f.fetchTarball(ctx, m, cache, j, filepath.Join(work, strconv.Itoa(i)), unpacked)
			if err == nil {
				ok[i] = true
				return
			}
			if j.optional {
				w.add("%s: optional package %s; it was not installed", j.module, f.explainNPM(j.module, err))
				return
			}
			w.add("%s: %s; it was not installed", j.module, f.explainNPM(j.module, err))
		}()
	}
	wg.Wait()
	if ctx.Err() == nil {
		cache.prune()
	}
	hits, kept := cache.counts()
	f.log.Info("deps: npm packages", "packages", len(jobs), "from_cache", hits, "cached", kept)

	// Assemble shallow first, so a nested package lands inside its
	// installed parent; one whose parent is missing is left out.
	placed := map[string]bool{}
	var index []indexEntry
	for i, j := range jobs {
		if !ok[i] || !ancestorsPlaced(j.rel, placed) {
			continue
		}
		parentRel, _ := splitLast(j.rel)
		if err := ensureDirs(stage, parentRel); err != nil {
			w.add("%s: it could not be placed; it was not installed", j.module)
			continue
		}
		dst := filepath.Join(stage, filepath.FromSlash(j.rel))
		if err := os.Rename(filepath.Join(work, strconv.Itoa(i)), dst); err != nil {
			if fi, lerr := os.Lstat(dst); lerr == nil && fi.IsDir() {
				// Its parent's tarball bundles a copy, which stays, as npm
				// and Yarn keep it: nothing to warn about.
				f.log.Debug("deps: a bundled copy stays", "module", j.module)
				continue
			}
			w.add("%s: it could not be placed; it was not installed", j.module)
			continue
		}
		placed[j.rel] = true
		index = append(index, indexEntry{Dir: j.rel, Module: j.module})
	}
	if index == nil {
		index = []indexEntry{}
	}
	err = workspace.MakeReadOnly(stage)
	// Links last: MakeReadOnly takes regular files and directories only.
	if err == nil && len(index)+placeLinks(stage, ws.Root, links, placed, w)+placeInnerLinks(stage, within, placed, w) == 0 {
		return
	}
	if err == nil {
		err = writeIndex(runtime.NPMIndex(ws), index)
	}
	if err == nil {
		if err = renameIntoTree(stage, dst); err != nil {
			if _, lerr := os.Lstat(dst); lerr != nil {
				_ = os.Remove(runtime.NPMIndex(ws)) // it would name roots that are not there
			}
		}
	}
	if err != nil {
		f.log.Error("deps: npm install", "err", err)
		w.add("npm packages could not be installed")
	}
}

// writeIndex records index at name, read-only, replacing what a crashed
// install may have left (written under a fresh name, then renamed).
func writeIndex(name string, index []indexEntry) error {
	if index == nil {
		index = []indexEntry{}
	}
	data, err := json.Marshal(index)
	if err != nil {
		return err
	}
	return writeAtomic(name, data, 0o444)
}

// renameIntoTree moves stage, a read-only directory beside the tree, to
// dst, a new entry at the top of the published (read-only) tree, whose
// directory is writable for the move alone. No jailed process can use the
// moment: the jails bind the tree read-only.
func renameIntoTree(stage, dst string) error {
	tree := filepath.Dir(dst)
	fi, err := os.Lstat(tree)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", tree)
	}
	if err := os.Chmod(tree, fi.Mode().Perm()|0o700); err != nil {
		return err
	}
	err = workspace.MoveReadOnly(stage, dst)
	if cerr := os.Chmod(tree, fi.Mode().Perm()); err == nil {
		err = cerr
	}
	return err
}

// clearLeftovers removes staging directories a crashed install left.
func clearLeftovers(parent string) {
	for _, pat := range []string{".node_modules-*", ".npm-*"} {
		old, _ := filepath.Glob(filepath.Join(parent, pat))
		for _, o := range old {
			workspace.RemoveAll(o)
		}
	}
}

// ancestorsPlaced: every package rel is nested in was installed (pnpm's
// hidden level, .pnpm/node_modules/, and its store directories,
// .pnpm/<dir>/node_modules/, are no packages).
func ancestorsPlaced(rel string, placed map[string]bool) bool {
	i := pnpmLevel(rel)
	for {
		k := strings.Index(rel[i:], "/node_modules/")
		if k < 0 {
			return true
		}
		if !placed[rel[:i+k]] {
			return false
		}
		i += k + 1
	}
}

// ensureDirs makes rel's directories below dir, one level at a time,
// accepting only real directories on the way.
func ensureDirs(dir, rel string) error {
	if rel == "" {
		return nil
	}
	p := dir
	for _, s := range strings.Split(rel, "/") {
		p = filepath.Join(p, s)
		err := os.Mkdir(p, 0o755)
		if errors.Is(err, fs.ErrExist) {
			fi, lerr := os.Lstat(p)
			if lerr != nil || !fi.IsDir() {
				return fmt.Errorf("%s is not a directory", s)
			}
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// errIntegrity: the tarball's bytes do not hash to the lockfile's
// integrity.
var errIntegrity = errors.New("does not match its integrity")

// fetchTarball puts one package in dir: linked from the cache, or else
// downloaded, verified, and only then unpacked (and then kept in the
// cache).
func (f *Fetcher) fetchTarball(ctx context.Context, m *mirror, cache *packageCache, j npmJob, dir string, unpacked *atomic.Int64) error {
	if cache.place(j.integrity, dir) {
		return nil
	}
	tgz, sum, err := f.download(ctx, m, j, filepath.Dir(dir))
	if err != nil {
		return err
	}
	defer os.Remove(tgz.Name())
	defer tgz.Close()
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	if err := extractTarball(tgz, dir, tarLimits{maxBytes: f.cfg.MaxZip, left: unpacked}); err != nil {
		workspace.RemoveAll(dir)
		return err
	}
	cache.keep(dir, j.integrity, sum)
	return nil
}

// download fetches j's tarball into a file in work, checks it against the
// lockfile's integrity, and returns it positioned at its start with the
// sum it hashed to; the caller removes it.
func (f *Fetcher) download(ctx context.Context, m *mirror, j npmJob, work string) (*os.File, []byte, error) {
	rel, ok := registryRel(j.resolved, f.cfg.NPMRegistry)
	if !ok {
		return nil, nil, errNotServed // ValidateLockfile refused it already; belt and braces
	}
	h := integrityHasher(j.integrity)
	if h == nil {
		return nil, nil, errIntegrity // install left such packages out already
	}
	tmp, err := os.CreateTemp(work, ".tgz-*")
	if err != nil {
		return nil, nil, err
	}
	fail := func(err error) (*os.File, []byte, error) {
		tmp.Close()
		os.Remove(tmp.Name())
		return nil, nil, err
	}
	if err := m.get(ctx, rel, f.cfg.MaxZip, io.MultiWriter(tmp, h)); err != nil {
		return fail(err)
	}
	sum := h.Sum(nil)
	if !integrityMatch(j.integrity, sum) {
		return fail(errIntegrity)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return fail(err)
	}
	return tmp, sum, nil
}

// registryRel is resolved's path below the registry, for mirror.get.
func registryRel(resolved string, registry *url.URL) (string, bool) {
	if !underRegistry(resolved, registry) {
		return "", false
	}
	u, err := url.Parse(resolved)
	if err != nil {
		return "", false
	}
	return strings.TrimPrefix(u.EscapedPath(), registry.EscapedPath()+"/"), true
}

func (f *Fetcher) explainNPM(name string, err error) string {
	switch {
	case errors.Is(err, errIntegrity):
		return "the tarball does not match its lockfile integrity"
	case errors.Is(err, errTarball):
		return err.Error()
	case errors.Is(err, errNotServed):
		return "is not served by the registry (no credential is ever used)"
	case errors.Is(err, errTooLarge):
		return "is over the size bound"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return "ran out of time"
	}
	f.log.Warn("deps: npm fetch", "package", name, "err", err)
	return "could not be fetched from the registry"
}
