package deps

import (
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

// hoistPNPM lays a pnpm graph out so that each package resolves what it
// resolves in pnpm's own layout, without pnpm's store. Every package's
// directory is below the hidden level: the root importer's direct
// dependencies (and the other importers', which their directories in the
// immutable tree reach by walking up to the top, when no other version
// holds the place, else a warning) at the hidden level itself, then,
// breadth first, each transitive dependency at the highest level on its
// dependent's path, the hidden level included, where no other version of
// it is visible and where it hides no other version from a package
// already resolved through that level, else nested below its dependent. A
// dependency a visible place already holds in the same version is shared.
// The top of node_modules holds the importers' direct dependencies only,
// each a relative symbolic link to its directory at the hidden level
// (LinkTo), and their link: workspace packages: code of the repository
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
	return h.out, h.warn
}

type hoister struct {
	g   *pnpmGraph
	out map[string]lockPackage
	// at is the node installed at each package path.
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
// package path p, deepest first: p/node_modules/, …, node_modules/.
func levels(p string) []string {
	out := []string{p + "/node_modules/"}
	for i := len(p); ; {
		j := strings.LastIndex(p[:i], "/node_modules/")
		if j < 0 {
			break
		}
		out = append(out, p[:j]+"/node_modules/")
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
