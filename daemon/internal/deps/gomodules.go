package deps

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"go/version"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/mod/modfile"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
)

// Bounds of the walk that finds a tree's Go modules.
const (
	maxGoModules = 64
	maxWalkDirs  = 20000
	maxWalkDepth = 32
)

// goIndexFile lists the Go modules the phase prepared for a tree, beside
// the tree (daemon-owned, published with it in one rename, read-only), so
// a server started on the tree later finds each module and its flags.
const goIndexFile = "go-modules.json"

// maxGoIndex bounds reading the index back.
const maxGoIndex = maxGoWorkSum + 4<<20 // it holds a go.work.sum

// goModule is one entry of the index: a module directory of the tree
// ("." for the root) and the GOFLAGS its go commands run with.
type goModule struct {
	Dir     string `json:"dir"`
	GoFlags string `json:"goflags"`
	// InWork: the tree's go.work uses it, so it loads in workspace mode.
	InWork bool `json:"in_work,omitempty"`
}

// goIndex is the whole index: the modules, and the tree's go.work.
type goIndex struct {
	Modules []goModule `json:"modules"`
	Work    *goWork    `json:"work,omitempty"`
	// WorkKey names the go.work's overlay directory in the home.
	WorkKey string `json:"work_key,omitempty"`
}

// findModules lists the directories of root holding a go.mod, "." first,
// the way the go command sees modules: vendor, testdata and node_modules
// directories and names starting with "." or "_" are skipped, links are
// never followed. The walk is bounded in directories, depth and modules;
// more reports that a bound cut it short.
func findModules(root string) (dirs []string, more bool) {
	visited := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == root {
				return err
			}
			return nil
		}
		if !d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if rel != "." {
			name := d.Name()
			if name == "vendor" || name == "testdata" || name == "node_modules" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
			if strings.Count(rel, "/") >= maxWalkDepth {
				more = true
				return filepath.SkipDir
			}
		}
		if visited++; visited > maxWalkDirs {
			more = true
			return filepath.SkipAll
		}
		if fi, err := os.Lstat(filepath.Join(p, "go.mod")); err == nil && fi.Mode().IsRegular() {
			if len(dirs) == maxGoModules {
				more = true
				return filepath.SkipAll
			}
			dirs = append(dirs, rel)
		}
		return nil
	})
	if err != nil {
		return nil, false
	}
	return dirs, more
}

