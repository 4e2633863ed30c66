package deps

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
)

// C and C++ (clangd). clangd reads a file with the flags of a compilation
// database; without one it guesses (no include paths, no defines) and
// reports false errors and loses references. A repository that commits a
// compile_commands.json (or compile_flags.txt) at its root or in build/
// is read as it is, by clangd's own search. Otherwise the phase writes a
// synthesized one into the workspace home, never into the tree and never
// by running the build: one entry per C/C++ source with the include
// directories, definitions and standard its CMakeLists.txt / Makefile.am
// / Makefile files say statically (cbuild.go), each build file's flags
// applying to its directory and below. clangd gets its path as the
// initialization option compilationDatabasePath (CInit), and keeps its
// background index beside it, in the home. Answers say it: the index
// beside the tree records what the database was made from, and CProblems
// turns that into a load warning, so every answer is partial.

// cIndexFile, beside the tree, records the synthesized database.
const cIndexFile = "c-compile.json"

// Bounds of the walk and of the database.
const (
	maxCWalk       = 50_000
	maxCBuildFiles = 256
	maxCSources    = 20_000
	maxCDepth      = 24
)

type cIndex struct {
	// From lists the build files read (tree paths); Sources counts entries.
	From    []string `json:"from"`
	Sources int      `json:"sources"`
	// Truncated: a bound cut the walk short.
	Truncated bool `json:"truncated,omitempty"`
	// CMake is what the warning says of the CMake reading: per target,
	// or why not.
	CMake string `json:"cmake,omitempty"`
	// Sets are the distinct flag sets (include directories relative to
	// the tree), Files each source with its set: the database is written
	// from them at each clangd start (CInit), with the published tree's
	// paths — the phase runs on the tree before it is published, where
	// its absolute paths are not yet the final ones.
	Sets  []cFlags `json:"sets"`
	Files []cFile  `json:"files"`
}

type cFile struct {
	Path string `json:"path"`
	Set  int    `json:"set"`
}

// maxCIndex bounds reading the index back.
const maxCIndex = 32 << 20

var cSourceExts = map[string]bool{".c": false, ".cc": true, ".cpp": true, ".cxx": true, ".c++": true, ".C": true}

// cdbDir is where a tree's synthesized database lives in the home: the
// home is shared by every revision of a repository, so it is named by the
// tree.
func cdbDir(ws runtime.Workspace) string {
	sum := sha256.Sum256([]byte(ws.Root))
	return "clangd/" + hex.EncodeToString(sum[:8])
}

type buildFile struct {
	dir, name string // slash directory in the tree, base name
}

// scanC walks the tree once: its C/C++ sources, its build files and
// whether it has a database of its own.
func scanC(root string) (sources []string, builds []buildFile, modules []string, own, truncated bool) {
	seen := 0
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if seen++; seen > maxCWalk {
			truncated = true
			return filepath.SkipAll
		}
		rel, rerr := filepath.Rel(root, p)
		if rerr != nil {
			return nil
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			// node_modules: the npm packages installed there are no
			// sources of the repository's (a node addon's headers).
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || rel == "node_modules" || strings.Count(rel, "/") >= maxCDepth) {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		name := d.Name()
		dir := path.Dir(rel)
		switch name {
		case "compile_commands.json", "compile_flags.txt":
			if dir == "." || dir == "build" {
				own = true
			}
		case "CMakeLists.txt", "Makefile.am", "Makefile", "GNUmakefile", "makefile":
			if len(builds) < maxCBuildFiles {
				builds = append(builds, buildFile{dir: dir, name: name})
			} else {
				truncated = true
			}
		default:
			// CMake modules of the tree: one may make targets that a
			// CMakeLists.txt's include() brings in.
			if strings.HasSuffix(name, ".cmake") {
				if len(modules) < maxCBuildFiles {
					modules = append(modules, rel)
				} else {
					truncated = true
				}
			}
		}
		if _, ok := cSourceExts[path.Ext(name)]; ok {
			if len(sources) < maxCSources {
				sources = append(sources, rel)
			} else {
				truncated = true
			}
		}
		return nil
	})
	return sources, builds, modules, own, truncated
}

