package deps

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
)

// checkLayout: from every installed package, each of its dependencies
// resolves, by node's walk up the node_modules directories from the
// package's real directory, to the version the lockfile resolved it to;
// every package's directory is below pnpm's hidden level, and the top
// holds links only: the root importer's direct dependencies, each to its
// directory at the hidden level in its version.
func checkLayout(t *testing.T, g *pnpmGraph, out map[string]lockPackage) {
	t.Helper()
	h := &hoister{out: out}
	for k, p := range out {
		if !installPath(k) {
			t.Fatalf("key %q is not a node_modules path", k)
		}
		top := lockPath(k) && !strings.Contains(strings.TrimPrefix(k, "node_modules/"), "node_modules/")
		switch {
		case p.Link:
			if !repoDir(p.Resolved) || !top {
				t.Fatalf("link %q to %q", k, p.Resolved)
			}
		case p.LinkTo != "":
			// From the top or the hidden level, to the package's real
			// directory: in the store, or at the hidden level (an alias).
			to, ok := out[p.LinkTo]
			name := strings.TrimPrefix(strings.TrimPrefix(k, pnpmHidden), "node_modules/")
			hidden := strings.HasPrefix(k, pnpmHidden) && !strings.Contains(name, "/node_modules/")
			inStore := !strings.HasPrefix(p.LinkTo, pnpmHidden) && strings.HasSuffix(p.LinkTo, "/node_modules/"+name) &&
				pnpmLevel(strings.TrimPrefix(p.LinkTo, "node_modules/")) == len(strings.TrimPrefix(p.LinkTo, "node_modules/"))-len(name)
			if !top && !hidden || !ok || to.LinkTo != "" || to.Link || !inStore && (!top || p.LinkTo != pnpmHidden+name) ||
				to.Name != p.Name || to.Version != p.Version {
				t.Fatalf("%q links to %q (%+v)", k, p.LinkTo, to)
			}
		case pnpmLevel(strings.TrimPrefix(k, "node_modules/")) == 0:
			t.Fatalf("%q: a package's directory at the top of node_modules", k)
		}
	}
	for dn, key := range g.roots {
		n := g.nodes[key]
		if n == nil || n.refused != "" {
			continue
		}
		if p, ok := out["node_modules/"+dn]; !ok || p.Version != n.version || p.Name != n.name {
			t.Errorf("direct dependency %s: %+v, want %s@%s at the top", dn, p, n.name, n.version)
		}
	}
	for k, p := range out {
		if p.Link || p.LinkTo != "" {
			continue
		}
		var n *pnpmNode
		for _, c := range g.nodes {
			if c.name == p.Name && c.version == p.Version && c.refused == "" {
				// Any node of this name@version: its peer variants have
				// the same dependencies in every lockfile we read, or the
				// layout check below reports the difference.
				n = c
				if ok := depsResolve(h, g, k, c); ok {
					break
				}
			}
		}
		if n == nil {
			t.Fatalf("%s: %s@%s is not in the graph", k, p.Name, p.Version)
		}
		if !depsResolve(h, g, k, n) {
			for dn, dk := range n.deps {
				d := g.nodes[dk]
				r, ok := h.visible(k, dn)
				t.Errorf("%s (%s@%s) needs %s@%s, resolves to %s %v (%s)", k, n.name, n.version, dn, d.version, r, ok, out[r].Version)
			}
		}
	}
}

func depsResolve(h *hoister, g *pnpmGraph, k string, n *pnpmNode) bool {
	for dn, dk := range n.deps {
		d := g.nodes[dk]
		if d == nil || d.refused != "" {
			continue
		}
		r, ok := h.visible(k, dn)
		if !ok || h.out[r].Version != d.version || h.out[r].Name != d.name {
			return false
		}
	}
	return true
}

