package workspace

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
)

// Store lays workspaces out under one root:
//
//	root/trees/<tenant>/<repo>/<commit>/   one published workspace:
//	    tree/                               the files, read-only
//	        node_modules/                   npm packages the dependency phase
//	                                        installed (runtime.NodeModules),
//	                                        moved in whole, read-only;
//	                                        counted and deleted with the tree
//	    prepare-id                          the push that wrote it
//	    warnings                            what that push found while
//	                                        preparing (JSON strings)
//	    deps-pending                        while its dependency phase runs
//	                                        after publication (WriteBeforeDeps)
//	    .lsp-packages.json, …               what the dependency phase
//	                                        prepared (deps' indexes)
//	root/homes/<tenant>/<repo>/             private HOME and caches of the servers
//	root/caches/<tenant>/<repo>/            the daemon's own cache for the
//	                                        repository (npm packages the
//	                                        dependency phase unpacked), never
//	                                        bound into a jail; deleted with
//	                                        the home, counted with it but for
//	                                        the files a tree links too
//	root/staging/                           trees being written
//
// The home is per (tenant, repo) so that a new revision of the same
// repository starts on warm caches, while nothing derived from one tenant's
// code is ever visible to another.
type Store struct {
	root   string
	limits Limits
}

// NewStore creates the layout under root.
func NewStore(root string, lim Limits) (*Store, error) {
	for _, d := range []string{"trees", "homes", "caches", "staging"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o700); err != nil {
			return nil, fmt.Errorf("workspace store: %w", err)
		}
	}
	// Leftovers from a crash are never published: clear them.
	entries, _ := os.ReadDir(filepath.Join(root, "staging"))
	for _, e := range entries {
		_ = RemoveAll(filepath.Join(root, "staging", e.Name()))
	}
	s := &Store{root: root, limits: lim}
	// Nor is a tree whose dependency phase a stop cut short: it would
	// be served without what was prepared for it.
	keys, err := s.List()
	if err != nil {
		return nil, fmt.Errorf("workspace store: %w", err)
	}
	for _, k := range keys {
		_, pending := os.Lstat(filepath.Join(s.workspaceDir(k), pendingName))
		// Nor one an older daemon laid out, its npm packages beside the
		// tree where the jails no longer show them: the next prepare
		// writes it again.
		_, beside := os.Lstat(filepath.Join(s.workspaceDir(k), "node_modules"))
		if pending == nil || beside == nil {
			if err := s.Delete(k); err != nil {
				return nil, fmt.Errorf("workspace store: an incomplete tree: %w", err)
			}
		}
	}
	return s, nil
}

// Root is the directory the store lives in (LSP_DAEMON_ROOT).
func (s *Store) Root() string { return s.root }

// Limits returns the store's bounds.
func (s *Store) Limits() Limits { return s.limits }

// workspaceDir holds k's tree and its metadata. The metadata lives beside
// the tree, never inside it, so no file of a repository can collide with it.
func (s *Store) workspaceDir(k Key) string {
	return filepath.Join(s.root, "trees", k.TenantKey, k.Repo, k.Commit)
}

// TreeDir is where the tree of k lives once published.
func (s *Store) TreeDir(k Key) string { return filepath.Join(s.workspaceDir(k), "tree") }

func (s *Store) prepareIDFile(k Key) string { return filepath.Join(s.workspaceDir(k), "prepare-id") }

func (s *Store) warningsFile(k Key) string { return filepath.Join(s.workspaceDir(k), warningsName) }

// warningsName is the file of a published workspace that keeps its
// prepare's warnings; maxWarningsFile bounds what is read of it.
const (
	warningsName    = "warnings"
	maxWarningsFile = 4 << 20
)

// pendingName marks a workspace published before its dependency phase
// ended (WriteBeforeDeps), until FinishDeps.
const pendingName = "deps-pending"

// HomeDir is the private writable directory of k's servers.
func (s *Store) HomeDir(k Key) string {
	return filepath.Join(s.root, "homes", k.TenantKey, k.Repo)
}

// CacheDir is the daemon's own directory for k's repository: what the
// dependency phase keeps for its next revision. No server ever sees it.
func (s *Store) CacheDir(k Key) string {
	return s.cacheDir(Home{TenantKey: k.TenantKey, Repo: k.Repo})
}

// Published reports whether k's tree is on disk.
func (s *Store) Published(k Key) bool {
	_, err := os.Stat(s.prepareIDFile(k))
	return err == nil
}

// ModTime is when k's tree was published (zero when it is not).
func (s *Store) ModTime(k Key) time.Time {
	fi, err := os.Stat(s.prepareIDFile(k))
	if err != nil {
		return time.Time{}
	}
	return fi.ModTime()
}

