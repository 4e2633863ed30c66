package deps

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
)

// maxManifest bounds one version manifest read from the registry.
const maxManifest = 4 << 20

// symlNode is one value of Berry's lockfile: a scalar or a map.
type symlNode struct {
	value string
	keys  []string // in file order
	kids  map[string]*symlNode
}

func (n *symlNode) get(k string) *symlNode {
	if n == nil {
		return nil
	}
	return n.kids[k]
}

func (n *symlNode) str(k string) string {
	if c := n.get(k); c != nil {
		return c.value
	}
	return ""
}

// parseSyml parses the YAML subset Berry writes its lockfile in (its
// "syml"): two-space indented "key: value" lines, where a key with no
// value opens a map one level deeper, keys and values either bare or
// JSON-quoted, "#" lines comments. Lists, anchors, flow collections and
// multi-line scalars are not part of it and are refused.
func parseSyml(data []byte) (*symlNode, error) {
	if len(data) > maxLockfile {
		return nil, fmt.Errorf("%w: over the size bound", errYarnLock)
	}
	root := &symlNode{kids: map[string]*symlNode{}}
	stack := []*symlNode{root} // stack[d] is the open map at depth d
	count := 0
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
		indent := len(line) - len(body)
		if indent%2 != 0 || strings.HasPrefix(body, "\t") {
			return nil, fail("bad indentation")
		}
		d := indent / 2
		if d >= len(stack) {
			return nil, fail("indented under a value")
		}
		if d > 4 {
			return nil, fail("nested too deep")
		}
		stack = stack[:d+1]
		key, rest, err := symlKey(body)
		if err != nil {
			return nil, fail(err.Error())
		}
		parent := stack[d]
		if _, dup := parent.kids[key]; dup {
			return nil, fail("key " + quote(key) + " appears twice")
		}
		if count++; count > 40*maxLockPackages {
			return nil, fmt.Errorf("%w: over the bound on lines", errYarnLock)
		}
		node := &symlNode{}
		parent.keys = append(parent.keys, key)
		parent.kids[key] = node
		if rest == "" {
			node.kids = map[string]*symlNode{}
			stack = append(stack, node)
			continue
		}
		v, err := symlScalar(rest)
		if err != nil {
			return nil, fail(err.Error())
		}
		node.value = v
	}
	return root, nil
}

// symlKey splits "key: rest" or "key:"; a quoted key is a JSON string.
func symlKey(s string) (string, string, error) {
	var key string
	if strings.HasPrefix(s, "\"") {
		j := 1
		for ; j < len(s) && s[j] != '"'; j++ {
			if s[j] == '\\' {
				j++
			}
		}
		if j >= len(s) {
			return "", "", errors.New("an unterminated key")
		}
		if err := json.Unmarshal([]byte(s[:j+1]), &key); err != nil {
			return "", "", errors.New("a malformed key")
		}
		s = s[j+1:]
		if !strings.HasPrefix(s, ":") {
			return "", "", errors.New("a key without a colon")
		}
		s = s[1:]
	} else {
		i := strings.Index(s, ": ")
		if i < 0 {
			if !strings.HasSuffix(s, ":") {
				return "", "", errors.New("a line that is not a key")
			}
			i = len(s) - 1
		}
		key, s = s[:i], s[i+1:]
		if key == "" || strings.ContainsAny(key[:1], "-?[{&*!|>'%@`") {
			return "", "", errors.New("a YAML construct the lockfile does not use")
		}
	}
	if s != "" && s[0] != ' ' {
		return "", "", errors.New("no space after the colon")
	}
	return key, strings.TrimSpace(s), nil
}

func symlScalar(s string) (string, error) {
	if strings.HasPrefix(s, "\"") {
		var v string
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			return "", errors.New("a malformed string")
		}
		return v, nil
	}
	if strings.ContainsAny(s[:1], "[{&*!|>'%@`") {
		return "", errors.New("a YAML construct the lockfile does not use")
	}
	if strings.ContainsAny(s, "\x00\t") {
		return "", errors.New("a control character")
	}
	return s, nil
}

// berryInfo is what a Berry lockfile says beyond its packages.
type berryInfo struct {
	// patched names packages whose own (not Yarn's builtin) patch is
	// not applied.
	patched []string
}

