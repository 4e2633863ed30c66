package workspace

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hanzoai/lsp/daemon/internal/safefs"
)

// Home names one server home: root/homes/<tenant>/<repo>.
type Home struct {
	TenantKey string
	Repo      string
}

// Usage is the disk a directory takes: allocated bytes (st_blocks × 512,
// what the filesystem really spends) of every entry under it, a file with
// several links once. A jail writes the homes, so the walk follows no
// link (a link counts as itself) and goes by descriptor, at any depth
// (safefs.StatTree); what it cannot read it passes over.
func Usage(dir string) int64 {
	n, _, _ := usage(dir, false, 0)
	return n
}

// usage is Usage, with the inodes; with unshared, a regular file with
// more than one link is left out of the bytes: the daemon's cache shares
// its files with the node_modules of the trees it was linked into
// (deps.packageCache), which count them. An inode counts 1/links for each
// of its names, so that a file linked from a tree and the cache, or from
// several revisions' trees, makes one inode over all the walks (a
// directory's links are its subdirectories': it counts one). With
// maxEntries > 0 the walk stops after that many entries (each name);
// entries reports how many it saw.
func usage(dir string, unshared bool, maxEntries int64) (bytes int64, inodes float64, entries int64) {
	// A jail that shares the daemon's uid could have locked its home's top
	// out of the measure.
	_ = safefs.GrantOwner(dir, 0o500)
	d, err := safefs.Open(dir)
	if err != nil {
		return 0, 0, 0
	}
	defer d.Close()
	// The inodes with more than one link seen so far: ten thousand links
	// to one file are one file's disk.
	type inode struct{ dev, ino uint64 }
	seen := map[inode]bool{}
	counts := func(st *unix.Stat_t) bool {
		if st.Mode&unix.S_IFMT == unix.S_IFDIR || st.Nlink <= 1 {
			return true
		}
		if unshared && st.Mode&unix.S_IFMT == unix.S_IFREG {
			return false
		}
		id := inode{uint64(st.Dev), uint64(st.Ino)}
		if seen[id] {
			return false
		}
		seen[id] = true
		return true
	}
	_ = d.StatTree(func(st *unix.Stat_t) bool {
		if counts(st) {
			bytes += st.Blocks * 512
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR || st.Nlink <= 1 {
			inodes++
		} else {
			inodes += 1 / float64(st.Nlink)
		}
		entries++
		return maxEntries <= 0 || entries < maxEntries
	})
	return bytes, inodes, entries
}

// TreeBytes is the disk k's published tree and its metadata take.
func (s *Store) TreeBytes(k Key) int64 {
	n, _ := s.TreeUsage(k)
	return n
}

// TreeUsage is TreeBytes with the inodes the tree takes.
func (s *Store) TreeUsage(k Key) (bytes int64, inodes float64) {
	bytes, inodes, _ = usage(s.workspaceDir(k), false, 0)
	return bytes, inodes
}

// Homes lists every server home on disk, with or without a published tree.
func (s *Store) Homes() ([]Home, error) {
	tenants, err := os.ReadDir(filepath.Join(s.root, "homes"))
	if err != nil {
		return nil, err
	}
	var out []Home
	for _, t := range tenants {
		repos, _ := os.ReadDir(filepath.Join(s.root, "homes", t.Name()))
		for _, r := range repos {
			if r.IsDir() {
				out = append(out, Home{TenantKey: t.Name(), Repo: r.Name()})
			}
		}
	}
	return out, nil
}

// Home is the home k's servers share with every revision of its
// repository.
func (k Key) Home() Home { return Home{TenantKey: k.TenantKey, Repo: k.Repo} }

func (s *Store) homeDir(h Home) string { return filepath.Join(s.root, "homes", h.TenantKey, h.Repo) }

func (s *Store) cacheDir(h Home) string { return filepath.Join(s.root, "caches", h.TenantKey, h.Repo) }

// HomeUsage is the disk a home takes, with the daemon's cache for the
// same repository (Store.CacheDir). Of the cache, only the files no tree
// links too: a file the cache shares is counted with a tree (its trees
// are measured whole), once the last such tree is gone with the cache.
// Nothing is missed; two revisions sharing a file count it twice.
//
// complete is false when the home holds Limits.MaxHomeEntries entries or
// more: the walk stopped there, and bytes is what it had counted. A jail
// writes the home and could fill it with millions of empty files, nearly
// free in bytes but not in inodes, whose walk would hold the disk budget's
// pass (and every cold prepare waiting for it) for minutes; the pool
// deletes such a home first. The cache is the daemon's own writing (the
// packages its installs unpacked) and is walked whole.
// inodes are counted as usage says.
func (s *Store) HomeUsage(h Home) (bytes int64, inodes float64, complete bool) {
	max := int64(s.limits.MaxHomeEntries)
	home, homeInodes, entries := usage(s.homeDir(h), false, max)
	cache, cacheInodes, _ := usage(s.cacheDir(h), true, 0)
	return home + cache, homeInodes + cacheInodes, max <= 0 || entries < max
}

// HomeModTime is when a home's directory last changed.
func (s *Store) HomeModTime(h Home) time.Time {
	fi, err := os.Stat(s.homeDir(h))
	if err != nil {
		return time.Time{}
	}
	return fi.ModTime()
}

// DeleteHome removes a home (its warm caches) and the daemon's cache for
// the same repository; the caller makes sure no server and no dependency
// phase uses them. Each disappears atomically, like a tree.
func (s *Store) DeleteHome(h Home) error {
	graves, err := s.BuryHome(h)
	return errors.Join(err, RemoveGraves(graves))
}

// BuryHome is DeleteHome but for the removal: it returns where the home
// and cache went, for RemoveGraves (a home can hold a million entries).
func (s *Store) BuryHome(h Home) ([]string, error) {
	var graves []string
	for _, dir := range []string{s.cacheDir(h), s.homeDir(h)} {
		// Moving a directory to another parent writes its "..": a home
		// its jail locked (the daemon's own uid, unprivileged) is
		// unlocked first.
		_ = safefs.GrantOwner(dir, 0o700)
		g, err := s.bury(dir)
		if err != nil {
			return graves, fmt.Errorf("delete home: %w", err)
		}
		graves = append(graves, g...)
	}
	return graves, nil
}
