package deps

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/sumdb/dirhash"
	modzip "golang.org/x/mod/zip"

	"github.com/hanzoai/lsp/daemon/internal/safefs"
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
// its zip when a package of it may be imported.
type goJob struct {
	mod module.Version
	zip bool
}

// fetchGo fills the module cache under home from root's go.mod and go.sum.
func (f *Fetcher) fetchGo(ctx context.Context, root, modCache string, m *mirror, w *warnings) {
	data, err := readRegular(filepath.Join(root, "go.mod"), maxGoMod)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err != nil {
		w.add("go.mod: %s; Go dependencies were not fetched", reason(err))
		return
	}
	mf, err := modfile.Parse("go.mod", data, nil)
	if err != nil {
		w.add("go.mod does not parse; Go dependencies were not fetched")
		return
	}
	// GOTOOLCHAIN=local: a newer Go is neither downloaded nor pretended.
	local := f.cfg.goVersion()
	if mf.Go != nil && newerGo(mf.Go.Version, local) {
		w.add("go.mod requires go %s, newer than the local %s; Go dependencies were not fetched", mf.Go.Version, local)
		return
	}
	if mf.Toolchain != nil && mf.Toolchain.Name != "default" && (!strings.HasPrefix(mf.Toolchain.Name, "go") || newerGo(mf.Toolchain.Name, local)) {
		w.add("go.mod asks for toolchain %s, newer than the local %s; Go dependencies were not fetched", mf.Toolchain.Name, local)
		return
	}
	sums, err := readGoSum(filepath.Join(root, "go.sum"))
	if err != nil {
		w.add("go.sum: %s; Go dependencies were not fetched", reason(err))
		return
	}
	jobs := goJobs(mf, sums, w)
	if len(jobs) > f.cfg.MaxModules {
		w.add("%d Go module versions are needed, over the bound of %d; the rest were not fetched", len(jobs), f.cfg.MaxModules)
		jobs = jobs[:f.cfg.MaxModules]
	}
	par := f.cfg.Parallel
	if par <= 0 {
		par = defaultParallel
	}
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for _, j := range jobs {
		if ctx.Err() != nil {
			w.add("the dependency phase ran out of time; some Go modules were not fetched")
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			f.fetchModule(ctx, modCache, m, j, sums, w)
		}()
	}
	wg.Wait()
}

// goJobs lists the module versions to fetch: every requirement of go.mod
// (after replace directives; a directory replacement needs nothing) with
// its zip, and every other go.mod that go.sum lists, because the go command
// reads those to build the module graph. Sorted, zips first.
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
			zips = append(zips, goJob{mod: v, zip: true})
		}
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
		mods = append(mods, goJob{mod: v})
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

// readGoSum reads go.sum into "path version[/go.mod]" → "h1:…". Lines of
// other hash kinds are ignored, as the go command ignores them. No go.sum
// is an empty map: then nothing is trusted.
func readGoSum(path string) (map[string]string, error) {
	data, err := readRegular(path, maxGoSum)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, err
	}
	return parseGoSum(data), nil
}

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

