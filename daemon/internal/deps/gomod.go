package deps

import (
	"archive/zip"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/sumdb/dirhash"
	modzip "golang.org/x/mod/zip"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
	"github.com/hanzoai/lsp/daemon/internal/workspace"
)

// Bounds on the repository's own files and on metadata from the mirror.
const (
	maxGoMod   = 4 << 20
	maxGoSum   = 16 << 20
	maxModFile = 4 << 20
	maxInfo    = 64 << 10
)

// goJob is one module version to put into the cache: its go.mod always,
// its zip when a package of it may be imported; sums are the go.sum lines
// of the module that needs it. walk: that go.sum lacks lines, so the
// requirements of this version's go.mod whose go.mod hash it lacks are
// fetched too (verified by the checksum database), as the go command would
// want them for the module graph.
type goJob struct {
	mod  module.Version
	zip  bool
	walk bool
	zip0 bool // required by the module itself, not found by the walk
	sums map[string]string
}

type jobKey struct {
	mod module.Version
	zip bool
}

// fetchGo prepares every Go module of the tree (findModules): its
// requirements go into the module cache under the home, and what the go
// command would write for it goes into its overlay in the home; the index
// beside the tree tells the servers each module's flags (GoFolders).
func (f *Fetcher) fetchGo(ctx context.Context, ws runtime.Workspace, c *goCache, m *mirror, w *warnings) {
	dirs, more := findModules(ws.Root)
	if more {
		w.add("the tree has more Go modules or directories than the bounds allow (%d modules, %d directories); some modules are not loaded", maxGoModules, maxWalkDirs)
	}
	gw, workSum := f.readGoWork(ws.Root, w)
	var index []goModule
	var overlays []*overlay
	var jobs []goJob
	seen := map[jobKey]bool{}
	for _, dir := range dirs {
		entry, js, ov := f.prepareModule(ws, dir, w)
		entry.InWork = gw != nil && slices.Contains(gw.Use, dir)
		index = append(index, entry)
		if ov != nil {
			overlays = append(overlays, ov)
		}
		for _, j := range js {
			k := jobKey{j.mod, j.zip}
			if seen[k] || (!j.zip && seen[jobKey{j.mod, true}]) {
				continue
			}
			seen[k] = true
			jobs = append(jobs, j)
		}
	}
	// Zips first, then the go.mod files only the graph needs.
	sort.SliceStable(jobs, func(i, j int) bool { return jobs[i].zip && !jobs[j].zip })
	if len(jobs) > f.cfg.MaxModules {
		w.add("%d Go module versions are needed, over the bound of %d; the rest were not fetched", len(jobs), f.cfg.MaxModules)
		jobs = jobs[:f.cfg.MaxModules]
	}
	par := f.cfg.Parallel
	if par <= 0 {
		par = defaultParallel
	}
	s := &scheduler{f: f, ctx: ctx, cache: c, m: m, w: w, lk: f.sumdb.forPhase(ctx, m),
		sem: make(chan struct{}, par), seen: seen, left: f.cfg.MaxModules - len(jobs)}
	for _, j := range jobs {
		s.start(j)
	}
	s.wg.Wait()
	if ctx.Err() != nil && len(jobs) > 0 {
		w.add("the dependency phase ran out of time; some Go modules were not fetched")
	}
	if err := c.install(); err != nil {
		f.log.Error("deps: install the module cache", "err", err)
		w.add("the module cache could not be written in the home; some Go modules are missing")
	}
	verified := s.lk.verified()
	for _, ov := range overlays {
		flags, err := f.writeOverlay(ws.Home, ov, verified)
		if err != nil {
			f.log.Warn("deps: Go overlay", "module", ov.dir, "err", err)
			w.add("%s: its private overlay could not be written; it loads read-only", ov.name)
			continue
		}
		for j := range index {
			if index[j].Dir == ov.dir {
				index[j].GoFlags = flags
			}
		}
	}
	idx := goIndex{Modules: index}
	if gw != nil {
		gw.Sum = string(appendVerified(workSum, parseGoSum(workSum), verified))
		idx.Work, idx.WorkKey = gw, overlayKey("go.work", nil, workSum)
	}
	if len(dirs) == 0 && gw == nil {
		return
	}
	if err := writeGoIndex(ws.Root, idx); err != nil {
		f.log.Error("deps: Go module index", "err", err)
		w.add("the Go module index could not be written; modules load with their own files only")
	}
}

