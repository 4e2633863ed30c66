package deps

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
)

// errYarnLock is a yarn.lock the phase refuses as a whole; its message
// says why.
var errYarnLock = errors.New("yarn.lock refused")

// Bounds on the yarn side: package.json files and workspaces read.
const (
	maxPackageJSON  = 1 << 20
	maxWorkspaces   = 1000
	maxYarnLineSize = 64 << 10
	// maxNesting bounds node_modules/…/node_modules depth in a computed
	// layout: conflicting cycles would otherwise nest for ever.
	maxNesting = 32
)

// yarnHoistWork bounds the shadowing checks of one layout; once spent, a
// package goes right below its dependent, which is always correct
// (nothing below a package is placed before its own edges are). A
// variable for tests.
var yarnHoistWork = 50_000_000

// yarnPkg is one resolved package of a Yarn lockfile, v1 or Berry.
type yarnPkg struct {
	// id is the package's identity (name@version of the registry
	// package); two placements with one id are the same package.
	id string
	// name is the package's registry name (an alias's target).
	name, version string
	// resolved and integrity: a tarball under the registry and its sha512
	// (Berry's come from the registry, see resolveBerry).
	resolved, integrity string
	// link is the directory, relative to the tree, of a workspace package.
	link     string
	deps     []yarnEdge
	os, cpu  []string
	optional bool
	// refused says why the package is not installed ("" when it is).
	refused string
}

// yarnEdge is one dependency: a name and the spec the lockfile keys it by.
type yarnEdge struct {
	name, spec string
	optional   bool
}

// yarnGraph is a lockfile's packages keyed by "name@spec", and the edges
// of the project (the root and every workspace) into them.
type yarnGraph struct {
	bySpec map[string]*yarnPkg
	roots  []yarnEdge
	// links are the workspace packages, by name.
	links map[string]*yarnPkg
	// resolve looks an edge up, for the formats that spell specs more than
	// one way; nil: bySpec[name@spec].
	resolve func(e yarnEdge) *yarnPkg
	// berry: workspaces are named by workspace: specs.
	berry bool
	// popular are edges placed at the top of node_modules right after the
	// roots' own (Yarn v1's prepass, yarnV1Popular).
	popular []yarnEdge
}

func (g *yarnGraph) lookup(e yarnEdge) *yarnPkg {
	if l := g.links[e.name]; l != nil && (!g.berry || strings.HasPrefix(e.spec, "workspace:")) {
		// v1 lockfiles have no entry for a workspace: any spec of its
		// name is the workspace.
		return l
	}
	if g.resolve != nil {
		return g.resolve(e)
	}
	return g.bySpec[e.name+"@"+e.spec]
}

// yarnLayout is a computed node_modules layout.
type yarnLayout struct {
	pkgs map[string]lockPackage
	// missing are edges the lockfile does not resolve, "name@spec".
	missing []string
	// refused are placed packages left out, with the reason.
	refused map[string]string
	// conflicts are workspace edges whose name the root already holds at
	// another version: the workspace sees the root's copy (its own
	// node_modules would be inside the read-only tree).
	conflicts []string
	// placed is every placement, for checking a layout.
	placed map[string]*yarnPkg
}