// parseBerry reads a Berry lockfile (__metadata, entries keyed by
// comma-joined "name@protocol:range" descriptors) into a graph whose
// roots are the root workspace's dependencies, then every other
// workspace's, and whose links are the other workspaces. Packages keep
// an empty integrity: Berry's checksum hashes Yarn's zip of the package,
// not the registry's tarball, so resolveBerry asks the registry.
//
// Resolutions: "npm:" is the registry package; "workspace:" an
// in-repository package, linked; "patch:" is installed as the package it
// patches — Yarn's builtin compat patches (optional!builtin<compat/…>)
// only make typescript, resolve and fsevents work under Plug'n'Play and
// change no declaration, and a repository's own patch is named in a
// warning; any other protocol (git, file, link, portal, exec, a URL) is
// left out.
func parseBerry(data []byte, m manifest) (*yarnGraph, berryInfo, error) {
	var info berryInfo
	doc, err := parseSyml(data)
	if err != nil {
		return nil, info, err
	}
	meta := doc.get("__metadata")
	if meta == nil || meta.str("version") == "" {
		return nil, info, fmt.Errorf("%w: it has no __metadata version", errYarnLock)
	}
	if len(doc.keys) > maxLockPackages {
		return nil, info, fmt.Errorf("%w: over %d entries", errYarnLock, maxLockPackages)
	}
	g := &yarnGraph{bySpec: map[string]*yarnPkg{}, links: map[string]*yarnPkg{}, berry: true}
	g.resolve = func(e yarnEdge) *yarnPkg {
		specs := append([]string{e.spec}, m.resolutionFor(e.name)...)
		for _, s := range specs {
			if p := g.bySpec[e.name+"@"+s]; p != nil {
				return p
			}
			if p := g.bySpec[e.name+"@npm:"+s]; p != nil {
				return p // lockfiles before v6 leave npm: out
			}
		}
		return nil
	}
	var rootWS *yarnPkg
	var others []*yarnPkg
	for _, key := range doc.keys {
		if key == "__metadata" {
			continue
		}
		e := doc.kids[key]
		if e.kids == nil {
			return nil, info, fmt.Errorf("%w: entry %s is not a map", errYarnLock, quote(key))
		}
		descs := strings.Split(key, ", ")
		name, _, ok := specName(descs[0])
		if !ok || name == "" {
			return nil, info, fmt.Errorf("%w: entry %s names no package", errYarnLock, quote(key))
		}
		for _, d := range descs {
			// An alias's descriptor may share the entry of its target
			// ("string-width-cjs@npm:string-width@^4.2.0, string-width@npm:^4.1.0").
			if n, _, ok := specName(d); !ok || n == "" {
				return nil, info, fmt.Errorf("%w: descriptor %s names no package", errYarnLock, quote(d))
			}
			if g.bySpec[d] != nil {
				return nil, info, fmt.Errorf("%w: descriptor %s appears twice", errYarnLock, quote(d))
			}
		}
		p, err := berryPackage(name, e, &info)
		if err != nil {
			return nil, info, err
		}
		for _, d := range descs {
			g.bySpec[d] = p
			// A patch from a file keys its entry with the workspace that
			// holds it ("…#./x.patch::locator=app%40workspace%3A."); the
			// dependency spec leaves that out.
			if i := strings.Index(d, "::"); i > 0 && strings.Contains(d, "@patch:") && g.bySpec[d[:i]] == nil {
				g.bySpec[d[:i]] = p
			}
		}
		if p.link != "" {
			if p.link == "." {
				rootWS = p
			} else {
				others = append(others, p)
			}
		}
	}
	if rootWS != nil {
		g.roots = append(g.roots, rootWS.deps...)
	} else {
		g.roots = m.edges() // a lockfile without its root workspace's entry
	}
	sort.Slice(others, func(i, j int) bool { return others[i].link < others[j].link })
	for _, o := range others {
		if g.links[o.name] == nil && lockPath("node_modules/"+o.name) {
			g.links[o.name] = o
		}
		g.roots = append(g.roots, o.deps...)
	}
	return g, info, nil
}