// TestPNPMZustand: zustand's real pnpm-lock.yaml (v9) lays out whole, as
// npm would, with real entries as golden values.
func TestPNPMZustand(t *testing.T) {
	reg, _ := url.Parse("https://registry.npmjs.org")
	out, warn, g, err := parsePNPM(corpusFile(t, "pmndrs__zustand", "pnpm-lock.yaml"), reg)
	if err != nil || len(warn) != 0 {
		t.Fatalf("%v, warnings %q", err, warn)
	}
	if len(out) < 500 {
		t.Fatalf("%d packages", len(out))
	}
	for k, want := range map[string]lockPackage{
		"node_modules/@types/react": {Name: "@types/react", Version: "19.2.18",
			Resolved:  "https://registry.npmjs.org/@types/react/-/react-19.2.18.tgz",
			Integrity: "sha512-AnzbBERsrLKtk2XSfTbYRLjQPdy116Sty4q+T+Bp3IC4l6jNBvreVPAHmpq9qhXQM7CXZPjLVmGMw9sy+hxQ3w=="},
		"node_modules/@types/node": {Name: "@types/node", Version: "25.9.5",
			Resolved:  "https://registry.npmjs.org/@types/node/-/node-25.9.5.tgz",
			Integrity: "sha512-OScDchr2fwuUmWdf4kZ9h7PcJiYDVInhJizG/biAq3cAvqwYktuy/TYGGdZNMtNTFUP7rnb0NU4TUdm82kt4Rg=="},
		pnpmHidden + "csstype":                   {Name: "csstype", Version: "3.2.3"},                 // @types/react's: pnpm's top holds the importers' own
		pnpmHidden + "undici-types":              {Name: "undici-types", Version: "7.24.6"},           // @types/node's
		pnpmHidden + "punycode":                  {Name: "punycode", Version: "2.3.1"},                // tr46's and uri-js's
		"node_modules/use-sync-external-store":   {Name: "use-sync-external-store", Version: "1.6.0"}, // 1.6.0(react@19.2.8)
		"node_modules/@redux-devtools/extension": {Name: "@redux-devtools/extension", Version: "4.0.0"},
		"node_modules/immer":                     {Name: "immer", Version: "11.1.16"},
		pnpmHidden + "@esbuild/linux-x64":        {Name: "@esbuild/linux-x64", Version: "0.28.2", Optional: true},
	} {
		got, ok := out[k]
		if !ok {
			t.Errorf("%s: not laid out", k)
			continue
		}
		if got.Name != want.Name || got.Version != want.Version || got.Optional != want.Optional ||
			want.Resolved != "" && got.Resolved != want.Resolved || want.Integrity != "" && got.Integrity != want.Integrity {
			t.Errorf("%s: %+v, want %+v", k, got, want)
		}
	}
	// As pnpm 12 installs it: the top of node_modules holds the root
	// importer's own dependencies and nothing else (vitest's vite is
	// not visible from examples/, which is no workspace package, so its
	// vite/client types do not resolve there, as on a checkout).
	for k := range out {
		name, nested := strings.CutPrefix(k, "node_modules/")
		if !nested || strings.Contains(name, "/node_modules/") {
			continue
		}
		if _, ok := g.roots[name]; !ok {
			t.Errorf("%s is at the top of node_modules, but the root does not depend on it", k)
		}
	}
	if _, ok := out["node_modules/vite"]; ok {
		t.Error("vite is at the top of node_modules")
	}
	if p := out[pnpmHidden+"@esbuild/linux-x64"]; strings.Join(p.OS, ",") != "linux" || strings.Join(p.CPU, ",") != "x64" {
		t.Errorf("platform of @esbuild/linux-x64: %v %v", p.OS, p.CPU)
	}
	checkLayout(t, g, out)
}