// scheduler runs the phase's module downloads, at most Parallel at once;
// a walking job adds the jobs its go.mod calls for, within the bound.
type scheduler struct {
	f     *Fetcher
	ctx   context.Context
	cache *goCache
	m     *mirror
	w     *warnings
	lk    *sumLookup
	sem   chan struct{}
	wg    sync.WaitGroup

	mu   sync.Mutex
	seen map[jobKey]bool
	left int // more jobs a walk may add
}

func (s *scheduler) start(j goJob) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		select {
		case s.sem <- struct{}{}:
		case <-s.ctx.Done():
			return
		}
		defer func() { <-s.sem }()
		if gomod := s.f.fetchModule(s.ctx, s.cache, s.m, j, s.lk, s.w); j.walk && gomod != nil {
			s.walk(j, gomod)
		}
	}()
}

// walk adds a job for each requirement of a fetched go.mod whose go.mod
// hash the module's go.sum lacks.
func (s *scheduler) walk(j goJob, gomod []byte) {
	mf, err := modfile.ParseLax("go.mod", gomod, nil)
	if err != nil {
		return
	}
	for _, r := range mf.Require {
		v := r.Mod
		if module.Check(v.Path, v.Version) != nil || j.sums[v.Path+" "+v.Version+"/go.mod"] != "" {
			continue
		}
		k := jobKey{v, true}
		s.mu.Lock()
		if s.seen[k] {
			s.mu.Unlock()
			continue
		}
		if s.left <= 0 {
			s.mu.Unlock()
			s.w.add("the Go module graph needs more module versions than the bound of %d; the rest were not fetched", s.f.cfg.MaxModules)
			return
		}
		s.seen[k] = true
		s.left--
		s.mu.Unlock()
		// Its zip too: in a graph the main module does not prune, a
		// package of it may be imported.
		s.start(goJob{mod: v, zip: true, walk: true, sums: j.sums})
	}
}

// overlay is what a module's overlay is made from.
type overlay struct {
	dir, name string
	gomod     []byte
	mf        *modfile.File
	gosum     []byte
	sums      map[string]string
}

// prepareModule reads the module in dir and decides how its go commands
// run: -mod=vendor when vendor/modules.txt matches go.mod (nothing to
// fetch), otherwise -mod=mod on an overlay go.mod and go.sum in the home
// (copies of the tree's, with the go directive the go command would add),
// so that whatever the go command writes lands there. A module that
// cannot be prepared keeps the go command's default (vendor/ where it
// is, else -mod=readonly): still nothing writes the tree.
func (f *Fetcher) prepareModule(ws runtime.Workspace, dir string, w *warnings) (goModule, []goJob, *overlay) {
	entry := goModule{Dir: dir} // the go command's default: never writes
	name := "go.mod"
	if dir != "." {
		name = dir + "/go.mod"
	}
	mdir := filepath.Join(ws.Root, filepath.FromSlash(dir))
	data, err := readRegular(filepath.Join(mdir, "go.mod"), maxGoMod)
	if err != nil {
		w.add("%s: %s; its dependencies were not fetched", name, reason(err))
		return entry, nil, nil
	}
	mf, err := modfile.Parse("go.mod", data, nil)
	if err != nil {
		w.add("%s does not parse; its dependencies were not fetched", name)
		return entry, nil, nil
	}
	// GOTOOLCHAIN=local: a newer Go is neither downloaded nor pretended.
	local := f.cfg.goVersion()
	if mf.Go != nil && newerGo(mf.Go.Version, local) {
		w.add("%s requires go %s, newer than the local %s; its dependencies were not fetched", name, mf.Go.Version, local)
		return entry, nil, nil
	}
	if mf.Toolchain != nil && mf.Toolchain.Name != "default" && (!strings.HasPrefix(mf.Toolchain.Name, "go") || newerGo(mf.Toolchain.Name, local)) {
		w.add("%s asks for toolchain %s, newer than the local %s; its dependencies were not fetched", name, mf.Toolchain.Name, local)
		return entry, nil, nil
	}
	// The go command vendors by default from go 1.14 on when vendor/
	// exists; it then fetches nothing, and checks modules.txt first.
	if mf.Go != nil && !newerGo("1.14", mf.Go.Version) {
		txt, err := readRegular(filepath.Join(mdir, "vendor", "modules.txt"), maxModulesTxt)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			w.add("%s: vendor/modules.txt: %s; dependencies are fetched instead", name, reason(err))
		default:
			if metas, ok := parseModulesTxt(txt); ok && vendorConsistent(mf, metas) {
				entry.GoFlags = "-mod=vendor"
				return entry, nil, nil
			}
			w.add("%s: vendor/modules.txt does not match it; dependencies are fetched instead", name)
		}
	}
	sumData, err := readRegular(filepath.Join(mdir, "go.sum"), maxGoSum)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		w.add("%s: go.sum: %s; its dependencies were not fetched", name, reason(err))
		return entry, nil, nil
	}
	sums := parseGoSum(sumData)
	jobs := goJobs(mf, sums, w)
	incomplete := false
	for _, j := range jobs {
		if j.zip && (sums[j.mod.Path+" "+j.mod.Version] == "" || sums[j.mod.Path+" "+j.mod.Version+"/go.mod"] == "") {
			incomplete = true
		}
	}
	for i := range jobs {
		jobs[i].walk = incomplete && jobs[i].zip
		jobs[i].zip0 = jobs[i].zip
	}
	return entry, jobs, &overlay{dir: dir, name: name, gomod: data, mf: mf, gosum: sumData, sums: sums}
}

