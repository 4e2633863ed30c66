package deps

import (
	"bytes"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// cFlags are the compiler flags one build file sets for the sources of
// its directory and below, as far as they can be read without running
// anything: include directories (slash paths relative to the tree's root,
// never outside it), macro definitions and a language standard.
type cFlags struct {
	Includes []string
	// Global are include directories for every source of the tree (a
	// CMake target's PUBLIC and INTERFACE ones).
	Global []string `json:",omitempty"`
	// System are the include directories (of Includes and Global) that
	// are system ones (-isystem; CMake's SYSTEM): clang and clang-tidy
	// report nothing from inside them, as from /usr/include (fmt's
	// gtest: clang-tidy's checks on what its TEST macro expands to).
	System []string `json:",omitempty"`
	// Sources are the sources an automake file's *_SOURCES list (tree
	// paths): the files its build compiles.
	Sources []string `json:"-"`
	// Subdirs are the directories a CMakeLists.txt's add_subdirectory
	// may enter (tree paths): in a branch taken or one a static read
	// cannot rule out.
	Subdirs []string `json:"-"`
	// SubdirUnknown: an add_subdirectory whose directory a static read
	// cannot tell (a variable it does not know, a function's argument).
	SubdirUnknown bool `json:"-"`
	Defines       []string
	CStd          string // "gnu11", "c99", …
	CxxStd        string // "gnu++11", "c++17", …
	// COpt, CxxOpt: the build compiles C (C++) optimized, -O2 (autoconf's
	// default flags): glibc's headers then declare their inline variants
	// (__USE_EXTERN_INLINES, from __OPTIMIZE__).
	COpt   bool `json:",omitempty"`
	CxxOpt bool `json:",omitempty"`
}

// Bounds of the build-file parsers (the files are a tenant's input).
const (
	maxBuildFileBytes = 1 << 20
	maxBuildTokens    = 200_000
	maxCIncludes      = 128
	maxCDefines       = 512
	maxCFlagLen       = 512
	maxCMakeVars      = 512
	maxCMakeDepth     = 64
)

var (
	macroRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(=[^\x00-\x1f]*)?$`)
	stdRE   = regexp.MustCompile(`^(c|gnu|iso9899:)(\+\+)?[0-9a-z:]{1,8}$`)
)

// appendFlag appends v to list unless it is empty, too long, already
// there, or list is full.
func appendFlag(list []string, v string, max int) []string {
	if v == "" || len(v) > maxCFlagLen || len(list) >= max || slices.Contains(list, v) {
		return list
	}
	return append(list, v)
}

func (f *cFlags) addInclude(dir string) { f.Includes = appendFlag(f.Includes, dir, maxCIncludes) }

func (f *cFlags) addGlobal(dir string) { f.Global = appendFlag(f.Global, dir, maxCIncludes) }

func (f *cFlags) addSystem(dir string) { f.System = appendFlag(f.System, dir, maxCIncludes) }

// clangDefaultStd is clang 19's default C and C++ standard (gnu17,
// gnu++17).
const clangDefaultStd = 17

func (f *cFlags) addDefine(d string) {
	if len(d) <= maxCFlagLen && macroRE.MatchString(d) {
		f.Defines = appendFlag(f.Defines, d, maxCDefines)
	}
}

func (f *cFlags) setStd(s string) {
	if len(s) > 24 || !stdRE.MatchString(s) {
		return
	}
	if strings.Contains(s, "++") {
		f.CxxStd = s
	} else {
		f.CStd = s
	}
}

// inTree resolves p, relative to the slash directory dir of the tree, to a
// clean slash path inside the tree ("." for its root); false when it is
// absolute, climbs out or is empty.
func inTree(dir, p string) (string, bool) {
	if p == "" || strings.HasPrefix(p, "/") || strings.ContainsAny(p, "\x00\\") {
		return "", false
	}
	j := path.Clean(path.Join(dir, p))
	if j == ".." || strings.HasPrefix(j, "../") || strings.HasPrefix(j, "/") {
		return "", false
	}
	return j, true
}

// compilerArgs applies the flags of one command line (already split into
// words) that matter to clangd's reading of a file: -I, -iquote, -isystem,
// -D and -std. dir is the build file's directory (relative include paths
// are relative to it, where its compiler runs); expand turns a word's
// variables into their values, false when it cannot.
func (f *cFlags) compilerArgs(words []string, dir string, expand func(string) (string, bool)) {
	for i := 0; i < len(words); i++ {
		w := words[i]
		var opt, val string
		switch {
		case w == "-I" || w == "-isystem" || w == "-iquote" || w == "-D":
			if i+1 >= len(words) {
				return
			}
			opt, val = w, words[i+1]
			i++
		case strings.HasPrefix(w, "-isystem"):
			opt, val = "-isystem", w[len("-isystem"):]
		case strings.HasPrefix(w, "-iquote"):
			opt, val = "-iquote", w[len("-iquote"):]
		case strings.HasPrefix(w, "-I"):
			opt, val = "-I", w[2:]
		case strings.HasPrefix(w, "-D"):
			opt, val = "-D", w[2:]
		case strings.HasPrefix(w, "-std="):
			opt, val = "-std", w[len("-std="):]
		default:
			continue
		}
		v, ok := expand(val)
		if !ok || len(v) > maxCFlagLen {
			continue
		}
		switch opt {
		case "-D":
			f.addDefine(v)
		case "-std":
			f.setStd(v)
		default:
			if p, ok := inTree(dir, v); ok {
				f.addInclude(p)
				if opt == "-isystem" {
					f.addSystem(p)
				}
			}
		}
	}
}

// parseMakefile reads a Makefile or an automake Makefile.am in the tree's
// slash directory dir: the assignments of the variables that carry
// preprocessor and compiler flags (CPPFLAGS, CFLAGS, CXXFLAGS, INCLUDES,
// DEFS, their AM_ and per-target forms), with $(srcdir), $(top_srcdir)
// and their @…@ forms substituted; a word with any other variable is left
// out. What a conditional holds (automake's if/else, make's ifeq/ifdef…)
// does not count: which branch the build takes is configure's, unknown
// here. automake adds
// the Makefile's own directory to the include path (DEFAULT_INCLUDES), so
// for a Makefile.am it is included too. A Makefile.am's *_SOURCES
// (outside conditionals, $(VAR) expanded) say which sources the build
// compiles (cFlags.Sources).
func parseMakefile(data []byte, dir, root string, automake bool) cFlags {
	var f cFlags
	dir, ok := inTree(".", dir)
	if !ok {
		return f
	}
	if len(data) > maxBuildFileBytes {
		data = data[:maxBuildFileBytes]
	}
	if automake {
		f.addInclude(dir)
	}
	expand := func(w string) (string, bool) {
		top := relTo(dir, root)
		r := strings.NewReplacer(
			"$(srcdir)", ".", "${srcdir}", ".", "@srcdir@", ".",
			"$(top_srcdir)", top, "${top_srcdir}", top, "@top_srcdir@", top,
			"$(builddir)", ".", "$(top_builddir)", top, "@top_builddir@", top,
		)
		w = r.Replace(w)
		if strings.ContainsAny(w, "$@`") {
			return "", false
		}
		return w, true
	}
	var conds condStack
	tokens := 0
	vars := map[string][]string{}
	for _, line := range logicalLines(data) {
		if strings.HasPrefix(line, "\t") {
			continue // a recipe
		}
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		word, _, _ := strings.Cut(line, " ")
		switch word {
		case "if", "ifeq", "ifneq", "ifdef", "ifndef":
			conds.push(condUnknown)
			continue
		case "else":
			conds.elseBranch()
			continue
		case "endif":
			conds.pop()
			continue
		}
		if !conds.active() {
			continue
		}
		name, value, ok := makeAssignment(line)
		if !ok {
			continue
		}
		words := strings.Fields(value)
		if tokens += len(words); tokens > maxBuildTokens {
			break
		}
		if automake {
			// Plain variables, for the $(VAR) in *_SOURCES (jq's
			// libjq_la_SOURCES = ${LIBJQ_SRC}).
			if len(vars) < maxCMakeVars {
				op := strings.TrimSpace(line[len(name):])
				if strings.HasPrefix(op, "+=") {
					vars[name] = append(vars[name], words...)
				} else {
					vars[name] = words
				}
			}
			if strings.HasSuffix(name, "_SOURCES") && !strings.HasPrefix(name, "EXTRA_") {
				budget := maxCSources
				for _, w := range expandMakeWords(words, vars, 0, &budget) {
					w = generatedSource(w)
					if _, isSrc := cSourceExts[path.Ext(w)]; !isSrc {
						continue
					}
					if p, ok := inTree(dir, strings.TrimPrefix(strings.TrimPrefix(w, "$(srcdir)/"), "$(top_srcdir)/")); ok && len(f.Sources) < maxCSources {
						f.Sources = append(f.Sources, p)
					}
				}
			}
		}
		if flagVariable(name) {
			f.compilerArgs(words, dir, expand)
		}
	}
	return f
}