// berryPackage reads one entry.
func berryPackage(name string, e *symlNode, info *berryInfo) (*yarnPkg, error) {
	res := e.str("resolution")
	rname, ref, ok := specName(res)
	if !ok || rname == "" {
		return nil, fmt.Errorf("%w: entry %s has no resolution", errYarnLock, quote(name))
	}
	p := &yarnPkg{id: res, name: rname, version: e.str("version")}
	optional := map[string]bool{}
	if meta := e.get("dependenciesMeta"); meta != nil {
		for _, k := range meta.keys {
			if meta.kids[k].str("optional") == "true" {
				optional[k] = true
			}
		}
	}
	if deps := e.get("dependencies"); deps != nil {
		for _, k := range deps.keys {
			p.deps = append(p.deps, yarnEdge{name: k, spec: deps.kids[k].value, optional: optional[k]})
		}
	}
	if c := e.str("conditions"); c != "" && !strings.Contains(c, "|") {
		for _, term := range strings.Split(c, "&") {
			k, v, _ := strings.Cut(strings.TrimSpace(term), "=")
			switch k {
			case "os":
				p.os = append(p.os, v)
			case "cpu":
				p.cpu = append(p.cpu, v)
			}
		}
		p.optional = true // Yarn skips a package whose conditions fail
	}
	proto, rest, _ := strings.Cut(ref, ":")
	switch proto {
	case "npm":
		p.version = rest
	case "workspace":
		dir := path.Clean(rest)
		if path.IsAbs(dir) || dir == ".." || strings.HasPrefix(dir, "../") || strings.Contains(dir, "\\") {
			return nil, fmt.Errorf("%w: workspace %s is outside the repository", errYarnLock, quote(name))
		}
		p.link = dir
		return p, nil
	case "patch":
		base, patch, _ := strings.Cut(rest, "#")
		inner, err := url.PathUnescape(base)
		bname, bref, ok := specName(inner)
		if err != nil || !ok || bname != rname || !strings.HasPrefix(bref, "npm:") {
			p.refused = "a patch of a package not from the registry"
			return p, nil
		}
		if !strings.HasPrefix(patch, "optional!builtin<") && !strings.HasPrefix(patch, "builtin<") {
			info.patched = append(info.patched, rname)
		}
		p.version = strings.TrimPrefix(bref, "npm:")
	default:
		p.refused = "resolved to git, a file or a URL"
		return p, nil
	}
	if !npmVersion(p.version) {
		p.refused = "no registry version"
		return p, nil
	}
	p.id = rname + "@" + p.version // a patched copy is its base package
	return p, nil
}

// berryLinker is .yarnrc.yml's nodeLinker, "pnp" when unset (Yarn's
// default). Only that top-level key is read.
func berryLinker(root string) string {
	data, err := readRegular(filepath.Join(root, ".yarnrc.yml"), maxPackageJSON)
	if err != nil {
		return "pnp"
	}
	for _, l := range bytes.Split(data, []byte("\n")) {
		if v, ok := bytes.CutPrefix(bytes.TrimRight(l, "\r"), []byte("nodeLinker:")); ok {
			s := string(v)
			if i := strings.Index(s, " #"); i >= 0 {
				s = s[:i]
			}
			return strings.Trim(strings.TrimSpace(s), `"'`)
		}
	}
	return "pnp"
}

