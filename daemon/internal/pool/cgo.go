package pool

import (
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/mod/modfile"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
)

// Without a C compiler (LSP_JAIL_CC=off, or a daemon run unjailed) the go
// command runs with CGO_ENABLED=0 and leaves every file that imports "C"
// out of its packages: gopls has nothing to say in those files, and the
// other files of their package, which use what they declare, are full of
// "undefined" errors. An answer there must not pass for current.

// Bounds on the scan for cgo files: the .go files read, and the bytes of
// each (the imports come first; go/parser stops after them).
const (
	maxCgoScanFiles = 50000
	maxCgoScanBytes = 256 << 10
)

// cgoScan is what the tree's .go files say about cgo.
type cgoScan struct {
	files int             // files that import "C"
	dirs  map[string]bool // their directories, slash-separated, "." for the root
	pkgs  map[string]bool // those directories' import paths
	first []string        // the first few, for the warning
	more  bool            // the scan stopped at its bound
}

type cgoKey struct{}

// importsC reports whether src, the start of a Go file, imports "C". A
// file that does not parse (or is cut inside its imports) does not.
func importsC(src []byte) bool {
	if !strings.Contains(string(src), `"C"`) {
		return false
	}
	return slices.Contains(imports(src), "C")
}

// imports are the import paths of src, the start of a Go file; a file cut
// or broken after some imports lists those it read.
func imports(src []byte) []string {
	f, _ := parser.ParseFile(token.NewFileSet(), "", src, parser.ImportsOnly)
	if f == nil {
		return nil
	}
	var out []string
	for _, im := range f.Imports {
		if p, e := strconv.Unquote(im.Path.Value); e == nil {
			out = append(out, p)
		}
	}
	return out
}

// importPath is the import path of the package in dir (slash-separated,
// relative to the tree): its nearest go.mod's module path and the rest;
// "" when no go.mod of the tree holds it.
func importPath(root, dir string) string {
	for d := dir; ; d = path.Dir(d) {
		data, err := readPrefix(filepath.Join(root, filepath.FromSlash(d), "go.mod"), maxCgoScanBytes)
		if err == nil {
			mod := modfile.ModulePath(data)
			if mod == "" {
				return ""
			}
			if d == dir {
				return mod
			}
			return mod + "/" + strings.TrimPrefix(dir, d+"/")
		}
		if d == "." || d == "/" {
			return ""
		}
	}
}

func readPrefix(p string, max int64) ([]byte, error) {
	fi, err := os.Lstat(p)
	if err != nil || !fi.Mode().IsRegular() {
		return nil, fs.ErrNotExist
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, max))
}

// cgo scans w's tree once. The published tree holds only the daemon's
// regular files, directories and, in node_modules (skipped here), its own
// links: nothing a jailed process could have planted; WalkDir follows no
// link.
func (w *Workspace) cgo() *cgoScan {
	return w.Derived(cgoKey{}, func() any {
		s := &cgoScan{dirs: map[string]bool{}, pkgs: map[string]bool{}}
		defer func() {
			for d := range s.dirs {
				if ip := importPath(w.Dir, d); ip != "" {
					s.pkgs[ip] = true
				}
			}
		}()
		n := 0
		_ = filepath.WalkDir(w.Dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if d.IsDir() {
				name := d.Name()
				if p != w.Dir && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
					return filepath.SkipDir
				}
				return nil
			}
			if !d.Type().IsRegular() || !strings.HasSuffix(d.Name(), ".go") {
				return nil
			}
			if n++; n > maxCgoScanFiles {
				s.more = true
				return filepath.SkipAll
			}
			f, err := os.Open(p)
			if err != nil {
				return nil
			}
			src, _ := io.ReadAll(io.LimitReader(f, maxCgoScanBytes))
			f.Close()
			if !importsC(src) {
				return nil
			}
			rel, err := filepath.Rel(w.Dir, p)
			if err != nil {
				return nil
			}
			rel = filepath.ToSlash(rel)
			s.files++
			s.dirs[path.Dir(rel)] = true
			if len(s.first) < 3 {
				s.first = append(s.first, rel)
			}
			return nil
		})
		return s
	}).(*cgoScan)
}

// goSpecsWithoutCgo are the Go servers of the pool that do not build cgo
// files.
func (p *Pool) goSpecsWithoutCgo() []*Spec {
	var out []*Spec
	for i := range p.specs {
		s := &p.specs[i]
		if s.Language == "go" && !runtime.CgoFor(p.spawner, s.Spec) {
			out = append(out, s)
		}
	}
	return out
}

// CgoWarnings are the prepare's warnings about cgo: the tree has files
// that import "C" and a Go server runs without a C compiler, so it does
// not load them.
func (w *Workspace) CgoWarnings() []string {
	specs := w.pool.goSpecsWithoutCgo()
	if len(specs) == 0 {
		return nil
	}
	s := w.cgo()
	if s.files == 0 {
		return nil
	}
	names := strings.Join(s.first, ", ")
	if s.files > len(s.first) {
		names += ", …"
	}
	var out []string
	for _, sp := range specs {
		out = append(out, fmt.Sprintf("%s runs without a C compiler (CGO_ENABLED=0): the %d file(s) that import \"C\" (%s) are not loaded; answers in their packages are partial", sp.ID, s.files, names))
	}
	if s.more {
		out = append(out, fmt.Sprintf("the scan for cgo files stopped after %d .go files", maxCgoScanFiles))
	}
	return out
}

// CgoFileWarnings qualify an answer about rel (text its content) from
// spec's server: when that server does not build cgo files and rel
// imports "C", or is in the package (directory) of a file that does.
func (w *Workspace) CgoFileWarnings(spec *Spec, rel string, text []byte) []string {
	if spec.Language != "go" || !slices.ContainsFunc(w.pool.goSpecsWithoutCgo(), func(s *Spec) bool { return s.ID == spec.ID }) {
		return nil
	}
	if len(text) > maxCgoScanBytes {
		text = text[:maxCgoScanBytes]
	}
	if importsC(text) {
		return []string{fmt.Sprintf("%s runs without a C compiler (CGO_ENABLED=0): this file imports \"C\" and is not loaded", spec.ID)}
	}
	s := w.cgo()
	if s.dirs[path.Dir(rel)] {
		return []string{fmt.Sprintf("%s runs without a C compiler (CGO_ENABLED=0): this file's package has files that import \"C\", which are not loaded", spec.ID)}
	}
	// A file that imports such a package uses what those files declare.
	for _, ip := range imports(text) {
		if s.pkgs[ip] {
			return []string{fmt.Sprintf("%s runs without a C compiler (CGO_ENABLED=0): this file imports %s, whose files that import \"C\" are not loaded", spec.ID, ip)}
		}
	}
	return nil
}
