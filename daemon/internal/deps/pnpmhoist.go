package deps

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// pnpmHidden is pnpm's hidden hoisting level, node_modules/.pnpm/node_modules/:
// pnpm links one version of every package there (hoist-pattern "*"),
// where module resolution walking up from a package's real directory
// (node_modules/.pnpm/<name>@<version>/node_modules/<name>) reaches it
// after the package's own dependencies and before the top, and where the
// repository's own files never look.
const pnpmHidden = "node_modules/" + pnpmHiddenRel

// pnpmHiddenRel is pnpmHidden below node_modules.
const pnpmHiddenRel = ".pnpm/node_modules/"

// pnpmStore is pnpm's virtual store: each package's real directory is
// node_modules/.pnpm/<its snapshot key as a file name>/node_modules/<name>.
const pnpmStore = "node_modules/" + pnpmStoreRel

// pnpmStoreRel is pnpmStore below node_modules.
const pnpmStoreRel = ".pnpm/"

// maxStoreDir is pnpm's virtual-store-dir-max-length: a longer directory
// name is cut and ends in a hash.
const maxStoreDir = 120

// pnpmStoreDir is the directory pnpm names a package's snapshot key by in
// its virtual store (as pnpm 9 to 12 write it, checked against the
// ground truth's checkout of zustand: 479 of its 481 directories, the
// other two platform packages it skips): "/" becomes "+", the peers'
// parentheses "_", and a name over maxStoreDir, or with a capital
// letter, is cut and ends in "_" and the first 32 hex digits of its
// SHA-256. ok is false for a name that is not a safe directory name.
func pnpmStoreDir(key string) (string, bool) {
	f := strings.TrimPrefix(key, "/")
	f = strings.Map(func(r rune) rune {
		if strings.ContainsRune(`\/:*?"<>|`, r) {
			return '+'
		}
		return r
	}, f)
	if strings.Contains(f, "(") {
		f = strings.NewReplacer(")(", "_", "(", "_", ")", "_").Replace(strings.TrimSuffix(f, ")"))
	}
	if len(f) > maxStoreDir || f != strings.ToLower(f) {
		sum := sha256.Sum256([]byte(f))
		f = f[:min(len(f), maxStoreDir-33)] + "_" + hex.EncodeToString(sum[:16])
	}
	return f, storeDirName(f)
}

// storeDirName: a directory name of pnpm's virtual store, as
// pnpmStoreDir makes them — never "node_modules", a dot name or a path.
func storeDirName(s string) bool {
	if s == "" || len(s) > maxStoreDir || s == "node_modules" || s[0] == '.' {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-._~!*'@+", c)) {
			return false
		}
	}
	return true
}

// pnpmLevel is the length of rel's pnpm prefix — the hidden level,
// .pnpm/node_modules/, or a store directory's, .pnpm/<dir>/node_modules/
// — neither of which is a package; 0 when rel has none.
func pnpmLevel(rel string) int {
	if strings.HasPrefix(rel, pnpmHiddenRel) {
		return len(pnpmHiddenRel)
	}
	rest, ok := strings.CutPrefix(rel, pnpmStoreRel)
	if !ok {
		return 0
	}
	dir, _, ok := strings.Cut(rest, "/node_modules/")
	if !ok || !storeDirName(dir) {
		return 0
	}
	return len(pnpmStoreRel) + len(dir) + len("/node_modules/")
}

// hoistPNPM lays a pnpm graph out so that each package resolves what it
// resolves in pnpm's own layout. Every package is first placed below the
// hidden level: the root importer's direct
// dependencies (and the other importers', which their directories in the
// immutable tree reach by walking up to the top, when no other version
// holds the place, else a warning) at the hidden level itself, then,
// breadth first, each transitive dependency at the highest level on its
// dependent's path, the hidden level included, where no other version of
// it is visible and where it hides no other version from a package
// already resolved through that level, else nested below its dependent. A
// dependency a visible place already holds in the same version is shared.
// Then each package at the hidden level moves to its directory in pnpm's
// virtual store (toVirtualStore), where its entry at the hidden level
// links. The top of node_modules holds the importers' direct dependencies
// only, each a relative symbolic link to its real directory (LinkTo), and
// their link: workspace packages: code of the repository
// that imports what it does not declare resolves nothing, as on a
// checkout (with npm's hoisting, zustand's examples/starter saw vitest's
// vite and its vite/client types, and a diagnostic the checkout has was
// missing), while a package resolves what it does not declare from the
// hidden level, as in pnpm's layout, where TypeScript follows the link to
// the real directory: @types/node's process.d.ts imports "punycode",
// which it does not declare, and the checkout's inferred project holds
// punycode.js through it.
func hoistPNPM(g *pnpmGraph) (map[string]lockPackage, []string) {
	return hoistWithin(g, maxHoistWork)
}