// pnpmV9 is a v9 workspace lockfile in pnpm's own layout: a root
// importer, a workspace package linked by the root, peers in the keys,
// an alias, a package two dependents need in two versions, and the kinds
// a registry install cannot take.
const pnpmV9 = `lockfileVersion: '9.0'

settings:
  autoInstallPeers: true
  excludeLinksFromLockfile: false

importers:

  .:
    dependencies:
      a:
        specifier: ^1.0.0
        version: 1.0.0(p@2.0.0)
      p:
        specifier: ^2.0.0
        version: 2.0.0
      '@ws/lib':
        specifier: workspace:*
        version: link:packages/lib
      alias:
        specifier: npm:real@^3.0.0
        version: real@3.0.0
      gitdep:
        specifier: github:u/r
        version: https://codeload.github.com/u/r/tar.gz/abc
    devDependencies:
      far:
        specifier: ^1.0.0
        version: 1.0.0
      nosum:
        specifier: ^1.0.0
        version: 1.0.0

  packages/lib:
    dependencies:
      p:
        specifier: ^1.0.0
        version: 1.0.0
      only-lib:
        specifier: ^1.0.0
        version: 1.0.0
      escape:
        specifier: link:../../../outside
        version: link:../../../outside

packages:

  a@1.0.0:
    resolution: {integrity: @A@}
    peerDependencies:
      p: '>=1'

  b@1.0.0:
    resolution: {integrity: @B@}

  p@1.0.0:
    resolution: {integrity: @P1@}

  p@2.0.0:
    resolution: {integrity: @P2@}

  real@3.0.0:
    resolution: {integrity: @REAL@}

  far@1.0.0:
    resolution: {integrity: @FAR@, tarball: https://elsewhere.example/far-1.0.0.tgz}

  nosum@1.0.0:
    resolution: {integrity: md5-1B2M2Y8AsgTpgAmY7PhCfg==}

  only-lib@1.0.0:
    resolution: {integrity: @OL@}

  r@https://codeload.github.com/u/r/tar.gz/abc:
    resolution: {tarball: https://codeload.github.com/u/r/tar.gz/abc}
    version: 1.0.0

snapshots:

  a@1.0.0(p@2.0.0):
    dependencies:
      b: 1.0.0
      p: 2.0.0

  b@1.0.0:
    dependencies:
      p: 1.0.0

  p@1.0.0: {}

  p@2.0.0: {}

  real@3.0.0: {}

  far@1.0.0: {}

  nosum@1.0.0: {}

  only-lib@1.0.0: {}
`

func TestParsePNPMV9(t *testing.T) {
	reg, _ := url.Parse("https://npm.example/registry")
	data := strings.NewReplacer("@A@", integrity, "@B@", integrity, "@P1@", integrity, "@P2@", integrity, "@REAL@", integrity, "@FAR@", integrity, "@OL@", integrity).Replace(pnpmV9)
	out, warn, g, err := parsePNPM([]byte(data), reg)
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(warn, "\n")
	for _, w := range []string{
		`"gitdep": "https://codeload.github.com/u/r/tar.gz/abc" is not a registry version; it was not installed`,
		`far@1.0.0: it resolves outside the registry; it was not installed`,
		`nosum@1.0.0: it has no sha512 or sha1 integrity; it was not installed`,
		`"packages/lib" needs p@1.0.0, which another version holds at the top of node_modules; it was not installed`,
		`"escape": it links outside the repository; it was not linked`,
	} {
		if !strings.Contains(all, w) {
			t.Errorf("warnings %q: want %q", warn, w)
		}
	}
	if len(warn) != 5 {
		t.Errorf("%d warnings: %q", len(warn), warn)
	}
	const store = pnpmStore
	want := map[string]string{
		// The top: the importers' own dependencies, each a link to its
		// directory in pnpm's store (an alias's at the hidden level).
		"node_modules/a":                               "a@1.0.0 → " + store + "a@1.0.0_p@2.0.0/node_modules/a",
		"node_modules/p":                               "p@2.0.0 → " + store + "p@2.0.0/node_modules/p",
		"node_modules/alias":                           "real@3.0.0 → " + pnpmHidden + "alias",
		"node_modules/only-lib":                        "only-lib@1.0.0 → " + store + "only-lib@1.0.0/node_modules/only-lib", // packages/lib's, hoisted
		"node_modules/@ws/lib":                         "link:packages/lib",
		pnpmHidden + "a":                               "a@1.0.0 → " + store + "a@1.0.0_p@2.0.0/node_modules/a",
		pnpmHidden + "p":                               "p@2.0.0 → " + store + "p@2.0.0/node_modules/p",
		pnpmHidden + "alias":                           "real@3.0.0",
		pnpmHidden + "only-lib":                        "only-lib@1.0.0 → " + store + "only-lib@1.0.0/node_modules/only-lib",
		store + "a@1.0.0_p@2.0.0/node_modules/a":       "a@1.0.0",
		store + "p@2.0.0/node_modules/p":               "p@2.0.0",
		store + "only-lib@1.0.0/node_modules/only-lib": "only-lib@1.0.0",
		// a's own b, at the hidden level, which the top does not show;
		// b's p@1.0.0 below b, since the hidden level holds p@2.0.0.
		pnpmHidden + "b":                                "b@1.0.0 → " + store + "b@1.0.0/node_modules/b",
		store + "b@1.0.0/node_modules/b":                "b@1.0.0",
		store + "b@1.0.0/node_modules/b/node_modules/p": "p@1.0.0",
	}
	if len(out) != len(want) {
		t.Errorf("%d packages laid out: %v", len(out), out)
	}
	for k, w := range want {
		p, ok := out[k]
		got := p.Name + "@" + p.Version
		if p.Link {
			got = "link:" + p.Resolved
		}
		if p.LinkTo != "" {
			got += " → " + p.LinkTo
		}
		if !ok || got != w {
			t.Errorf("%s: %q, want %q", k, got, w)
		}
	}
	if r := out[store+"a@1.0.0_p@2.0.0/node_modules/a"].Resolved; r != "https://npm.example/registry/a/-/a-1.0.0.tgz" {
		t.Errorf("a resolves to %s", r)
	}
	checkLayout(t, g, out)
}