// yaccLexOutputs are the C/C++ sources automake's rules make of a yacc or
// lex file a *_SOURCES lists (the automake manual's "Yacc and Lex
// support": foo.y → foo.c, foo.yy → foo.cc, …): the build compiles those,
// beside the grammar. Where a repository commits them (jq's src/parser.c
// and src/lexer.c), they get an entry as in the build's own database;
// where it does not, the walk never finds them and none is made (the
// generator is not run).
var yaccLexOutputs = map[string]string{
	".y": ".c", ".yy": ".cc", ".yxx": ".cxx", ".ypp": ".cpp", ".y++": ".c++",
	".l": ".c", ".ll": ".cc", ".lxx": ".cxx", ".lpp": ".cpp", ".l++": ".c++",
}

// generatedSource is the source a *_SOURCES word compiles to: a yacc or
// lex file's output, any other word itself.
func generatedSource(w string) string {
	if out, ok := yaccLexOutputs[path.Ext(w)]; ok {
		return strings.TrimSuffix(w, path.Ext(w)) + out
	}
	return w
}

// expandMakeWords substitutes $(VAR) and ${VAR} words by the variables
// read so far (a word that is only a reference; others stay), nested up
// to a bound. budget is the words still allowed, shared by the whole
// recursion: a variable referenced k times at each of depth levels would
// otherwise fan out to k^depth words.
func expandMakeWords(words []string, vars map[string][]string, depth int, budget *int) []string {
	var out []string
	for _, w := range words {
		if *budget <= 0 {
			break
		}
		if depth < 4 && len(w) > 3 && (strings.HasPrefix(w, "$(") && strings.HasSuffix(w, ")") || strings.HasPrefix(w, "${") && strings.HasSuffix(w, "}")) {
			out = append(out, expandMakeWords(vars[w[2:len(w)-1]], vars, depth+1, budget)...)
			continue
		}
		out = append(out, w)
		*budget--
	}
	return out
}