// berryLayout parses a Berry lockfile, computes the layout and takes each
// placed package's tarball and sha512 from the registry.
//
// Every linker gets the hoisted node_modules: with node-modules it is what
// Yarn itself writes; with pnpm a flattened equivalent; with Plug'n'Play
// (the default) Yarn writes no node_modules at all, but the pinned
// tsserver does not read .pnp.cjs, so the tree's node_modules is the
// cheap way for it to resolve the same packages.
func (f *Fetcher) berryLayout(ctx context.Context, ws runtime.Workspace, data []byte, left *atomic.Int64, w *warnings) (yarnLayout, error) {
	root := ws.Root
	switch l := berryLinker(root); l {
	case "node-modules", "pnpm", "pnp":
	default:
		return yarnLayout{}, fmt.Errorf("%w: nodeLinker %s is not known", errYarnLock, quote(l))
	}
	m, err := readManifest(filepath.Join(root, "package.json"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return yarnLayout{}, fmt.Errorf("%w: package.json is %s", errYarnLock, reason(err))
	}
	g, info, err := parseBerry(data, m)
	if err != nil {
		return yarnLayout{}, err
	}
	if len(info.patched) > 0 {
		sort.Strings(info.patched)
		w.add("yarn.lock: %s the repository patches installed unpatched: %s", countOf(len(info.patched), "package"), listSome(info.patched))
	}
	layout, err := hoist(g)
	if err != nil {
		return layout, err
	}
	f.resolveBerry(ctx, &layout, ws.Cache, left)
	return layout, nil
}

// errNoIntegrity: the registry's manifest pins the version by neither sha512
// nor sha1 (what pinnedIntegrity accepts, as for lockfiles).
var errNoIntegrity = errors.New("the registry lists no sha512 or sha1 integrity")

// resolveBerry fills each registry package's tarball and integrity from
// the registry's version manifest (<registry>/<name>/<version>, a few
// kilobytes, where the full packument can be megabytes), through the
// same bounded client as the tarballs. The tarball is the manifest's
// dist.tarball when that is under the registry, else npm's conventional
// path; either way it must hash to dist.integrity. A package whose
// manifest fails is left out, and named. What the repository's cache
// (cache, "" for none) kept from the last install is not asked again.
func (f *Fetcher) resolveBerry(ctx context.Context, l *yarnLayout, cache string, left *atomic.Int64) {
	reg := f.cfg.NPMRegistry
	m := &mirror{bases: []*url.URL{reg}, client: f.npmClient, left: left}
	ids := map[string][2]string{} // name@version -> name, version
	for k, p := range l.pkgs {
		if p.Link {
			continue
		}
		name := p.Name
		if name == "" {
			name = k[strings.LastIndex(k, "node_modules/")+len("node_modules/"):]
		}
		if p.Optional && !(platformMatch(p.OS, npmPlatform()) && platformMatch(p.CPU, npmArch())) {
			continue // install skips it: no request
		}
		ids[name+"@"+p.Version] = [2]string{name, p.Version}
	}
	var mu sync.Mutex
	got, known := map[string]berryDist{}, loadDists(cache, reg.String())
	defer func() { saveDists(cache, reg.String(), got, f.log) }()
	for id := range ids {
		if d, ok := known[id]; ok {
			got[id] = d
			delete(ids, id)
		}
	}
	failed := map[string]string{}
	par := f.cfg.Parallel
	if par <= 0 {
		par = defaultParallel
	}
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for id, nv := range ids {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			d, err := f.versionDist(ctx, m, nv[0], nv[1])
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed[id] = f.explainManifest(id, err)
				return
			}
			got[id] = d
		}()
	}
	wg.Wait()
	for k, p := range l.pkgs {
		if p.Link {
			continue
		}
		name := p.Name
		if name == "" {
			name = k[strings.LastIndex(k, "node_modules/")+len("node_modules/"):]
		}
		d, ok := got[name+"@"+p.Version]
		if !ok {
			if why, ok := failed[name+"@"+p.Version]; ok {
				l.refused[k] = why
				delete(l.pkgs, k)
			} else if _, asked := ids[name+"@"+p.Version]; asked {
				l.refused[k] = "not looked up in time"
			}
			// Another platform's is not installed either: without an
			// integrity, it leaves the layout.
			delete(l.pkgs, k)
			continue
		}
		p.Resolved, p.Integrity = d.resolved, d.integrity
		l.pkgs[k] = p
	}
}

// berryDist is a version's tarball and integrity, from the registry.
type berryDist struct{ resolved, integrity string }

func (f *Fetcher) versionDist(ctx context.Context, m *mirror, name, version string) (berryDist, error) {
	var out berryDist
	var buf bytes.Buffer
	if err := m.get(ctx, name+"/"+version, maxManifest, &buf); err != nil {
		return out, err
	}
	var man struct {
		Name    string `json:"name"`
		Version string `json:"version"`
		Dist    struct {
			Integrity string `json:"integrity"`
			Tarball   string `json:"tarball"`
		} `json:"dist"`
	}
	if err := json.Unmarshal(buf.Bytes(), &man); err != nil || man.Name != name || man.Version != version {
		return out, errors.New("not the version's manifest")
	}
	if !pinnedIntegrity(man.Dist.Integrity) {
		return out, errNoIntegrity
	}
	out.integrity = man.Dist.Integrity
	out.resolved = f.cfg.NPMRegistry.String() + tarballPath(name, version)
	if underRegistry(man.Dist.Tarball, f.cfg.NPMRegistry) {
		out.resolved = man.Dist.Tarball
	}
	return out, nil
}

// explainManifest is the reason, as a warning's plural clause, a
// package's manifest gave no integrity.
func (f *Fetcher) explainManifest(id string, err error) string {
	switch {
	case errors.Is(err, errNoIntegrity):
		return "no sha512 or sha1 integrity on the registry"
	case errors.Is(err, errNotServed):
		return "not served by the registry (no credential is ever used)"
	case errors.Is(err, errTooLarge):
		return "a registry manifest over the size bound"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return "out of time"
	}
	f.log.Warn("deps: npm manifest", "package", id, "err", err)
	return "could not be looked up on the registry"
}