func hoistWithin(g *pnpmGraph, budget int) (map[string]lockPackage, []string) {
	h := &hoister{g: g, out: map[string]lockPackage{}, at: map[string]*pnpmNode{}, users: map[string][]string{}, budget: budget}
	for _, dn := range sortedKeys(g.roots) {
		if n := g.nodes[g.roots[dn]]; n != nil && n.refused == "" {
			h.placeDirect(dn, n)
		}
	}
	for _, l := range g.links {
		k := "node_modules/" + l.name
		if have, ok := h.out[k]; ok {
			if !have.Link || have.Resolved != l.dir {
				h.warnf("%s: %s links %s, which another package holds at the top of node_modules; it was not linked", quote(l.importer), quote(l.name), quote(l.dir))
			}
			continue
		}
		h.out[k] = lockPackage{Link: true, Resolved: l.dir}
	}
	for _, imp := range sortedKeys2(g.importers) {
		deps := g.importers[imp]
		for _, dn := range sortedKeys(deps) {
			n := g.nodes[deps[dn]]
			if n == nil || n.refused != "" {
				continue
			}
			k := "node_modules/" + dn
			if have, ok := h.out[k]; ok {
				if have.Link || h.at[k].name != n.name || h.at[k].version != n.version {
					h.warnf("%s needs %s, which another version holds at the top of node_modules; it was not installed", quote(imp), pnpmModule(n))
				}
				continue
			}
			h.placeDirect(dn, n)
		}
	}
	for len(h.queue) > 0 {
		p := h.queue[0]
		h.queue = h.queue[1:]
		n := h.at[p]
		for _, dn := range sortedKeys(n.deps) {
			d := h.g.nodes[n.deps[dn]]
			if d == nil || d.refused != "" {
				continue
			}
			h.resolve(p, dn, d)
		}
	}
	h.toVirtualStore()
	return h.out, h.warn
}

// toVirtualStore moves each package the layout put at the hidden level,
// with what is nested below it, to its real directory in pnpm's virtual
// store, node_modules/.pnpm/<pnpmStoreDir>/node_modules/<name>, and makes
// its hidden entry, and the top's link to it, links to that directory.
// Module resolution from there walks the same levels as before (the
// package's own node_modules, the store directory's, which holds it
// alone, the hidden level, the top), and a server that prints a package
// file's real path prints the one a pnpm checkout has: tsserver's hover
// on zustand's tests named node_modules/.pnpm/node_modules/@testing-library/dom/…
// where the checkout has node_modules/.pnpm/@testing-library+dom@10.4.0/node_modules/@testing-library/dom/….
// An alias (installed under another name than its own) stays where it
// is, as does a package whose store directory would not be a safe name.
func (h *hoister) toVirtualStore() {
	moved := map[string]string{} // hidden-level package path → store path
	for k, p := range h.out {
		name, ok := strings.CutPrefix(k, pnpmHidden)
		if !ok || strings.Contains(name, "/node_modules/") || p.Link || p.LinkTo != "" {
			continue
		}
		n := h.at[k]
		if n == nil || n.name != name {
			continue
		}
		if dir, ok := pnpmStoreDir(n.key); ok {
			moved[k] = pnpmStore + dir + "/node_modules/" + name
		}
	}
	if len(moved) == 0 {
		return
	}
	out := make(map[string]lockPackage, len(h.out)+len(moved))
	for k, p := range h.out {
		if to, ok := moved[p.LinkTo]; ok {
			p.LinkTo = to
		}
		if rest, ok := strings.CutPrefix(k, pnpmHidden); ok {
			name, _, _ := strings.Cut(rest, "/node_modules/")
			if to, ok := moved[pnpmHidden+name]; ok {
				k = to + rest[len(name):]
			}
		}
		out[k] = p
	}
	for k, to := range moved {
		link := h.out[k]
		link.LinkTo = to
		out[k] = link
	}
	h.out = out
}