// synthesizeC writes the compilation database of a tree without one. It
// returns nothing to warn about at prepare: the index beside the tree
// carries the note every clangd answer gets (CProblems).
func (f *Fetcher) synthesizeC(ws runtime.Workspace, w *warnings) {
	sources, builds, modules, own, truncated := scanC(ws.Root)
	if own || len(sources) == 0 {
		return
	}
	// Directory flags: CMake's variables flow into subdirectories, so
	// parents are read first.
	sort.Slice(builds, func(i, j int) bool {
		di, dj := depthOf(builds[i].dir), depthOf(builds[j].dir)
		if di != dj {
			return di < dj
		}
		if builds[i].dir != builds[j].dir {
			return builds[i].dir < builds[j].dir
		}
		return buildRank(builds[i].name) < buildRank(builds[j].name)
	})
	flags := map[string][]cFlags{}
	cmakeVars := map[string]map[string]string{}
	var from []string
	hasCMake := map[string]bool{}
	for _, b := range builds {
		if b.name == "CMakeLists.txt" {
			hasCMake[b.dir] = true
		}
	}
	for _, b := range builds {
		// A generated Makefile beside the CMakeLists.txt or Makefile.am
		// that made it says nothing more (and is seldom committed).
		if (b.name == "Makefile" || b.name == "GNUmakefile" || b.name == "makefile") && (hasCMake[b.dir] || hasBuild(builds, b.dir, "Makefile.am")) {
			continue
		}
		data, err := readRegular(filepath.Join(ws.Root, filepath.FromSlash(b.dir), b.name), maxBuildFileBytes)
		if err != nil {
			continue
		}
		rel := path.Join(b.dir, b.name)
		from = append(from, rel)
		var fl cFlags
		if b.name == "CMakeLists.txt" {
			inherited := parentVars(cmakeVars, b.dir)
			var vars map[string]string
			fl, vars = parseCMake(data, b.dir, inherited)
			cmakeVars[b.dir] = vars
		} else {
			fl = parseMakefile(data, b.dir, ".", b.name == "Makefile.am")
		}
		flags[b.dir] = append(flags[b.dir], fl)
	}
	// A CMake project's build enters the root's directory and those
	// add_subdirectory names, from the directories it enters; a
	// directory with a CMakeLists.txt no build can enter (fmt's
	// test/fuzzing behind FMT_FUZZ, OFF; the test projects its tests
	// configure on their own) adds neither flags nor sources, as in
	// CMake's own database.
	// When an add_subdirectory of an entered directory names one a
	// static read cannot tell, every directory is kept.
	// When the project's targets can be followed, they say which sources
	// get an entry and with which flags (perTarget); cmakeNote is what
	// the warning says of the reading.
	var perTarget map[string]cFlags
	var cmakeNote string
	var cmakeDirs map[string]*cmakeDir
	if hasCMake["."] {
		walked := slices.Clone(sources)
		reached := map[string]bool{".": true}
		queue := []string{"."}
		unknown := false
		for len(queue) > 0 {
			d := queue[0]
			queue = queue[1:]
			for _, fl := range flags[d] {
				unknown = unknown || fl.SubdirUnknown
				for _, sub := range fl.Subdirs {
					if hasCMake[sub] && !reached[sub] {
						reached[sub] = true
						queue = append(queue, sub)
					}
				}
			}
		}
		if unknown {
			for d := range hasCMake {
				reached[d] = true
			}
		}
		cmakeDir := func(dir string) string { // the nearest directory with a CMakeLists.txt
			as := ancestors(dir)
			for i := len(as) - 1; i >= 0; i-- {
				if hasCMake[as[i]] {
					return as[i]
				}
			}
			return "."
		}
		for d := range flags {
			if !reached[cmakeDir(d)] {
				delete(flags, d)
			}
		}
		kept := sources[:0]
		for _, src := range sources {
			if reached[cmakeDir(path.Dir(src))] {
				kept = append(kept, src)
			}
		}
		sources = kept
		read := from[:0]
		for _, rel := range from {
			if path.Base(rel) != "CMakeLists.txt" || reached[path.Dir(rel)] {
				read = append(read, rel)
			}
		}
		from = read
		perTarget, cmakeDirs, cmakeNote = cmakeTargetSources(reached, unknown, modules, ws.Root, walked)
		// A target may compile a source of a directory the build does
		// not enter (add_library(x vendor/a.c)).
		for _, src := range walked {
			if _, ok := perTarget[src]; ok && !reached[cmakeDir(path.Dir(src))] {
				sources = append(sources, src)
			}
		}
	}
	// Where Makefile.am files list their sources, only those get an
	// entry (as in the build's own database); a source under no listing
	// directory keeps one.
	listed := map[string]bool{}
	listing := map[string]bool{}
	for d, fls := range flags {
		for _, fl := range fls {
			for _, src := range fl.Sources {
				listed[src] = true
				listing[d] = true
			}
		}
	}
	if perTarget != nil {
		// The targets' directories list their sources as a Makefile.am does.
		for src := range perTarget {
			listed[src] = true
		}
		for d, cd := range cmakeDirs {
			for _, t := range cd.Targets {
				if len(t.Sources) > 0 {
					listing[d] = true
				}
			}
		}
	}
	if len(listed) > 0 {
		kept := sources[:0]
		for _, src := range sources {
			under := false
			for _, a := range ancestors(path.Dir(src)) {
				under = under || listing[a]
			}
			if listed[src] || !under {
				kept = append(kept, src)
			}
		}
		sources = kept
	}
	var global cFlags
	for _, fls := range flags {
		for _, fl := range fls {
			for _, g := range fl.Global {
				global.addInclude(g)
				if slices.Contains(fl.System, g) {
					global.addSystem(g)
				}
			}
		}
	}
	sort.Strings(global.Includes)
	// configure's definitions (cconfigure.go), on every compiler line as
	// its DEFS are.
	for _, name := range []string{"configure.ac", "configure.in"} {
		data, err := readRegular(filepath.Join(ws.Root, name), maxBuildFileBytes)
		if err != nil {
			continue
		}
		from = append([]string{name}, from...)
		ac := parseConfigureAC(data, systemPlatform(), configureMacros(ws.Root, data)...)
		if !ac.Header {
			global.Defines = ac.Defines
		}
		global.COpt, global.CxxOpt = ac.COpt, ac.CxxOpt
		break
	}
	idx := cIndex{From: from, Sources: len(sources), Truncated: truncated, CMake: cmakeNote}
	setOf := map[string]int{}
	for _, src := range sources {
		var all cFlags
		for _, x := range global.Defines {
			all.addDefine(x)
		}
		if tf, ok := perTarget[src]; ok {
			for _, x := range tf.Defines {
				all.addDefine(x)
			}
			for _, i := range tf.Includes {
				all.addInclude(i)
			}
			// Not the global include directories: a target's PUBLIC
			// ones reach the targets that link it only.
			for _, i := range tf.System {
				all.addSystem(i)
			}
			all.CStd, all.CxxStd = tf.CStd, tf.CxxStd
			all.COpt, all.CxxOpt = global.COpt, global.CxxOpt
			n := flagSet(&idx, setOf, all)
			idx.Files = append(idx.Files, cFile{Path: src, Set: n})
			continue
		}
		for _, d := range ancestors(path.Dir(src)) {
			for _, fl := range flags[d] {
				for _, i := range fl.Includes {
					all.addInclude(i)
					if slices.Contains(fl.System, i) {
						all.addSystem(i)
					}
				}
				for _, x := range fl.Defines {
					all.addDefine(x)
				}
				if fl.CStd != "" {
					all.CStd = fl.CStd
				}
				if fl.CxxStd != "" {
					all.CxxStd = fl.CxxStd
				}
			}
		}
		for _, g := range global.Includes {
			all.addInclude(g)
		}
		for _, g := range global.System {
			all.addSystem(g)
		}
		all.COpt, all.CxxOpt = global.COpt, global.CxxOpt
		n := flagSet(&idx, setOf, all)
		idx.Files = append(idx.Files, cFile{Path: src, Set: n})
	}
	raw, err := json.Marshal(idx)
	if err == nil {
		err = writeAtomic(filepath.Join(filepath.Dir(ws.Root), cIndexFile), append(raw, '\n'), 0o444)
	}
	if err != nil {
		f.log.Error("deps: clangd index", "err", err)
		w.add("the C/C++ compilation database could not be made; clangd reads files without include paths")
	}
}

