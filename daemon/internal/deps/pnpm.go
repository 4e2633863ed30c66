package deps

import (
	"errors"
	"fmt"
	"net/url"
	"path"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// pnpm-lock.yaml, versions 6 to 9, parsed by a YAML decoder
// (go.yaml.in/yaml/v3, which bounds alias expansion; never by pattern)
// into the npm-shaped packages install takes.
//
// The lockfile names each importer (the root ".", and each workspace
// package by its directory) with its direct dependencies, each a
// specifier and a resolved version: "1.2.3", "1.2.3(peer@2.0.0)" (the
// peers it was resolved with), "other@1.2.3" (an npm: alias), or
// "link:../dir" (another workspace package). Packages are keyed
// name@version (v6: /name@version, peers in the key) and carry their
// resolution (integrity, and a tarball URL when it is not the registry's
// usual one); v9 moves each package's dependency graph into snapshots,
// keyed with the peers, while v6 keeps it in packages.
//
// pnpm installs into a content-addressed store with symbolic links; the
// phase instead lays out, inside the tree's read-only node_modules, real
// package directories below pnpm's hidden level
// (node_modules/.pnpm/node_modules) and links to them from the top for the
// importers' own dependencies, so that every package and the repository's
// own files see what they see in pnpm's layout (hoistPNPM).

// errPNPMLock is a pnpm-lock.yaml the phase refuses whole.
var errPNPMLock = errors.New("pnpm-lock.yaml refused")

// Bounds on a pnpm-lock.yaml beyond its size (maxLockfile) and package
// count (maxLockPackages).
const (
	// maxPNPMLockfile is below maxLockfile: a YAML decoder holds the
	// whole document as nodes, several times its size. Large real
	// monorepos' pnpm-lock.yaml files are a few MiB.
	maxPNPMLockfile  = 16 << 20
	maxPNPMImporters = 1000
	// maxPNPMDepth bounds how deep the hoisted layout may nest.
	maxPNPMDepth = 32
)

type pnpmLock struct {
	Importers map[string]pnpmImporter `yaml:"importers"`
	Packages  map[string]pnpmPackage  `yaml:"packages"`
	Snapshots map[string]pnpmSnapshot `yaml:"snapshots"`
	// A lockfile without importers (a single project, before v9 made
	// importers universal) has the root's dependencies at the top.
	pnpmImporter `yaml:",inline"`
}

type pnpmImporter struct {
	Dependencies         map[string]pnpmDep `yaml:"dependencies"`
	DevDependencies      map[string]pnpmDep `yaml:"devDependencies"`
	OptionalDependencies map[string]pnpmDep `yaml:"optionalDependencies"`
}

// pnpmDep is an importer's dependency: {specifier, version} since v6.
type pnpmDep struct {
	Specifier string `yaml:"specifier"`
	Version   string `yaml:"version"`
}

type pnpmPackage struct {
	Resolution struct {
		Integrity string `yaml:"integrity"`
		Tarball   string `yaml:"tarball"`
		Type      string `yaml:"type"`
		Directory string `yaml:"directory"`
		Repo      string `yaml:"repo"`
	} `yaml:"resolution"`
	Name    string   `yaml:"name"`
	Version string   `yaml:"version"`
	OS      []string `yaml:"os"`
	CPU     []string `yaml:"cpu"`
	Libc    []string `yaml:"libc"`
	// v6 keeps the graph here; v9 in snapshots.
	pnpmSnapshot `yaml:",inline"`
}

type pnpmSnapshot struct {
	Dependencies         map[string]string `yaml:"dependencies"`
	OptionalDependencies map[string]string `yaml:"optionalDependencies"`
	Optional             bool              `yaml:"optional"`
}

// pnpmNode is one package of the graph, by its snapshot key.
type pnpmNode struct {
	key           string // its snapshot key: name@version(peers…), "/"-prefixed before v7
	name, version string
	pkg           lockPackage
	// deps: dependency name (as its dependent imports it) → node key.
	deps map[string]string
	// refused, when set, says why the package is not installed.
	refused string
}

// pnpmGraph is a parsed lockfile.
type pnpmGraph struct {
	nodes map[string]*pnpmNode
	// roots are the root importer's direct dependencies, name → node key.
	roots map[string]string
	// links are workspace packages the importers depend on by link:,
	// name → repository directory, with the importer that asked.
	links []pnpmLinkDep
	// importers are the other workspace packages' direct dependencies.
	importers map[string]map[string]string
}

type pnpmLinkDep struct{ importer, name, dir string }

// ParsePNPMLock reads a pnpm-lock.yaml (lockfile version 6 to 9) and lays
// its packages out as hoistPNPM does, in package-lock.json's shape:
// node_modules/… keys (packages in pnpm's virtual store,
// node_modules/.pnpm/<dir>/node_modules/…, linked from the hidden level and
// the top by LinkTo entries) with registry tarball URLs (the resolution's
// tarball, or <registry>/<name>/-/<unscoped name>-<version>.tgz) and
// sha512 integrities, and workspace packages depended on by link: as
// link entries to their directory in the repository. Packages that do not
// come from the registry (git, a directory, a tarball elsewhere) or have
// no sha512 or sha1 integrity are left out, each with a warning, as are packages
// a workspace needs in a version the top level already holds. A lockfile
// that is not YAML, of another version or over the bounds is refused
// whole. It makes no request.
func ParsePNPMLock(data []byte, registry *url.URL) (map[string]lockPackage, []string, error) {
	out, warn, _, err := parsePNPM(data, registry)
	return out, warn, err
}

// parsePNPM is ParsePNPMLock, with the graph the layout was made from.
func parsePNPM(data []byte, registry *url.URL) (map[string]lockPackage, []string, *pnpmGraph, error) {
	if len(data) > maxPNPMLockfile {
		return nil, nil, nil, fmt.Errorf("%w: over the size bound", errPNPMLock)
	}
	// The version first, so that another version's layout is named as
	// such rather than failing to decode.
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, nil, nil, fmt.Errorf("%w: it is not YAML of a pnpm lockfile", errPNPMLock)
	}
	var head struct {
		LockfileVersion yaml.Node `yaml:"lockfileVersion"`
	}
	_ = doc.Decode(&head)
	major, err := pnpmVersion(head.LockfileVersion)
	if err != nil {
		return nil, nil, nil, err
	}
	var lf pnpmLock
	if err := doc.Decode(&lf); err != nil {
		return nil, nil, nil, fmt.Errorf("%w: it is not YAML of a pnpm lockfile", errPNPMLock)
	}
	if len(lf.Packages) > maxLockPackages || len(lf.Snapshots) > maxLockPackages {
		return nil, nil, nil, fmt.Errorf("%w: over the bound of %d packages", errPNPMLock, maxLockPackages)
	}
	if len(lf.Importers) > maxPNPMImporters {
		return nil, nil, nil, fmt.Errorf("%w: over the bound of %d importers", errPNPMLock, maxPNPMImporters)
	}
	if lf.Importers == nil {
		lf.Importers = map[string]pnpmImporter{".": lf.pnpmImporter}
	}
	g, warn := buildPNPM(&lf, major, registry)
	out, more := hoistPNPM(g)
	return out, append(warn, more...), g, nil
}