// TestParsePNPMV6: a v6 lockfile keeps the graph in packages, keys with a
// leading slash and peers in parentheses.
func TestParsePNPMV6(t *testing.T) {
	reg, _ := url.Parse("https://registry.npmjs.org")
	data := `lockfileVersion: '6.0'

settings:
  autoInstallPeers: true
  excludeLinksFromLockfile: false

dependencies:
  '@scope/a':
    specifier: ^1.0.0
    version: 1.0.0(react@18.2.0)
  react:
    specifier: ^18.2.0
    version: 18.2.0
  wrap:
    specifier: npm:wrap-ansi@^7.0.0
    version: /wrap-ansi@7.0.0

packages:

  /@scope/a@1.0.0(react@18.2.0):
    resolution: {integrity: ` + integrity + `}
    peerDependencies:
      react: '>=16'
    dependencies:
      loose-envify: 1.4.0
      react: 18.2.0
    dev: false

  /loose-envify@1.4.0:
    resolution: {integrity: ` + integrity + `}
    dev: false

  /react@18.2.0:
    resolution: {integrity: ` + integrity + `}
    dependencies:
      loose-envify: 1.4.0
    dev: false

  /wrap-ansi@7.0.0:
    resolution: {integrity: ` + integrity + `, tarball: https://registry.npmjs.org/wrap-ansi/-/wrap-ansi-7.0.0.tgz}
    dev: false

  /fsevents@2.3.3:
    resolution: {integrity: ` + integrity + `}
    os: [darwin]
    requiresBuild: true
    optional: true
`
	out, warn, g, err := parsePNPM([]byte(data), reg)
	if err != nil || len(warn) != 0 {
		t.Fatalf("%v, %q", err, warn)
	}
	for k, w := range map[string]string{
		"node_modules/@scope/a": "@scope/a@1.0.0",
		"node_modules/react":    "react@18.2.0",
		"node_modules/wrap":     "wrap-ansi@7.0.0",
		pnpmHidden + "@scope/a": "@scope/a@1.0.0",
		pnpmHidden + "react":    "react@18.2.0",
		pnpmHidden + "wrap":     "wrap-ansi@7.0.0",
		// No importer's own: at the hidden level only, which pnpm's top
		// does not show, shared by both dependents.
		pnpmHidden + "loose-envify": "loose-envify@1.4.0",
	} {
		if p := out[k]; p.Name+"@"+p.Version != w {
			t.Errorf("%s: %+v, want %s", k, p, w)
		}
	}
	// Each at the hidden level links to its directory in pnpm's store,
	// named as pnpm 6 to 12 name it (peers after "_").
	for k, w := range map[string]string{
		pnpmHidden + "@scope/a":     "@scope+a@1.0.0_react@18.2.0/node_modules/@scope/a",
		pnpmHidden + "react":        "react@18.2.0/node_modules/react",
		pnpmHidden + "loose-envify": "loose-envify@1.4.0/node_modules/loose-envify",
	} {
		if to := out[k].LinkTo; to != pnpmStore+w || out[to].Name == "" {
			t.Errorf("%s links to %q, want its store directory %s", k, to, w)
		}
	}
	if len(out) != 10 {
		t.Errorf("%d packages: %v (fsevents is no importer's)", len(out), out)
	}
	if r := out[realPackage(out, pnpmHidden+"@scope/a")].Resolved; r != "https://registry.npmjs.org/@scope/a/-/a-1.0.0.tgz" {
		t.Errorf("@scope/a resolves to %s", r)
	}
	checkLayout(t, g, out)
}