// writeOverlay writes the overlay go.mod and go.sum of a module and
// returns the module's GOFLAGS. The go.sum is the tree's with every line
// the checksum database verified in this phase that it lacks.
func (f *Fetcher) writeOverlay(home string, ov *overlay, verified []string) (string, error) {
	key := overlayKey(ov.dir, ov.gomod, ov.gosum)
	rel := overlayDir(key)
	abs := filepath.Join(home, filepath.FromSlash(rel), "go.mod")
	if strings.ContainsAny(abs, " \t\n\"'\\") {
		// GOFLAGS is split on spaces and cannot quote.
		return "", errors.New("the home's path cannot go into GOFLAGS")
	}
	gomod := ov.gomod
	if ov.mf.Go == nil {
		// What the go command assumes of a go.mod without the directive,
		// and would otherwise write into it.
		gomod = append(bytes.TrimRight(bytes.Clone(gomod), "\n"), "\n\ngo 1.16\n"...)
	}
	gosum := appendVerified(ov.gosum, ov.sums, verified)
	d, owner, err := openHomeDir(home, rel)
	if err != nil {
		return "", err
	}
	defer d.Close()
	if err := d.WriteFile("go.mod", gomod, 0o644, owner); err != nil {
		return "", err
	}
	if err := d.WriteFile("go.sum", gosum, 0o644, owner); err != nil {
		return "", err
	}
	return overlayFlags + abs, nil
}

// appendVerified is gosum with each verified line whose key sums lacks.
func appendVerified(gosum []byte, sums map[string]string, verified []string) []byte {
	out := bytes.Clone(gosum)
	if len(out) > 0 && out[len(out)-1] != '\n' {
		out = append(out, '\n')
	}
	verified = slices.Clone(verified)
	sort.Strings(verified)
	for _, l := range verified {
		if f := strings.Fields(l); len(f) == 3 && sums[f[0]+" "+f[1]] == "" {
			out = append(out, l+"\n"...)
		}
	}
	return out
}

