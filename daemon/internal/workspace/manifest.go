// Package workspace owns the daemon's trees on disk: it validates a pushed
// manifest, writes the files into a private staging directory while checking
// each file's SHA-256, and publishes the finished tree with one rename, so a
// half-written tree is never served.
//
// A workspace is named by (tenant key, repo, commit). Its directory is derived
// from that key alone — never from anything a language server or a tree
// could say — and nothing under it is shared with another tenant.
package workspace

import (
	"errors"
	"fmt"
	"io"
	"strings"

	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
)

// Limits bound a pushed tree. They are checked against the manifest before a
// single byte is written.
type Limits struct {
	MaxFiles      int
	MaxTotalBytes int64
	MaxFileBytes  int64
	MaxDepth      int
	MaxPathBytes  int
	// MaxDirs bounds the distinct directories the tree makes. The other
	// bounds do not: 100,000 empty files, each at the end of its own
	// chain of 60 directories, are 0 bytes and within the depth, yet
	// writing them makes 6 million directories (tens of GiB and as many
	// inodes) that no byte count reserves.
	MaxDirs int
	// MaxHomeEntries bounds the walk that measures one home (with the
	// daemon's cache of its repository): past it the home is not measured
	// further (Store.HomeBytes).
	MaxHomeEntries int
}

// DefaultLimits are generous for real repositories and small enough that one
// push cannot fill a disk.
func DefaultLimits() Limits {
	return Limits{
		MaxFiles:      100_000,
		MaxTotalBytes: 1 << 30,
		MaxFileBytes:  64 << 20,
		MaxDepth:      64,
		MaxPathBytes:  daemonv1.MaxTreePathBytes,
		// One per file: real trees have far fewer directories than files.
		MaxDirs: 100_000,
		// A large Go workspace's build and module caches hold tens of
		// thousands; a million is walked in seconds.
		MaxHomeEntries: 1_000_000,
	}
}

// ErrInvalid marks a key or manifest the daemon refuses.
var ErrInvalid = errors.New("invalid workspace")

// The key's and the manifest's patterns, as loops: every query parses
// its key (regular expressions were 3 % of the daemon's CPU per warm
// definition). FuzzKeyPatterns holds each to its expression:
//
//	tenant key  ^[0-9a-f]{64}$
//	repo        ^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$
//	commit      ^(?:[0-9a-f]{40}|[0-9a-f]{64})$
//	sha256      ^[0-9a-f]{64}$
func isTenantKey(s string) bool { return len(s) == 64 && lowerHex(s) }

// ValidTenantKey reports whether s is a tenant key as a workspace key
// holds it: 64 lowercase hex digits.
func ValidTenantKey(s string) bool { return isTenantKey(s) }
func isCommit(s string) bool       { return (len(s) == 40 || len(s) == 64) && lowerHex(s) }
func isSHA256(s string) bool       { return len(s) == 64 && lowerHex(s) }