// relTo is the slash path from dir up to root, the tree's top ("." when
// dir is it).
func relTo(dir, root string) string {
	_ = root
	if dir == "." || dir == "" {
		return "."
	}
	n := strings.Count(dir, "/") + 1
	return strings.TrimSuffix(strings.Repeat("../", n), "/")
}

// logicalLines joins backslash-continued lines, bounded by the file's
// size.
func logicalLines(data []byte) []string {
	var out []string
	var cur strings.Builder
	for _, l := range bytes.Split(data, []byte("\n")) {
		l = bytes.TrimSuffix(l, []byte("\r"))
		if bytes.HasSuffix(l, []byte("\\")) {
			cur.Write(l[:len(l)-1])
			cur.WriteByte(' ')
			continue
		}
		cur.Write(l)
		out = append(out, cur.String())
		cur.Reset()
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}

var makeAssignRE = regexp.MustCompile(`^([A-Za-z0-9_.]{1,128})\s*(\+=|:=|::=|\?=|=)(.*)$`)

func makeAssignment(line string) (name, value string, ok bool) {
	m := makeAssignRE.FindStringSubmatch(line)
	if m == nil {
		return "", "", false
	}
	return m[1], m[3], true
}

// flagVariable reports whether a make variable carries compiler flags.
func flagVariable(name string) bool {
	switch name {
	case "INCLUDES", "DEFS", "DEFAULT_INCLUDES":
		return true
	}
	for _, s := range []string{"CPPFLAGS", "CFLAGS", "CXXFLAGS"} {
		if name == s || strings.HasSuffix(name, "_"+s) {
			return true
		}
	}
	return false
}

// parseCMake reads a CMakeLists.txt in the tree's slash directory dir:
// include_directories, target_include_directories, add_definitions,
// add_compile_definitions and add_compile_options (their -I/-D/-std
// words; a target's own definitions and options are left out), the standard
// (CMAKE_C_STANDARD, CMAKE_CXX_STANDARD, target_compile_features c_std_N /
// cxx_std_N; gnu unless *_EXTENSIONS is OFF, CMake's default), and set()
// of plain variables for ${…} expansion. Targets are not told apart: what
// any target of the directory uses counts for the directory, as with
// include_directories, except what is INTERFACE only (for the target's
// users). Of function and macro bodies, read where they are defined, only
// the include directories count (their definitions and features depend on
// the call's arguments); of an if(), the branch its condition chooses when
// cmakeCond can tell (options and set() variables, constants, NOT, AND,
// OR, DEFINED; an unset variable is false, as in CMake), none when it
// cannot.
// $<BUILD_INTERFACE:x> is x; other generator expressions and variables
// that are not known leave their word out.
func parseCMake(data []byte, dir string, inherited map[string]string) (cFlags, map[string]string) {
	var f cFlags
	dir, ok := inTree(".", dir)
	if !ok {
		return f, inherited
	}
	if len(data) > maxBuildFileBytes {
		data = data[:maxBuildFileBytes]
	}
	vars := map[string]string{}
	for k, v := range inherited {
		vars[k] = v
	}
	vars["CMAKE_CURRENT_SOURCE_DIR"] = "@/" + dir
	vars["CMAKE_CURRENT_LIST_DIR"] = "@/" + dir
	if _, ok := vars["CMAKE_SOURCE_DIR"]; !ok {
		vars["CMAKE_SOURCE_DIR"] = "@/."
		vars["PROJECT_SOURCE_DIR"] = "@/" + dir
	}
	var cStd, cxxStd int
	// Compile features are minimums: CMake adds a -std flag only when the
	// compiler's default does not meet them, and clang 19's defaults are
	// gnu17 and gnu++17.
	var cMin, cxxMin int
	cExt, cxxExt := true, true
	expand := func(w string) (string, bool) { return cmakeExpand(w, vars) }
	// resolve turns an expanded word that names a directory into a tree
	// path: "@/x" marks one made from a source-dir variable.
	resolve := func(v string) (string, bool) {
		if rest, ok := strings.CutPrefix(v, "@/"); ok {
			return inTree(".", rest)
		}
		return inTree(dir, v)
	}
	var conds condStack
	body := 0 // inside function() or macro(): only include directories count
	for _, c := range cmakeCommands(data) {
		if conds.apply(c, vars) {
			continue
		}
		switch c.name {
		case "function", "macro":
			body++
			continue
		case "endfunction", "endmacro":
			if body > 0 {
				body--
			}
			continue
		}
		if c.name == "add_subdirectory" && conds.possible() && len(c.args) > 0 {
			// Also from a function's body or a branch that cannot be
			// told: a directory is left out only when no build can
			// enter it.
			v, ok := expand(c.args[0])
			if ok {
				var d string
				if d, ok = resolve(v); ok {
					f.Subdirs = appendFlag(f.Subdirs, d, maxCBuildFiles)
				} else {
					ok = strings.HasPrefix(v, "/") || strings.HasPrefix(path.Clean(path.Join(dir, v)), "..") // outside the tree: nothing of it
				}
			}
			f.SubdirUnknown = f.SubdirUnknown || !ok
			continue
		}
		if !conds.active() {
			continue
		}
		if body > 0 && c.name != "include_directories" && c.name != "target_include_directories" {
			continue
		}
		args := c.args
		switch c.name {
		case "project":
			if len(args) > 0 {
				vars["PROJECT_SOURCE_DIR"] = "@/" + dir
				if len(vars) < maxCMakeVars {
					vars[args[0]+"_SOURCE_DIR"] = "@/" + dir
				}
			}
		case "option":
			if len(args) > 0 && len(vars) < maxCMakeVars {
				if _, ok := vars[args[0]]; !ok {
					v := "OFF"
					if len(args) > 2 {
						v, _ = expand(args[2])
					}
					if len(v) > maxCFlagLen {
						continue // bounded like set's values
					}
					vars[args[0]] = v
				}
			}
		case "set":
			if len(args) == 0 || len(vars) >= maxCMakeVars {
				continue
			}
			var vals []string
			for _, a := range args[1:] {
				if a == "CACHE" || a == "PARENT_SCOPE" {
					break
				}
				if v, ok := expand(a); ok {
					vals = append(vals, v)
				}
			}
			val := strings.Join(vals, ";")
			if len(val) > maxCFlagLen {
				continue
			}
			switch args[0] {
			case "CMAKE_C_STANDARD":
				cStd, _ = strconv.Atoi(val)
			case "CMAKE_CXX_STANDARD":
				cxxStd, _ = strconv.Atoi(val)
			case "CMAKE_C_EXTENSIONS":
				cExt = !cmakeFalse(val)
			case "CMAKE_CXX_EXTENSIONS":
				cxxExt = !cmakeFalse(val)
			}
			vars[args[0]] = val
		case "include_directories", "target_include_directories":
			if c.name == "target_include_directories" && len(args) > 0 {
				args = args[1:]
			}
			// A target's PUBLIC and INTERFACE directories reach every
			// target that links it, anywhere in the project: they count
			// for the whole tree (Global); PRIVATE ones and
			// include_directories for the directory.
			global, system := false, false
			for _, a := range args {
				v, ok := expand(a)
				if !ok {
					continue
				}
				for _, p := range strings.Split(v, ";") {
					switch p {
					case "PUBLIC", "INTERFACE":
						global = c.name == "target_include_directories"
						continue
					case "PRIVATE":
						global = false
						continue
					case "SYSTEM":
						system = true
						continue
					}
					if cmakeKeyword(p) {
						continue
					}
					if d, ok := resolve(p); ok {
						if system {
							f.addSystem(d)
						}
						if global {
							f.addGlobal(d)
						} else {
							f.addInclude(d)
						}
					}
				}
			}
		case "add_definitions", "add_compile_options":
			f.compilerArgs(cmakeWords(args, expand), dir, func(s string) (string, bool) { return s, true })
		case "add_compile_definitions":
			// A target's own definitions and options
			// (target_compile_definitions, target_compile_options) are left
			// out: targets are not told apart, and one test target's
			// -DFMT_ENFORCE_COMPILE_STRING on every file of its directory
			// changes more answers than it fixes.
			iface := false // INTERFACE items are for the target's users
			for _, w := range cmakeWords(args, expand) {
				switch w {
				case "INTERFACE":
					iface = true
				case "PUBLIC", "PRIVATE":
					iface = false
				default:
					if !iface {
						f.addDefine(strings.TrimPrefix(w, "-D"))
					}
				}
			}
		case "target_compile_features":
			iface := false
			for _, w := range cmakeWords(args, expand) {
				switch w {
				case "INTERFACE":
					iface = true
				case "PUBLIC", "PRIVATE":
					iface = false
				}
				if iface {
					continue
				}
				if n, ok := strings.CutPrefix(w, "cxx_std_"); ok {
					if v, err := strconv.Atoi(n); err == nil && v > cxxMin {
						cxxMin = v
					}
				} else if n, ok := strings.CutPrefix(w, "c_std_"); ok {
					if v, err := strconv.Atoi(n); err == nil && v > cMin {
						cMin = v
					}
				}
			}
		}
	}
	if cMin > clangDefaultStd && cMin > cStd {
		cStd = cMin
	}
	if cxxMin > clangDefaultStd && cxxMin > cxxStd {
		cxxStd = cxxMin
	}
	if cStd > 0 && cStd < 100 {
		f.setStd(map[bool]string{true: "gnu", false: "c"}[cExt] + strconv.Itoa(cStd))
	}
	if cxxStd > 0 && cxxStd < 100 {
		f.setStd(map[bool]string{true: "gnu++", false: "c++"}[cxxExt] + strconv.Itoa(cxxStd))
	}
	out := map[string]string{}
	for k, v := range vars {
		if k != "CMAKE_CURRENT_SOURCE_DIR" && k != "CMAKE_CURRENT_LIST_DIR" {
			out[k] = v
		}
	}
	return f, out
}

func cmakeFalse(v string) bool {
	switch strings.ToUpper(v) {
	case "OFF", "0", "NO", "FALSE", "N", "IGNORE", "":
		return true
	}
	return strings.HasSuffix(strings.ToUpper(v), "-NOTFOUND")
}

func cmakeKeyword(a string) bool {
	switch a {
	case "PUBLIC", "PRIVATE", "INTERFACE", "SYSTEM", "BEFORE", "AFTER":
		return true
	}
	return false
}

// cmakeWords expands every argument and splits lists.
func cmakeWords(args []string, expand func(string) (string, bool)) []string {
	var out []string
	for _, a := range args {
		if v, ok := expand(a); ok {
			for _, w := range strings.Split(v, ";") {
				if w != "" {
					out = append(out, w)
				}
			}
		}
	}
	return out
}

// cmakeExpand substitutes ${VAR} (known variables only, nested up to a
// bound) and the generator expression $<BUILD_INTERFACE:x>; false when
// anything else remains.
func cmakeExpand(w string, vars map[string]string) (string, bool) {
	if len(w) > maxCFlagLen {
		return "", false
	}
	for i := 0; i < 8 && strings.Contains(w, "${"); i++ {
		var b strings.Builder
		rest := w
		for {
			// Stop as soon as the result is over the bound: many
			// references in one argument must not build it first.
			if b.Len() > maxCFlagLen {
				return "", false
			}
			j := strings.Index(rest, "${")
			if j < 0 {
				b.WriteString(rest)
				break
			}
			b.WriteString(rest[:j])
			k := strings.IndexByte(rest[j:], '}')
			if k < 0 {
				return "", false
			}
			name := rest[j+2 : j+k]
			if strings.Contains(name, "${") {
				// Innermost first: keep the outer and expand the inner.
				inner := strings.LastIndex(name, "${")
				b.WriteString(rest[j : j+2+inner])
				rest = rest[j+2+inner:]
				continue
			}
			v, ok := vars[name]
			if !ok || v == cmakeUnknown {
				return "", false
			}
			if b.Len()+len(v) > maxCFlagLen {
				return "", false
			}
			b.WriteString(v)
			rest = rest[j+k+1:]
		}
		w = b.String()
		if len(w) > maxCFlagLen {
			return "", false
		}
	}
	if strings.Contains(w, "${") {
		return "", false
	}
	if strings.HasPrefix(w, "$<BUILD_INTERFACE:") && strings.HasSuffix(w, ">") {
		w = w[len("$<BUILD_INTERFACE:") : len(w)-1]
	}
	if strings.Contains(w, "$<") || strings.Contains(w, "$ENV{") {
		return "", false
	}
	// A "@/" made from a source-dir variable stays at the front only.
	if i := strings.Index(w, "@/"); i > 0 {
		return "", false
	}
	return w, true
}

// cmakeUnknown is the value of a variable a command set to what a static
// read cannot tell (find_package's <Name>_FOUND, a check's result): a
// condition on it is unknown and a word using it is left out.
const cmakeUnknown = "\x00unknown"

type cmakeCommand struct {
	name string
	args []string
}

// cmakeCommands tokenises a CMake file into commands: identifiers followed
// by a parenthesised argument list (nested parentheses stay inside it);
// quoted arguments, bracket arguments and comments (line and bracket) as
// CMake has them. Bounded by maxBuildTokens.
func cmakeCommands(data []byte) []cmakeCommand {
	var out []cmakeCommand
	s := string(data)
	tokens := 0
	i := 0
	for i < len(s) && tokens < maxBuildTokens {
		c := s[i]
		switch {
		case c == '#':
			i = skipCMakeComment(s, i)
		case isIdentStart(c):
			j := i
			for j < len(s) && isIdent(s[j]) {
				j++
			}
			name := strings.ToLower(s[i:j])
			k := j
			for k < len(s) && (s[k] == ' ' || s[k] == '\t') {
				k++
			}
			if k >= len(s) || s[k] != '(' {
				i = j
				continue
			}
			// A condition's nested parentheses group its terms: they
			// are tokens of if(), elseif() and while() only.
			parens := name == "if" || name == "elseif" || name == "while"
			args, end := cmakeArgs(s, k+1, &tokens, parens)
			out = append(out, cmakeCommand{name: name, args: args})
			i = end
		default:
			i++
		}
	}
	return out
}

func isIdentStart(c byte) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}
func isIdent(c byte) bool { return isIdentStart(c) || (c >= '0' && c <= '9') }