// pnpmVersion accepts lockfileVersion '6.0' … '9.0' (quoted or not).
func pnpmVersion(n yaml.Node) (int, error) {
	v := n.Value
	major, _, _ := strings.Cut(v, ".")
	m, err := strconv.Atoi(major)
	if n.Kind != yaml.ScalarNode || err != nil {
		return 0, fmt.Errorf("%w: it has no lockfileVersion", errPNPMLock)
	}
	if m < 6 || m > 9 {
		return 0, fmt.Errorf("%w: lockfileVersion %s is not 6 to 9", errPNPMLock, quote(v))
	}
	return m, nil
}

// buildPNPM resolves the importers' dependencies and every package's into
// graph nodes; what it cannot resolve is a warning.
func buildPNPM(lf *pnpmLock, major int, registry *url.URL) (*pnpmGraph, []string) {
	g := &pnpmGraph{nodes: map[string]*pnpmNode{}, roots: map[string]string{}, importers: map[string]map[string]string{}}
	var warn []string
	warnf := func(format string, args ...any) { warn = append(warn, fmt.Sprintf(format, args...)) }

	// node returns the node for a snapshot key, making it on first use.
	node := func(key string) *pnpmNode {
		if n, ok := g.nodes[key]; ok {
			return n
		}
		n := &pnpmNode{key: key, deps: map[string]string{}}
		g.nodes[key] = n
		base, _, _ := strings.Cut(key, "(") // the peers do not change the tarball
		name, version, ok := splitNameVersion(strings.TrimPrefix(base, "/"))
		var pkg pnpmPackage
		var snap pnpmSnapshot
		if lf.Snapshots != nil {
			pkg = lf.Packages[base]
			snap = lf.Snapshots[key]
		} else {
			pkg = lf.Packages[key]
			snap = pkg.pnpmSnapshot
		}
		if pkg.Name != "" {
			name = pkg.Name
		}
		if pkg.Version != "" {
			version = pkg.Version
		}
		n.name, n.version = name, version
		switch {
		case !ok || !lockPath("node_modules/"+name):
			n.refused = "its lockfile key is not a package name and version"
		case pkg.Resolution.Type != "" || pkg.Resolution.Directory != "" || pkg.Resolution.Repo != "":
			n.refused = "it does not come from the registry (git or a directory)"
		case specKind(version) != "":
			n.refused = fmt.Sprintf("it is a %s dependency", specKind(version))
		case !npmVersion(version):
			n.refused = "its version is not a registry version"
		}
		resolved := pkg.Resolution.Tarball
		if resolved == "" && n.refused == "" {
			resolved = registryTarball(registry, name, version)
		}
		switch {
		case n.refused != "":
		case !underRegistry(resolved, registry):
			n.refused = "it resolves outside the registry"
		case !pinnedIntegrity(pkg.Resolution.Integrity):
			n.refused = "it has no sha512 or sha1 integrity"
		}
		n.pkg = lockPackage{
			Name: name, Version: version, Resolved: resolved, Integrity: pkg.Resolution.Integrity,
			Optional: snap.Optional, OS: pkg.OS, CPU: pkg.CPU, Libc: pkg.Libc,
		}
		for _, deps := range []map[string]string{snap.Dependencies, snap.OptionalDependencies} {
			for _, dn := range sortedKeys(deps) {
				if k, ok := pnpmDepKey(dn, deps[dn], major); ok {
					n.deps[dn] = k
				}
			}
		}
		return n
	}

	for _, imp := range sortedImporters(lf.Importers) {
		dir := imp
		if imp != "." && !repoDir(imp) {
			warnf("importer %s is not a directory in the repository; its dependencies were not installed", quote(imp))
			continue
		}
		direct := map[string]string{}
		im := lf.Importers[imp]
		for _, deps := range []map[string]pnpmDep{im.Dependencies, im.DevDependencies, im.OptionalDependencies} {
			for _, dn := range sortedDepKeys(deps) {
				d := deps[dn]
				if !lockPath("node_modules/" + dn) {
					warnf("importer %s: dependency %s is not a package name; it was not installed", quote(imp), quote(dn))
					continue
				}
				if target, ok := strings.CutPrefix(d.Version, "link:"); ok {
					p := path.Join(dir, target)
					if dir == "." {
						p = path.Clean(target)
					}
					if !repoDir(p) {
						warnf("%s: it links outside the repository; it was not linked", quote(dn))
						continue
					}
					g.links = append(g.links, pnpmLinkDep{importer: imp, name: dn, dir: p})
					continue
				}
				k, ok := pnpmDepKey(dn, d.Version, major)
				if !ok {
					warnf("%s: %s is not a registry version; it was not installed", quote(dn), quote(d.Version))
					continue
				}
				direct[dn] = k
			}
		}
		if imp == "." {
			g.roots = direct
		} else {
			g.importers[imp] = direct
		}
	}
	// Every node reachable from the importers, so that refusals are
	// reported once, whatever the layout does.
	seen := map[string]bool{}
	var queue []string
	push := func(m map[string]string) {
		for _, dn := range sortedKeys(m) {
			if k := m[dn]; !seen[k] && len(seen) < maxLockPackages {
				seen[k] = true
				queue = append(queue, k)
			}
		}
	}
	push(g.roots)
	for _, imp := range sortedKeys2(g.importers) {
		push(g.importers[imp])
	}
	for len(queue) > 0 {
		n := node(queue[0])
		queue = queue[1:]
		if n.refused != "" {
			warnf("%s: %s; it was not installed", pnpmModule(n), n.refused)
			continue
		}
		push(n.deps)
	}
	return g, warn
}