// flagSet is the index of fl among idx's distinct flag sets, added when
// it is new.
func flagSet(idx *cIndex, setOf map[string]int, fl cFlags) int {
	key, _ := json.Marshal(fl)
	n, ok := setOf[string(key)]
	if !ok {
		n = len(idx.Sets)
		setOf[string(key)] = n
		idx.Sets = append(idx.Sets, fl)
	}
	return n
}

// cmakeTargetSources reads the CMakeLists.txt files of the directories
// the build enters per target (cmaketargets.go; parents first, a
// directory's variables and functions flowing into its subdirectories)
// and returns the flags of each source their targets compile (the first
// target naming a source gives its flags, as the first of a file's
// entries in CMake's own database is the one clangd reads) and the
// directories read; nil when the project's targets cannot be followed.
// The note says which, for the warning.
func cmakeTargetSources(reached map[string]bool, subdirUnknown bool, modules []string, root string, sources []string) (map[string]cFlags, map[string]*cmakeDir, string) {
	const fallback = "; CMake's targets were not followed ("
	const rule = "), so every source below a CMakeLists.txt has an entry with its directory's flags"
	if subdirUnknown {
		return nil, nil, fallback + "an add_subdirectory a static read cannot tell" + rule
	}
	var order []string
	for d := range reached {
		order = append(order, d)
	}
	// Parents first, as the build enters them.
	sort.Slice(order, func(i, j int) bool {
		if di, dj := depthOf(order[i]), depthOf(order[j]); di != dj {
			return di < dj
		}
		return order[i] < order[j]
	})
	proj := newCMakeProject()
	dirs := map[string]*cmakeDir{}
	vars := map[string]map[string]string{}
	any := false
	for _, d := range order {
		data, err := readRegular(filepath.Join(root, filepath.FromSlash(d), "CMakeLists.txt"), maxBuildFileBytes)
		if err != nil {
			continue
		}
		cd, v := readCMakeTargets(data, d, parentVars(vars, d), proj)
		if cd.Unknown != "" {
			return nil, nil, fallback + cd.Unknown + rule
		}
		dirs[d], vars[d] = cd, v
		for _, t := range cd.Targets {
			any = any || len(t.Sources) > 0
		}
	}
	if !any {
		return nil, nil, ""
	}
	for _, m := range modules {
		data, err := readRegular(filepath.Join(root, filepath.FromSlash(m)), maxBuildFileBytes)
		if err == nil && definesTargets(cmakeCommands(data)) {
			return nil, nil, fallback + m + " makes targets, which an include() may bring in" + rule
		}
	}
	exists := map[string]bool{}
	for _, s := range sources {
		exists[s] = true
	}
	out := map[string]cFlags{}
	for _, d := range order {
		if dirs[d] == nil {
			continue
		}
		for _, t := range dirs[d].Targets {
			var fl *cFlags
			for _, src := range t.Sources {
				if _, done := out[src]; done || !exists[src] {
					continue
				}
				if fl == nil {
					f := cmakeSourceFlags(t, proj, dirs)
					fl = &f
				}
				out[src] = *fl
			}
		}
	}
	return out, dirs, "; CMake read per target: the sources its targets compile, each with its target's flags and those of the targets it links"
}

