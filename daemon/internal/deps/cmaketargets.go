package deps

import (
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// CMake read per target. parseCMake reads a directory's flags for every
// source below it; a build compiles only the sources its targets name,
// each with its target's flags and the usage requirements (PUBLIC and
// INTERFACE definitions, include directories and compile features) of
// the targets it links, transitively. readCMakeTargets follows a
// CMakeLists.txt as far as a static read can: add_library,
// add_executable and target_sources name the sources; target_link_libraries
// links; the project's own functions and macros are run at each call with
// their arguments bound (ARGV, ARGN, ARGC, ARGVn, named parameters,
// cmake_parse_arguments); foreach() over a list or a range is unrolled;
// an if() whose condition cmakeCond tells takes its branch. A target made
// in a branch a static read cannot rule out counts (its sources may be
// compiled), its definitions and include directories only where the
// branch is known to be taken. When something that may name sources
// cannot be followed (a source word with a variable not known, a
// generator expression, file(GLOB), a target in a while() loop, a bound
// reached), the read says why (cmakeDir.Unknown) and the tree keeps the
// directory rule.

var cmakeNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// Bounds of the per-target read, beside the build-file ones.
const (
	maxCMakeTargets   = 2048
	maxCMakeCallDepth = 16
	maxCMakeSteps     = 200_000 // commands run, calls and loop bodies included
	maxCMakeLoop      = 4096    // items of one foreach
	maxCMakeLinks     = 256     // targets one source's flags gather
)

// cmakeUsage is what a target compiles with (Own: PRIVATE and PUBLIC) or
// gives the targets linking it (Iface: PUBLIC and INTERFACE).
type cmakeUsage struct {
	Includes, System, Defines []string
	// CMin, CxxMin: the highest c_std_N / cxx_std_N feature.
	CMin, CxxMin int
	Links        []string
}

type cmakeTarget struct {
	Name, Dir  string
	Sources    []string // tree paths, C/C++ only
	Own, Iface cmakeUsage
}

// cmakeDir is one CMakeLists.txt read per target.
type cmakeDir struct {
	// Flags are the directory's own (include_directories,
	// add_definitions, add_compile_definitions, add_compile_options,
	// CMAKE_<LANG>_STANDARD): they apply to its targets and those below.
	Flags cFlags
	// CStd, CxxStd: CMAKE_C_STANDARD / CMAKE_CXX_STANDARD (0 unset);
	// CExt, CxxExt: the gnu dialect (CMAKE_<LANG>_EXTENSIONS not OFF).
	CStd, CxxStd int
	CExt, CxxExt bool
	Targets      []*cmakeTarget
	// Unknown says why a static read cannot follow the file's targets,
	// "" when it can.
	Unknown string
}

// cmakeProject is the targets of every directory read so far: a
// target_* command or a link may name one made in another directory.
type cmakeProject struct {
	targets map[string]*cmakeTarget
	aliases map[string]string
	n       int
	// funcs are the functions and macros defined so far: a directory's
	// are its subdirectories' too (they are read after it).
	funcs map[string]*cmakeFunc
}

func newCMakeProject() *cmakeProject {
	return &cmakeProject{targets: map[string]*cmakeTarget{}, aliases: map[string]string{}, funcs: map[string]*cmakeFunc{}}
}

func (p *cmakeProject) target(name string) *cmakeTarget {
	for i := 0; i < 4; i++ {
		a, ok := p.aliases[name]
		if !ok {
			break
		}
		name = a
	}
	return p.targets[name]
}

type cmakeFunc struct {
	params []string
	body   []cmakeCommand
	macro  bool
}

type cmakeReader struct {
	dir   string
	proj  *cmakeProject
	out   *cmakeDir
	steps int
}

// ctl is how a block of commands ended.
type ctl int

const (
	ctlNone ctl = iota
	ctlReturn
	ctlBreak
	ctlContinue
)

// readCMakeTargets reads the CMakeLists.txt data of the tree's slash
// directory dir with the variables inherited from its parent directory,
// adding its targets to proj; it returns the directory's reading and its
// variables (for its subdirectories).
func readCMakeTargets(data []byte, dir string, inherited map[string]string, proj *cmakeProject) (*cmakeDir, map[string]string) {
	out := &cmakeDir{CExt: true, CxxExt: true}
	dir, ok := inTree(".", dir)
	if !ok {
		out.Unknown = "a directory outside the tree"
		return out, inherited
	}
	if len(data) > maxBuildFileBytes {
		out.Unknown = path.Join(dir, "CMakeLists.txt") + " is over the size bound"
		data = data[:maxBuildFileBytes]
	}
	vars := map[string]string{}
	for k, v := range inherited {
		vars[k] = v
	}
	vars["CMAKE_CURRENT_SOURCE_DIR"] = "@/" + dir
	vars["CMAKE_CURRENT_LIST_DIR"] = "@/" + dir
	// The build directory: what is made there is generated, not a
	// source of the tree.
	for _, k := range []string{"CMAKE_CURRENT_BINARY_DIR", "CMAKE_BINARY_DIR", "PROJECT_BINARY_DIR"} {
		vars[k] = "@build"
	}
	if _, ok := vars["CMAKE_SOURCE_DIR"]; !ok {
		vars["CMAKE_SOURCE_DIR"] = "@/."
		vars["PROJECT_SOURCE_DIR"] = "@/" + dir
	}
	if s, ok := inherited["\x00std"]; ok { // the parent's standard
		restoreStd(out, s)
	}
	r := &cmakeReader{dir: dir, proj: proj, out: out}
	r.exec(cmakeCommands(data), vars, nil, true, true, 0)
	out.Flags.CStd, out.Flags.CxxStd = "", ""
	if out.CStd > 0 && out.CStd < 100 {
		out.Flags.setStd(map[bool]string{true: "gnu", false: "c"}[out.CExt] + strconv.Itoa(out.CStd))
	}
	if out.CxxStd > 0 && out.CxxStd < 100 {
		out.Flags.setStd(map[bool]string{true: "gnu++", false: "c++"}[out.CxxExt] + strconv.Itoa(out.CxxStd))
	}
	res := map[string]string{}
	for k, v := range vars {
		if k != "CMAKE_CURRENT_SOURCE_DIR" && k != "CMAKE_CURRENT_LIST_DIR" {
			res[k] = v
		}
	}
	res["\x00std"] = strconv.Itoa(out.CStd) + "," + strconv.Itoa(out.CxxStd) + "," + strconv.FormatBool(out.CExt) + "," + strconv.FormatBool(out.CxxExt)
	return out, res
}

// restoreStd restores a parent's standard recorded by readCMakeTargets.
func restoreStd(out *cmakeDir, s string) {
	p := strings.Split(s, ",")
	if len(p) != 4 {
		return
	}
	out.CStd, _ = strconv.Atoi(p[0])
	out.CxxStd, _ = strconv.Atoi(p[1])
	out.CExt, out.CxxExt = p[2] == "true", p[3] == "true"
}

func (r *cmakeReader) fail(why string) {
	if r.out.Unknown == "" {
		r.out.Unknown = path.Join(r.dir, "CMakeLists.txt") + ": " + why
	}
}

// definesTargets reports whether commands may name sources.
func definesTargets(cmds []cmakeCommand) bool {
	for _, c := range cmds {
		switch c.name {
		case "add_library", "add_executable", "target_sources":
			return true
		}
	}
	return false
}

// block returns the index of the command closing the block opened at
// cmds[i] (open/close names, nested), len(cmds) when there is none.
func block(cmds []cmakeCommand, i int, open, close map[string]bool) int {
	depth := 0
	for j := i; j < len(cmds); j++ {
		switch {
		case open[cmds[j].name]:
			depth++
		case close[cmds[j].name]:
			depth--
			if depth == 0 {
				return j
			}
		}
	}
	return len(cmds)
}

var (
	funcOpen     = map[string]bool{"function": true, "macro": true}
	funcClose    = map[string]bool{"endfunction": true, "endmacro": true}
	foreachOpen  = map[string]bool{"foreach": true}
	foreachClose = map[string]bool{"endforeach": true}
	whileOpen    = map[string]bool{"while": true}
	whileClose   = map[string]bool{"endwhile": true}
)

// exec runs cmds with vars (the scope's variables; parent is the caller's
// for set(… PARENT_SCOPE)). active: the enclosing branches are known to
// be taken; possible: none is known to be skipped.
func (r *cmakeReader) exec(cmds []cmakeCommand, vars, parent map[string]string, active, possible bool, depth int) ctl {
	conds := condStack{}
	on := func() bool { return active && conds.active() }
	maybe := func() bool { return possible && conds.possible() }
	expand := func(w string) (string, bool) { return cmakeExpand(w, vars) }
	for i := 0; i < len(cmds); i++ {
		if r.steps++; r.steps > maxCMakeSteps {
			r.fail("over the bound of commands a static read runs")
			return ctlReturn
		}
		c := cmds[i]
		if conds.apply(c, vars) {
			continue
		}
		switch c.name {
		case "function", "macro":
			end := block(cmds, i, funcOpen, funcClose)
			if len(c.args) > 0 && maybe() {
				name := strings.ToLower(c.args[0])
				switch name {
				case "add_library", "add_executable", "target_sources":
					// The built-in is then _add_library…, called
					// from a body this read would not follow.
					r.fail("a function replaces " + name)
				}
				if _, ok := r.proj.funcs[name]; ok || len(r.proj.funcs) < maxCMakeVars {
					r.proj.funcs[name] = &cmakeFunc{params: c.args[1:], body: cmds[i+1 : min(end, len(cmds))], macro: c.name == "macro"}
				}
			}
			i = end
			continue
		case "foreach":
			end := block(cmds, i, foreachOpen, foreachClose)
			body := cmds[i+1 : min(end, len(cmds))]
			i = end
			if !maybe() {
				continue
			}
			items, ok := r.foreachItems(c.args, vars)
			if !ok || !on() {
				if definesTargets(body) {
					r.fail("a foreach() a static read cannot unroll makes targets")
				}
				continue
			}
			name := c.args[0]
			old, had := vars[name]
			for _, it := range items {
				if r.steps++; r.steps > maxCMakeSteps {
					r.fail("over the bound of commands a static read runs")
					return ctlReturn
				}
				vars[name] = it
				k := r.exec(body, vars, parent, true, true, depth)
				if k == ctlBreak {
					break
				}
				if k == ctlReturn {
					return ctlReturn
				}
			}
			if had {
				vars[name] = old
			} else {
				delete(vars, name)
			}
			continue
		case "while":
			end := block(cmds, i, whileOpen, whileClose)
			if maybe() && definesTargets(cmds[i+1:min(end, len(cmds))]) {
				r.fail("a while() loop makes targets")
			}
			i = end
			continue
		case "return":
			if on() {
				return ctlReturn
			}
			continue
		case "break":
			if on() {
				return ctlBreak
			}
			continue
		case "continue":
			if on() {
				return ctlContinue
			}
			continue
		}
		if !maybe() {
			continue
		}
		if fn, ok := r.proj.funcs[c.name]; ok {
			r.call(fn, c.args, vars, on(), depth)
			continue
		}
		r.command(c, vars, parent, expand, on())
	}
	return ctlNone
}

// foreachItems are the values foreach(var …) takes: a list of words,
// IN ITEMS / IN LISTS, or RANGE; false when a static read cannot tell
// them.
func (r *cmakeReader) foreachItems(args []string, vars map[string]string) ([]string, bool) {
	if len(args) < 1 {
		return nil, false
	}
	rest := args[1:]
	expand := func(w string) (string, bool) { return cmakeExpand(w, vars) }
	if len(rest) > 0 && rest[0] == "RANGE" {
		var n []int
		for _, a := range rest[1:] {
			v, ok := expand(a)
			x, err := strconv.Atoi(v)
			if !ok || err != nil {
				return nil, false
			}
			n = append(n, x)
		}
		start, stop, step := 0, 0, 1
		switch len(n) {
		case 1:
			stop = n[0]
		case 2:
			start, stop = n[0], n[1]
		case 3:
			start, stop, step = n[0], n[1], n[2]
		default:
			return nil, false
		}
		if step <= 0 || stop < start || (stop-start)/step >= maxCMakeLoop {
			return nil, false
		}
		var out []string
		for x := start; x <= stop; x += step {
			out = append(out, strconv.Itoa(x))
		}
		return out, true
	}
	var out []string
	add := func(v string) bool {
		for _, w := range strings.Split(v, ";") {
			if w == "" {
				continue
			}
			if len(out) >= maxCMakeLoop {
				return false
			}
			out = append(out, w)
		}
		return true
	}
	if len(rest) > 0 && rest[0] == "IN" {
		mode := ""
		for _, a := range rest[1:] {
			switch a {
			case "LISTS", "ITEMS":
				mode = a
				continue
			case "ZIP_LISTS":
				return nil, false
			}
			var v string
			var ok bool
			if mode == "LISTS" {
				v, ok = vars[a]
				ok = !ok || v != cmakeUnknown // an unset list is empty
			} else {
				v, ok = expand(a)
			}
			if !ok || !add(v) {
				return nil, false
			}
		}
		return out, true
	}
	for _, a := range rest {
		v, ok := expand(a)
		if !ok || !add(v) {
			return nil, false
		}
	}
	return out, true
}

// call runs a function or macro of the file with args bound.
func (r *cmakeReader) call(fn *cmakeFunc, args []string, vars map[string]string, active bool, depth int) {
	if depth >= maxCMakeCallDepth {
		if definesTargets(fn.body) {
			r.fail("calls nested over the bound")
		}
		return
	}
	// A call copies the caller's variables: it costs as many steps.
	if r.steps += 1 + len(vars)/16; r.steps > maxCMakeSteps {
		r.fail("over the bound of commands a static read runs")
		return
	}
	var argv []string
	for _, a := range args {
		v, ok := cmakeExpand(a, vars)
		if !ok {
			v = cmakeUnknown
			argv = append(argv, v)
			continue
		}
		for _, w := range strings.Split(v, ";") {
			if w != "" && len(argv) < maxCMakeLoop {
				argv = append(argv, w)
			}
		}
	}
	scope := vars
	if !fn.macro {
		scope = make(map[string]string, len(vars)+8)
		for k, v := range vars {
			scope[k] = v
		}
	}
	// A macro's arguments are replaced in its text, not variables of
	// the caller: what it binds is restored after it.
	type saved struct {
		v   string
		had bool
	}
	restore := map[string]saved{}
	set := func(k, v string) {
		if len(v) > maxCFlagLen {
			v = cmakeUnknown
		}
		if _, ok := restore[k]; !ok && fn.macro {
			old, had := scope[k]
			restore[k] = saved{old, had}
		}
		scope[k] = v
	}
	// A list holding an unknown word is unknown as a whole.
	join := func(l []string) string {
		for _, w := range l {
			if w == cmakeUnknown {
				return cmakeUnknown
			}
		}
		return strings.Join(l, ";")
	}
	set("ARGC", strconv.Itoa(len(argv)))
	set("ARGV", join(argv))
	for i, w := range argv {
		if i < 32 {
			set("ARGV"+strconv.Itoa(i), w)
		}
	}
	for i, p := range fn.params {
		if i < len(argv) {
			set(p, argv[i])
		} else {
			set(p, "")
		}
	}
	if len(argv) > len(fn.params) {
		set("ARGN", join(argv[len(fn.params):]))
	} else {
		set("ARGN", "")
	}
	r.exec(fn.body, scope, vars, active, true, depth+1)
	for k, o := range restore {
		if o.had {
			scope[k] = o.v
		} else {
			delete(scope, k)
		}
	}
}

// command runs one built-in command.
func (r *cmakeReader) command(c cmakeCommand, vars, parent map[string]string, expand func(string) (string, bool), active bool) {
	dir := r.dir
	resolve := func(v string) (string, bool) {
		if v == "@build" || strings.HasPrefix(v, "@build/") {
			return "", false
		}
		if rest, ok := strings.CutPrefix(v, "@/"); ok {
			return inTree(".", rest)
		}
		return inTree(dir, v)
	}
	setVar := func(m map[string]string, k, v string) {
		if _, ok := m[k]; ok || len(m) < maxCMakeVars {
			if len(v) > maxCFlagLen {
				v = cmakeUnknown
			}
			m[k] = v
		}
	}
	// The names a command sets may be made of variables
	// (set(${result_var} … PARENT_SCOPE)).
	args := make([]string, len(c.args))
	copy(args, c.args)
	switch {
	case slices.Contains([]string{"set", "option", "unset", "list", "cmake_parse_arguments", "find_package", "try_compile", "try_run", "file", "aux_source_directory", "execute_process", "string", "math", "separate_arguments"}, c.name),
		strings.HasPrefix(c.name, "get_"):
		for i, a := range args {
			if strings.Contains(a, "${") {
				if v, ok := expand(a); ok && !strings.Contains(v, ";") {
					args[i] = v
				}
			}
		}
	}
	if strings.HasPrefix(c.name, "check_") {
		for i, a := range args {
			if v, ok := expand(a); ok {
				args[i] = v
			}
		}
	}
	c.args = args
	switch c.name {
	case "project":
		if active && len(args) > 0 {
			vars["PROJECT_SOURCE_DIR"] = "@/" + dir
			setVar(vars, args[0]+"_SOURCE_DIR", "@/"+dir)
			setVar(vars, "PROJECT_NAME", args[0])
		}
	case "option":
		if active && len(args) > 0 {
			if _, ok := vars[args[0]]; !ok {
				v := "OFF"
				if len(args) > 2 {
					var ok bool
					if v, ok = expand(args[2]); !ok {
						v = cmakeUnknown
					}
				}
				setVar(vars, args[0], v)
			}
		}
	case "set", "list":
		if !active {
			// A variable a branch not known to be taken may set is
			// not known either, unless it already was (the
			// directory rule's reading: a branch not known is not
			// taken).
			if len(args) > 1 && c.name == "list" {
				args = args[1:]
			}
			if len(args) > 0 {
				if _, ok := vars[args[0]]; !ok {
					setVar(vars, args[0], cmakeUnknown)
				}
			}
			return
		}
		r.set(c, vars, parent, setVar)
	case "unset":
		if active && len(args) > 0 {
			delete(vars, args[0])
		}
	case "cmake_parse_arguments":
		if active {
			r.parseArguments(args, vars, setVar)
		}
	case "find_package":
		// Whether a package is found is the machine's.
		if len(args) > 0 {
			setVar(vars, args[0]+"_FOUND", cmakeUnknown)
			setVar(vars, strings.ToUpper(args[0])+"_FOUND", cmakeUnknown)
		}
	case "try_compile", "try_run":
		if len(args) > 0 {
			setVar(vars, args[0], cmakeUnknown)
		}
	case "execute_process":
		for i, a := range args {
			if (a == "OUTPUT_VARIABLE" || a == "RESULT_VARIABLE" || a == "ERROR_VARIABLE") && i+1 < len(args) {
				setVar(vars, args[i+1], cmakeUnknown)
			}
		}
	case "file":
		if len(args) > 1 {
			setVar(vars, args[1], cmakeUnknown) // GLOB, READ, STRINGS, …: what the tree holds
		}
	case "aux_source_directory":
		if len(args) > 1 {
			setVar(vars, args[1], cmakeUnknown)
		}
	case "include_directories":
		if active {
			system := false
			for _, w := range cmakeWords(args, expand) {
				switch w {
				case "SYSTEM":
					system = true
					continue
				case "BEFORE", "AFTER":
					continue
				}
				if d, ok := resolve(w); ok {
					r.out.Flags.addInclude(d)
					if system {
						r.out.Flags.addSystem(d)
					}
				}
			}
		}
	case "add_definitions", "add_compile_options":
		if active {
			r.out.Flags.compilerArgs(cmakeWords(args, expand), dir, func(s string) (string, bool) { return s, true })
		}
	case "add_compile_definitions":
		if active {
			for _, w := range cmakeWords(args, expand) {
				r.out.Flags.addDefine(strings.TrimPrefix(w, "-D"))
			}
		}
	case "add_library", "add_executable":
		r.addTarget(c, expand, resolve)
	case "target_sources":
		if len(args) < 1 {
			return
		}
		name, ok := expand(args[0])
		t := r.proj.target(name)
		if !ok || t == nil {
			r.fail("target_sources of a target not known")
			return
		}
		for _, a := range args[1:] {
			switch a {
			case "PRIVATE", "PUBLIC":
				continue
			case "INTERFACE", "FILE_SET":
				r.fail("target_sources " + a)
				return
			}
			r.addSources(t, a, expand, resolve)
		}
	case "target_link_libraries":
		r.link(args, expand)
	case "target_include_directories", "target_compile_definitions", "target_compile_features", "target_compile_options":
		if active {
			r.usage(c.name, args, expand, resolve)
		}
	}
	// What string(), math() and the get_* commands compute is not
	// followed: their output variables become unknown (string()'s forms
	// put it at different places: every bare name among its arguments).
	switch {
	case c.name == "string":
		for _, a := range args[1:] {
			if cmakeNameRE.MatchString(a) {
				setVar(vars, a, cmakeUnknown)
			}
		}
	case c.name == "math" && len(args) > 1:
		setVar(vars, args[1], cmakeUnknown)
	case strings.HasPrefix(c.name, "get_") || c.name == "separate_arguments":
		if len(args) > 0 {
			setVar(vars, args[0], cmakeUnknown)
		}
	}
	if !active {
		return
	}
	// A check's result (check_cxx_compiler_flag, check_include_file,
	// check_symbol_exists, …) is the compiler's: its last argument.
	if strings.HasPrefix(c.name, "check_") && len(args) > 1 {
		setVar(vars, args[len(args)-1], cmakeUnknown)
	}
}

// set runs set() and list(APPEND|PREPEND); any other list() makes its
// list unknown.
func (r *cmakeReader) set(c cmakeCommand, vars, parent map[string]string, setVar func(map[string]string, string, string)) {
	args := c.args
	var name string
	var vals []string
	if c.name == "list" {
		if len(args) < 2 {
			return
		}
		name = args[1]
		if args[0] != "APPEND" && args[0] != "PREPEND" {
			setVar(vars, name, cmakeUnknown)
			return
		}
		cur, ok := vars[name]
		if cur == cmakeUnknown {
			return
		}
		if ok && cur != "" {
			vals = []string{cur}
		}
		var add []string
		for _, a := range args[2:] {
			v, ok := cmakeExpand(a, vars)
			if !ok {
				setVar(vars, name, cmakeUnknown)
				return
			}
			add = append(add, v)
		}
		if args[0] == "APPEND" {
			vals = append(vals, add...)
		} else {
			vals = append(add, vals...)
		}
	} else {
		if len(args) == 0 {
			return
		}
		name = args[0]
		target, up := vars, false
		for _, a := range args[1:] {
			if a == "PARENT_SCOPE" {
				if parent == nil {
					return
				}
				target, up = parent, true
				break
			}
			if a == "CACHE" {
				if _, ok := vars[name]; ok {
					return // a cache entry does not replace a set variable
				}
				break
			}
			v, ok := cmakeExpand(a, vars)
			if !ok {
				setVar(target, name, cmakeUnknown)
				return
			}
			vals = append(vals, v)
		}
		if len(args) == 1 {
			// set(X) unsets X, which then expands to nothing: the
			// idiom of an empty list (fmt's set(FMT_HEADERS)).
			setVar(vars, name, "")
			return
		}
		val := strings.Join(vals, ";")
		setVar(target, name, val)
		if up {
			return
		}
		switch name {
		case "CMAKE_C_STANDARD":
			r.out.CStd, _ = strconv.Atoi(val)
		case "CMAKE_CXX_STANDARD":
			r.out.CxxStd, _ = strconv.Atoi(val)
		case "CMAKE_C_EXTENSIONS":
			r.out.CExt = !cmakeFalse(val)
		case "CMAKE_CXX_EXTENSIONS":
			r.out.CxxExt = !cmakeFalse(val)
		}
		return
	}
	setVar(vars, name, strings.Join(vals, ";"))
}

// parseArguments runs cmake_parse_arguments(prefix options one multi
// args…) and its PARSE_ARGV form.
func (r *cmakeReader) parseArguments(args []string, vars map[string]string, setVar func(map[string]string, string, string)) {
	var rest []string
	if len(args) > 0 && args[0] == "PARSE_ARGV" {
		if len(args) < 5 {
			return
		}
		n, err := strconv.Atoi(args[1])
		if err != nil || n < 0 {
			return
		}
		args = args[2:]
		argc, _ := strconv.Atoi(vars["ARGC"])
		for i := n; i < argc && i < 32; i++ {
			rest = append(rest, "${ARGV"+strconv.Itoa(i)+"}")
		}
	} else {
		if len(args) < 4 {
			return
		}
		rest = args[4:]
	}
	prefix := args[0]
	list := func(a string) []string {
		v, _ := cmakeExpand(a, vars)
		var out []string
		for _, w := range strings.Split(v, ";") {
			if w != "" {
				out = append(out, w)
			}
		}
		return out
	}
	kind := map[string]int{} // 0 option, 1 one value, 2 many
	for i, a := range args[1:4] {
		for _, k := range list(a) {
			kind[k] = i
		}
	}
	vals := map[string][]string{}
	var unparsed []string
	unknown := false
	cur := ""
	for _, a := range rest {
		v, ok := cmakeExpand(a, vars)
		if !ok || v == cmakeUnknown {
			unknown = true
			continue
		}
		for _, w := range strings.Split(v, ";") {
			if w == "" {
				continue
			}
			if k, ok := kind[w]; ok {
				cur = ""
				if k == 0 {
					vals[w] = []string{"TRUE"}
				} else {
					cur = w
					vals[w] = nil
				}
				continue
			}
			if cur != "" {
				vals[cur] = append(vals[cur], w)
				if kind[cur] == 1 {
					cur = ""
				}
				continue
			}
			unparsed = append(unparsed, w)
		}
	}
	for k, n := range kind {
		v := strings.Join(vals[k], ";")
		if n == 0 && v == "" {
			v = "FALSE"
		}
		if unknown {
			v = cmakeUnknown
		}
		setVar(vars, prefix+"_"+k, v)
	}
	v := strings.Join(unparsed, ";")
	if unknown {
		v = cmakeUnknown
	}
	setVar(vars, prefix+"_UNPARSED_ARGUMENTS", v)
}

// addTarget runs add_library / add_executable.
func (r *cmakeReader) addTarget(c cmakeCommand, expand func(string) (string, bool), resolve func(string) (string, bool)) {
	if len(c.args) == 0 {
		return
	}
	name, ok := expand(c.args[0])
	if !ok || name == "" || strings.Contains(name, ";") {
		r.fail(c.name + " of a name a static read cannot tell")
		return
	}
	rest := c.args[1:]
	if len(rest) >= 2 && rest[0] == "ALIAS" {
		if to, ok := expand(rest[1]); ok && len(r.proj.aliases) < maxCMakeTargets {
			r.proj.aliases[name] = to
		}
		return
	}
	if r.proj.targets[name] != nil {
		return // CMake refuses a second target of one name
	}
	if r.proj.n >= maxCMakeTargets {
		r.fail("over the bound of targets")
		return
	}
	t := &cmakeTarget{Name: name, Dir: r.dir}
	r.proj.targets[name] = t
	r.proj.n++
	r.out.Targets = append(r.out.Targets, t)
	for _, a := range rest {
		switch a {
		case "STATIC", "SHARED", "MODULE", "OBJECT", "EXCLUDE_FROM_ALL", "WIN32", "MACOSX_BUNDLE":
			continue
		case "INTERFACE", "IMPORTED", "GLOBAL", "UNKNOWN":
			// An interface or imported target compiles nothing of
			// the tree.
			if c.name == "add_library" || a == "IMPORTED" {
				return
			}
		}
		r.addSources(t, a, expand, resolve)
	}
}

// addSources adds one source argument's files to t.
func (r *cmakeReader) addSources(t *cmakeTarget, a string, expand func(string) (string, bool), resolve func(string) (string, bool)) {
	if strings.HasPrefix(a, "$<TARGET_OBJECTS:") && strings.HasSuffix(a, ">") {
		return // another target's objects, compiled there
	}
	v, ok := expand(a)
	if !ok {
		r.fail("a source of " + t.Name + " a static read cannot tell (" + clip(a, 64) + ")")
		return
	}
	for _, w := range strings.Split(v, ";") {
		if w == "" {
			continue
		}
		if w == cmakeUnknown {
			r.fail("a source of " + t.Name + " a static read cannot tell")
			return
		}
		if _, isSrc := cSourceExts[path.Ext(w)]; !isSrc {
			continue // headers and the rest
		}
		p, ok := resolve(w)
		if !ok {
			continue // generated in the build directory, or outside the tree
		}
		if len(t.Sources) >= maxCSources {
			r.fail("over the bound of sources")
			return
		}
		t.Sources = append(t.Sources, p)
	}
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// link runs target_link_libraries: the plain form links PUBLIC (CMake's
// usage requirements of a plain link are transitive).
func (r *cmakeReader) link(args []string, expand func(string) (string, bool)) {
	if len(args) < 1 {
		return
	}
	name, ok := expand(args[0])
	t := r.proj.target(name)
	if !ok || t == nil {
		return
	}
	own, iface := true, true
	for _, w := range cmakeWords(args[1:], expand) {
		switch w {
		case "PUBLIC", "LINK_PUBLIC":
			own, iface = true, true
			continue
		case "PRIVATE", "LINK_PRIVATE":
			own, iface = true, false
			continue
		case "INTERFACE", "LINK_INTERFACE_LIBRARIES":
			own, iface = false, true
			continue
		case "debug", "optimized", "general":
			continue
		}
		if own {
			t.Own.Links = appendFlag(t.Own.Links, w, maxCMakeLinks)
		}
		if iface {
			t.Iface.Links = appendFlag(t.Iface.Links, w, maxCMakeLinks)
		}
	}
}

// usage runs target_include_directories, target_compile_definitions,
// target_compile_features and target_compile_options (its -I/-D/-std).
func (r *cmakeReader) usage(cmd string, args []string, expand func(string) (string, bool), resolve func(string) (string, bool)) {
	if len(args) < 1 {
		return
	}
	name, ok := expand(args[0])
	t := r.proj.target(name)
	if !ok || t == nil {
		return
	}
	own, iface, system := true, false, false
	for _, a := range args[1:] {
		v, ok := expand(a)
		if !ok {
			continue
		}
		for _, w := range strings.Split(v, ";") {
			switch w {
			case "":
				continue
			case "PUBLIC":
				own, iface = true, true
				continue
			case "PRIVATE":
				own, iface = true, false
				continue
			case "INTERFACE":
				own, iface = false, true
				continue
			case "SYSTEM":
				system = true
				continue
			case "BEFORE", "AFTER":
				continue
			}
			for _, u := range []*cmakeUsage{&t.Own, &t.Iface} {
				if u == &t.Own && !own || u == &t.Iface && !iface {
					continue
				}
				switch cmd {
				case "target_include_directories":
					if d, ok := resolve(w); ok {
						u.Includes = appendFlag(u.Includes, d, maxCIncludes)
						if system {
							u.System = appendFlag(u.System, d, maxCIncludes)
						}
					}
				case "target_compile_definitions":
					if d := strings.TrimPrefix(w, "-D"); len(d) <= maxCFlagLen && macroRE.MatchString(d) {
						u.Defines = appendFlag(u.Defines, d, maxCDefines)
					}
				case "target_compile_options":
					var f cFlags
					f.compilerArgs([]string{w}, r.dir, func(s string) (string, bool) { return s, true })
					for _, d := range f.Defines {
						u.Defines = appendFlag(u.Defines, d, maxCDefines)
					}
					for _, d := range f.Includes {
						u.Includes = appendFlag(u.Includes, d, maxCIncludes)
					}
				case "target_compile_features":
					if n, ok := strings.CutPrefix(w, "cxx_std_"); ok {
						if x, err := strconv.Atoi(n); err == nil && x > u.CxxMin && x < 100 {
							u.CxxMin = x
						}
					} else if n, ok := strings.CutPrefix(w, "c_std_"); ok {
						if x, err := strconv.Atoi(n); err == nil && x > u.CMin && x < 100 {
							u.CMin = x
						}
					}
				}
			}
		}
	}
}

// cmakeSourceFlags are the flags t compiles its sources with: the
// directory flags of t's directory and its ancestors (dirs, by tree
// path), t's own usage and the interface usage of every target it links,
// transitively (bounded).
func cmakeSourceFlags(t *cmakeTarget, proj *cmakeProject, dirs map[string]*cmakeDir) cFlags {
	var all cFlags
	cStd, cxxStd := 0, 0
	cExt, cxxExt := true, true
	for _, d := range ancestors(t.Dir) {
		cd := dirs[d]
		if cd == nil {
			continue
		}
		for _, i := range cd.Flags.Includes {
			all.addInclude(i)
		}
		for _, i := range cd.Flags.System {
			all.addSystem(i)
		}
		for _, x := range cd.Flags.Defines {
			all.addDefine(x)
		}
		if d == t.Dir || cd.CStd != 0 || cd.CxxStd != 0 {
			cStd, cxxStd, cExt, cxxExt = cd.CStd, cd.CxxStd, cd.CExt, cd.CxxExt
		}
	}
	cMin, cxxMin := 0, 0
	add := func(u cmakeUsage) {
		for _, i := range u.Includes {
			all.addInclude(i)
		}
		for _, i := range u.System {
			all.addSystem(i)
		}
		for _, x := range u.Defines {
			all.addDefine(x)
		}
		cMin, cxxMin = max(cMin, u.CMin), max(cxxMin, u.CxxMin)
	}
	add(t.Own)
	seen := map[*cmakeTarget]bool{t: true}
	queue := append([]string(nil), t.Own.Links...)
	for len(queue) > 0 && len(seen) < maxCMakeLinks {
		l := proj.target(queue[0])
		queue = queue[1:]
		if l == nil || seen[l] {
			continue
		}
		seen[l] = true
		add(l.Iface)
		if len(queue) < maxCMakeLinks {
			queue = append(queue, l.Iface.Links...)
		}
	}
	// Compile features are minimums, met by clang 19's defaults up to
	// gnu17 / gnu++17.
	if cMin > clangDefaultStd && cMin > cStd {
		cStd = cMin
	}
	if cxxMin > clangDefaultStd && cxxMin > cxxStd {
		cxxStd = cxxMin
	}
	if cStd > 0 && cStd < 100 {
		all.setStd(map[bool]string{true: "gnu", false: "c"}[cExt] + strconv.Itoa(cStd))
	}
	if cxxStd > 0 && cxxStd < 100 {
		all.setStd(map[bool]string{true: "gnu++", false: "c++"}[cxxExt] + strconv.Itoa(cxxStd))
	}
	return all
}