// PrepareID reads the prepare id stored with a published tree.
func (s *Store) PrepareID(k Key) (string, error) {
	b, err := os.ReadFile(s.prepareIDFile(k))
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// Warnings are what the push that published k found while preparing it
// (what its beforePublish returned); none for a tree published without.
func (s *Store) Warnings(k Key) ([]string, error) {
	f, err := os.OpenFile(s.warningsFile(k), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxWarningsFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxWarningsFile {
		return nil, fmt.Errorf("%s: over %d bytes", warningsName, maxWarningsFile)
	}
	var w []string
	if err := json.Unmarshal(b, &w); err != nil {
		return nil, fmt.Errorf("%s: %w", warningsName, err)
	}
	return w, nil
}

// Write receives a tree's bytes from r (the concatenation of the manifest's
// files in order), verifies each file's digest, and publishes the tree
// atomically under k. It reports published=false, with no error, when
// another push published k first.
//
// beforePublish, when set, runs on the verified tree (read-only) and k's
// home just before the publishing rename: what it writes in the tree's
// directory (the dependency phase's node_modules, moved into the tree, and
// its indexes beside it) is published with it in the same rename, so a
// tree is never served, nor adopted after a crash, without what was
// prepared for it. The warnings it returns are published with the tree
// too (Warnings).
func (s *Store) Write(k Key, prepareID string, files []*daemonv1.FileEntry, r io.Reader, beforePublish func(tree, home string) (warnings []string)) (published bool, err error) {
	return s.write(k, prepareID, files, r, beforePublish, false)
}

// WriteBeforeDeps is Write for a tree whose dependency phase runs after it
// is published (pool.Prepare's late): the tree is published marked as
// pending, FinishDeps ends that with the phase's warnings, and a tree
// still pending when the daemon starts again is deleted then (NewStore):
// it was never completed.
func (s *Store) WriteBeforeDeps(k Key, prepareID string, files []*daemonv1.FileEntry, r io.Reader) (published bool, err error) {
	return s.write(k, prepareID, files, r, nil, true)
}

// FinishDeps records the warnings of k's dependency phase, run after k was
// published by WriteBeforeDeps, and ends its pending mark.
func (s *Store) FinishDeps(k Key, warnings []string) error {
	if err := writeWarnings(s.warningsFile(k), warnings); err != nil {
		return fmt.Errorf("finish %s: %w", k, err)
	}
	if err := os.Remove(filepath.Join(s.workspaceDir(k), pendingName)); err != nil {
		return fmt.Errorf("finish %s: %w", k, err)
	}
	return nil
}

func (s *Store) write(k Key, prepareID string, files []*daemonv1.FileEntry, r io.Reader, beforePublish func(tree, home string) (warnings []string), pending bool) (published bool, err error) {
	if _, err := CheckManifestFor(files, s.limits, r); err != nil {
		return false, err
	}
	trailer, _ := r.(DigestTrailer)
	follow := DigestsFollow(r)
	stage, err := os.MkdirTemp(filepath.Join(s.root, "staging"), "push-")
	if err != nil {
		return false, fmt.Errorf("stage: %w", err)
	}
	defer func() {
		if stage != "" {
			_ = RemoveAll(stage)
		}
	}()
	buf := make([]byte, 256<<10)
	tree := filepath.Join(stage, "tree")
	// Each file is hashed as it is written; its digest is checked against
	// the manifest's at once, or against the trailer's once the stream has
	// ended — either way before the tree is used or published.
	sums := make([]string, len(files))
	for i, f := range files {
		sum, err := writeFile(filepath.Join(tree, filepath.FromSlash(f.GetPath())), f, r, buf)
		if err != nil {
			return false, err
		}
		if !follow && sum != f.GetSha256() {
			return false, fmt.Errorf("%w: %q: sha256 mismatch", ErrInvalid, f.GetPath())
		}
		sums[i] = sum
	}
	if err := os.MkdirAll(tree, 0o700); err != nil { // an empty tree
		return false, fmt.Errorf("stage: %w", err)
	}
	// Nothing may follow the last file.
	switch n, err := io.ReadFull(r, buf[:1]); {
	case n != 0:
		return false, fmt.Errorf("%w: more bytes than the manifest declares", ErrInvalid)
	case err != io.EOF:
		return false, fmt.Errorf("%w: the stream did not end cleanly: %v", ErrInvalid, err)
	}
	if follow {
		want, err := trailer.Digests()
		if err != nil {
			return false, err
		}
		if len(want) != len(files) {
			return false, fmt.Errorf("%w: the trailer has %d digests for %d files", ErrInvalid, len(want), len(files))
		}
		for i, f := range files {
			if want[i] != sums[i] {
				return false, fmt.Errorf("%w: %q: sha256 mismatch", ErrInvalid, f.GetPath())
			}
		}
		// Verified: the manifest is now whole for everything that uses it.
		for i, f := range files {
			f.Sha256 = sums[i]
		}
	}
	if err := os.WriteFile(filepath.Join(stage, "prepare-id"), []byte(prepareID+"\n"), 0o444); err != nil {
		return false, fmt.Errorf("stage: %w", err)
	}
	if err := MakeReadOnly(tree); err != nil {
		return false, fmt.Errorf("stage: %w", err)
	}
	dst := s.workspaceDir(k)
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return false, fmt.Errorf("publish: %w", err)
	}
	if err := os.MkdirAll(s.HomeDir(k), 0o700); err != nil {
		return false, fmt.Errorf("publish: %w", err)
	}
	if beforePublish != nil {
		if err := writeWarnings(filepath.Join(stage, warningsName), beforePublish(tree, s.HomeDir(k))); err != nil {
			return false, fmt.Errorf("stage: %w", err)
		}
	}
	if pending {
		if err := os.WriteFile(filepath.Join(stage, pendingName), nil, 0o444); err != nil {
			return false, fmt.Errorf("stage: %w", err)
		}
	}
	// rename(2) onto an existing non-empty directory fails: the first push
	// to publish wins, and later ones are discarded.
	if err := os.Rename(stage, dst); err != nil {
		if s.Published(k) {
			return false, nil
		}
		return false, fmt.Errorf("publish: %w", err)
	}
	stage = ""
	return true, nil
}

// writeWarnings creates name with w, never through a link: O_EXCL fails on
// anything already there (the dependency phase's processes write only
// below the stage, in node_modules, yet nothing they might have left is
// ever followed).
func writeWarnings(name string, w []string) error {
	if w == nil {
		w = []string{}
	}
	b, err := json.Marshal(w)
	if err != nil {
		return err
	}
	if len(b) > maxWarningsFile {
		return fmt.Errorf("%s: over %d bytes", warningsName, maxWarningsFile)
	}
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o444)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Delete removes k's tree. The home (caches) stays for the next revision.
func (s *Store) Delete(k Key) error {
	graves, err := s.Bury(k)
	return errors.Join(err, RemoveGraves(graves))
}

// Bury moves k's tree out of the store, atomically, and returns where it
// went for RemoveGraves: a caller holding a lock others wait for removes
// it once it has let go.
func (s *Store) Bury(k Key) ([]string, error) {
	grave, err := s.bury(s.workspaceDir(k))
	if err != nil {
		return nil, fmt.Errorf("delete workspace: %w", err)
	}
	return grave, nil
}

// bury moves dir into staging, so that it disappears atomically, and
// returns where it went (nothing when there was no dir).
func (s *Store) bury(dir string) ([]string, error) {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	grave := filepath.Join(s.root, "staging", "del-"+randomHex())
	if err := os.Rename(dir, grave); err != nil {
		return nil, err
	}
	return []string{grave}, nil
}

// RemoveGraves removes what Bury and BuryHome moved aside. What it leaves
// (the daemon stopped) goes at the next start with the rest of staging.
func RemoveGraves(graves []string) error {
	var errs []error
	for _, g := range graves {
		errs = append(errs, RemoveAll(g))
	}
	return errors.Join(errs...)
}

// List returns the keys of every published tree (for start-up recovery).
func (s *Store) List() ([]Key, error) {
	var keys []Key
	tenants, err := os.ReadDir(filepath.Join(s.root, "trees"))
	if err != nil {
		return nil, err
	}
	for _, t := range tenants {
		repos, _ := os.ReadDir(filepath.Join(s.root, "trees", t.Name()))
		for _, r := range repos {
			commits, _ := os.ReadDir(filepath.Join(s.root, "trees", t.Name(), r.Name()))
			for _, c := range commits {
				k := Key{TenantKey: t.Name(), Repo: r.Name(), Commit: c.Name()}
				if _, err := ParseKey(&daemonv1.WorkspaceKey{TenantKey: k.TenantKey, Repo: k.Repo, Commit: k.Commit}); err == nil && s.Published(k) {
					keys = append(keys, k)
				}
			}
		}
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	return keys, nil
}

// writeFile writes f's bytes from r to path and returns their SHA-256.
func writeFile(path string, f *daemonv1.FileEntry, r io.Reader, buf []byte) (string, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", fmt.Errorf("write %q: %w", f.GetPath(), err)
	}
	mode := os.FileMode(0o644)
	if f.GetExecutable() {
		mode = 0o755
	}
	// O_EXCL with O_NOFOLLOW: the staging dir is ours and fresh, so any
	// existing entry means the manifest lied.
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|noFollow, mode)
	if err != nil {
		return "", fmt.Errorf("write %q: %w", f.GetPath(), err)
	}
	h := sha256.New()
	n, err := io.CopyBuffer(io.MultiWriter(out, h), io.LimitReader(r, int64(f.GetSize())), buf)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("write %q: %w", f.GetPath(), err)
	}
	if uint64(n) != f.GetSize() {
		return "", fmt.Errorf("%w: %q: stream ended after %d of %d bytes", ErrInvalid, f.GetPath(), n, f.GetSize())
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func randomHex() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
