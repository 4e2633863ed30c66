package deps

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/hanzoai/lsp/daemon/internal/workspace"
)

// packageCache keeps the npm packages one repository's installs unpacked,
// so that the next revision's install (the same lockfile, or most of it)
// links them into its node_modules instead of downloading and unpacking
// them again: a new commit of a TypeScript repository otherwise cost a
// whole install (axios: 2,112 packages, 31,000 files, 14–19 s here, most
// of it creating the files), where a Go one reuses the module cache in
// its home.
//
// An entry is a package directory as extractTarball made it from bytes
// that matched the lockfile's integrity, named by the digest those bytes
// hash to; the next install links its files (hard links: the same
// read-only inodes, no bytes copied) into its own package directory. The
// cache lives in the daemon's own directory for the repository
// (runtime.Workspace.Cache), which no jail binds, so nothing a server runs
// can plant or change anything there: it is trusted as node_modules
// itself is, once written. An install that ran to its end removes what it
// did not use (prune), so the cache holds at most one install's packages;
// the disk budget counts it with the repository's home and deletes it with
// the home.
type packageCache struct {
	dir string // "": no cache
	log *slog.Logger

	mu   sync.Mutex
	used map[string]bool // entries this install linked or added
	hits int
}

// tmpPrefix names an entry being added; a crash leaves it, never an entry.
const tmpPrefix = ".tmp-"

func newPackageCache(dir string, log *slog.Logger) *packageCache {
	c := &packageCache{log: log, used: map[string]bool{}}
	if dir == "" {
		return c
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		log.Warn("deps: npm package cache", "err", err)
		return c
	}
	if old, err := filepath.Glob(filepath.Join(dir, tmpPrefix+"*")); err == nil {
		for _, o := range old {
			_ = workspace.RemoveAll(o)
		}
	}
	c.dir = dir
	return c
}

// entryName is the cache's name for a package unpacked from bytes whose
// integrityHasher(sri) sum is sum.
func entryName(sri string, sum []byte) string {
	i, _ := integrityDigests(sri)
	return strings.TrimSuffix(integrityAlgs[i].prefix, "-") + "-" + hex.EncodeToString(sum)
}

// place links the cached package pinned by sri into dir, which must not
// exist yet, and reports whether the cache had it.
func (c *packageCache) place(sri, dir string) bool {
	if c.dir == "" {
		return false
	}
	_, digests := integrityDigests(sri)
	for _, d := range digests {
		name := entryName(sri, d)
		src := filepath.Join(c.dir, name)
		if fi, err := os.Lstat(src); err != nil || !fi.IsDir() {
			continue
		}
		if err := linkTree(src, dir); err != nil {
			// Not what keep made: dropped, and made again from the
			// registry's bytes.
			c.log.Warn("deps: a cached npm package is unusable; fetching it again", "entry", name, "err", err)
			_ = workspace.RemoveAll(dir)
			_ = workspace.RemoveAll(src)
			continue
		}
		c.mu.Lock()
		c.used[name] = true
		c.hits++
		c.mu.Unlock()
		return true
	}
	return false
}

// keep adds the package extractTarball unpacked at dir, from bytes whose
// integrityHasher(sri) sum is sum, to the cache. It appears whole or not
// at all (linked under a temporary name, then renamed); a failure only
// costs the next install an unpacking.
func (c *packageCache) keep(dir, sri string, sum []byte) {
	if c.dir == "" {
		return
	}
	name := entryName(sri, sum)
	c.mu.Lock()
	c.used[name] = true
	c.mu.Unlock()
	dst := filepath.Join(c.dir, name)
	if _, err := os.Lstat(dst); err == nil {
		return // the same bytes under another package of this install
	}
	tmp, err := os.MkdirTemp(c.dir, tmpPrefix+"*")
	if err != nil {
		c.log.Debug("deps: npm package cache", "err", err)
		return
	}
	defer workspace.RemoveAll(tmp)
	staged := filepath.Join(tmp, "p")
	if err := linkTree(dir, staged); err != nil {
		c.log.Debug("deps: npm package cache", "err", err)
		return
	}
	// A job with the same bytes may have added it meanwhile: either copy
	// is the package.
	_ = os.Rename(staged, dst)
}

// prune removes the entries this install did not use. Only after an
// install that ran to its end: one cut short used less than its lockfile
// needs.
func (c *packageCache) prune() {
	if c.dir == "" {
		return
	}
	entries, err := os.ReadDir(c.dir)
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range entries {
		if !c.used[e.Name()] {
			_ = workspace.RemoveAll(filepath.Join(c.dir, e.Name()))
		}
	}
}

// counts are the packages linked from the cache and the entries it holds
// for this install.
func (c *packageCache) counts() (hits, kept int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hits, len(c.used)
}

// linkTree makes dst (new) a copy of the package directory src whose
// files are hard links to src's: a package holds only directories and
// regular files (extractTarball makes nothing else), and anything else
// refuses the copy.
func linkTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		t := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.Mkdir(t, 0o700)
		case d.Type().IsRegular():
			return os.Link(p, t)
		}
		return fmt.Errorf("%s: %w", p, errNotPackageEntry)
	})
}

var errNotPackageEntry = errors.New("neither a directory nor a regular file")

// npmCacheDir is where a repository's package cache lives in its cache
// directory ("" without one).
func npmCacheDir(cache string) string {
	if cache == "" {
		return ""
	}
	return filepath.Join(cache, "npm")
}

// A Yarn Berry lockfile pins no tarball hash, so each install looked up
// every package's version manifest on the registry (redux: 997 requests,
// 5 s of a next revision's 5 s phase). What a manifest said of a version
// (its tarball and integrity) does not change, so the repository's cache
// keeps it too, beside the packages: distsFile, written whole for each
// install with what that install used, and read only when it names the
// registry configured now.
const (
	distsFile = "npm-dists.json"
	maxDists  = 16 << 20
)

type distsDoc struct {
	Registry string               `json:"registry"`
	Dists    map[string][2]string `json:"dists"` // name@version → tarball, integrity
}

// loadDists are the version dists the repository's cache holds for reg;
// none without a cache or for another registry.
func loadDists(cache string, reg string) map[string]berryDist {
	out := map[string]berryDist{}
	if cache == "" {
		return out
	}
	data, err := readRegular(filepath.Join(cache, distsFile), maxDists)
	if err != nil {
		return out
	}
	var doc distsDoc
	if json.Unmarshal(data, &doc) != nil || doc.Registry != reg {
		return out
	}
	for id, d := range doc.Dists {
		if pinnedIntegrity(d[1]) {
			out[id] = berryDist{resolved: d[0], integrity: d[1]}
		}
	}
	return out
}

// saveDists replaces the repository's dists with got; a failure only
// costs the next install its lookups.
func saveDists(cache string, reg string, got map[string]berryDist, log *slog.Logger) {
	if cache == "" {
		return
	}
	doc := distsDoc{Registry: reg, Dists: make(map[string][2]string, len(got))}
	for id, d := range got {
		doc.Dists[id] = [2]string{d.resolved, d.integrity}
	}
	data, err := json.Marshal(doc)
	if err == nil && len(data) <= maxDists {
		if err = os.MkdirAll(cache, 0o700); err == nil {
			err = writeAtomic(filepath.Join(cache, distsFile), data, 0o600)
		}
	}
	if err != nil {
		log.Debug("deps: npm dists cache", "err", err)
	}
}