// TestParsePNPMRefused: what is refused whole.
func TestParsePNPMRefused(t *testing.T) {
	reg, _ := url.Parse("https://npm.example/registry")
	for data, want := range map[string]string{
		"lockfileVersion: 5.4\ndependencies:\n  a: 1.0.0\n": "lockfileVersion \"5.4\" is not 6 to 9",
		"lockfileVersion: 5.4\n":                            "lockfileVersion \"5.4\" is not 6 to 9",
		"lockfileVersion: '10.0'\n":                         "is not 6 to 9",
		"importers: {}\n":                                   "no lockfileVersion",
		"{":                                                 "not YAML",
		"lockfileVersion: '9.0'\n#" + strings.Repeat("x", maxPNPMLockfile): "over the size bound",
		"- a\n":                                 "not YAML",
		"":                                      "not YAML",
		"lockfileVersion: [1]\n":                "no lockfileVersion",
		"lockfileVersion: '9.0'\npackages: 3\n": "not YAML",
	} {
		if _, _, err := ParsePNPMLock([]byte(data), reg); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", data, err, want)
		}
	}
}

// TestHoistNoShadow: a dependency is not hoisted to a level where it would
// hide another version from a package already resolved through it.
func TestHoistNoShadow(t *testing.T) {
	n := func(name, version string, deps map[string]string) *pnpmNode {
		return &pnpmNode{name: name, version: version, pkg: lockPackage{Name: name, Version: version}, deps: deps}
	}
	// root → a, x@1, and y@0, c@0 (holding the top); a → c@1, y@1;
	// c → x@1; y → x@2. c, resolved first, sees x@1 at the top through
	// a's level: y's x@2 may not go there, so it nests under y.
	g := &pnpmGraph{nodes: map[string]*pnpmNode{
		"a@1": n("a", "1", map[string]string{"c": "c@1", "y": "y@1"}),
		"y@1": n("y", "1", map[string]string{"x": "x@2"}),
		"c@1": n("c", "1", map[string]string{"x": "x@1"}),
		"x@1": n("x", "1", nil),
		"x@2": n("x", "2", nil),
		"y@0": n("y", "0", nil),
		"c@0": n("c", "0", nil),
	}, roots: map[string]string{"a": "a@1", "x": "x@1", "y": "y@0", "c": "c@0"}}
	out, warn := hoistPNPM(g)
	if len(warn) != 0 {
		t.Fatalf("warnings %q", warn)
	}
	for k, v := range map[string]string{
		pnpmHidden + "a/node_modules/y":                "1",
		pnpmHidden + "a/node_modules/c":                "1",
		pnpmHidden + "a/node_modules/y/node_modules/x": "2",
	} {
		if out[k].Version != v {
			t.Errorf("%s: %q, want %s (layout %v)", k, out[k].Version, v, out)
		}
	}
	if _, ok := out[pnpmHidden+"a/node_modules/x"]; ok {
		t.Error("x@2 hides x@1 from c")
	}
	checkLayout(t, g, out)
}

