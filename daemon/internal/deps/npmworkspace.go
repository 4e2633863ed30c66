package deps

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// npm workspaces. A workspace lockfile names each workspace package twice:
// node_modules/foo is a link (link: true, resolved: "packages/foo", a
// directory relative to the repository's root) and packages/foo is the
// package itself, whose files are in the tree. Packages only one
// workspace needs in another version nest below it
// (packages/foo/node_modules/bar). The tree is immutable once published,
// so those cannot go where npm puts them: they are hoisted to the top of
// the workspace's node_modules when no other version is there, which
// module resolution walking up from packages/foo still finds; otherwise
// they are left out with a warning.

// splitWorkspaceKey splits a lockfile key into the in-repo workspace
// directory it is below ("" for the root's node_modules) and the rest, a
// node_modules path or "" for the workspace's own entry. ok is false for
// a key that is neither.
func splitWorkspaceKey(k string) (ws, rest string, ok bool) {
	if strings.HasPrefix(k, "node_modules/") {
		return "", k, installPath(k)
	}
	ws, rest = k, ""
	if i := strings.Index(k, "/node_modules/"); i >= 0 {
		ws, rest = k[:i], k[i+1:]
		if !lockPath(rest) {
			return "", "", false
		}
	}
	if !repoDir(ws) {
		return "", "", false
	}
	return ws, rest, true
}

// repoDir: a relative slash path inside the repository, with no dot,
// empty or node_modules segments, bounded.
func repoDir(s string) bool {
	if s == "" || len(s) > 1024 || strings.ContainsAny(s, "\\\x00:") || strings.HasPrefix(s, "/") {
		return false
	}
	for _, seg := range strings.Split(s, "/") {
		if seg == "" || seg == "." || seg == ".." || seg == "node_modules" {
			return false
		}
	}
	return true
}

// npmLink is one workspace link to make in node_modules.
type npmLink struct {
	// rel is the link's path below node_modules ("foo", "@s/foo").
	rel string
	// target is the linked directory, relative to the tree's root.
	target string
}

// hoistWorkspaces rewrites a validated lockfile's packages into what can
// be installed without changing the tree but for its top node_modules:
// the root's node_modules keys as they are, and each workspace's nested
// packages hoisted to the top (packages/foo/node_modules/bar becomes
// node_modules/bar) where no other version of them is, with everything
// nested below them. The workspace packages' own entries are dropped
// (their files are in the tree). What cannot be hoisted is warned about
// and left out.
func hoistWorkspaces(pkgs map[string]lockPackage, w *warnings) map[string]lockPackage {
	out := make(map[string]lockPackage, len(pkgs))
	type nested struct{ ws, rest string }
	var moved []nested
	for k, p := range pkgs {
		ws, rest, ok := splitWorkspaceKey(k)
		switch {
		case k == "" || ws == "" && ok:
			out[k] = p
		case ok && rest != "":
			moved = append(moved, nested{ws, rest})
		}
	}
	// Shallow first, then by workspace: a package's decision carries the
	// packages nested below it, and the first workspace takes a free slot.
	sort.Slice(moved, func(i, j int) bool {
		di, dj := strings.Count(moved[i].rest, "node_modules/"), strings.Count(moved[j].rest, "node_modules/")
		if di != dj {
			return di < dj
		}
		if moved[i].ws != moved[j].ws {
			return moved[i].ws < moved[j].ws
		}
		return moved[i].rest < moved[j].rest
	})
	// hoisted: for each workspace/top package, whether it went up.
	hoisted := map[string]bool{}
	for _, m := range moved {
		p := pkgs[m.ws+"/"+m.rest]
		top := topPackage(m.rest)
		if m.rest != top {
			if hoisted[m.ws+"/"+top] {
				out[m.rest] = p
			}
			continue
		}
		if have, taken := out[m.rest]; taken {
			if !have.Link && !p.Link && have.Version == p.Version && have.Integrity == p.Integrity {
				hoisted[m.ws+"/"+top] = true // the same package is already there
				continue
			}
			w.add("%s needs %s, which another version holds at the top of node_modules; it was not installed", quote(m.ws), npmModule(m.rest, p))
			continue
		}
		out[m.rest] = p
		hoisted[m.ws+"/"+top] = true
	}
	return out
}

// topPackage is the first package of a node_modules path:
// node_modules/a/node_modules/b → node_modules/a, node_modules/@s/a → itself.
func topPackage(rest string) string {
	segs := strings.SplitN(rest, "/", 4)
	if len(segs) >= 3 && strings.HasPrefix(segs[1], "@") {
		return strings.Join(segs[:3], "/")
	}
	return strings.Join(segs[:2], "/")
}

// npmLinks lists the workspace links among pkgs, shallow first.
func npmLinks(pkgs map[string]lockPackage) []npmLink {
	var links []npmLink
	for k, p := range pkgs {
		if p.Link && lockPath(k) {
			links = append(links, npmLink{rel: strings.TrimPrefix(k, "node_modules/"), target: p.Resolved})
		}
	}
	sort.Slice(links, func(i, j int) bool { return links[i].rel < links[j].rel })
	return links
}