// skipCMakeComment returns the index after the comment at s[i] ('#').
func skipCMakeComment(s string, i int) int {
	if n := bracketLen(s, i+1); n > 0 {
		close := "]" + strings.Repeat("=", n-2) + "]"
		if j := strings.Index(s[i+1+n:], close); j >= 0 {
			return i + 1 + n + j + len(close)
		}
		return len(s)
	}
	if j := strings.IndexByte(s[i:], '\n'); j >= 0 {
		return i + j + 1
	}
	return len(s)
}

// bracketLen is the length of a bracket opening "[==[" at s[i], 0 when
// there is none.
func bracketLen(s string, i int) int {
	if i >= len(s) || s[i] != '[' {
		return 0
	}
	j := i + 1
	for j < len(s) && s[j] == '=' {
		j++
	}
	if j < len(s) && s[j] == '[' {
		return j - i + 1
	}
	return 0
}

// cmakeArgs reads arguments from s[i] to the closing parenthesis and
// returns them and the index after it; with parens, nested parentheses
// are arguments "(" and ")" of their own.
func cmakeArgs(s string, i int, tokens *int, parens bool) ([]string, int) {
	var args []string
	depth := 0
	for i < len(s) {
		if *tokens >= maxBuildTokens {
			return args, len(s)
		}
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#':
			i = skipCMakeComment(s, i)
		case c == '(':
			depth++
			i++
			if parens {
				args = append(args, "(")
				*tokens++
			}
		case c == ')':
			if depth == 0 {
				return args, i + 1
			}
			depth--
			i++
			if parens {
				args = append(args, ")")
				*tokens++
			}
		case c == '"':
			j := i + 1
			var b strings.Builder
			for j < len(s) && s[j] != '"' {
				if s[j] == '\\' && j+1 < len(s) {
					if s[j+1] == '\n' {
						j += 2
						continue
					}
					b.WriteByte(s[j+1])
					j += 2
					continue
				}
				b.WriteByte(s[j])
				j++
			}
			args = append(args, b.String())
			*tokens++
			i = j + 1
		case c == '[' && bracketLen(s, i) > 0:
			n := bracketLen(s, i)
			close := "]" + strings.Repeat("=", n-2) + "]"
			j := strings.Index(s[i+n:], close)
			if j < 0 {
				return args, len(s)
			}
			args = append(args, s[i+n:i+n+j])
			*tokens++
			i = i + n + j + len(close)
		default:
			j := i
			gen := 0 // inside $<…>, whose ':' and ';' belong to it
			for j < len(s) {
				d := s[j]
				if d == '$' && j+1 < len(s) && s[j+1] == '<' {
					gen++
				} else if d == '>' && gen > 0 {
					gen--
				}
				if gen == 0 && (d == ' ' || d == '\t' || d == '\n' || d == '\r' || d == '(' || d == ')' || d == '"' || d == '#') {
					break
				}
				if d == '\\' && j+1 < len(s) {
					j++
				}
				j++
			}
			if j == i {
				j++
			}
			args = append(args, s[i:j])
			*tokens++
			i = j
		}
	}
	return args, len(s)
}