// goJobs lists the module versions to fetch: every requirement of go.mod
// (after replace directives; a directory replacement needs nothing) and
// every other version whose zip go.sum lists, with its zip; and every
// other go.mod that go.sum lists, because the go command reads those to
// build the module graph. Sorted, zips first.
func goJobs(mf *modfile.File, sums map[string]string, w *warnings) []goJob {
	repl := map[module.Version]module.Version{}
	for _, r := range mf.Replace {
		repl[r.Old] = r.New
	}
	replaced := func(v module.Version) (module.Version, bool) {
		if n, ok := repl[v]; ok {
			return n, true
		}
		n, ok := repl[module.Version{Path: v.Path}]
		return n, ok
	}
	seen := map[module.Version]bool{}
	var zips, mods []goJob
	for _, r := range mf.Require {
		v := r.Mod
		if n, ok := replaced(v); ok {
			if n.Version == "" {
				continue // a directory in the tree, or missing: nothing to fetch
			}
			v = n
		}
		if err := module.Check(v.Path, v.Version); err != nil {
			w.add("go.mod requires an invalid module version; it was not fetched")
			continue
		}
		if !seen[v] {
			seen[v] = true
			zips = append(zips, goJob{mod: v, zip: true, sums: sums})
		}
	}
	// A zip go.sum vouches for was needed to build the module (a package
	// of a dependency's dependency in a graph the module does not prune,
	// or a requirement an untidy go.mod forgot): fetched too, as go mod
	// download would.
	for k := range sums {
		p, ver, ok := strings.Cut(k, " ")
		if !ok || strings.HasSuffix(ver, "/go.mod") {
			continue
		}
		v := module.Version{Path: p, Version: ver}
		if seen[v] || module.Check(v.Path, v.Version) != nil || sums[k+"/go.mod"] == "" {
			continue
		}
		seen[v] = true
		zips = append(zips, goJob{mod: v, zip: true, sums: sums})
	}
	for k := range sums {
		p, ver, ok := strings.Cut(k, " ")
		if !ok || !strings.HasSuffix(ver, "/go.mod") {
			continue
		}
		v := module.Version{Path: p, Version: strings.TrimSuffix(ver, "/go.mod")}
		if seen[v] || module.Check(v.Path, v.Version) != nil {
			continue
		}
		seen[v] = true
		mods = append(mods, goJob{mod: v, sums: sums})
	}
	less := func(s []goJob) func(i, j int) bool {
		return func(i, j int) bool {
			if s[i].mod.Path != s[j].mod.Path {
				return s[i].mod.Path < s[j].mod.Path
			}
			return s[i].mod.Version < s[j].mod.Version
		}
	}
	sort.Slice(zips, less(zips))
	sort.Slice(mods, less(mods))
	return append(zips, mods...)
}

// parseGoSum reads go.sum into "path version[/go.mod]" → "h1:…". Lines of
// other hash kinds are ignored, as the go command ignores them. No go.sum
// is an empty map: then nothing is trusted but the checksum database.
func parseGoSum(data []byte) map[string]string {
	sums := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 || !strings.HasPrefix(f[2], "h1:") {
			continue
		}
		key := f[0] + " " + f[1]
		if old, ok := sums[key]; ok && old != f[2] {
			// Two different hashes for one file: neither is trusted.
			sums[key] = "conflict"
			continue
		}
		sums[key] = f[2]
	}
	return sums
}

// fetchModule puts one module version into the cache, verified by the
// module's go.sum or, for what go.sum lacks, by the checksum database. It
// returns the verified go.mod, nil when the version was not fetched.
func (f *Fetcher) fetchModule(ctx context.Context, c *goCache, m *mirror, j goJob, lk *sumLookup, w *warnings) []byte {
	v, sums := j.mod, j.sums
	name := v.Path + "@" + v.Version
	modSum, zipSum := sums[v.Path+" "+v.Version+"/go.mod"], sums[v.Path+" "+v.Version]
	if modSum == "conflict" || zipSum == "conflict" {
		w.add("%s: go.sum lists two different hashes for it; it was not fetched", name)
		return nil
	}
	if modSum == "" || (j.zip && zipSum == "") {
		// No trust on first use: what go.sum lacks, the checksum database
		// must vouch for.
		db, err := lk.lookup(v, j.zip)
		if err != nil {
			if j.walk && !j.zip0 && !errors.Is(err, errNoSumDB) {
				// A version only the walk wanted: the go command may not
				// need it either.
				f.log.Info("deps: checksum database", "module", name, "err", err)
				return nil
			}
			if errors.Is(err, errNoSumDB) {
				w.add("%s: go.sum has no hash for it; it was not fetched (no trust on first use)", name)
			} else {
				f.log.Warn("deps: checksum database", "module", name, "err", err)
				w.add("%s: go.sum has no hash for it and the checksum database could not verify it; it was not fetched (no trust on first use)", name)
			}
			return nil
		}
		if modSum == "" {
			modSum = db[v.Path+" "+v.Version+"/go.mod"]
		}
		if j.zip && zipSum == "" {
			zipSum = db[v.Path+" "+v.Version]
		}
		if modSum == "" || (j.zip && zipSum == "") {
			w.add("%s: the checksum database has no hash for it; it was not fetched", name)
			return nil
		}
	}
	ep, err1 := module.EscapePath(v.Path)
	ev, err2 := module.EscapeVersion(v.Version)
	if err1 != nil || err2 != nil {
		w.add("%s: invalid module version; it was not fetched", name)
		return nil
	}
	dl := "cache/download/" + ep + "/@v"
	if err := os.MkdirAll(c.staged(dl), 0o755); err != nil {
		f.log.Error("deps: module cache", "err", err)
		w.add("%s: the module cache could not be written", name)
		return nil
	}
	rel := ep + "/@v/" + ev
	gomod, err := f.fetchGoMod(ctx, m, rel, c, dl+"/"+ev+".mod", modSum)
	if err != nil {
		w.add("%s: go.mod %s; it was not fetched", name, f.explain(name, err))
		return nil
	}
	if j.zip {
		if err := f.fetchZip(ctx, m, v, rel, c, dl, ep+"@"+ev, zipSum); err != nil {
			w.add("%s: %s; it was not fetched", name, f.explain(name, err))
			return nil
		}
	}
	if err := f.fetchInfo(ctx, m, v, rel, c, dl+"/"+ev+".info"); err != nil {
		f.log.Warn("deps: module info", "module", name, "err", err)
	}
	if err := c.appendList(dl+"/list", v.Version); err != nil {
		f.log.Warn("deps: module list", "module", name, "err", err)
	}
	return gomod
}