// hoist computes npm's hoisted layout for g: breadth first from the
// project's edges, in name order, each package placed at the shallowest
// node_modules on its dependent's path where no other version of it sits
// in between and where it shadows no package already placed for another
// dependent. Workspace packages are link entries at the top.
func hoist(g *yarnGraph) (yarnLayout, error) {
	out := yarnLayout{pkgs: map[string]lockPackage{}, refused: map[string]string{}}
	placed := map[string]*yarnPkg{}
	// needers[name]: placed directories whose edges (already processed)
	// include name, for the shadowing check.
	needers := map[string][]string{}
	wantOf := map[string]map[string]string{} // dir -> name -> id
	linkNames := make([]string, 0, len(g.links))
	for n := range g.links {
		linkNames = append(linkNames, n)
	}
	sort.Strings(linkNames)
	for _, n := range linkNames {
		placed[yarnChild("", n)] = g.links[n]
	}
	queue := []string{""}
	missing := map[string]bool{}
	work := 0
	for len(queue) > 0 {
		dir := queue[0]
		queue = queue[1:]
		var edges []yarnEdge
		if dir == "" {
			// In the order given: the root's own first, then what a
			// prepass chose for the top.
			edges = append(append([]yarnEdge(nil), g.roots...), g.popular...)
		} else {
			edges = append([]yarnEdge(nil), placed[dir].deps...)
			sort.SliceStable(edges, func(i, j int) bool { return edges[i].name < edges[j].name })
		}
		wants := map[string]string{}
		wantOf[dir] = wants
		for _, e := range edges {
			p := g.lookup(e)
			if p == nil {
				if !e.optional && !missing[e.name+"@"+e.spec] {
					missing[e.name+"@"+e.spec] = true
					out.missing = append(out.missing, e.name+"@"+e.spec)
				}
				continue
			}
			if p.link != "" {
				continue // at the top already
			}
			if _, dup := wants[e.name]; dup {
				if dir == "" && wants[e.name] != p.id {
					out.conflicts = append(out.conflicts, e.name+"@"+p.version)
				}
				continue // a workspace asking again for what the root has
			}
			wants[e.name] = p.id
			needers[e.name] = append(needers[e.name], dir)
			target, satisfied := "", false
			for lvl := dir; ; lvl = yarnParent(lvl) {
				k := yarnChild(lvl, e.name)
				if q, ok := placed[k]; ok {
					satisfied = q.id == p.id
					break
				}
				if work += len(needers[e.name]); work > yarnHoistWork {
					target = yarnChild(dir, e.name)
				} else if !shadows(lvl, e.name, p.id, placed, needers[e.name], wantOf) {
					target = k
				}
				if lvl == "" {
					break
				}
			}
			if satisfied {
				continue
			}
			if target == "" {
				if dir == "" {
					// A workspace's edge the root holds at another version.
					out.conflicts = append(out.conflicts, e.name+"@"+p.version)
					continue
				}
				target = yarnChild(dir, e.name)
				if _, ok := placed[target]; ok {
					continue
				}
			}
			if strings.Count(target, "node_modules/") > maxNesting || len(target) > 1024 {
				return out, fmt.Errorf("%w: the layout nests deeper than %d packages", errYarnLock, maxNesting)
			}
			if len(placed) >= maxLockPackages {
				return out, fmt.Errorf("%w: the layout has over %d packages", errYarnLock, maxLockPackages)
			}
			placed[target] = p
			queue = append(queue, target)
		}
	}
	for k, p := range placed {
		if refusedAbove(k, placed) {
			continue // inside a package left out: not fetched either
		}
		if p.link != "" {
			out.pkgs[k] = lockPackage{Link: true, Resolved: p.link} // as package-lock.json writes a workspace
			continue
		}
		if !lockPath(k) {
			out.refused[k] = "not a package name"
			continue
		}
		if p.refused != "" {
			out.refused[k] = p.refused
			continue
		}
		lp := lockPackage{Version: p.version, Resolved: p.resolved, Integrity: p.integrity, OS: p.os, CPU: p.cpu, Optional: p.optional}
		if p.name != k[strings.LastIndex(k, "node_modules/")+len("node_modules/"):] {
			lp.Name = p.name // an alias
		}
		out.pkgs[k] = lp
	}
	sort.Strings(out.conflicts)
	out.placed = placed
	return out, nil
}

// refusedAbove: k is nested in a placed package that is left out.
func refusedAbove(k string, placed map[string]*yarnPkg) bool {
	for d := yarnParent(k); d != ""; d = yarnParent(d) {
		if p := placed[d]; p != nil && p.refused != "" {
			return true
		}
	}
	return false
}

// shadows: putting id at lvl's node_modules/name would change what a
// package already placed under lvl gets for name.
func shadows(lvl, name, id string, placed map[string]*yarnPkg, needers []string, wantOf map[string]map[string]string) bool {
	for _, n := range needers {
		if lvl != "" && n != lvl && !strings.HasPrefix(n, lvl+"/node_modules/") {
			continue
		}
		if wantOf[n][name] == id {
			continue
		}
		// Does n find name below lvl already?
		found := false
		for d := n; d != lvl; d = yarnParent(d) {
			if _, ok := placed[yarnChild(d, name)]; ok {
				found = true
				break
			}
			if d == "" {
				break
			}
		}
		if !found {
			return true
		}
	}
	return false
}

func yarnChild(dir, name string) string {
	if dir == "" {
		return "node_modules/" + name
	}
	return dir + "/node_modules/" + name
}