// maxCDBBytes bounds the compilation database written into the home at
// each clangd (re)start: 20,000 sources with 512 long definitions each
// would otherwise be gigabytes.
const maxCDBBytes = 64 << 20

// writeCDB writes the compilation database of idx for ws into its home
// (through safefs: the home is the jail's) and returns its directory.
func writeCDB(ws runtime.Workspace, idx cIndex) (string, error) {
	return writeCDBBudget(ws, idx, maxCDBBytes)
}

func writeCDBBudget(ws runtime.Workspace, idx cIndex, budget int64) (string, error) {
	home, owner, err := openHomeDir(ws.Home, cdbDir(ws))
	if err != nil {
		return "", err
	}
	defer home.Close()
	// Streamed: the database is never held whole in memory.
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := encodeCDB(pw, ws, idx, budget)
		pw.CloseWithError(err)
		done <- err
	}()
	err = home.CreateFrom("compile_commands.json", pr, 0o644, owner)
	pr.CloseWithError(errors.New("compile_commands.json: not written")) // ends the encoder if the write stopped early
	if encErr := <-done; err == nil {
		err = encErr
	}
	if err != nil {
		return "", err
	}
	return filepath.Join(ws.Home, filepath.FromSlash(cdbDir(ws))), nil
}

// cdbCut is how many of idx's sources the database's byte bound leaves
// without an entry (what encodeCDB would cut, counted without writing).
func cdbCut(ws runtime.Workspace, idx cIndex) int {
	cut, _ := encodeCDB(io.Discard, ws, idx, maxCDBBytes)
	return cut
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// encodeCDB writes the JSON compilation database of idx for ws to out,
// one entry at a time, stopping before the entry that would take it over
// budget bytes; cut is the number of sources left out.
func encodeCDB(out io.Writer, ws runtime.Workspace, idx cIndex, budget int64) (cut int, err error) {
	type entry struct {
		Directory string   `json:"directory"`
		File      string   `json:"file"`
		Arguments []string `json:"arguments"`
	}
	cw := &countingWriter{w: out}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if _, err := io.WriteString(cw, "["); err != nil {
		return 0, err
	}
	n := 0
	for i, f := range idx.Files {
		if f.Set < 0 || f.Set >= len(idx.Sets) {
			continue
		}
		rel, ok := inTree(".", f.Path)
		if !ok {
			continue
		}
		fl := idx.Sets[f.Set]
		cxx := cSourceExts[path.Ext(rel)]
		args := []string{"clang"}
		if cxx {
			args[0] = "clang++"
		}
		if cxx && fl.CxxStd != "" {
			args = append(args, "-std="+fl.CxxStd)
		} else if !cxx && fl.CStd != "" {
			args = append(args, "-std="+fl.CStd)
		}
		if cxx && fl.CxxOpt || !cxx && fl.COpt {
			args = append(args, "-O2")
		}
		for _, x := range fl.Defines {
			args = append(args, "-D"+x)
		}
		for _, inc := range fl.Includes {
			if d, ok := inTree(".", inc); ok && len(d) <= maxCFlagLen {
				if slices.Contains(fl.System, inc) {
					args = append(args, "-isystem", filepath.Join(ws.Root, filepath.FromSlash(d)))
				} else {
					args = append(args, "-I"+filepath.Join(ws.Root, filepath.FromSlash(d)))
				}
			}
		}
		abs := filepath.Join(ws.Root, filepath.FromSlash(rel))
		args = append(args, "-c", abs)
		buf.Reset()
		if n > 0 {
			buf.WriteString(",")
		}
		buf.WriteString("\n")
		if err := enc.Encode(entry{Directory: ws.Root, File: abs, Arguments: args}); err != nil {
			return 0, err
		}
		if cw.n+int64(buf.Len())+2 > budget {
			cut = len(idx.Files) - i
			break
		}
		if _, err := cw.Write(bytes.TrimSuffix(buf.Bytes(), []byte("\n"))); err != nil {
			return 0, err
		}
		n++
	}
	_, err = io.WriteString(cw, "\n]\n")
	return cut, err
}

func depthOf(dir string) int {
	if dir == "." {
		return 0
	}
	return strings.Count(dir, "/") + 1
}

func buildRank(name string) int {
	switch name {
	case "CMakeLists.txt":
		return 0
	case "Makefile.am":
		return 1
	}
	return 2
}

func hasBuild(bs []buildFile, dir, name string) bool {
	for _, b := range bs {
		if b.dir == dir && b.name == name {
			return true
		}
	}
	return false
}

// parentVars are the CMake variables of the nearest read ancestor of dir.
func parentVars(vars map[string]map[string]string, dir string) map[string]string {
	as := ancestors(dir)
	for i := len(as) - 2; i >= 0; i-- {
		if v, ok := vars[as[i]]; ok {
			return v
		}
	}
	return nil
}

// ancestors are ".", then each directory down to dir itself.
func ancestors(dir string) []string {
	out := []string{"."}
	if dir == "." || dir == "" {
		return out
	}
	parts := strings.Split(dir, "/")
	for i := range parts {
		out = append(out, strings.Join(parts[:i+1], "/"))
	}
	return out
}

func readCIndex(ws runtime.Workspace) (cIndex, bool) {
	var idx cIndex
	data, err := readRegular(filepath.Join(filepath.Dir(ws.Root), cIndexFile), maxCIndex)
	if err != nil || json.Unmarshal(data, &idx) != nil {
		return cIndex{}, false
	}
	return idx, true
}

// CInit is clangd's initialization options for ws (runtime.Spec.Init):
// when the phase recorded synthesized flags, it writes the database into
// the home with ws's paths and names its directory.
func CInit(ws runtime.Workspace) json.RawMessage {
	idx, ok := readCIndex(ws)
	if !ok {
		return nil
	}
	dir, err := writeCDB(ws, idx)
	if err != nil {
		return nil
	}
	raw, err := json.Marshal(map[string]any{"compilationDatabasePath": dir})
	if err != nil {
		return nil
	}
	return raw
}

// CProblems is what clangd's answers on ws are partial for
// (runtime.Spec.Problems): flags that were synthesized, not the build's.
func CProblems(ws runtime.Workspace) []string {
	idx, ok := readCIndex(ws)
	if !ok {
		return nil
	}
	from := "no build file (no include paths)"
	if len(idx.From) > 0 {
		from = strings.Join(clipList(idx.From, 4), ", ")
	}
	msg := "no compile_commands.json in the repository: compile flags were synthesized from " + from +
		" (include directories, definitions and standard read statically, configure's link and header checks answered against the platform; neither configure nor the build was run, so generated headers and the results of compile tests are missing)"
	msg += idx.CMake
	if idx.Truncated {
		msg += "; the tree was larger than the walk's bound, so some sources have no entry"
	}
	if cut := cdbCut(ws, idx); cut > 0 {
		msg += fmt.Sprintf("; the compilation database's size bound (%d MiB) left %d of %d sources without an entry", maxCDBBytes>>20, cut, len(idx.Files))
	}
	return []string{msg}
}

func clipList(l []string, n int) []string {
	if len(l) <= n {
		return l
	}
	out := append([]string(nil), l[:n]...)
	return append(out, "…")
}

// cFamily are the languages clangd serves.
var cFamily = map[string]bool{"c": true, "cpp": true, "objective-c": true, "objective-cpp": true}

// Init is the initialization-options hook (runtime.Spec.Init) of a
// language's servers, nil for a language without one.
func Init(language string) func(runtime.Workspace) json.RawMessage {
	if cFamily[language] {
		return CInit
	}
	return nil
}

// Problems is the load-problems hook (runtime.Spec.Problems) of a
// language's servers, nil for a language without one.
func Problems(language string) func(runtime.Workspace) []string {
	if cFamily[language] {
		return CProblems
	}
	return nil
}