// errMismatch: the bytes do not hash to go.sum's line.
var errMismatch = errors.New("does not match go.sum")

func (f *Fetcher) explain(name string, err error) string {
	switch {
	case errors.Is(err, errMismatch):
		return "does not match its go.sum hash"
	case errors.Is(err, errNotServed):
		return "is not served by the mirror (a private or missing module; no credential is ever used)"
	case errors.Is(err, errTooLarge):
		return "is over the size bound"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return "ran out of time"
	}
	f.log.Warn("deps: fetch", "module", name, "err", err)
	return "could not be fetched from the mirror"
}

// fetchGoMod stages file (a cache-relative path) from the mirror unless a
// verified copy is in the home's cache, and returns the verified bytes.
func (f *Fetcher) fetchGoMod(ctx context.Context, m *mirror, rel string, c *goCache, file, want string) ([]byte, error) {
	if data, err := c.read(file, maxModFile); err == nil {
		return data, checkGoMod(data, want)
	}
	var buf bytes.Buffer
	if err := m.get(ctx, rel+".mod", maxModFile, &buf); err != nil {
		return nil, err
	}
	if err := checkGoMod(buf.Bytes(), want); err != nil {
		return nil, err
	}
	return buf.Bytes(), writeAtomic(c.staged(file), buf.Bytes(), 0o444)
}

func checkGoMod(data []byte, want string) error {
	h, err := dirhash.Hash1([]string{"go.mod"}, func(string) (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	})
	if err != nil {
		return err
	}
	if h != want {
		return errMismatch
	}
	return nil
}

// fetchZip downloads, verifies and extracts one module zip into the
// stage (dl and dir cache-relative). An extracted directory with a ziphash
// is the go command's mark of a complete module: one in the home's cache
// is kept.
func (f *Fetcher) fetchZip(ctx context.Context, m *mirror, v module.Version, rel string, c *goCache, dl, dir, want string) error {
	ev, _ := module.EscapeVersion(v.Version)
	hashFile := dl + "/" + ev + ".ziphash"
	if h, err := c.read(hashFile, 1024); err == nil && c.inHome(dir) {
		if strings.TrimSpace(string(h)) != want {
			return errMismatch
		}
		return nil
	}
	tmp, err := os.CreateTemp(c.staged(dl), ".zip-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	err = m.get(ctx, rel+".zip", f.cfg.MaxZip, tmp)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	h, err := dirhash.HashZip(tmp.Name(), dirhash.Hash1)
	if err != nil {
		return fmt.Errorf("hash zip: %w", err)
	}
	if h != want {
		return errMismatch
	}
	// What it unpacks to, charged before a byte is: a verified zip is not a
	// small one (a tenant can publish a module of a few KiB that inflates
	// to the zip library's 500 MiB), and the download budget counts only
	// compressed bytes.
	size, err := zipCost(tmp.Name())
	if err != nil {
		return err
	}
	if err := c.charge(size); err != nil {
		return err
	}
	if err := extract(v, tmp.Name(), c.staged(dir)); err != nil {
		c.refund(size)
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o444); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), c.staged(dl+"/"+ev+".zip")); err != nil {
		return err
	}
	return writeAtomic(c.staged(hashFile), []byte(h+"\n"), 0o444)
}

