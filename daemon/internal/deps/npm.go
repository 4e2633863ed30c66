package deps

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
)

// Bounds on a package-lock.json.
const (
	maxLockfile     = 32 << 20
	maxLockPackages = 20000
)

// errLockfile is a lockfile the phase refuses; its message says why.
var errLockfile = errors.New("package-lock.json refused")

// lockfile is the part of package-lock.json the phase reads.
type lockfile struct {
	LockfileVersion int                        `json:"lockfileVersion"`
	Packages        map[string]lockPackage     `json:"packages"`
	Dependencies    map[string]json.RawMessage `json:"dependencies"`
}

type lockPackage struct {
	Name                 string            `json:"name"`
	Version              string            `json:"version"`
	Resolved             string            `json:"resolved"`
	Integrity            string            `json:"integrity"`
	Link                 bool              `json:"link"`
	InBundle             bool              `json:"inBundle"`
	Optional             bool              `json:"optional"`
	OS                   []string          `json:"os"`
	CPU                  []string          `json:"cpu"`
	Libc                 []string          `json:"libc"`
	Dependencies         map[string]string `json:"dependencies"`
	DevDependencies      map[string]string `json:"devDependencies"`
	OptionalDependencies map[string]string `json:"optionalDependencies"`
	PeerDependencies     map[string]string `json:"peerDependencies"`
	// LinkTo, set only by the pnpm layout (never read from a lockfile),
	// makes this entry a relative symbolic link to another package path
	// of the same node_modules (hoistPNPM: node_modules/react →
	// .pnpm/node_modules/react); Name and Version are the target's.
	LinkTo string `json:"-"`
}

// installNPM reads the tree's root lockfile (chooseLockfile says which)
// and, when it holds, installs its packages into the tree's node_modules —
// unless the repository has a node_modules of its own, which stays as
// committed (a tree is never changed) and is named in a warning.
func (f *Fetcher) installNPM(ctx context.Context, ws runtime.Workspace, left *atomic.Int64, w *warnings) {
	var pkgs map[string]lockPackage
	defer func() { nestedLockfiles(ws.Root, pkgs, w) }()
	name, pkgJSON := chooseLockfile(ws.Root)
	if name == "" {
		if declaresDeps(pkgJSON) {
			w.add("package.json has no lockfile (package-lock.json, pnpm-lock.yaml or yarn.lock); its npm dependencies were not installed (answers about the repository's own code still work)")
		}
		return
	}
	if ownNodeModules(ws) {
		w.add("the repository commits a node_modules of its own: it is served as committed, and %s's packages were not installed (answers see only what it holds)", name)
		return
	}
	data, err := readRegular(filepath.Join(ws.Root, name), maxLockfile)
	if err != nil {
		w.add("%s: %s; npm packages were not installed", name, reason(err))
		return
	}
	switch name {
	case "pnpm-lock.yaml":
		var warn []string
		pkgs, warn, err = ParsePNPMLock(data, f.cfg.NPMRegistry)
		if err != nil {
			w.add("%s; npm packages were not installed", err.Error())
			return
		}
		for _, s := range warn {
			w.add("%s", s)
		}
	case "package-lock.json":
		n, err := ValidateLockfile(data, f.cfg.NPMRegistry)
		if err != nil {
			w.add("%s; npm packages were not installed", err.Error())
			return
		}
		if n == 0 {
			return
		}
		var lf lockfile
		if err := json.Unmarshal(data, &lf); err != nil {
			return // ValidateLockfile parsed it
		}
		pkgs = lf.Packages
	case "yarn.lock":
		if pkgs, err = f.yarnLockPackages(ctx, ws, data, left, w); err != nil {
			w.add("%s; npm packages were not installed", err.Error())
			return
		}
	default:
		w.add("%s is not read yet; npm packages were not installed", name)
		return
	}
	f.install(ctx, ws, pkgs, left, w)
}

// ownNodeModules says the tree's node_modules is the repository's own:
// there, and not what an earlier prepare of the tree installed (whose
// index is beside the tree).
func ownNodeModules(ws runtime.Workspace) bool {
	if _, err := os.Lstat(runtime.NodeModules(ws)); err != nil {
		return false
	}
	_, err := os.Lstat(runtime.NPMIndex(ws))
	return err != nil
}

// maxNestedLockfiles bounds the nested lockfiles named one by one.
const maxNestedLockfiles = 16