// pnpmDepKey is the snapshot key a dependency's version names: "1.2.3" and
// "1.2.3(peer@1.0.0)" are name's own, "other@1.2.3" (v6: "/other@1.2.3";
// keys lost their leading slash in v7) an alias. Anything else (link:, file:, a URL, git) is not the registry's.
func pnpmDepKey(name, v string, major int) (string, bool) {
	if v == "" || len(v) > 1024 {
		return "", false
	}
	if v[0] >= '0' && v[0] <= '9' {
		if major >= 7 {
			return name + "@" + v, true
		}
		return "/" + name + "@" + v, true
	}
	alias := v
	if major < 7 {
		var ok bool
		if alias, ok = strings.CutPrefix(v, "/"); !ok {
			return "", false
		}
	}
	base, _, _ := strings.Cut(alias, "(")
	an, av, ok := splitNameVersion(base)
	if !ok || !lockPath("node_modules/"+an) || av == "" || av[0] < '0' || av[0] > '9' {
		return "", false
	}
	return v, true
}

// splitNameVersion splits name@version at the @ that is not a scope's.
func splitNameVersion(s string) (string, string, bool) {
	i := strings.LastIndex(s, "@")
	if i <= 0 {
		return "", "", false
	}
	return s[:i], s[i+1:], true
}

// registryTarball is npm's tarball URL for name@version on registry:
// <registry>/<name>/-/<unscoped name>-<version>.tgz.
func registryTarball(registry *url.URL, name, version string) string {
	if registry == nil {
		return ""
	}
	_, unscoped := splitLast(name)
	return strings.TrimSuffix(registry.String(), "/") + "/" + name + "/-/" + unscoped + "-" + version + ".tgz"
}

func pnpmModule(n *pnpmNode) string {
	name := n.name
	if !lockPath("node_modules/" + name) {
		return quote(name)
	}
	if npmVersion(n.version) {
		return name + "@" + n.version
	}
	return name
}

func sortedImporters(m map[string]pnpmImporter) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func sortedDepKeys(m map[string]pnpmDep) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func sortedKeys2(m map[string]map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