// innerLinks lists the links from one package path of node_modules to
// another (LinkTo: the pnpm layout's top and hidden level, to the store),
// shallow first.
func innerLinks(pkgs map[string]lockPackage) []npmLink {
	var links []npmLink
	for k, p := range pkgs {
		if p.LinkTo != "" && !p.Link && installPath(k) && installPath(p.LinkTo) {
			links = append(links, npmLink{rel: strings.TrimPrefix(k, "node_modules/"), target: strings.TrimPrefix(p.LinkTo, "node_modules/")})
		}
	}
	sort.Slice(links, func(i, j int) bool { return links[i].rel < links[j].rel })
	return links
}

// placeInnerLinks makes each link in stage (already read-only) as a
// relative symbolic link to the package directory it names in the same
// node_modules, when that package was installed there and nothing else
// holds the link's place (a link's target is never itself a link); a
// package whose link fails is named in a warning. It returns how many it
// made.
func placeInnerLinks(stage string, links []npmLink, placed map[string]bool, w *warnings) int {
	made := 0
	for _, l := range links {
		if !placed[l.target] || placed[l.rel] || !ancestorsPlaced(l.rel, placed) {
			continue
		}
		parentRel, _ := splitLast(l.rel)
		target, err := filepath.Rel(filepath.FromSlash(parentRel), filepath.FromSlash(l.target))
		if err != nil || pnpmLevel(l.target) == 0 {
			continue
		}
		if err := withWritable(stage, parentRel, func(dir string) error {
			return os.Symlink(target, filepath.Join(dir, filepath.Base(filepath.FromSlash(l.rel))))
		}); err != nil {
			w.add("%s: it could not be linked from the top of node_modules; it is not visible to the repository's files", quote(l.rel))
			continue
		}
		placed[l.rel] = true
		made++
	}
	return made
}

// realDirUnder checks that rel (a repoDir) is a real directory in tree,
// every element of it a directory and none a link.
func realDirUnder(tree, rel string) error {
	p := tree
	fi, err := os.Lstat(p)
	if err != nil || !fi.IsDir() {
		return errors.New("the tree is not there")
	}
	for _, s := range strings.Split(rel, "/") {
		p = filepath.Join(p, s)
		fi, err := os.Lstat(p)
		switch {
		case errors.Is(err, os.ErrNotExist):
			return errors.New("its directory is not in the repository")
		case err != nil:
			return fmt.Errorf("lstat: %w", err)
		case fi.Mode()&os.ModeSymlink != 0:
			return errors.New("its directory is reached through a link")
		case !fi.IsDir():
			return errors.New("it is not a directory")
		}
	}
	return nil
}

// placeLinks makes each link in stage (already read-only) as a relative
// symbolic link to its directory in the tree, so that it resolves once
// stage is renamed to the tree's node_modules, inside a jail as outside.
// A link whose directory is not a real one in the tree is left out with a
// warning. It returns how many it made.
func placeLinks(stage, tree string, links []npmLink, placed map[string]bool, w *warnings) int {
	made := 0
	for _, l := range links {
		if err := realDirUnder(tree, l.target); err != nil {
			w.add("workspace package %s: %s; it was not linked", quote(l.rel), err.Error())
			continue
		}
		parentRel, _ := splitLast(l.rel)
		if !ancestorsPlaced(l.rel, placed) {
			continue
		}
		if placed[l.rel] {
			w.add("workspace package %s: a package is installed there; it was not linked", quote(l.rel))
			continue
		}
		if err := withWritable(stage, parentRel, func(dir string) error {
			// From node_modules/<rel>'s directory up to the tree's root,
			// then down to the package's directory.
			up := strings.Repeat("../", strings.Count(l.rel, "/")+1)
			return os.Symlink(up+l.target, filepath.Join(dir, filepath.Base(filepath.FromSlash(l.rel))))
		}); err != nil {
			w.add("workspace package %s: it could not be linked", quote(l.rel))
			continue
		}
		placed[l.rel] = true
		made++
	}
	return made
}

// withWritable runs fn on stage/rel made writable for the call (and made
// first, one level at a time, if missing), then read-only again.
func withWritable(stage, rel string, fn func(dir string) error) error {
	dirs := []string{stage}
	p := stage
	if rel != "" {
		for _, s := range strings.Split(rel, "/") {
			p = filepath.Join(p, s)
			dirs = append(dirs, p)
		}
	}
	for i, d := range dirs {
		fi, err := os.Lstat(d)
		if errors.Is(err, os.ErrNotExist) && i > 0 {
			if err := os.Mkdir(d, 0o755); err != nil {
				return err
			}
			continue
		}
		if err != nil || !fi.IsDir() {
			return fmt.Errorf("%s is not a directory", d)
		}
		if err := os.Chmod(d, 0o755); err != nil {
			return err
		}
	}
	err := fn(p)
	for i := len(dirs) - 1; i >= 0; i-- {
		if cerr := os.Chmod(dirs[i], 0o555); err == nil {
			err = cerr
		}
	}
	return err
}