func isRepoSlug(s string) bool {
	if len(s) == 0 || len(s) > 100 || !alnum(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !alnum(c) && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func alnum(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// Key names a workspace.
type Key struct {
	TenantKey string
	Repo      string
	Commit    string
}

func (k Key) String() string { return k.TenantKey[:12] + "/" + k.Repo + "@" + k.Commit[:12] }

// ParseKey validates a key from the wire. Every component ends up in a file
// path, so each is checked against a strict pattern.
func ParseKey(w *daemonv1.WorkspaceKey) (Key, error) {
	if w == nil {
		return Key{}, fmt.Errorf("%w: no workspace key", ErrInvalid)
	}
	k := Key{TenantKey: w.GetTenantKey(), Repo: w.GetRepo(), Commit: w.GetCommit()}
	switch {
	case !isTenantKey(k.TenantKey):
		return Key{}, fmt.Errorf("%w: tenant key is not 64 lowercase hex digits", ErrInvalid)
	case !isRepoSlug(k.Repo) || k.Repo == "." || k.Repo == "..":
		return Key{}, fmt.Errorf("%w: bad repo slug", ErrInvalid)
	case !isCommit(k.Commit):
		return Key{}, fmt.Errorf("%w: commit is not a full sha", ErrInvalid)
	}
	return k, nil
}

// CheckPath validates one repo-relative path by the tree path rule both
// sides share (daemonv1.CheckTreePath: '/'-separated, relative, no empty,
// '.' or '..' segment, no NUL, control character or backslash, valid
// UTF-8, bounded), and maxBytes on top. The proxy drops what the rule
// refuses before it sends a tree, so a tree it sends is never refused
// here for a path.
func CheckPath(p string, maxBytes int) error {
	if len(p) > maxBytes {
		return fmt.Errorf("path longer than %d bytes", maxBytes)
	}
	return daemonv1.CheckTreePath(p)
}

// CheckManifest validates a manifest against the limits: every path valid,
// no path repeated, no file used as a directory of another, and the sums
// (files, bytes, directories) within bounds. It returns the total byte count.
func CheckManifest(files []*daemonv1.FileEntry, lim Limits) (int64, error) {
	return checkManifest(files, lim, false)
}

// DigestTrailer is a tree body whose files' SHA-256 digests follow their
// bytes (the push header's digests_follow): its manifest carries no
// digests, and Digests, once the body has been read to its end, returns
// the trailer's, in manifest order. Store.Write checks every file against
// them before the tree is used or published.
type DigestTrailer interface {
	DigestsFollow() bool
	Digests() ([]string, error)
}

// DigestsFollow reports whether body is a tree body whose digests follow.
func DigestsFollow(body io.Reader) bool {
	t, ok := body.(DigestTrailer)
	return ok && t.DigestsFollow()
}

// CheckManifestFor is CheckManifest for a manifest read with body: when
// body's digests follow, every digest must be empty (the trailer's are
// checked against the bytes instead).
func CheckManifestFor(files []*daemonv1.FileEntry, lim Limits, body io.Reader) (int64, error) {
	return checkManifest(files, lim, DigestsFollow(body))
}

func checkManifest(files []*daemonv1.FileEntry, lim Limits, digestsFollow bool) (int64, error) {
	if len(files) > lim.MaxFiles {
		return 0, fmt.Errorf("%w: more than %d files", ErrInvalid, lim.MaxFiles)
	}
	seen := make(map[string]bool, len(files))
	var total int64
	for _, f := range files {
		p := f.GetPath()
		if err := CheckPath(p, lim.MaxPathBytes); err != nil {
			return 0, fmt.Errorf("%w: %q: %v", ErrInvalid, p, err)
		}
		if strings.Count(p, "/")+1 > lim.MaxDepth {
			return 0, fmt.Errorf("%w: %q deeper than %d", ErrInvalid, p, lim.MaxDepth)
		}
		if seen[p] {
			return 0, fmt.Errorf("%w: %q repeated", ErrInvalid, p)
		}
		seen[p] = true
		if digestsFollow {
			if f.GetSha256() != "" {
				return 0, fmt.Errorf("%w: %q: a digest in a manifest whose digests follow", ErrInvalid, p)
			}
		} else if !isSHA256(f.GetSha256()) {
			return 0, fmt.Errorf("%w: %q: bad sha256", ErrInvalid, p)
		}
		if int64(f.GetSize()) > lim.MaxFileBytes || f.GetSize() > 1<<62 {
			return 0, fmt.Errorf("%w: %q larger than %d bytes", ErrInvalid, p, lim.MaxFileBytes)
		}
		total += int64(f.GetSize())
		if total > lim.MaxTotalBytes {
			return 0, fmt.Errorf("%w: tree larger than %d bytes", ErrInvalid, lim.MaxTotalBytes)
		}
	}
	// A file used as a directory: some path is a strict prefix dir of
	// another. The same walk counts the distinct directories (MaxDirs). A
	// directory met before was checked with its parents then, so the walk
	// up from a file stops there: it costs one step per directory, not
	// one per file and level, and the set it keeps is at most MaxDirs+1.
	dirs := make(map[string]struct{})
	for p := range seen {
		for dir := parentDir(p); dir != ""; dir = parentDir(dir) {
			if _, ok := dirs[dir]; ok {
				break
			}
			if seen[dir] {
				return 0, fmt.Errorf("%w: %q is a file and a directory", ErrInvalid, dir)
			}
			dirs[dir] = struct{}{}
			if len(dirs) > lim.MaxDirs {
				return 0, fmt.Errorf("%w: more than %d directories", ErrInvalid, lim.MaxDirs)
			}
		}
	}
	return total, nil
}

func parentDir(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return ""
	}
	return p[:i]
}