// TestInstallPNPM: a pnpm repository's packages are installed from the
// registry, checked against their integrity, in pnpm's visible layout, with
// its workspace package linked into the tree.
func TestInstallPNPM(t *testing.T) {
	r := newRegistry(t)
	ints := map[string]string{}
	for _, p := range []struct{ name, version string }{{"a", "1.0.0"}, {"b", "1.0.0"}, {"p", "1.0.0"}, {"p", "2.0.0"}, {"real", "3.0.0"}, {"only-lib", "1.0.0"}} {
		e := r.add(p.name, p.version, tgz(t, tarEntry{name: "package/package.json", body: `{"name":"` + p.name + `","version":"` + p.version + `"}`}))
		ints[p.name+"@"+p.version] = e["integrity"].(string)
	}
	data := strings.NewReplacer("@A@", ints["a@1.0.0"], "@B@", ints["b@1.0.0"], "@P1@", ints["p@1.0.0"], "@P2@", ints["p@2.0.0"], "@REAL@", ints["real@3.0.0"], "@FAR@", integrity, "@OL@", ints["only-lib@1.0.0"]).Replace(pnpmV9)
	ws := repo(t, map[string]string{
		"pnpm-lock.yaml":            data,
		"pnpm-workspace.yaml":       "packages:\n  - packages/*\n",
		"package.json":              `{"name":"root","packageManager":"pnpm@9.0.0"}`,
		"package-lock.json":         `{"lockfileVersion":3,"packages":{"node_modules/x":{"resolved":"https://evil.example/x.tgz"}}}`,
		"packages/lib/package.json": `{"name":"@ws/lib"}`,
	})
	w := fetcher(Config{NPMRegistry: r.url}).Fetch(context.Background(), ws)
	if len(w) != 5 {
		t.Errorf("warnings %q, want the parser's five", w)
	}
	nm := runtime.NodeModules(ws)
	for p, want := range map[string]string{
		"a/package.json": "1.0.0",
		".pnpm/node_modules/b/node_modules/p/package.json": "1.0.0", // through b's link into the store
		"p/package.json":        "2.0.0",
		"alias/package.json":    `"real"`,
		"only-lib/package.json": "only-lib",
		"@ws/lib/package.json":  "@ws/lib", // through the link into the tree
	} {
		if b, err := os.ReadFile(filepath.Join(nm, p)); err != nil || !strings.Contains(string(b), want) {
			t.Errorf("%s: %q, %v", p, b, err)
		}
	}
	if got, _ := os.Readlink(filepath.Join(nm, "@ws/lib")); got != "../../packages/lib" {
		t.Errorf("@ws/lib links to %q", got)
	}
	// The top's packages link to their directories in pnpm's store (an
	// alias to its own at the hidden level), as do those at the hidden
	// level; b, a's own, is there alone.
	for l, want := range map[string]string{
		"a": ".pnpm/a@1.0.0_p@2.0.0/node_modules/a", "p": ".pnpm/p@2.0.0/node_modules/p", "alias": ".pnpm/node_modules/alias",
		".pnpm/node_modules/b": "../b@1.0.0/node_modules/b",
	} {
		if got, err := os.Readlink(filepath.Join(nm, l)); got != want {
			t.Errorf("%s links to %q (%v), want %q", l, got, err, want)
		}
	}
	if _, err := os.Lstat(filepath.Join(nm, "b")); err == nil {
		t.Error("b is at the top of node_modules")
	}
	if b, err := os.ReadFile(filepath.Join(nm, ".pnpm/node_modules/b/package.json")); err != nil || !strings.Contains(string(b), `"b"`) {
		t.Errorf("b: %q, %v", b, err)
	}
	for _, e := range NPMExternals(ws) {
		if fi, err := os.Lstat(e.Dir); err != nil || !fi.IsDir() || !strings.HasPrefix(e.Dir, filepath.Join(nm, ".pnpm")+"/") {
			t.Errorf("external root %s (%s) is not a real directory in pnpm's store or at its hidden level", e.Dir, e.Module)
		}
	}
	mods := map[string]bool{}
	for _, e := range NPMExternals(ws) {
		mods[e.Module] = true
	}
	if !mods["real@3.0.0"] || !mods["p@1.0.0"] || len(mods) != 6 {
		t.Errorf("externals %v", mods)
	}
}

// TestChooseLockfile: which lockfile the phase reads when several are
// there, and the warning for a package.json with none.
func TestChooseLockfile(t *testing.T) {
	for _, c := range []struct {
		name  string
		files []string
		pm    string
		want  string
	}{
		{"pnpm workspace", []string{"pnpm-lock.yaml", "pnpm-workspace.yaml", "package-lock.json"}, "", "pnpm-lock.yaml"},
		{"packageManager pnpm", []string{"pnpm-lock.yaml", "package-lock.json"}, "pnpm@11.3.0+sha512.2c40", "pnpm-lock.yaml"},
		{"packageManager npm", []string{"pnpm-lock.yaml", "package-lock.json"}, "npm@10.0.0", "package-lock.json"},
		{"packageManager yarn", []string{"yarn.lock", "package-lock.json"}, "yarn@4.1.0", "yarn.lock"},
		{"packageManager names a missing lockfile", []string{"package-lock.json"}, "pnpm@9.0.0", "package-lock.json"},
		{"no word: package-lock.json", []string{"pnpm-lock.yaml", "package-lock.json", "yarn.lock"}, "", "package-lock.json"},
		{"pnpm alone", []string{"pnpm-lock.yaml"}, "", "pnpm-lock.yaml"},
		{"none", nil, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			files := map[string]string{"package.json": `{"packageManager":"` + c.pm + `"}`}
			for _, f := range c.files {
				files[f] = "x"
			}
			ws := repo(t, files)
			if got, _ := chooseLockfile(ws.Root); got != c.want {
				t.Fatalf("%s, want %s", got, c.want)
			}
		})
	}
	// zustand's own files: pnpm-lock.yaml wins over its package-lock.json.
	if b := corpusFiles(t, "pmndrs__zustand", func(n string) bool {
		return n == "package.json" || n == "pnpm-workspace.yaml" || n == "pnpm-lock.yaml" || n == "package-lock.json"
	}); len(b) == 4 {
		if got, _ := chooseLockfile(repo(t, b).Root); got != "pnpm-lock.yaml" {
			t.Fatalf("zustand: %s", got)
		}
	}
}