// nestedLockfiles warns of each lockfile below the tree's root: a project
// of its own (a web/ or docs/ beside the code) whose packages the phase
// does not install — only the root's lockfile is read — so that answers in
// it that lack its packages say why. A workspace of the root's lockfile
// (a key of pkgs naming a directory of the tree) is installed from the
// root's: its own lockfile is not named.
func nestedLockfiles(root string, pkgs map[string]lockPackage, w *warnings) {
	files, more := findManifests(root, isLockfile, maxNestedLockfiles+4)
	n := 0
	for _, f := range files {
		dir := path.Dir(f)
		if dir == "." {
			continue // the root's own
		}
		if _, member := pkgs[dir]; member {
			continue
		}
		if n++; n > maxNestedLockfiles {
			more = true
			break
		}
		w.add("%s: a project below the repository's root; only the root's lockfile is read, so its npm packages were not installed", f)
	}
	if more {
		w.add("more lockfiles below the repository's root than are listed; their npm packages were not installed")
	}
}

func isLockfile(name string) bool {
	return name == "package-lock.json" || name == "pnpm-lock.yaml" || name == "yarn.lock"
}

// chooseLockfile names the root lockfile the phase reads, "" for none,
// and returns the root package.json (nil when absent or unreadable). When
// several are present: pnpm-lock.yaml if a pnpm-workspace.yaml or
// package.json's packageManager (pnpm@…) says pnpm; else the lockfile of
// the manager packageManager names (npm@… package-lock.json, yarn@…
// yarn.lock); else package-lock.json; else pnpm-lock.yaml, then
// yarn.lock, whichever is there.
func chooseLockfile(root string) (string, []byte) {
	pkgJSON, _ := readRegular(filepath.Join(root, "package.json"), maxLockfile)
	var pj struct {
		PackageManager string `json:"packageManager"`
	}
	_ = json.Unmarshal(pkgJSON, &pj)
	manager, _, _ := strings.Cut(strings.TrimSpace(pj.PackageManager), "@")
	has := func(name string) bool {
		_, err := os.Lstat(filepath.Join(root, name))
		return err == nil
	}
	if has("pnpm-lock.yaml") && (manager == "pnpm" || has("pnpm-workspace.yaml")) {
		return "pnpm-lock.yaml", pkgJSON
	}
	byManager := map[string]string{"npm": "package-lock.json", "pnpm": "pnpm-lock.yaml", "yarn": "yarn.lock"}
	if l, ok := byManager[manager]; ok && has(l) {
		return l, pkgJSON
	}
	for _, l := range []string{"package-lock.json", "pnpm-lock.yaml", "yarn.lock"} {
		if has(l) {
			return l, pkgJSON
		}
	}
	return "", pkgJSON
}

// declaresDeps: a package.json that names dependencies of any kind.
func declaresDeps(pkgJSON []byte) bool {
	var pj struct {
		Dependencies         map[string]json.RawMessage `json:"dependencies"`
		DevDependencies      map[string]json.RawMessage `json:"devDependencies"`
		OptionalDependencies map[string]json.RawMessage `json:"optionalDependencies"`
		PeerDependencies     map[string]json.RawMessage `json:"peerDependencies"`
	}
	if json.Unmarshal(pkgJSON, &pj) != nil {
		return false
	}
	return len(pj.Dependencies)+len(pj.DevDependencies)+len(pj.OptionalDependencies)+len(pj.PeerDependencies) > 0
}

