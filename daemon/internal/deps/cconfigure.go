package deps

import (
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Autoconf. configure.ac is read statically; configure and the build are
// never run. What configure makes whatever its checks find: the
// definitions of AC_USE_SYSTEM_EXTENSIONS, as autoconf makes them for
// glibc (the jail's C library), an AC_DEFINE with a literal value outside
// every shell conditional, and AC_PROG_CC's default -O2 (with no CFLAGS
// set before it). configure's checks (a function links, a header is
// there, the byte order, POSIX threads) are answered against the platform
// clangd's jail compiles for (cplatform.go), never by running them, and
// the definitions and action branches that follow from the answer are
// read the same way. A project's own m4 macros (AC_DEFUN in its macro
// directories) are expanded where they are called, with their arguments.
// A check a static read cannot answer (a program compiles or runs, a
// struct has a member, a size) is configure's to know: neither its
// definitions nor its branches are read, so clangd reads the #else
// branches behind them and the answers say partial.
//
// configure writes its definitions on every compiler line (DEFS), unless
// configure.ac names a config header (AC_CONFIG_HEADERS), where they go
// instead: that header is generated, missing from a checkout, so then
// none is used.

// systemExtensions are the definitions AC_USE_SYSTEM_EXTENSIONS makes
// with glibc (autoconf 2.71's specific.m4): all of it unconditional but
// __EXTENSIONS__, whose compile test passes with glibc's headers; _MINIX's
// and _XOPEN_SOURCE's (Minix, old HP-UX) do not apply.
var systemExtensions = []string{
	"_ALL_SOURCE=1", "_DARWIN_C_SOURCE=1", "_GNU_SOURCE=1", "_HPUX_ALT_XOPEN_SOCKET_API=1",
	"_NETBSD_SOURCE=1", "_OPENBSD_SOURCE=1", "_POSIX_PTHREAD_SEMANTICS=1",
	"__STDC_WANT_IEC_60559_ATTRIBS_EXT__=1", "__STDC_WANT_IEC_60559_BFP_EXT__=1",
	"__STDC_WANT_IEC_60559_DFP_EXT__=1", "__STDC_WANT_IEC_60559_FUNCS_EXT__=1",
	"__STDC_WANT_IEC_60559_TYPES_EXT__=1", "__STDC_WANT_LIB_EXT2__=1",
	"__STDC_WANT_MATH_SPEC_FUNCS__=1", "_TANDEM_SOURCE=1", "__EXTENSIONS__=1",
}

// configureAC is what a static read of configure.ac gives.
type configureAC struct {
	// Defines are the definitions configure makes (NAME=VALUE).
	Defines []string
	// Header: configure.ac names a config header (AC_CONFIG_HEADERS,
	// AC_CONFIG_HEADER, AM_CONFIG_HEADER), where the definitions go.
	Header bool
	// COpt, CxxOpt: AC_PROG_CC (AC_PROG_CXX) runs at the top level with
	// no CFLAGS (CXXFLAGS) assigned before it, so configure sets them to
	// autoconf's default for a GNU compiler, "-g -O2".
	COpt, CxxOpt bool
}

const (
	// maxConfigureCalls bounds the words read as macro calls, in
	// configure.ac and the macros it expands.
	maxConfigureCalls = 200_000
	// maxM4Expansion bounds the bytes of macro bodies expanded (each
	// expansion is read once), maxM4Macros the macros defined.
	maxM4Expansion = 8 << 20
	maxM4Macros    = 4096
	// maxACDepth bounds nested branches and expansions.
	maxACDepth = 12
)

// parseConfigureAC reads a configure.ac (bounded like the other build
// files) with the project's macro files (the .m4 files aclocal would
// read, each bounded the same way), answering its checks against plat.
// m4's quotes ([…]) and comments (# and dnl to the end of the line) are
// followed. A definition (AC_DEFINE, AC_USE_SYSTEM_EXTENSIONS) counts
// only where configure makes it unconditionally: outside every shell if,
// case, for, while or until, and in a branch the static read decides.
// A check's own definitions (AC_CHECK_FUNCS's HAVE_<FUNC>,
// AC_CHECK_HEADERS's HAVE_<HEADER_H>) are the platform's answer wherever
// the check is written: they name what they test, and a project that
// checks under a condition tests the result under it (autoheader reads
// them the same way; so does a macro like Heimdal's AC_FIND_FUNC, which
// names its definition through the shell and declares it with an
// AC_CHECK_FUNCS configure never runs).
//
// Of AS_IF([test "x$enable_foo" != "xno"], [then], [else]) on an option
// AC_ARG_ENABLE or AC_ARG_WITH declares (enable_foo, with_foo), the branch
// configure takes when it is run without options is read the same way:
// the variable is unset then, or what the option's action-if-not-given
// assigns it (jq's USE_DECNUM, on unless --disable-decnum). On anything
// else, both branches are read as conditional.
func parseConfigureAC(data []byte, plat *cPlatform, macroFiles ...[]byte) configureAC {
	if len(data) > maxBuildFileBytes {
		data = data[:maxBuildFileBytes]
	}
	p := &acParser{plat: plat, options: map[string]string{}, defs: map[string]m4Def{}, text: string(data)}
	p.defsOnly = true
	for _, f := range macroFiles {
		if len(f) > maxBuildFileBytes {
			f = f[:maxBuildFileBytes]
		}
		p.scan(string(f), 1, false)
	}
	p.defsOnly = false
	p.scan(p.text, 0, false)
	return p.c
}

// acParser is parseConfigureAC's state.
type acParser struct {
	c       configureAC
	plat    *cPlatform
	options map[string]string // the options' values without arguments
	defs    map[string]m4Def  // the project's macros
	// defsOnly: reading macro files, whose top level only defines.
	defsOnly bool
	calls    int    // words read as calls
	expanded int    // bytes of macro bodies expanded
	text     string // configure.ac
	first    map[string]int
}

// m4Def is a macro the project defines: an AC_DEFUN's body, expanded
// where it is called, or an m4_define's text, also expanded in the
// arguments of other calls (jq's m4_define([ac_tr_func], …) named the
// AC_DEFINE after it).
type m4Def struct {
	body string
	text bool
}

// before reports whether configure.ac has assign ending at or before i:
// the first occurrence is found once per name, not once per macro call (a
// file of AC_PROG_CC lines would otherwise rescan its prefix each time).
func (p *acParser) before(assign string, i int) bool {
	at, ok := p.first[assign]
	if !ok {
		at = strings.Index(p.text, assign)
		if p.first == nil {
			p.first = map[string]int{}
		}
		p.first[assign] = at
	}
	return at >= 0 && at+len(assign) <= i
}

// scan reads s, whose calls are conditional already when cond.
func (p *acParser) scan(s string, depth int, cond bool) {
	c := &p.c
	quote, paren, shell := 0, 0, 0
	lineStart := true
	for i := 0; i < len(s); {
		ch := s[i]
		switch {
		case ch == '\n':
			lineStart = true
			i++
			continue
		case ch == '#' && quote == 0:
			for i < len(s) && s[i] != '\n' {
				i++
			}
			continue
		case ch == '[':
			quote++
		case ch == ']':
			if quote > 0 {
				quote--
			}
		case quote > 0:
		case ch == '(':
			paren++
		case ch == ')':
			if paren > 0 {
				paren--
			}
		case isIdentStart(ch) && (i == 0 || !isIdent(s[i-1])):
			j := i
			for j < len(s) && isIdent(s[j]) {
				j++
			}
			word := s[i:j]
			if word == "dnl" {
				for j < len(s) && s[j] != '\n' {
					j++
				}
				i = j
				continue
			}
			if paren == 0 {
				if lineStart {
					switch word {
					case "if", "case", "for", "while", "until":
						shell++
					case "fi", "esac", "done":
						if shell > 0 {
							shell--
						}
					}
				}
				switch word {
				case "AC_CONFIG_HEADERS", "AC_CONFIG_HEADER", "AM_CONFIG_HEADER":
					c.Header = c.Header || !p.defsOnly
				}
				if p.calls++; p.calls > maxConfigureCalls {
					return
				}
				var args []string
				closed := true
				if j < len(s) && s[j] == '(' {
					var end int
					args, end, closed = p.args(s, j, 0)
					j = end
				}
				inShell := cond || shell > 0
				if depth == 0 && !inShell {
					// s is configure.ac here: is a flag assigned before?
					switch word {
					case "AC_PROG_CC":
						c.COpt = !p.before("CFLAGS=", i)
					case "AC_PROG_CXX":
						c.CxxOpt = !p.before("CXXFLAGS=", i)
					}
				}
				if closed { // a call the file's end (or its bound) cuts is not read
					p.call(word, args, depth, inShell)
				}
			}
			// A shell keyword after which a command starts.
			lineStart = paren == 0 && (word == "then" || word == "else" || word == "do" || word == "elif")
			i = j
			continue
		}
		switch ch {
		case ' ', '\t':
		case ';', '&', '|':
			lineStart = paren == 0 && quote == 0
		default:
			lineStart = false
		}
		i++
	}
}

// branch reads one of a call's action arguments, if it has it.
func (p *acParser) branch(args []string, n, depth int, cond bool) {
	if n < len(args) && args[n] != "" && depth < maxACDepth {
		p.scan(args[n], depth+1, cond)
	}
}

// call applies one macro call; cond: configure may not run it.
func (p *acParser) call(name string, args []string, depth int, cond bool) {
	c := &p.c
	switch name {
	case "AC_DEFUN", "AC_DEFUN_ONCE", "AU_DEFUN", "m4_defun", "m4_define":
		if len(args) > 1 && macroRE.MatchString(args[0]) && !strings.Contains(args[0], "=") {
			if _, ok := p.defs[args[0]]; (!ok || !p.defsOnly) && len(p.defs) < maxM4Macros {
				p.defs[args[0]] = m4Def{body: args[1], text: name == "m4_define"}
			}
		}
		return
	}
	if p.defsOnly {
		return
	}
	plat := p.plat
	switch name {
	case "AC_ARG_ENABLE", "AC_ARG_WITH":
		if cond || len(args) == 0 || len(p.options) >= maxCMakeVars {
			return
		}
		prefix := map[bool]string{true: "enable_", false: "with_"}[name == "AC_ARG_ENABLE"]
		v := prefix + strings.ReplaceAll(args[0], "-", "_")
		if !macroRE.MatchString(v) || strings.Contains(v, "=") {
			return
		}
		val, known := "", true // unset without the option
		if len(args) > 3 && args[3] != "" {
			// action-if-not-given: only "v=value" is read.
			name, value, ok := strings.Cut(args[3], "=")
			known = ok && name == v && !strings.ContainsAny(value, "$`;&| \t\n\"'")
			val = value
		}
		// Assigned anywhere but in the option's own actions (jq's
		// enable_docs=no when a tool is missing): configure's to know.
		own := 0
		for _, a := range args[min(2, len(args)):] {
			own += strings.Count(a, v+"=")
		}
		if strings.Count(p.text, v+"=") > own {
			known = false
		}
		if known {
			p.options[v] = val
		} else {
			p.options[v] = "\x00" // a value configure computes
		}
	case "AS_IF":
		if len(args) < 2 {
			return
		}
		switch acTest(args[0], p.options) {
		case condTrue:
			p.branch(args, 1, depth, cond)
		case condFalse:
			p.branch(args, 2, depth, cond)
		default:
			p.branch(args, 1, depth, true)
			p.branch(args, 2, depth, true)
		}
	case "AC_USE_SYSTEM_EXTENSIONS", "AC_GNU_SOURCE":
		if !cond {
			for _, d := range systemExtensions {
				c.addDefine(d)
			}
		}
	case "AC_DEFINE", "AC_DEFINE_UNQUOTED":
		if cond || len(args) == 0 || !macroRE.MatchString(args[0]) || strings.Contains(args[0], "=") {
			return
		}
		v := "1"
		if len(args) > 1 {
			v = args[1]
		}
		// A value from the shell ($var, `cmd`) is configure's to know.
		if strings.ContainsAny(v, "$`\n") {
			return
		}
		c.addDefine(args[0] + "=" + v)
	case "AC_CHECK_FUNCS", "AC_CHECK_FUNCS_ONCE":
		for _, fn := range acList(args) {
			ok := plat.links(fn, "")
			if ok {
				c.addDefine("HAVE_" + acTrCPP(fn) + "=1")
			}
			p.branch(args, map[bool]int{true: 1, false: 2}[ok], depth, cond)
		}
	case "AC_CHECK_FUNC":
		if len(args) > 0 {
			p.branch(args, map[bool]int{true: 1, false: 2}[plat.links(args[0], "")], depth, cond)
		}
	case "AC_CHECK_LIB":
		if len(args) < 2 {
			return
		}
		ok := plat.hasLib(args[0]) && plat.links(args[1], args[0])
		if ok && (len(args) < 3 || args[2] == "") {
			c.addDefine("HAVE_LIB" + acTrCPP(args[0]) + "=1")
		}
		p.branch(args, map[bool]int{true: 2, false: 3}[ok], depth, cond)
	case "AC_SEARCH_LIBS":
		if len(args) < 1 {
			return
		}
		ok := plat.links(args[0], "")
		for _, lib := range strings.Fields(argAt(args, 1)) {
			ok = ok || plat.links(args[0], lib)
		}
		p.branch(args, map[bool]int{true: 2, false: 3}[ok], depth, cond)
	case "AC_CHECK_HEADERS", "AC_CHECK_HEADERS_ONCE":
		for _, h := range acList(args) {
			ok := plat.header(h)
			if ok {
				c.addDefine("HAVE_" + acTrCPP(h) + "=1")
			}
			p.branch(args, map[bool]int{true: 1, false: 2}[ok], depth, cond)
		}
	case "AC_CHECK_HEADER":
		if len(args) > 0 {
			p.branch(args, map[bool]int{true: 1, false: 2}[plat.header(args[0])], depth, cond)
		}
	case "AC_FUNC_ALLOCA":
		// With glibc's <alloca.h> alloca is the compiler's builtin.
		if plat.header("alloca.h") {
			c.addDefine("HAVE_ALLOCA_H=1")
			c.addDefine("HAVE_ALLOCA=1")
		}
	case "AC_C_BIGENDIAN":
		switch {
		case plat == nil || !plat.bigEndian:
			p.branch(args, 1, depth, cond)
		case argAt(args, 0) != "":
			p.branch(args, 0, depth, cond)
		default:
			c.addDefine("WORDS_BIGENDIAN=1")
		}
	case "AX_PTHREAD", "ACX_PTHREAD":
		// autoconf-archive's: the platform's threads are glibc's.
		switch {
		case !plat.links("pthread_create", "pthread"):
			p.branch(args, 1, depth, cond)
		case argAt(args, 0) != "":
			p.branch(args, 0, depth, cond)
		default:
			c.addDefine("HAVE_PTHREAD=1")
		}
	default:
		d, ok := p.defs[name]
		if !ok || depth >= maxACDepth {
			return
		}
		body, ok := m4Subst(d.body, name, args, maxM4Expansion-p.expanded)
		if !ok {
			p.expanded = maxM4Expansion
			return
		}
		p.expanded += len(body)
		p.scan(body, depth+1, cond)
	}
}

// argAt is args[n], or "" when the call has fewer.
func argAt(args []string, n int) string {
	if n < len(args) {
		return args[n]
	}
	return ""
}

// acList is the names a check's first argument lists (whitespace
// separated); a name from the shell ($funcs) is configure's to know.
func acList(args []string) []string {
	var out []string
	for _, w := range strings.Fields(argAt(args, 0)) {
		if !strings.ContainsAny(w, "$`\"'") {
			out = append(out, w)
		}
	}
	return out
}

// m4Subst is body with m4's parameters replaced: $0 the macro's name,
// $1…$9 its arguments, $# their number, $* and $@ all of them (each
// quoted, for $@); ok false when it would be longer than max bytes (a
// body of 1 MB of $1 would otherwise multiply an argument's size).
func m4Subst(body, name string, args []string, max int) (string, bool) {
	if !strings.Contains(body, "$") {
		return body, len(body) <= max
	}
	var b strings.Builder
	for i := 0; i < len(body); i++ {
		if b.Len() > max {
			return "", false
		}
		if body[i] != '$' || i+1 == len(body) {
			b.WriteByte(body[i])
			continue
		}
		switch n := body[i+1]; {
		case n == '0':
			b.WriteString(name)
		case n >= '1' && n <= '9':
			b.WriteString(argAt(args, int(n-'1')))
		case n == '#':
			b.WriteString(strconv.Itoa(len(args)))
		case n == '*' || n == '@':
			for k, a := range args {
				if k > 0 {
					b.WriteByte(',')
				}
				if n == '@' {
					a = "[" + a + "]"
				}
				b.WriteString(a)
			}
		default:
			b.WriteByte('$')
			continue
		}
		i++
	}
	return b.String(), b.Len() <= max
}

func (c *configureAC) addDefine(d string) {
	if len(d) <= maxCFlagLen && macroRE.MatchString(d) {
		name, _, _ := strings.Cut(d, "=")
		for _, x := range c.Defines {
			if n, _, _ := strings.Cut(x, "="); n == name {
				return
			}
		}
		c.Defines = appendFlag(c.Defines, d, maxCDefines)
	}
}

// maxM4ArgDepth bounds the nested calls expanded in an argument.
const maxM4ArgDepth = 8

// args splits the arguments of the macro call whose '(' is at s[open], as
// m4 collects them: at commas outside nested parentheses and quotes, one
// level of quotes taken off, leading whitespace trimmed, and outside
// quotes the case and name builtins (m4_toupper, m4_tolower, AS_TR_CPP,
// AS_TR_SH) and the project's m4_define texts expanded; end is past the
// closing ')' (or the end of s, closed false). Each byte of s is read
// once; the bytes a text expands to are bounded with the bodies.
func (p *acParser) args(s string, open, nest int) (args []string, end int, closed bool) {
	var cur strings.Builder
	quote, paren := 0, 0
	i := open + 1
	for ; i < len(s); i++ {
		ch := s[i]
		switch {
		case ch == '[':
			if quote > 0 {
				cur.WriteByte(ch)
			}
			quote++
			continue
		case ch == ']' && quote > 0:
			quote--
			if quote > 0 {
				cur.WriteByte(ch)
			}
			continue
		case quote > 0:
		case ch == '(':
			paren++
		case ch == ')':
			if paren == 0 {
				args = append(args, strings.TrimSpace(cur.String()))
				return args, i + 1, true
			}
			paren--
		case ch == ',' && paren == 0:
			args = append(args, strings.TrimSpace(cur.String()))
			cur.Reset()
			continue
		case isIdentStart(ch) && !isIdent(s[i-1]):
			j := i
			for j < len(s) && isIdent(s[j]) {
				j++
			}
			word := s[i:j]
			if tr := m4Case[word]; tr != nil && j < len(s) && s[j] == '(' && nest < maxM4ArgDepth {
				sub, e, _ := p.args(s, j, nest+1)
				cur.WriteString(tr(argAt(sub, 0)))
				i = e - 1
				continue
			}
			if d, ok := p.defs[word]; ok && d.text && p.expanded+len(d.body) <= maxM4Expansion {
				p.expanded += len(d.body)
				cur.WriteString(d.body)
			} else {
				cur.WriteString(word)
			}
			i = j - 1
			continue
		}
		cur.WriteByte(ch)
	}
	return append(args, strings.TrimSpace(cur.String())), i, false
}

// m4Case are the builtins that change a name's case or bytes.
var m4Case = map[string]func(string) string{
	"m4_toupper": strings.ToUpper,
	"m4_tolower": strings.ToLower,
	"AS_TR_CPP":  acTrCPP,
	"AS_TR_SH": func(s string) string {
		return strings.Map(func(r rune) rune {
			if r < 0x80 && isIdent(byte(r)) {
				return r
			}
			return '_'
		}, s)
	},
}

// acTest evaluates an AS_IF condition of the form test "x$var" = "xval"
// (= or !=, with or without the x prefix and the quotes) on an option's
// variable; anything else is unknown.
func acTest(cond string, options map[string]string) cond {
	w := strings.Fields(cond)
	if len(w) != 4 || w[0] != "test" || w[2] != "=" && w[2] != "!=" {
		return condUnknown
	}
	unquote := func(s string) string {
		if len(s) >= 2 && (s[0] == '"' && s[len(s)-1] == '"' || s[0] == '\'' && s[len(s)-1] == '\'') {
			return s[1 : len(s)-1]
		}
		return s
	}
	lhs, rhs := unquote(w[1]), unquote(w[3])
	if strings.HasPrefix(lhs, "x") != strings.HasPrefix(rhs, "x") {
		return condUnknown
	}
	if strings.HasPrefix(lhs, "x") {
		lhs, rhs = lhs[1:], rhs[1:]
	}
	name, ok := strings.CutPrefix(lhs, "$")
	name = strings.TrimSuffix(strings.TrimPrefix(name, "{"), "}")
	val, set := options[name]
	if !ok || !set || val == "\x00" || strings.ContainsAny(rhs, "$`") {
		return condUnknown
	}
	if (val == rhs) == (w[2] == "=") {
		return condTrue
	}
	return condFalse
}

// Bounds of the macro files read: the directories, the .m4 files of
// each, and their bytes together.
const (
	maxM4Dirs       = 8
	maxM4Files      = 256
	maxM4FilesBytes = 8 << 20
)

var (
	macroDirRE     = regexp.MustCompile(`AC_CONFIG_MACRO_DIRS?\(\s*\[?([^\])]*)`)
	aclocalFlagsRE = regexp.MustCompile(`(?m)^ACLOCAL_AMFLAGS\s*=(.*)$`)
)

// configureMacros reads the macro files aclocal would give configure.ac
// from the tree at root: the .m4 files of the directories
// AC_CONFIG_MACRO_DIR(S) and the top Makefile.am's ACLOCAL_AMFLAGS -I
// name, in that order, then acinclude.m4. Each directory must be a real
// one in the tree (no element a link), each file a regular one.
func configureMacros(root string, ac []byte) [][]byte {
	var dirs []string
	add := func(d string) {
		d = path.Clean(strings.Trim(d, `"'`))
		if filepath.IsLocal(d) && !slices.Contains(dirs, d) && len(dirs) < maxM4Dirs {
			dirs = append(dirs, d)
		}
	}
	for _, m := range macroDirRE.FindAllSubmatch(ac, maxM4Dirs) {
		for _, d := range strings.Fields(string(m[1])) {
			add(d)
		}
	}
	if am, err := readRegular(filepath.Join(root, "Makefile.am"), maxBuildFileBytes); err == nil {
		if m := aclocalFlagsRE.FindSubmatch(am); m != nil {
			f := strings.Fields(string(m[1]))
			for i, w := range f {
				switch {
				case w == "-I" && i+1 < len(f):
					add(f[i+1])
				case strings.HasPrefix(w, "-I") && len(w) > 2:
					add(w[2:])
				}
			}
		}
	}
	var files [][]byte
	total := 0
	read := func(p string) {
		if len(files) >= maxM4Files || total >= maxM4FilesBytes {
			return
		}
		if b, err := readRegular(p, maxBuildFileBytes); err == nil && total+len(b) <= maxM4FilesBytes {
			files = append(files, b)
			total += len(b)
		}
	}
	for _, d := range dirs {
		if d == "." || realDirUnder(root, d) != nil {
			continue
		}
		ents, err := os.ReadDir(filepath.Join(root, filepath.FromSlash(d)))
		if err != nil {
			continue
		}
		for _, e := range ents { // sorted by name, as aclocal reads them
			if e.Type().IsRegular() && strings.HasSuffix(e.Name(), ".m4") {
				read(filepath.Join(root, filepath.FromSlash(d), e.Name()))
			}
		}
	}
	read(filepath.Join(root, "acinclude.m4"))
	return files
}