func TestNoLockfileWarning(t *testing.T) {
	reg, _ := url.Parse("https://npm.example/registry")
	ws := repo(t, map[string]string{"package.json": `{"name":"x","dependencies":{"react":"^19.0.0"}}`})
	w := fetcher(Config{NPMRegistry: reg}).Fetch(context.Background(), ws)
	if len(w) != 1 || !strings.Contains(w[0], "package.json has no lockfile") || !strings.Contains(w[0], "were not installed") {
		t.Fatalf("warnings %q", w)
	}
	// A package.json that depends on nothing needs no lockfile.
	ws = repo(t, map[string]string{"package.json": `{"name":"x","scripts":{"t":"x"}}`})
	if w := fetcher(Config{NPMRegistry: reg}).Fetch(context.Background(), ws); len(w) != 0 {
		t.Fatalf("warnings %q", w)
	}
}

// TestHoistBudgetSpent: once hoisting's budget is spent, packages nest
// below their dependents, and every dependency still resolves.
func TestHoistBudgetSpent(t *testing.T) {
	reg, _ := url.Parse("https://registry.npmjs.org")
	_, _, g, err := parsePNPM(corpusFile(t, "pmndrs__zustand", "pnpm-lock.yaml"), reg)
	if err != nil {
		t.Fatal(err)
	}
	out, warn := hoistWithin(g, 0)
	for _, w := range warn {
		if !strings.Contains(w, "would nest too deep") {
			t.Fatalf("warning %q", w)
		}
	}
	t.Logf("%d packages nested, %d warnings", len(out), len(warn))
	if len(warn) == 0 {
		checkLayout(t, g, out)
	}
}

// TestPNPMZustandGolden: the whole layout of zustand's pnpm-lock.yaml,
// one "path name@version" line per package, against
// testdata/zustand-pnpm-layout.golden (go test -run Golden -update
// rewrites it).
func TestPNPMZustandGolden(t *testing.T) {
	reg, _ := url.Parse("https://registry.npmjs.org")
	out, _, err := ParsePNPMLock(corpusFile(t, "pmndrs__zustand", "pnpm-lock.yaml"), reg)
	if err != nil {
		t.Fatal(err)
	}
	lines := make([]string, 0, len(out))
	for k, p := range out {
		l := k + " " + p.Name + "@" + p.Version
		if p.Optional {
			l += " optional"
		}
		if p.LinkTo != "" {
			l += " -> " + p.LinkTo
		}
		lines = append(lines, l)
	}
	sort.Strings(lines)
	checkGolden(t, "zustand-pnpm-layout.golden", strings.Join(lines, "\n")+"\n")
}

// realPackage is the directory a package path names once links are
// followed, as TypeScript and node resolve it (realpath).
func realPackage(out map[string]lockPackage, k string) string {
	if p, ok := out[k]; ok && p.LinkTo != "" {
		return p.LinkTo
	}
	return k
}