// cond is a condition's value as far as a static read can tell.
type cond int

const (
	condFalse cond = iota
	condTrue
	condUnknown
)

// condStack follows nested conditionals: a line counts when every
// enclosing conditional is in the branch it takes.
type condStack struct{ frames []condFrame }

type condFrame struct {
	active  bool // this branch is taken (and the parent's is)
	taken   bool // an earlier branch was taken
	unknown bool // a condition could not be told: no branch from it on
	parent  bool
	// maybe: this branch is not known to be skipped (taken, or behind
	// a condition that could not be told), nor is the parent's;
	// parentMaybe is the parent's.
	maybe, parentMaybe bool
}

func (s *condStack) active() bool {
	return len(s.frames) == 0 || s.frames[len(s.frames)-1].active
}

// possible reports whether a build may take the current branch: no
// enclosing condition is known to skip it.
func (s *condStack) possible() bool {
	return len(s.frames) == 0 || s.frames[len(s.frames)-1].maybe
}

func (s *condStack) push(c cond) {
	if len(s.frames) >= maxCMakeDepth {
		// Too deep to follow: nothing below counts.
		s.frames = append(s.frames, condFrame{unknown: true, maybe: s.possible(), parentMaybe: s.possible()})
		return
	}
	p, pm := s.active(), s.possible()
	s.frames = append(s.frames, condFrame{parent: p, active: p && c == condTrue, taken: c == condTrue, unknown: c == condUnknown,
		maybe: pm && c != condFalse, parentMaybe: pm})
}