// ValidateLockfile checks a package-lock.json (lockfile version 2 or 3):
// every package resolves to a tarball under registry, and no spec names
// git, a file, a link or a plain URL, except a file: directory inside the
// repository that the project or a workspace declares, which npm links
// like a workspace (a package with no sha512 or sha1 integrity is install's to
// leave out, with a warning, not a refusal). npm
// workspaces are accepted: a link entry (node_modules/foo, link: true)
// whose resolved is a relative directory inside the repository, that
// directory's own entry (packages/foo) and the packages nested below it
// (packages/foo/node_modules/bar); install checks each link's directory
// in the tree itself. It returns how many packages and links the lockfile
// installs. It makes no request.
func ValidateLockfile(data []byte, registry *url.URL) (int, error) {
	var lf lockfile
	if err := json.Unmarshal(data, &lf); err != nil {
		return 0, fmt.Errorf("%w: it is not JSON", errLockfile)
	}
	if lf.LockfileVersion != 2 && lf.LockfileVersion != 3 {
		return 0, fmt.Errorf("%w: lockfileVersion %d is not 2 or 3", errLockfile, lf.LockfileVersion)
	}
	if len(lf.Packages) > maxLockPackages {
		return 0, fmt.Errorf("%w: %d packages, over the bound of %d", errLockfile, len(lf.Packages), maxLockPackages)
	}
	keys := make([]string, 0, len(lf.Packages))
	// The workspaces: in-repo directories that link entries point to.
	workspaces := map[string]bool{}
	for k, p := range lf.Packages {
		keys = append(keys, k)
		if p.Link {
			workspaces[p.Resolved] = true
		}
	}
	// The first refusal in key order, so that the warning is stable.
	sort.Strings(keys)
	n := 0
	for _, k := range keys {
		p := lf.Packages[k]
		for _, deps := range []map[string]string{p.Dependencies, p.DevDependencies, p.OptionalDependencies, p.PeerDependencies} {
			for _, name := range sortedKeys(deps) {
				kind := specKind(deps[name])
				if kind == "file" && inRepoFileSpec(k, deps[name]) {
					// npm links it like a workspace: its entry is checked below.
					continue
				}
				if kind != "" {
					return 0, fmt.Errorf("%w: package %s has a %s dependency (%s)", errLockfile, quote(k), kind, quote(name))
				}
			}
		}
		if k == "" {
			continue // the project itself
		}
		ws, rest, ok := splitWorkspaceKey(k)
		if !ok || ws != "" && !workspaces[ws] {
			return 0, fmt.Errorf("%w: package path %s is not under node_modules", errLockfile, quote(k))
		}
		if p.Link {
			// A workspace package, linked from node_modules to its
			// directory in the tree (which install checks on disk).
			if !repoDir(p.Resolved) {
				return 0, fmt.Errorf("%w: package %s links outside the repository", errLockfile, quote(k))
			}
			n++
			continue
		}
		if rest == "" {
			continue // a workspace package's own entry: its files are in the tree
		}
		if kind := specKind(p.Version); kind != "" {
			return 0, fmt.Errorf("%w: package %s has a %s version", errLockfile, quote(k), kind)
		}
		if p.InBundle {
			continue // inside its parent's verified tarball
		}
		if p.Resolved == "" {
			return 0, fmt.Errorf("%w: package %s has no resolved URL", errLockfile, quote(k))
		}
		if !underRegistry(p.Resolved, registry) {
			return 0, fmt.Errorf("%w: package %s resolves outside the registry", errLockfile, quote(k))
		}
		// A package whose integrity pins nothing (integrity.go) is left
		// out by install, with a warning, not the lockfile.
		n++
	}
	return n, nil
}