func yarnParent(dir string) string {
	i := strings.LastIndex(dir, "/node_modules/")
	if i < 0 {
		return ""
	}
	return dir[:i]
}

// specName splits a "name@range" selector: the name ends at the first @
// after its first character (scopes start with one).
func specName(sel string) (string, string, bool) {
	i := strings.IndexByte(sel[min(1, len(sel)):], '@')
	if i < 0 {
		return "", "", false
	}
	i++
	return sel[:i], sel[i+1:], true
}

// aliasTarget is the registry name an "npm:real@range" spec installs, or
// name when the spec is not an alias.
func aliasTarget(name, spec string) string {
	s, ok := strings.CutPrefix(spec, "npm:")
	if !ok {
		return name
	}
	if n, _, ok := specName(s); ok && n != "" {
		return n
	}
	return name
}

// yarnLockPackages reads a yarn.lock, v1 or Berry, into the
// package-lock-shaped layout install takes, warning for what it leaves
// out. Berry's packages have their tarball and integrity from the
// registry by then. Nothing, and no request, when an earlier prepare of
// this same tree installed them.
func (f *Fetcher) yarnLockPackages(ctx context.Context, ws runtime.Workspace, data []byte, left *atomic.Int64, w *warnings) (map[string]lockPackage, error) {
	if _, err := os.Lstat(runtime.NodeModules(ws)); err == nil {
		return nil, nil
	}
	var layout yarnLayout
	var err error
	if yarnBerry(data) {
		layout, err = f.berryLayout(ctx, ws, data, left, w)
	} else {
		layout, err = yarnV1Layout(ws.Root, data, f.cfg.NPMRegistry, w)
	}
	if err != nil {
		return nil, err
	}
	reportLayout(layout, w)
	return layout.pkgs, nil
}

// reportLayout turns what a layout left out into warnings, few of them:
// a repository with hundreds of sha1-only packages gets one line.
func reportLayout(l yarnLayout, w *warnings) {
	byReason := map[string][]string{}
	for k, r := range l.refused {
		byReason[r] = append(byReason[r], strings.TrimPrefix(k, "node_modules/"))
	}
	for r, ks := range byReason {
		sort.Strings(ks)
		w.add("yarn.lock: %s not installed (nor what is nested in them), %s: %s", countOf(len(ks), "package"), r, listSome(ks))
	}
	if len(l.missing) > 0 {
		sort.Strings(l.missing)
		w.add("yarn.lock: %s not in the lockfile: %s", countOf(len(l.missing), "dependency"), listSome(l.missing))
	}
	if len(l.conflicts) > 0 {
		w.add("yarn.lock: workspaces see the root's version of %s they pin otherwise: %s", countOf(len(l.conflicts), "package"), listSome(l.conflicts))
	}
}