// TestPNPMHiddenHoist: as through pnpm's node_modules/.pnpm/node_modules,
// a package resolves a package it does not declare when another package
// of the graph brings it in, while the repository's own files (which see
// only the top of node_modules) still do not. On zustand's lockfile,
// @types/node's process.d.ts imports "punycode", which @types/node does
// not declare (tr46 and uri-js do): on a pnpm checkout it resolves to
// punycode@2.3.1's punycode.js, which the inferred project of the open
// loose files then holds (references of Math list it).
func TestPNPMHiddenHoist(t *testing.T) {
	reg, _ := url.Parse("https://registry.npmjs.org")
	out, _, g, err := parsePNPM(corpusFile(t, "pmndrs__zustand", "pnpm-lock.yaml"), reg)
	if err != nil {
		t.Fatal(err)
	}
	h := &hoister{out: out}
	types := realPackage(out, "node_modules/@types/node")
	if n := g.nodes[g.roots["@types/node"]]; n == nil || n.deps["punycode"] != "" {
		t.Fatalf("@types/node declares punycode: %+v", n)
	}
	r, ok := h.visible(types, "punycode")
	if !ok || out[r].Name != "punycode" || out[r].Version != "2.3.1" {
		t.Errorf("punycode from %s: %q %v (%+v), want punycode@2.3.1", types, r, ok, out[r])
	}
	if _, ok := out["node_modules/punycode"]; ok {
		t.Error("punycode is visible to the repository's files")
	}
	if _, ok := out["node_modules/vite"]; ok {
		t.Error("vite is visible to the repository's files")
	}

	// The same on a small graph: root → a, b; b → u. a imports u,
	// undeclared; u nests nowhere below b, so a's real directory sees it.
	n := func(name string, deps map[string]string) *pnpmNode {
		return &pnpmNode{name: name, version: "1.0.0", pkg: lockPackage{Name: name, Version: "1.0.0"}, deps: deps}
	}
	g = &pnpmGraph{nodes: map[string]*pnpmNode{
		"a@1": n("a", nil), "b@1": n("b", map[string]string{"u": "u@1"}), "u@1": n("u", nil),
	}, roots: map[string]string{"a": "a@1", "b": "b@1"}}
	out, warn := hoistPNPM(g)
	if len(warn) != 0 {
		t.Fatalf("warnings %q", warn)
	}
	h = &hoister{out: out}
	if r, ok := h.visible(realPackage(out, "node_modules/a"), "u"); !ok || out[r].Name != "u" {
		t.Errorf("u from a: %q %v; layout %v", r, ok, out)
	}
	if _, ok := out["node_modules/u"]; ok {
		t.Error("u is visible to the repository's files")
	}
	checkLayout(t, g, out)
}

// TestPNPMStoreDir: snapshot keys name the directories pnpm 12 made for
// them in the ground truth's checkout of zustand (node_modules/.pnpm/),
// a long one cut and hashed as pnpm cuts it; a name that is no safe
// directory is refused.
func TestPNPMStoreDir(t *testing.T) {
	for key, want := range map[string]string{
		"@testing-library/dom@10.4.0":                                    "@testing-library+dom@10.4.0",
		"@babel/helper-module-transforms@7.29.7(@babel/core@7.29.7)":     "@babel+helper-module-transforms@7.29.7_@babel+core@7.29.7",
		"@csstools/css-syntax-patches-for-csstree@1.1.7(css-tree@3.2.1)": "@csstools+css-syntax-patches-for-csstree@1.1.7_css-tree@3.2.1",
		"@csstools/css-calc@3.3.0(@csstools/css-parser-algorithms@4.0.0(@csstools/css-tokenizer@4.0.0))(@csstools/css-tokenizer@4.0.0)": "@csstools+css-calc@3.3.0_@csstools+css-parser-algorithms@4.0.0_@csstools+css-tokenizer@_4dbc5b05e8dbfe1f32044d24572a798f",
		"/@scope/a@1.0.0(react@18.2.0)": "@scope+a@1.0.0_react@18.2.0", // v6
	} {
		if got, ok := pnpmStoreDir(key); !ok || got != want {
			t.Errorf("%s: %q %v, want %q", key, got, ok, want)
		}
	}
	if got, ok := pnpmStoreDir("a@1.0.0-Beta"); !ok || !strings.HasPrefix(got, "a@1.0.0-Beta_") || len(got) != len("a@1.0.0-Beta_")+32 {
		t.Errorf("a capital letter: %q %v, want the name and a hash", got, ok)
	}
	for _, key := range []string{"..", ".hidden@1.0.0", "node_modules", "a@1.0.0 x", ""} {
		if got, ok := pnpmStoreDir(key); ok {
			t.Errorf("%q: %q accepted", key, got)
		}
	}
}