func (s *condStack) elseIf(c cond) {
	if len(s.frames) == 0 {
		return
	}
	f := &s.frames[len(s.frames)-1]
	if f.taken {
		f.active, f.maybe = false, false
		return
	}
	f.maybe = f.parentMaybe && c != condFalse
	if f.unknown {
		f.active = false
		return
	}
	f.active, f.taken, f.unknown = f.parent && c == condTrue, c == condTrue, c == condUnknown
}

func (s *condStack) elseBranch() {
	if len(s.frames) == 0 {
		return
	}
	f := &s.frames[len(s.frames)-1]
	f.active = f.parent && !f.taken && !f.unknown
	f.maybe = f.parentMaybe && !f.taken
}

// apply runs c when it is if, elseif, else or endif, and reports whether
// it was.
func (s *condStack) apply(c cmakeCommand, vars map[string]string) bool {
	switch c.name {
	case "if":
		s.push(cmakeCond(c.args, vars))
	case "elseif":
		s.elseIf(cmakeCond(c.args, vars))
	case "else":
		s.elseBranch()
	case "endif":
		s.pop()
	default:
		return false
	}
	return true
}

func (s *condStack) pop() {
	if len(s.frames) > 0 {
		s.frames = s.frames[:len(s.frames)-1]
	}
}

