package deps

import (
	"fmt"
	"strings"
)

// hoistPNPM lays a pnpm graph out so that each package sees what it sees
// in pnpm's own layout: the root importer's direct dependencies (and its
// link: workspace packages) at the top of node_modules; the other
// importers' direct dependencies there too, since their directories are
// in the immutable tree and module resolution walking up from them
// reaches the top, when no other version holds the place (else a
// warning); then, breadth first, each transitive dependency at the
// highest level below the top on its dependent's path where no other
// version of it is visible and where it hides no other version from a
// package already resolved through that level, else nested below its
// dependent. A dependency a visible place already holds in the same
// version is shared. Nothing transitive goes to the top: pnpm puts only
// the importers' own dependencies there (pnpm 12 hoists nothing publicly
// by default), so code of the repository that imports what it does not
// declare resolves nothing, as on a checkout — with npm's hoisting,
// zustand's examples/starter saw vitest's vite and its vite/client types,
// and a diagnostic the checkout has was missing.
func hoistPNPM(g *pnpmGraph) (map[string]lockPackage, []string) {
	return hoistWithin(g, maxHoistWork)
}

func hoistWithin(g *pnpmGraph, budget int) (map[string]lockPackage, []string) {
	h := &hoister{g: g, out: map[string]lockPackage{}, at: map[string]*pnpmNode{}, users: map[string][]string{}, budget: budget}
	for _, dn := range sortedKeys(g.roots) {
		if n := g.nodes[g.roots[dn]]; n != nil && n.refused == "" {
			h.place("node_modules/"+dn, n)
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
			h.place(k, n)
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
			continue // the importers' own dependencies only
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