// inRepoFileSpec: a file: (or path) spec that the project itself, or one
// of its workspace packages, declares for a directory inside the
// repository, which npm installs as a link to it. A registry package's
// path specs, and paths that climb out, are not.
func inRepoFileSpec(key, spec string) bool {
	dir := "."
	if key != "" {
		ws, rest, ok := splitWorkspaceKey(key)
		if !ok || ws == "" || rest != "" {
			return false
		}
		dir = ws
	}
	p, _ := cutPrefixFold(strings.TrimSpace(spec), "file:")
	if strings.HasPrefix(p, "/") || strings.HasPrefix(p, "~") || strings.Contains(p, "\\") {
		return false
	}
	return repoDir(path.Join(dir, p))
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// specKind names a dependency spec that does not come from the registry,
// by npm's own grammar (npm-package-arg): "git" (git+…, git://,
// github:, gitlab:, bitbucket:, gist:, and user/repo GitHub shorthand),
// "file" (file:, and paths: ./, ../, /, ~/, a leading dot, a drive
// letter), "link" (link:, and the workspace:, portal: and patch:
// protocols of pnpm and Yarn) and "URL" (a tarball URL). Everything else is
// the registry's and gives "": a version, a range (~1.0.2, ^1, 1.x, *,
// ">=1 <2", "1 - 2", "a || b"), a dist-tag, or an npm: alias of one. A
// tilde is a path only before a slash: "~1.0.2" is a range, "~/x" a path.
func specKind(spec string) string {
	s := strings.TrimSpace(spec)
	if rest, ok := cutPrefixFold(s, "npm:"); ok {
		// An alias, npm:name@range: its target is classified. A name may
		// be scoped (@s/name@range), so the range follows the last @.
		s = ""
		if i := strings.LastIndex(rest, "@"); i > 0 {
			s = rest[i+1:]
		}
		return specKind(s)
	}
	l := strings.ToLower(s)
	switch {
	case strings.HasPrefix(l, "git+") || strings.HasPrefix(l, "git://") || strings.HasPrefix(l, "git@"):
		return "git"
	case strings.HasPrefix(l, "github:") || strings.HasPrefix(l, "gitlab:") || strings.HasPrefix(l, "bitbucket:") || strings.HasPrefix(l, "gist:"):
		return "git"
	case strings.HasPrefix(l, "file:") || strings.HasPrefix(l, ".") || strings.HasPrefix(l, "/") || strings.HasPrefix(l, "~/") || strings.HasPrefix(l, "\\"):
		return "file"
	case len(l) >= 2 && l[1] == ':' && l[0] >= 'a' && l[0] <= 'z':
		return "file" // C:\x, as npm reads it on every platform
	case strings.HasPrefix(l, "link:") || strings.HasPrefix(l, "workspace:") || strings.HasPrefix(l, "portal:") || strings.HasPrefix(l, "patch:"):
		return "link"
	case strings.Contains(l, "://"):
		if strings.Contains(l, ".git") || strings.Contains(l, "#") && !strings.HasPrefix(l, "http") {
			return "git"
		}
		return "URL"
	case strings.HasPrefix(l, "http:") || strings.HasPrefix(l, "https:"):
		return "URL"
	case !strings.HasPrefix(l, "@") && strings.Contains(l, "/") && !strings.ContainsAny(l, " <>=^~|*"):
		return "git" // user/repo is GitHub shorthand; no range or tag has a slash
	}
	return ""
}

func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix) {
		return s[len(prefix):], true
	}
	return s, false
}

// installPath: a lockPath, or one below pnpm's hidden level
// (node_modules/.pnpm/node_modules/a …) or a directory of its virtual
// store (node_modules/.pnpm/a@1.0.0/node_modules/a …, hoistPNPM), the
// package paths an install may write. Package names are checked with
// lockPath alone, so no name can reach either (a name never starts with
// a dot).
func installPath(k string) bool {
	if rel, ok := strings.CutPrefix(k, "node_modules/"); ok {
		if n := pnpmLevel(rel); n > 0 {
			return lockPath("node_modules/" + rel[n:])
		}
	}
	return lockPath(k)
}

// lockPath: node_modules/a, node_modules/@s/a, node_modules/a/node_modules/b …
func lockPath(k string) bool {
	if len(k) > 1024 || strings.Contains(k, "\\") {
		return false
	}
	segs := strings.Split(k, "/")
	for i := 0; i < len(segs); {
		if segs[i] != "node_modules" || i+1 >= len(segs) {
			return false
		}
		i++
		if strings.HasPrefix(segs[i], "@") {
			if !npmName(segs[i][1:]) || i+1 >= len(segs) {
				return false
			}
			i++
		}
		if !npmName(segs[i]) {
			return false
		}
		i++
	}
	return true
}

func npmName(s string) bool {
	if s == "" || len(s) > 214 || s[0] == '.' || s[0] == '_' {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-._~!*'()", c)) {
			return false
		}
	}
	return true
}

// underRegistry: an https (or the registry's own scheme) URL on the
// registry's host whose path is under the registry's path, with no
// credentials and no dot segments.
func underRegistry(resolved string, registry *url.URL) bool {
	u, err := url.Parse(resolved)
	if err != nil || registry == nil {
		return false
	}
	if u.Scheme != registry.Scheme || u.Host != registry.Host || u.User != nil || u.Opaque != "" || u.Fragment != "" {
		return false
	}
	p := u.EscapedPath()
	if strings.Contains(p, "/../") || strings.Contains(p, "/./") || strings.HasSuffix(p, "/..") || strings.Contains(strings.ToLower(p), "%2e") || strings.Contains(strings.ToLower(p), "%2f") {
		return false
	}
	return strings.HasPrefix(p, registry.EscapedPath()+"/")
}

// quote bounds and quotes tenant text for a warning.
func quote(s string) string {
	if len(s) > 80 {
		s = s[:80] + "…"
	}
	return fmt.Sprintf("%q", s)
}