// fetchModule puts one module version into the cache, verified.
func (f *Fetcher) fetchModule(ctx context.Context, modCache string, m *mirror, j goJob, sums map[string]string, w *warnings) {
	v := j.mod
	name := v.Path + "@" + v.Version
	modSum, zipSum := sums[v.Path+" "+v.Version+"/go.mod"], sums[v.Path+" "+v.Version]
	if modSum == "" || (j.zip && zipSum == "") {
		w.add("%s: go.sum has no hash for it; it was not fetched (no trust on first use)", name)
		return
	}
	if modSum == "conflict" || zipSum == "conflict" {
		w.add("%s: go.sum lists two different hashes for it; it was not fetched", name)
		return
	}
	ep, err1 := module.EscapePath(v.Path)
	ev, err2 := module.EscapeVersion(v.Version)
	if err1 != nil || err2 != nil {
		w.add("%s: invalid module version; it was not fetched", name)
		return
	}
	dl := filepath.Join(modCache, "cache", "download", filepath.FromSlash(ep), "@v")
	dlDir, err := safefs.MkdirAllPath(dl, 0o755, safefs.MkdirOpts{ReplaceNonDirs: true})
	if err != nil {
		f.log.Error("deps: module cache", "err", err)
		w.add("%s: the module cache could not be written", name)
		return
	}
	defer dlDir.Close()
	dl = dlDir.Path() // a jail may replace what the path names
	rel := ep + "/@v/" + ev
	if err := f.fetchGoMod(ctx, m, rel, filepath.Join(dl, ev+".mod"), modSum); err != nil {
		w.add("%s: go.mod %s; it was not fetched", name, f.explain(name, err))
		return
	}
	if j.zip {
		if err := f.fetchZip(ctx, m, v, rel, dl, filepath.Join(modCache, filepath.FromSlash(ep)+"@"+ev), zipSum); err != nil {
			w.add("%s: %s; it was not fetched", name, f.explain(name, err))
			return
		}
	}
	if err := f.fetchInfo(ctx, m, v, rel, filepath.Join(dl, ev+".info")); err != nil {
		f.log.Warn("deps: module info", "module", name, "err", err)
	}
	if err := appendList(filepath.Join(dl, "list"), v.Version); err != nil {
		f.log.Warn("deps: module list", "module", name, "err", err)
	}
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

// fetchGoMod writes dst from the mirror unless a verified copy is there.
func (f *Fetcher) fetchGoMod(ctx context.Context, m *mirror, rel, dst, want string) error {
	if data, err := readRegular(dst, maxModFile); err == nil {
		return checkGoMod(data, want)
	}
	var buf bytes.Buffer
	if err := m.get(ctx, rel+".mod", maxModFile, &buf); err != nil {
		return err
	}
	if err := checkGoMod(buf.Bytes(), want); err != nil {
		return err
	}
	return writeAtomic(dst, buf.Bytes(), 0o444)
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

// fetchZip downloads, verifies and extracts one module zip. An extracted
// directory with a ziphash is the go command's mark of a complete module.
func (f *Fetcher) fetchZip(ctx context.Context, m *mirror, v module.Version, rel, dl, dir, want string) error {
	ev, _ := module.EscapeVersion(v.Version)
	hashFile := filepath.Join(dl, ev+".ziphash")
	if h, err := readRegular(hashFile, 1024); err == nil {
		if _, err := os.Lstat(dir); err == nil {
			if strings.TrimSpace(string(h)) != want {
				return errMismatch
			}
			return nil
		}
	}
	// The zip is downloaded into a directory only the daemon can enter,
	// so that what is hashed is what is unpacked and renamed into place
	// (dl is the jail's).
	dlDir, err := safefs.Open(dl)
	if err != nil {
		return err
	}
	defer dlDir.Close()
	stageName := safefs.TempName()
	stage, err := dlDir.MkdirPrivate(stageName)
	if err != nil {
		return err
	}
	defer func() {
		stage.Close()
		_ = dlDir.RemoveAll(stageName)
	}()
	tmp, err := os.OpenFile(filepath.Join(stage.Path(), "zip"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	err = m.get(ctx, rel+".zip", f.cfg.MaxZip, tmp)
	if err == nil {
		err = tmp.Chmod(0o444)
	}
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
	if err := extract(v, tmp.Name(), dir); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dl, ev+".zip")); err != nil {
		return err
	}
	return writeAtomic(hashFile, []byte(h+"\n"), 0o444)
}

// extract unzips a verified module zip into dir, read-only, through a
// sibling staging directory so that dir appears whole or not at all. The
// zip library refuses paths outside the module, absolute paths, case
// collisions, links and oversized contents.
//
// dir's parent is in a jail's home: it is opened with safefs, and the
// staging directory is one only the daemon can enter, named by its
// descriptor, so that no link a jail plants redirects a write.
func extract(v module.Version, zipFile, dir string) error {
	parent, err := safefs.MkdirAllPath(filepath.Dir(dir), 0o755, safefs.MkdirOpts{ReplaceNonDirs: true})
	if err != nil {
		return err
	}
	defer parent.Close()
	stageName := safefs.TempName()
	stage, err := parent.MkdirPrivate(stageName)
	if err != nil {
		return err
	}
	defer func() {
		stage.Close()
		_ = parent.RemoveAll(stageName)
	}()
	out := filepath.Join(stage.Path(), "m")
	if err := modzip.Unzip(out, v, zipFile); err != nil {
		return fmt.Errorf("unzip: %w", err)
	}
	if err := workspace.MakeReadOnly(out); err != nil {
		return err
	}
	dir = filepath.Join(parent.Path(), filepath.Base(dir))
	if err := os.Rename(out, dir); err != nil {
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
func (f *Fetcher) fetchInfo(ctx context.Context, m *mirror, v module.Version, rel, dst string) error {
	if _, err := os.Lstat(dst); err == nil {
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
	return writeAtomic(dst, append(data, '\n'), 0o444)
}

var listMu sync.Mutex

// maxListFile bounds a module's list file.
const maxListFile = 1 << 20

// appendList adds version to a module's list file once.
func appendList(path, version string) error {
	listMu.Lock()
	defer listMu.Unlock()
	old, err := readRegular(path, maxListFile)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, l := range strings.Split(string(old), "\n") {
		if l == version {
			return nil
		}
	}
	return writeAtomic(path, append(old, version+"\n"...), 0o644)
}

// writeAtomic writes a file through a temporary sibling and a rename.
func writeAtomic(path string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	// By its descriptor: the directory may be a jail's, and a path there
	// may meanwhile name a link.
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// readRegular reads a regular file (never through a link) of at most max
// bytes.
func readRegular(path string, max int64) ([]byte, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	if fi.Size() > max {
		return nil, errTooLarge
	}
	// Never through a link put there since the Lstat (the directory may
	// be a jail's), and never a fifo that would block.
	fh, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	if fi, err := fh.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	return io.ReadAll(io.LimitReader(fh, max))
}

// reason is an error as a warning may show it: no host path.
func reason(err error) string {
	switch {
	case errors.Is(err, errTooLarge):
		return "over the size bound"
	default:
		return "unreadable"
	}
}