// overlayKey names a module's overlay in the home: the home is shared by
// every revision of a repository, so the name is the hash of what the
// overlay is made from.
func overlayKey(dir string, gomod, gosum []byte) string {
	h := sha256.New()
	for _, b := range [][]byte{[]byte(dir), gomod, gosum} {
		var n [8]byte
		for i, l := 0, len(b); i < 8; i, l = i+1, l>>8 {
			n[i] = byte(l)
		}
		h.Write(n[:])
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// overlayDir is where the overlay of key lives, relative to the home.
func overlayDir(key string) string { return "go/overlay/" + key }

func writeGoIndex(root string, idx goIndex) error {
	data, err := json.Marshal(idx)
	if err != nil {
		return err
	}
	return writeAtomic(filepath.Join(filepath.Dir(root), goIndexFile), append(data, '\n'), 0o444)
}

// Folders is the workspace-folder hook (runtime.Spec.Folders) of a
// language's servers, nil for a language without one.
func Folders(language string) func(runtime.Workspace) []runtime.Folder {
	if language == "go" {
		return GoFolders
	}
	return nil
}

// GoFolders makes every Go module the phase prepared for ws a workspace
// folder of gopls, whose env settings give that module's go commands their
// flags: a go.work in the home using only the module, over its overlay's
// go.sum (writeModuleWork), else its overlay (-mod=mod -modfile=…, so
// whatever the go command writes goes to the home), or -mod=vendor. gopls asks for a
// folder's settings with workspace/configuration scoped to it and puts
// each file in the innermost folder, so nested modules each get their own.
// A tree with a go.work loads in workspace mode as on an ordinary
// checkout: GoFolders writes the home's copy of it (the published tree's
// absolute paths, and a go.work.sum with the verified lines), and the
// root folder gets env.GOWORK; the modules it uses get no folder of their
// own. Nothing prepared: no folders, and the go command's default applies
// (vendor/ where it is, else -mod=readonly).
func GoFolders(ws runtime.Workspace) []runtime.Folder {
	data, err := readRegular(filepath.Join(filepath.Dir(ws.Root), goIndexFile), maxGoIndex)
	if err != nil {
		return nil
	}
	var idx goIndex
	if json.Unmarshal(data, &idx) != nil {
		return nil
	}
	work := ""
	if idx.Work != nil {
		work = writeGoWork(ws, idx)
	}
	var out []runtime.Folder
	folder := func(dir string, env map[string]string) {
		st, err := json.Marshal(map[string]any{"gopls": map[string]any{"env": env}})
		if err == nil {
			out = append(out, runtime.Folder{Dir: filepath.Join(ws.Root, filepath.FromSlash(dir)), Settings: st})
		}
	}
	if work != "" {
		folder(".", map[string]string{"GOWORK": work, "GOFLAGS": ""})
	}
	for _, m := range idx.Modules {
		if !treeDir(m.Dir) || len(out) == maxGoModules || (work != "" && (m.InWork || m.Dir == ".")) {
			continue
		}
		if w := writeModuleWork(ws, m); w != "" {
			folder(m.Dir, map[string]string{"GOWORK": w, "GOFLAGS": ""})
			continue
		}
		folder(m.Dir, map[string]string{"GOFLAGS": m.GoFlags})
	}
	sort.SliceStable(out, func(i, j int) bool { return len(out[i].Dir) < len(out[j].Dir) })
	return out
}

// overlayFlags is how writeOverlay's GOFLAGS begin.
const overlayFlags = "-mod=mod -modfile="

// writeModuleWork writes, for a module of ws loading through its overlay
// (GOFLAGS -mod=mod -modfile=…), a go.work in the home that uses only that
// module of the published tree, with the overlay's go.sum as its
// go.work.sum, and returns its path; "" when the module has no overlay or
// it cannot (then the module keeps its GOFLAGS).
//
// gopls counts a package as the workspace's only when the go.mod that go
// list reports for its module is one of the view's (the go.mod found above
// the folder). Through -modfile, go list reports the overlay's go.mod for
// every package of the module, so only packages with an open file were
// the workspace's: references, implementations and workspace symbols
// missed every other package (cobra's doc/, logrus's hooks/* and its
// external tests). In workspace mode the module's go.mod is the tree's
// own, as on an ordinary checkout, and the go command finds the verified
// lines in go.work.sum; it never writes a go.mod there. A module whose
// go.mod has no go directive keeps its overlay (see below), and with it
// the limitation.
func writeModuleWork(ws runtime.Workspace, m goModule) string {
	abs, ok := strings.CutPrefix(m.GoFlags, overlayFlags)
	if !ok || strings.ContainsAny(abs, " \t") {
		return ""
	}
	rel, err := filepath.Rel(ws.Home, abs)
	if err != nil {
		return ""
	}
	rel = filepath.ToSlash(rel)
	key, ok := strings.CutSuffix(strings.TrimPrefix(rel, overlayDir("")), "/go.mod")
	if !strings.HasPrefix(rel, overlayDir("")) || !ok || len(key) != 32 || strings.Trim(key, "0123456789abcdef") != "" {
		return ""
	}
	// The tree's go.mod (daemon-owned, immutable) says the module's go
	// version. Without a go directive the go command assumes go 1.16 in
	// module mode, but reports no version in workspace mode, and gopls would
	// then check the module as the newest Go (modernizer hints an ordinary
	// checkout does not give): such a module keeps its overlay.
	gomod, err := readRegular(filepath.Join(ws.Root, filepath.FromSlash(m.Dir), "go.mod"), maxGoMod)
	if err != nil {
		return ""
	}
	mf, err := modfile.ParseLax("go.mod", gomod, nil)
	if err != nil || mf.Go == nil {
		return ""
	}
	gosum, err := readHome(ws.Home, overlayDir(key)+"/go.sum", maxGoWorkSum)
	if err != nil {
		return ""
	}
	// go.work needs go 1.18, and at least each module's go version.
	goVersion := "1.18"
	if version.Compare("go"+mf.Go.Version, "go"+goVersion) > 0 {
		goVersion = mf.Go.Version
	}
	text := fmt.Sprintf("go %s\nuse %s\n", goVersion, modfile.AutoQuote(filepath.Join(ws.Root, filepath.FromSlash(m.Dir))))
	// The copy names the published tree's paths: each revision and module
	// gets its own.
	dir := overlayDir(overlayKey(ws.Root+"\x00"+m.Dir, []byte(text), gosum))
	d, owner, err := openHomeDir(ws.Home, dir)
	if err != nil {
		return ""
	}
	defer d.Close()
	if d.WriteFile("go.work", []byte(text), 0o644, owner) != nil || d.WriteFile("go.work.sum", gosum, 0o644, owner) != nil {
		return ""
	}
	return filepath.Join(ws.Home, filepath.FromSlash(dir), "go.work")
}

// writeGoWork writes the home's go.work for ws and returns its path, ""
// when it cannot (then each module loads on its own).
func writeGoWork(ws runtime.Workspace, idx goIndex) string {
	if len(idx.WorkKey) != 32 || strings.Trim(idx.WorkKey, "0123456789abcdef") != "" {
		return ""
	}
	for _, u := range idx.Work.Use {
		if !treeDir(u) {
			return ""
		}
	}
	for _, r := range idx.Work.Replace {
		if r.NewDir != "" && !treeDir(r.NewDir) {
			return ""
		}
	}
	// The copy names the published tree's paths, so revisions sharing the
	// home (and the same go.work) each get their own.
	rel := overlayDir(overlayKey(ws.Root, []byte(idx.WorkKey), nil))
	d, owner, err := openHomeDir(ws.Home, rel)
	if err != nil {
		return ""
	}
	defer d.Close()
	if d.WriteFile("go.work", idx.Work.text(ws.Root), 0o644, owner) != nil || d.WriteFile("go.work.sum", []byte(idx.Work.Sum), 0o644, owner) != nil {
		return ""
	}
	return filepath.Join(ws.Home, filepath.FromSlash(rel), "go.work")
}

// treeDir: "." or a clean relative slash path within the tree.
func treeDir(d string) bool {
	if d == "." {
		return true
	}
	return d != "" && path.Clean(d) == d && !strings.HasPrefix(d, "/") && d != ".." && !strings.HasPrefix(d, "../")
}