// zipCost is what a zip unpacks to on disk: its files' bytes and an
// entryCost each.
func zipCost(name string) (int64, error) {
	z, err := zip.OpenReader(name)
	if err != nil {
		return 0, fmt.Errorf("open zip: %w", err)
	}
	defer z.Close()
	var n int64
	for _, f := range z.File {
		n += min(int64(f.UncompressedSize64), math.MaxInt64/2) + entryCost
		if n > math.MaxInt64/2 {
			return 0, errTooLarge
		}
	}
	return n, nil
}

// extract unzips a verified module zip into dir, read-only, through a
// sibling staging directory so that dir appears whole or not at all. The
// zip library refuses paths outside the module, absolute paths, case
// collisions, links and oversized contents.
func extract(v module.Version, zipFile, dir string) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	stage, err := os.MkdirTemp(filepath.Dir(dir), ".extract-*")
	if err != nil {
		return err
	}
	defer workspace.RemoveAll(stage)
	out := filepath.Join(stage, "m")
	if err := modzip.Unzip(out, v, zipFile); err != nil {
		return fmt.Errorf("unzip: %w", err)
	}
	if err := workspace.MakeReadOnly(out); err != nil {
		return err
	}
	if err := workspace.MoveReadOnly(out, dir); err != nil {
		if _, serr := os.Lstat(dir); serr == nil {
			return nil // another prepare of this home put it there
		}
		return err
	}
	return nil
}

// fetchInfo writes the .info file the go command reads for a version's
// time. It is metadata go.sum cannot verify, so only a well-formed version
// and time are kept; a mirror without it gets a bare one.
func (f *Fetcher) fetchInfo(ctx context.Context, m *mirror, v module.Version, rel string, c *goCache, file string) error {
	if c.inHome(file) {
		return nil
	}
	info := struct {
		Version string
		Time    *time.Time `json:",omitempty"`
	}{Version: v.Version}
	var buf bytes.Buffer
	if err := m.get(ctx, rel+".info", maxInfo, &buf); err == nil {
		var got struct {
			Version string
			Time    time.Time
		}
		if json.Unmarshal(buf.Bytes(), &got) == nil && got.Version == v.Version && !got.Time.IsZero() {
			info.Time = &got.Time
		}
	} else if !errors.Is(err, errNotServed) {
		return err
	}
	data, err := json.Marshal(info)
	if err != nil {
		return err
	}
	return writeAtomic(c.staged(file), append(data, '\n'), 0o444)
}

var listMu sync.Mutex

// appendList adds version to a module's list file once: the staged one,
// or a copy of the home's.
func (c *goCache) appendList(file, version string) error {
	listMu.Lock()
	defer listMu.Unlock()
	old, err := os.ReadFile(c.staged(file))
	if errors.Is(err, fs.ErrNotExist) {
		old, err = c.read(file, maxModFile)
	}
	if err != nil {
		old = nil // none, or not a file: the go command's list is only a hint
	}
	for _, l := range strings.Split(string(old), "\n") {
		if l == version {
			return nil
		}
	}
	return writeAtomic(c.staged(file), append(old, version+"\n"...), 0o644)
}

// writeAtomic writes a file through a temporary sibling and a rename.
func writeAtomic(path string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), perm); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// errNotRegular: a file the phase reads is a link, a directory or a
// device.
var errNotRegular = errors.New("not a regular file")

// readRegular reads a regular file (never through a link) of at most max
// bytes. It reads up to max+1 bytes, so a file that grew after the Lstat
// is refused, never silently cut.
func readRegular(path string, max int64) ([]byte, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, errNotRegular
	}
	if fi.Size() > max {
		return nil, errTooLarge
	}
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	b, err := io.ReadAll(io.LimitReader(fh, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, errTooLarge
	}
	return b, nil
}

// reason is an error as a warning may show it: no host path.
func reason(err error) string {
	switch {
	case errors.Is(err, errTooLarge):
		return "over the size bound"
	case errors.Is(err, errNotRegular):
		return "not a regular file"
	default:
		return "unreadable"
	}
}