// cmakeCond evaluates an if() condition: terms grouped by parentheses
// and joined by NOT, AND and OR (CMake's precedence: NOT, then AND, then
// OR), each a constant, a variable (true when set to a non-false value;
// unset is false), DEFINED var, or "x IN_LIST
// CMAKE_<LANG>_COMPILE_FEATURES" (clang has every feature CMake names).
// Anything else is unknown; AND with a false term is false and OR with a
// true one true even when another term is unknown.
func cmakeCond(args []string, vars map[string]string) cond {
	if len(args) == 0 || len(args) > 64 {
		return condUnknown
	}
	p := condParser{toks: args, vars: vars}
	v := p.or(0)
	if p.bad || p.i != len(args) {
		return condUnknown
	}
	return v
}

// condParser is a recursive-descent reading of a condition's tokens,
// nested at most maxCMakeDepth deep.
type condParser struct {
	toks []string
	i    int
	vars map[string]string
	bad  bool
}

func (p *condParser) or(depth int) cond {
	v := p.and(depth)
	for !p.bad && p.i < len(p.toks) && p.toks[p.i] == "OR" {
		p.i++
		w := p.and(depth)
		switch {
		case v == condTrue || w == condTrue:
			v = condTrue
		case v == condUnknown || w == condUnknown:
			v = condUnknown
		}
	}
	return v
}