type hoister struct {
	g   *pnpmGraph
	out map[string]lockPackage
	// at is the node installed at each package path (as placed, before
	// toVirtualStore moves the hidden level's into the store).
	at map[string]*pnpmNode
	// users: dependency name → the package paths that resolved it.
	users map[string][]string
	queue []string
	warn  []string
	// budget bounds the resolution walks hoisting may take; once spent,
	// packages nest below their dependents, which is always correct.
	budget int
}

// maxHoistWork bounds hoisting's walks, far above what a real lockfile
// needs; a hostile graph cannot make the layout quadratic without end.
const maxHoistWork = 20_000_000

func (h *hoister) warnf(format string, args ...any) {
	h.warn = append(h.warn, fmt.Sprintf(format, args...))
}

// placeDirect installs an importer's direct dependency at the hidden
// level and links it from the top.
func (h *hoister) placeDirect(name string, n *pnpmNode) {
	k := pnpmHidden + name
	h.place(k, n)
	link := n.pkg
	link.LinkTo = k
	h.out["node_modules/"+name] = link
	h.at["node_modules/"+name] = n
}

func (h *hoister) place(k string, n *pnpmNode) {
	h.out[k] = n.pkg
	h.at[k] = n
	h.queue = append(h.queue, k)
}

// levels are the node_modules directories module resolution tries from
// package path p, deepest first: p/node_modules/, …, node_modules/ —
// from a store directory, .pnpm/<dir>/node_modules/ and then the hidden
// level (its parent .pnpm's node_modules).
func levels(p string) []string {
	out := []string{p + "/node_modules/"}
	for i := len(p); ; {
		j := strings.LastIndex(p[:i], "/node_modules/")
		if j < 0 {
			break
		}
		out = append(out, p[:j]+"/node_modules/")
		if strings.HasPrefix(p[:j], pnpmStore) && !strings.Contains(p[len(pnpmStore):j], "/") {
			out = append(out, pnpmHidden)
		}
		i = j
	}
	return append(out, "node_modules/")
}

// visible is the path name resolves to from package path p, if any.
func (h *hoister) visible(p, name string) (string, bool) {
	for _, l := range levels(p) {
		if _, ok := h.out[l+name]; ok {
			return l + name, true
		}
	}
	return "", false
}

func (h *hoister) same(k string, n *pnpmNode) bool {
	have := h.at[k]
	return have != nil && have.name == n.name && have.version == n.version
}

// resolve makes dependency name (node d) of the package at p visible
// from p: shared where the same version already is, else placed.
func (h *hoister) resolve(p, name string, d *pnpmNode) {
	defer func() { h.users[name] = append(h.users[name], p) }()
	ls := levels(p)
	top := len(ls) // the highest level d may go to, exclusive
	for i, l := range ls {
		if _, ok := h.out[l+name]; ok {
			if h.same(l+name, d) {
				return
			}
			top = i
			break
		}
	}
	if top == 0 {
		// Its dependent's own place holds another version: a lockfile
		// that names one dependency twice.
		h.warnf("%s: another version is where it must go; it was not installed", pnpmModule(d))
		return
	}
	if len(ls) > maxPNPMDepth {
		h.warnf("%s: it would nest too deep; it was not installed", pnpmModule(d))
		return
	}
	if len(h.out) >= maxLockPackages {
		h.warnf("%s: over the bound of %d packages; it was not installed", pnpmModule(d), maxLockPackages)
		return
	}
	for i := top - 1; i > 0; i-- {
		if ls[i] == "node_modules/" {
			continue // the importers' own dependencies only (links to the hidden level)
		}
		if !h.hides(ls[i], name, d) {
			h.place(ls[i]+name, d)
			return
		}
	}
	h.place(ls[0]+name, d) // below its dependent: seen by it alone
}

// hides: putting d at level l would change what name resolves to for a
// package already resolved through l.
func (h *hoister) hides(l, name string, d *pnpmNode) bool {
	if h.budget -= len(h.users[name]) + 1; h.budget < 0 {
		return true
	}
	for _, q := range h.users[name] {
		if !strings.HasPrefix(q+"/node_modules/", l) {
			continue
		}
		if r, ok := h.visible(q, name); ok && !strings.HasPrefix(r, l) && !h.same(r, d) {
			return true
		}
	}
	return false
}
