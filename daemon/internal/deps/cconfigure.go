package deps

import (
	"strings"
)

// Autoconf. configure's checks (a header compiles, a function links,
// AX_PTHREAD, a project's own m4 macros) are results of running the build
// and are not known here: jq's HAVE_PTHREAD, USE_DECNUM and HAVE_<func>
// stay undefined, so clangd reads their #else branches, and the answers
// say partial. What configure.ac makes whatever the checks find is read
// statically: AC_USE_SYSTEM_EXTENSIONS's definitions, as autoconf defines
// them for glibc (the jail's C library), an AC_DEFINE with a literal
// value outside every macro argument and shell conditional, and
// AC_PROG_CC's default -O2 (with no CFLAGS set before it). configure
// writes them on every compiler line (DEFS), unless configure.ac names a
// config header (AC_CONFIG_HEADERS), where they go instead: that header
// is generated, missing from a checkout, so then none is used.

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
	// Defines are the definitions configure makes whatever its checks
	// find (NAME=VALUE).
	Defines []string
	// Header: configure.ac names a config header (AC_CONFIG_HEADERS,
	// AC_CONFIG_HEADER, AM_CONFIG_HEADER), where the definitions go.
	Header bool
	// COpt, CxxOpt: AC_PROG_CC (AC_PROG_CXX) runs at the top level with
	// no CFLAGS (CXXFLAGS) assigned before it, so configure sets them to
	// autoconf's default for a GNU compiler, "-g -O2".
	COpt, CxxOpt bool
}

// maxConfigureCalls bounds the macro calls read from one configure.ac.
const maxConfigureCalls = 20_000

// parseConfigureAC reads a configure.ac (bounded like the other build
// files): m4's quotes ([…]) and comments (# and dnl to the end of the
// line) are followed, and a macro call counts only at the top level:
// outside every macro's arguments, every quote and every shell if, case,
// for, while or until — where configure runs it unconditionally.
//
// Of AS_IF([test "x$enable_foo" != "xno"], [then], [else]) on an option
// AC_ARG_ENABLE or AC_ARG_WITH declares (enable_foo, with_foo), the branch
// configure takes when it is run without options is read the same way:
// the variable is unset then, or what the option's action-if-not-given
// assigns it (jq's USE_DECNUM, on unless --disable-decnum). A condition
// on anything else is configure's to know; neither branch counts.
func parseConfigureAC(data []byte) configureAC {
	if len(data) > maxBuildFileBytes {
		data = data[:maxBuildFileBytes]
	}
	p := &acParser{options: map[string]string{}, text: string(data)}
	p.scan(string(data), 0)
	return p.c
}

// acParser is parseConfigureAC's state: what it found, the options'
// values without arguments, and the macro calls read (shared by the
// branches it enters).
type acParser struct {
	c       configureAC
	options map[string]string
	calls   int
	text    string // the whole file
	first   map[string]int
}

// before reports whether the file has assign ending at or before i: the
// first occurrence is found once per name, not once per macro call (a
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

// maxACDepth bounds the nested AS_IF branches read.
const maxACDepth = 8

func (p *acParser) scan(s string, depth int) {
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
		case isIdentStart(ch):
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
					c.Header = true
				}
				if shell == 0 {
					if p.calls++; p.calls > maxConfigureCalls {
						return
					}
					var args []string
					closed := true
					if j < len(s) && s[j] == '(' {
						var end int
						args, end, closed = m4Args(s, j)
						j = end
					}
					if depth == 0 {
						// s is the whole file here: is a flag assigned before?
						switch word {
						case "AC_PROG_CC":
							c.COpt = !p.before("CFLAGS=", i)
						case "AC_PROG_CXX":
							c.CxxOpt = !p.before("CXXFLAGS=", i)
						}
					}
					if closed { // a call the file's end (or its bound) cuts is not read
						p.topLevel(word, args, depth)
					}
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

// topLevel applies one unconditional macro call.
func (p *acParser) topLevel(name string, args []string, depth int) {
	c := &p.c
	switch name {
	case "AC_ARG_ENABLE", "AC_ARG_WITH":
		if len(args) == 0 || len(p.options) >= maxCMakeVars {
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
		if depth >= maxACDepth || len(args) < 2 {
			return
		}
		switch acTest(args[0], p.options) {
		case condTrue:
			p.scan(args[1], depth+1)
		case condFalse:
			if len(args) > 2 {
				p.scan(args[2], depth+1)
			}
		}
	case "AC_USE_SYSTEM_EXTENSIONS", "AC_GNU_SOURCE":
		for _, d := range systemExtensions {
			c.addDefine(d)
		}
	case "AC_DEFINE", "AC_DEFINE_UNQUOTED":
		if len(args) == 0 || !macroRE.MatchString(args[0]) || strings.Contains(args[0], "=") {
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
	}
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

// m4Args splits the arguments of the macro call whose '(' is at s[open]:
// at commas outside nested parentheses and quotes, one level of quotes
// taken off, leading whitespace trimmed; end is past the closing ')' (or
// the end of s, closed false). Bounded by the file: each byte is read
// once and copied at most once.
func m4Args(s string, open int) (args []string, end int, closed bool) {
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
		}
		cur.WriteByte(ch)
	}
	return append(args, strings.TrimSpace(cur.String())), i, false
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