func (p *condParser) and(depth int) cond {
	v := p.not(depth)
	for !p.bad && p.i < len(p.toks) && p.toks[p.i] == "AND" {
		p.i++
		w := p.not(depth)
		switch {
		case v == condFalse || w == condFalse:
			v = condFalse
		case v == condUnknown || w == condUnknown:
			v = condUnknown
		}
	}
	return v
}

func (p *condParser) not(depth int) cond {
	if depth > maxCMakeDepth {
		p.bad = true
		return condUnknown
	}
	if p.i < len(p.toks) && p.toks[p.i] == "NOT" {
		p.i++
		switch p.not(depth + 1) {
		case condTrue:
			return condFalse
		case condFalse:
			return condTrue
		}
		return condUnknown
	}
	if p.i < len(p.toks) && p.toks[p.i] == "(" {
		p.i++
		v := p.or(depth + 1)
		if p.i >= len(p.toks) || p.toks[p.i] != ")" {
			p.bad = true
			return condUnknown
		}
		p.i++
		return v
	}
	// A term: the tokens up to the next operator or parenthesis.
	j := p.i
	for j < len(p.toks) {
		t := p.toks[j]
		if t == "AND" || t == "OR" || t == "(" || t == ")" {
			break
		}
		j++
	}
	if j == p.i {
		p.bad = true
		return condUnknown
	}
	t := p.toks[p.i:j]
	p.i = j
	return cmakeTerm(t, p.vars)
}

func cmakeTerm(t []string, vars map[string]string) cond {
	if len(t) >= 2 && t[0] == "NOT" {
		switch cmakeTerm(t[1:], vars) {
		case condTrue:
			return condFalse
		case condFalse:
			return condTrue
		}
		return condUnknown
	}
	switch {
	case len(t) == 2 && t[0] == "DEFINED":
		if v, ok := vars[t[1]]; ok {
			if v == cmakeUnknown {
				return condUnknown
			}
			return condTrue
		}
		return condFalse
	case len(t) == 3 && t[1] == "IN_LIST" && (t[2] == "CMAKE_CXX_COMPILE_FEATURES" || t[2] == "CMAKE_C_COMPILE_FEATURES"):
		return condTrue
	case len(t) != 1:
		return condUnknown
	}
	a := t[0]
	if strings.HasPrefix(a, "${") && strings.HasSuffix(a, "}") && !strings.Contains(a[2:], "${") {
		a = a[2 : len(a)-1]
	}
	switch strings.ToUpper(a) {
	case "ON", "YES", "TRUE", "Y", "1":
		return condTrue
	case "OFF", "NO", "FALSE", "N", "0", "IGNORE", "NOTFOUND", "":
		return condFalse
	}
	v, ok := vars[a]
	if !ok {
		return condFalse
	}
	if v == cmakeUnknown {
		return condUnknown
	}
	if cmakeFalse(v) {
		return condFalse
	}
	return condTrue
}