func countOf(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	if strings.HasSuffix(what, "y") {
		return fmt.Sprintf("%d %sies", n, what[:len(what)-1])
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// listSome names at most five, quoted and bounded.
func listSome(ks []string) string {
	var b strings.Builder
	for i, k := range ks {
		if i == 5 {
			fmt.Fprintf(&b, " and %d more", len(ks)-5)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(quote(k))
	}
	return b.String()
}

// yarnBerry: the lockfile has Berry's __metadata block.
func yarnBerry(data []byte) bool {
	for _, l := range bytes.Split(data, []byte("\n")) {
		if bytes.HasPrefix(l, []byte("__metadata:")) {
			return true
		}
	}
	return false
}

// manifest is the part of a package.json the phase reads.
type manifest struct {
	Name                 string            `json:"name"`
	Dependencies         map[string]string `json:"dependencies"`
	DevDependencies      map[string]string `json:"devDependencies"`
	OptionalDependencies map[string]string `json:"optionalDependencies"`
	Workspaces           json.RawMessage   `json:"workspaces"`
	Resolutions          map[string]string `json:"resolutions"`
}

// resolutionFor is the range package.json's "resolutions" forces on
// name: Yarn records the forced descriptor in the lockfile while
// dependency lists keep the original range. Patterns are "name",
// "**/name" or "parent/name" (read as "name" everywhere: the lockfile
// has no entry for the original range, so nothing else can be meant).
func (m manifest) resolutionFor(name string) []string {
	var out []string
	keys := make([]string, 0, len(m.Resolutions))
	for k := range m.Resolutions {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		pat := k
		if n, _, ok := specName(pat); ok && n != "" && !strings.HasSuffix(n, "/") {
			pat = n // "name@range": the range it replaces
		}
		if pat == name || strings.HasSuffix(pat, "/"+name) {
			out = append(out, m.Resolutions[k])
		}
	}
	return out
}

// edges are a manifest's dependencies in a stable order, dev ones
// included (types live there).
func (m manifest) edges() []yarnEdge {
	var out []yarnEdge
	for _, d := range []struct {
		m   map[string]string
		opt bool
	}{{m.Dependencies, false}, {m.DevDependencies, false}, {m.OptionalDependencies, true}} {
		names := make([]string, 0, len(d.m))
		for n := range d.m {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			out = append(out, yarnEdge{name: n, spec: d.m[n], optional: d.opt})
		}
	}
	return out
}

// workspaceGlobs is package.json's "workspaces": a list, or an object
// with a "packages" list.
func (m manifest) workspaceGlobs() []string {
	var list []string
	if json.Unmarshal(m.Workspaces, &list) == nil {
		return list
	}
	var obj struct {
		Packages []string `json:"packages"`
	}
	_ = json.Unmarshal(m.Workspaces, &obj)
	return obj.Packages
}

func readManifest(p string) (manifest, error) {
	var m manifest
	data, err := readRegular(p, maxPackageJSON)
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return m, errors.New("not JSON")
	}
	return m, nil
}

// workspaceDirs expands workspace globs ("packages/*", "tools/cli") below
// root into directories, relative slash paths in order (the caller takes
// those whose package.json names a package). Only real directories are walked (never a link), "*" and the
// other path.Match patterns match one level, "**" is not followed, and a
// "!" pattern excludes.
func workspaceDirs(root string, globs []string) []string {
	seen := map[string]bool{}
	var excl []string
	for _, g := range globs {
		if e, ok := strings.CutPrefix(g, "!"); ok {
			excl = append(excl, path.Clean(e))
		}
	}
	for _, g := range globs {
		g = path.Clean(strings.TrimPrefix(g, "./"))
		if strings.HasPrefix(g, "!") || path.IsAbs(g) || g == ".." || strings.HasPrefix(g, "../") || strings.Contains(g, "**") || strings.Contains(g, "\\") {
			continue
		}
		dirs := []string{""}
		for _, seg := range strings.Split(g, "/") {
			var next []string
			for _, d := range dirs {
				ents, err := os.ReadDir(filepath.Join(root, filepath.FromSlash(d)))
				if err != nil {
					continue
				}
				for _, e := range ents {
					if !e.IsDir() || e.Name() == "node_modules" || strings.HasPrefix(e.Name(), ".") {
						continue // e.IsDir is false for a link
					}
					if ok, _ := path.Match(seg, e.Name()); ok {
						next = append(next, path.Join(d, e.Name()))
					}
				}
			}
			dirs = next
			if len(dirs) > maxWorkspaces {
				dirs = dirs[:maxWorkspaces]
			}
		}
		for _, d := range dirs {
			if d == "" || seen[d] {
				continue
			}
			excluded := false
			for _, e := range excl {
				if ok, _ := path.Match(e, d); ok {
					excluded = true
				}
			}
			if !excluded && len(seen) < maxWorkspaces {
				seen[d] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for d := range seen {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

// Yarn v1.

// yarnV1Entry is one entry of a Yarn v1 lockfile.
type yarnV1Entry struct {
	Selectors                          []string
	Version, Resolved, Integrity       string
	Dependencies, OptionalDependencies map[string]string
}

// parseYarnV1 parses a Yarn v1 lockfile: its own indentation grammar
// (not YAML). An entry is a line of comma-joined "name@range" selectors,
// each quoted or bare, ending in ":", then two-space indented fields
// written "key value" or "key: value", and the indented maps
// "dependencies:" and "optionalDependencies:" of "name range" lines.
// Quoted strings are JSON strings; "#" starts a comment line.
func parseYarnV1(data []byte) ([]yarnV1Entry, error) {
	if len(data) > maxLockfile {
		return nil, fmt.Errorf("%w: over the size bound", errYarnLock)
	}
	var out []yarnV1Entry
	seen := map[string]bool{}
	var cur *yarnV1Entry
	var curMap *map[string]string // the open nested map, if any
	fields := map[string]bool{}
	for n, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSuffix(line, "\r")
		fail := func(why string) error { return fmt.Errorf("%w: line %d: %s", errYarnLock, n+1, why) }
		if len(line) > maxYarnLineSize {
			return nil, fail("too long")
		}
		body := strings.TrimLeft(line, " ")
		if body == "" || strings.HasPrefix(body, "#") {
			continue
		}
		if strings.HasPrefix(body, "\t") {
			return nil, fail("a tab indents it")
		}
		indent := len(line) - len(body)
		if indent%2 != 0 {
			return nil, fail("odd indentation")
		}
		toks, err := yarnV1Tokens(body)
		if err != nil {
			return nil, fail(err.Error())
		}
		keys, value, opener, err := yarnV1Line(toks)
		if err != nil {
			return nil, fail(err.Error())
		}
		switch indent {
		case 0:
			if !opener {
				return nil, fail("a top-level line that opens no entry")
			}
			if len(out) >= maxLockPackages {
				return nil, fmt.Errorf("%w: over %d entries", errYarnLock, maxLockPackages)
			}
			for _, k := range keys {
				if seen[k] {
					return nil, fail("selector " + quote(k) + " appears twice")
				}
				seen[k] = true
			}
			out = append(out, yarnV1Entry{Selectors: keys})
			cur, curMap = &out[len(out)-1], nil
			fields = map[string]bool{}
		case 2:
			if cur == nil {
				return nil, fail("indented outside an entry")
			}
			if len(keys) != 1 {
				return nil, fail("a field with several names")
			}
			k := keys[0]
			if fields[k] {
				return nil, fail("field " + quote(k) + " appears twice")
			}
			fields[k] = true
			curMap = nil
			if opener {
				switch k {
				case "dependencies":
					cur.Dependencies = map[string]string{}
					curMap = &cur.Dependencies
				case "optionalDependencies":
					cur.OptionalDependencies = map[string]string{}
					curMap = &cur.OptionalDependencies
				default:
					ignored := map[string]string{}
					curMap = &ignored
				}
				continue
			}
			switch k {
			case "version":
				cur.Version = value
			case "resolved":
				cur.Resolved = value
			case "integrity":
				cur.Integrity = value
			}
		case 4:
			if curMap == nil {
				return nil, fail("indented outside a map")
			}
			if opener || len(keys) != 1 {
				return nil, fail("not a \"name range\" line")
			}
			if _, dup := (*curMap)[keys[0]]; dup {
				return nil, fail("dependency " + quote(keys[0]) + " appears twice")
			}
			(*curMap)[keys[0]] = value
		default:
			return nil, fail("nested too deep")
		}
	}
	return out, nil
}

// yarnV1Tokens splits one line's body into strings (quoted or bare),
// ":" and ",".
func yarnV1Tokens(s string) ([]string, error) {
	var toks []string
	for i := 0; i < len(s); {
		switch c := s[i]; {
		case c == ' ':
			i++
		case c == ':' || c == ',':
			toks = append(toks, s[i:i+1])
			i++
		case c == '"':
			j := i + 1
			for ; j < len(s) && s[j] != '"'; j++ {
				if s[j] == '\\' {
					j++
				}
			}
			if j >= len(s) {
				return nil, errors.New("an unterminated string")
			}
			var v string
			if err := json.Unmarshal([]byte(s[i:j+1]), &v); err != nil {
				return nil, errors.New("a malformed string")
			}
			toks = append(toks, "\x00"+v) // marks a string token
			i = j + 1
		case c == '#':
			return toks, nil
		default:
			j := i
			for ; j < len(s) && s[j] != ' ' && s[j] != ':' && s[j] != ','; j++ {
				if s[j] < 0x20 || s[j] == '"' {
					return nil, errors.New("a control character or stray quote")
				}
			}
			toks = append(toks, "\x00"+s[i:j])
			i = j
		}
	}
	return toks, nil
}

// yarnV1Line reads "k1, k2:" (an opener), "k value" or "k: value".
func yarnV1Line(toks []string) (keys []string, value string, opener bool, err error) {
	i := 0
	for {
		if i >= len(toks) || !strings.HasPrefix(toks[i], "\x00") {
			return nil, "", false, errors.New("a key is missing")
		}
		keys = append(keys, toks[i][1:])
		i++
		if i < len(toks) && toks[i] == "," {
			i++
			continue
		}
		break
	}
	colon := i < len(toks) && toks[i] == ":"
	if colon {
		i++
	}
	switch {
	case i == len(toks) && colon:
		return keys, "", true, nil
	case i == len(toks)-1 && strings.HasPrefix(toks[i], "\x00") && len(keys) == 1:
		return keys, toks[i][1:], false, nil
	}
	return nil, "", false, errors.New("not a key and a value")
}

// Public registries whose tarballs are the same files at the same paths:
// registry.yarnpkg.com fronts npm's registry, and Yarn v1 writes it into
// lockfiles by default for packages it fetched from npm, so a v1 lockfile
// naming either is read as naming the configured registry.
var publicRegistries = map[string]bool{"registry.yarnpkg.com": true, "registry.npmjs.org": true}

// yarnV1Tarball maps a v1 "resolved" URL to a URL under the registry. The
// "#sha1" fragment is dropped (the integrity field is what is checked, or
// the fragment itself when there is none; see sha1Fragment). A
// URL under the configured registry is taken as it is; one on a public
// registry is rewritten to the configured registry only when its path is
// exactly the conventional tarball path of the entry's own name and
// version, "/<name>/-/<base>-<version>.tgz", which every npm registry
// and mirror serves: the entry cannot name another file than the one
// its version is, and its sha512 must still match. Anything else (git,
// a file, another host) is refused.
func yarnV1Tarball(resolved, name, version string, registry *url.URL) (string, bool) {
	if i := strings.IndexByte(resolved, '#'); i >= 0 {
		resolved = resolved[:i]
	}
	if underRegistry(resolved, registry) {
		return resolved, true
	}
	u, err := url.Parse(resolved)
	if err != nil || registry == nil || u.Scheme != "https" || !publicRegistries[u.Host] || u.User != nil || u.RawQuery != "" {
		return "", false
	}
	if u.EscapedPath() != tarballPath(name, version) {
		return "", false
	}
	out := registry.String() + u.EscapedPath()
	return out, underRegistry(out, registry)
}

// tarballPath is npm's conventional tarball path below a registry.
func tarballPath(name, version string) string {
	return "/" + name + "/-/" + name[strings.LastIndex(name, "/")+1:] + "-" + version + ".tgz"
}

// yarnV1Layout parses a v1 lockfile and computes the layout of the
// project's dependencies: the root package.json's and every workspace's.
func yarnV1Layout(root string, data []byte, registry *url.URL, w *warnings) (yarnLayout, error) {
	entries, err := parseYarnV1(data)
	if err != nil {
		return yarnLayout{}, err
	}
	m, err := readManifest(filepath.Join(root, "package.json"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return yarnLayout{}, fmt.Errorf("%w: package.json is %s", errYarnLock, reason(err))
	}
	g, err := yarnV1Graph(entries, registry)
	if err != nil {
		return yarnLayout{}, err
	}
	g.roots = m.edges()
	g.resolve = func(e yarnEdge) *yarnPkg {
		if p := g.bySpec[e.name+"@"+e.spec]; p != nil {
			return p
		}
		for _, r := range m.resolutionFor(e.name) {
			if p := g.bySpec[e.name+"@"+r]; p != nil {
				return p
			}
		}
		return nil
	}
	for _, d := range workspaceDirs(root, m.workspaceGlobs()) {
		wm, err := readManifest(filepath.Join(root, filepath.FromSlash(d), "package.json"))
		if err != nil || wm.Name == "" || !lockPath("node_modules/"+wm.Name) {
			continue // yarn ignores a folder without a named package.json too
		}
		if g.links[wm.Name] != nil {
			w.add("yarn.lock: two workspaces are named %s; the first is linked", quote(wm.Name))
			continue
		}
		g.links[wm.Name] = &yarnPkg{id: "workspace:" + d, name: wm.Name, link: d}
		g.roots = append(g.roots, wm.edges()...)
	}
	g.popular = yarnV1Popular(g)
	return hoist(g)
}

// yarnV1Popular is Yarn v1's hoisting prepass (its documented rule: "if
// there's multiple versions of the same package, hoist the one with the
// most dependents to the top"): over the packages the project reaches,
// for each name the project does not depend on itself and that appears in
// more than one version, the version required by the most distinct
// packages goes to the top of node_modules before anything else is
// hoisted — if more than one package requires it; on a tie, the version
// that sorts first as a string. Without it, the first version met breadth
// first took the top: on immer, tsup's source-map@0.8.0-beta.0 (a direct
// dependency's) instead of the 0.5.7 that six packages require and Yarn
// 1.22 puts there. One edge per chosen version, in name order.
func yarnV1Popular(g *yarnGraph) []yarnEdge {
	type version struct {
		edge       yarnEdge
		dependents map[string]bool
	}
	byName := map[string]map[string]*version{}
	rootNames := map[string]bool{}
	var queue []*yarnPkg
	seen := map[*yarnPkg]bool{}
	reach := func(e yarnEdge) *yarnPkg {
		p := g.lookup(e)
		if p == nil || p.link != "" {
			return nil
		}
		if !seen[p] && len(seen) < maxLockPackages {
			seen[p] = true
			queue = append(queue, p)
		}
		vs := byName[p.name]
		if vs == nil {
			vs = map[string]*version{}
			byName[p.name] = vs
		}
		if vs[p.version] == nil {
			vs[p.version] = &version{edge: e, dependents: map[string]bool{}}
		}
		return p
	}
	for _, e := range g.roots {
		if p := reach(e); p != nil {
			rootNames[p.name] = true
		}
	}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, e := range p.deps {
			if q := reach(e); q != nil && q != p {
				byName[q.name][q.version].dependents[p.id] = true
			}
		}
	}
	names := make([]string, 0, len(byName))
	for n, vs := range byName {
		if len(vs) > 1 && !rootNames[n] {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	var out []yarnEdge
	for _, n := range names {
		vs := byName[n]
		keys := make([]string, 0, len(vs))
		for v := range vs {
			keys = append(keys, v)
		}
		sort.Strings(keys)
		best := ""
		for _, v := range keys {
			if best == "" || len(vs[v].dependents) > len(vs[best].dependents) {
				best = v
			}
		}
		if len(vs[best].dependents) > 1 {
			e := vs[best].edge
			e.optional = true // nothing is missing if it is not placed
			out = append(out, e)
		}
	}
	return out
}

// yarnV1Graph checks each entry and keys it by its selectors. A whole
// lockfile is refused only for its grammar or its bounds; an entry that
// is not a registry package with a sha512 is kept, marked refused, so the
// rest still installs.
func yarnV1Graph(entries []yarnV1Entry, registry *url.URL) (*yarnGraph, error) {
	g := &yarnGraph{bySpec: map[string]*yarnPkg{}, links: map[string]*yarnPkg{}}
	for _, e := range entries {
		// The registry package every selector resolves to: an alias's
		// selector may share the entry of its target.
		var real string
		for _, s := range e.Selectors {
			n, spec, ok := specName(s)
			if !ok || n == "" {
				return nil, fmt.Errorf("%w: selector %s names no package", errYarnLock, quote(s))
			}
			r := aliasTarget(n, spec)
			if real != "" && r != real {
				return nil, fmt.Errorf("%w: entry %s joins two packages", errYarnLock, quote(s))
			}
			real = r
		}
		p := &yarnPkg{id: real + "@" + e.Version, name: real, version: e.Version}
		for _, d := range []struct {
			m   map[string]string
			opt bool
		}{{e.Dependencies, false}, {e.OptionalDependencies, true}} {
			for n, spec := range d.m {
				p.deps = append(p.deps, yarnEdge{name: n, spec: spec, optional: d.opt})
			}
		}
		switch {
		case !npmVersion(e.Version):
			p.refused = "no registry version"
		case e.Resolved == "":
			p.refused = "no resolved URL"
		case specKind(e.Resolved) == "git" || strings.HasPrefix(e.Resolved, "file:"):
			p.refused = "resolved to git or a file"
		default:
			if r, ok := yarnV1Tarball(e.Resolved, real, e.Version, registry); ok {
				p.resolved = r
			} else {
				p.refused = "resolved outside the registry"
			}
		}
		if p.refused == "" {
			switch {
			case pinnedIntegrity(e.Integrity):
				p.integrity = e.Integrity
			case e.Integrity == "" && sha1Fragment(e.Resolved) != "":
				p.integrity = sha1Fragment(e.Resolved) // Yarn < 1.10: the pin is the URL's fragment
			default:
				p.refused = "no sha512 or sha1 integrity"
			}
		}
		for _, s := range e.Selectors {
			g.bySpec[s] = p
		}
	}
	return g, nil
}
