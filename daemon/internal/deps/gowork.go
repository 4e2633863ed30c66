package deps

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
)

// maxGoWork and maxGoWorkSum bound the tree's go.work and go.work.sum.
const (
	maxGoWork    = 1 << 20
	maxGoWorkSum = 16 << 20
)

// goWork is a tree's go.work as the index keeps it, with its paths
// relative to the tree, for GoFolders to write the home's copy with the
// published tree's absolute paths: the go command finds modules relative
// to the go.work file, and gopls loads the tree in workspace mode exactly
// as on an ordinary checkout. Workspace mode never writes a go.mod; the
// go.work.sum beside the copy holds the tree's lines and those the
// checksum database verified.
type goWork struct {
	Go        string        `json:"go,omitempty"`
	Toolchain string        `json:"toolchain,omitempty"`
	Use       []string      `json:"use"`
	Replace   []workReplace `json:"replace,omitempty"`
	Sum       string        `json:"sum,omitempty"`
}

// workReplace is one replace directive; NewDir is a tree-relative
// directory replacement, New a module version.
type workReplace struct {
	Old    module.Version `json:"old"`
	New    module.Version `json:"new"`
	NewDir string         `json:"new_dir,omitempty"`
}

// readGoWork reads root's go.work, if any. Paths that leave the tree (or
// are absolute) are dropped with a warning: the jail shows only the tree.
func (f *Fetcher) readGoWork(root string, w *warnings) (*goWork, []byte) {
	data, err := readRegular(filepath.Join(root, "go.work"), maxGoWork)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		w.add("go.work: %s; each module loads on its own", reason(err))
		return nil, nil
	}
	wf, err := modfile.ParseWork("go.work", data, nil)
	if err != nil {
		w.add("go.work does not parse; each module loads on its own")
		return nil, nil
	}
	local := f.cfg.goVersion()
	gw := &goWork{}
	if wf.Go != nil {
		if newerGo(wf.Go.Version, local) {
			w.add("go.work requires go %s, newer than the local %s; each module loads on its own", wf.Go.Version, local)
			return nil, nil
		}
		gw.Go = wf.Go.Version
	}
	if wf.Toolchain != nil && wf.Toolchain.Name != "default" {
		if !strings.HasPrefix(wf.Toolchain.Name, "go") || newerGo(wf.Toolchain.Name, local) {
			w.add("go.work asks for toolchain %s, newer than the local %s; each module loads on its own", wf.Toolchain.Name, local)
			return nil, nil
		}
		gw.Toolchain = wf.Toolchain.Name
	}
	for _, u := range wf.Use {
		d, ok := workDir(u.Path)
		if !ok {
			w.add("go.work uses a directory outside the tree; it is left out")
			continue
		}
		gw.Use = append(gw.Use, d)
	}
	for _, r := range wf.Replace {
		wr := workReplace{Old: r.Old}
		if r.New.Version == "" {
			d, ok := workDir(r.New.Path)
			if !ok {
				w.add("go.work replaces %s with a directory outside the tree; the replacement is left out", r.Old.Path)
				continue
			}
			wr.NewDir = d
		} else {
			wr.New = r.New
		}
		gw.Replace = append(gw.Replace, wr)
	}
	sort.Strings(gw.Use)
	gw.Use = slices.Compact(gw.Use)
	sum, err := readRegular(filepath.Join(root, "go.work.sum"), maxGoWorkSum)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		w.add("go.work.sum: %s; it is not used", reason(err))
	}
	return gw, sum
}

// workDir turns a go.work directory (relative to the tree's root, where
// go.work is) into a clean tree-relative slash path.
func workDir(p string) (string, bool) {
	p = filepath.ToSlash(p)
	if path.IsAbs(p) || strings.Contains(p, "\\") {
		return "", false
	}
	c := path.Clean(p)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", false
	}
	return c, true
}

// text is the go.work for a tree published at root.
func (gw *goWork) text(root string) []byte {
	var b strings.Builder
	if gw.Go != "" {
		fmt.Fprintf(&b, "go %s\n", gw.Go)
	}
	if gw.Toolchain != "" {
		fmt.Fprintf(&b, "toolchain %s\n", gw.Toolchain)
	}
	abs := func(d string) string { return modfile.AutoQuote(filepath.Join(root, filepath.FromSlash(d))) }
	for _, u := range gw.Use {
		fmt.Fprintf(&b, "use %s\n", abs(u))
	}
	for _, r := range gw.Replace {
		old := modfile.AutoQuote(r.Old.Path)
		if r.Old.Version != "" {
			old += " " + r.Old.Version
		}
		if r.NewDir != "" {
			fmt.Fprintf(&b, "replace %s => %s\n", old, abs(r.NewDir))
		} else {
			fmt.Fprintf(&b, "replace %s => %s %s\n", old, modfile.AutoQuote(r.New.Path), r.New.Version)
		}
	}
	return []byte(b.String())
}
