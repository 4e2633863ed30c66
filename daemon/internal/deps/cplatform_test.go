package deps

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hanzoai/lsp/daemon/internal/deps/depstest"
)

// glibc is the platform of the machine the tests run on (Debian's
// layout, as the jail's), skipping where it has no glibc.
func glibc(t *testing.T) *cPlatform {
	t.Helper()
	p := systemPlatform()
	if !p.links("memmem", "") {
		t.Skip("no glibc here")
	}
	return p
}

func TestPlatform(t *testing.T) {
	p := glibc(t)
	for _, tc := range []struct {
		fn, lib string
		want    bool
	}{
		{"memmem", "", true}, {"strptime", "", true}, {"atexit", "", true}, // atexit: libc_nonshared.a, through libc.so's script {"cos", "", false}, {"cos", "m", true},
		{"pthread_create", "pthread", true}, {"pthread_create", "", true},
		{"_isatty", "", false}, {"__exp10", "m", false}, {"no_such_function_here", "m", false},
		{"memmem", "../../etc/passwd", true}, {"cos", "../../etc/passwd", false}, {"cos;rm", "m", false},
	} {
		if got := p.links(tc.fn, tc.lib); got != tc.want {
			t.Errorf("links(%q, %q) = %v", tc.fn, tc.lib, got)
		}
	}
	for _, tc := range []struct {
		lib  string
		want bool
	}{{"m", true}, {"c", true}, {"pthread", true}, {"no-such-lib", false}, {"*", false}, {"", false}} {
		if got := p.hasLib(tc.lib); got != tc.want {
			t.Errorf("hasLib(%q) = %v", tc.lib, got)
		}
	}
	for _, tc := range []struct {
		h    string
		want bool
	}{
		{"stdio.h", true}, {"sys/time.h", true}, {"alloca.h", true}, {"shlwapi.h", false}, {"sys/cygwin.h", false},
		{"../include/stdio.h", false}, {"/usr/include/stdio.h", false}, {"sys", false}, {"sys/../stdio.h", false},
	} {
		if got := p.header(tc.h); got != tc.want {
			t.Errorf("header(%q) = %v", tc.h, got)
		}
	}
	if p.bigEndian {
		t.Error("this machine is little-endian")
	}
	// The files a linker script names, comments and all; an archive's
	// index.
	script := "/* GNU ld script\n  GROUP(x) in a comment */\nOUTPUT_FORMAT(elf64-x86-64)\nGROUP ( /lib/x/libc.so.6 /usr/lib/x/libc_nonshared.a  AS_NEEDED ( /lib64/ld.so.2 ) ) INPUT(/usr/lib/../etc/passwd, /usr/lib/x/libm.so.6)"
	if got, want := linkScriptFiles(script), []string{"/lib/x/libc.so.6", "/usr/lib/x/libc_nonshared.a", "/usr/lib/x/libm.so.6"}; !slices.Equal(got, want) {
		t.Errorf("linkScriptFiles = %q, want %q", got, want)
	}
	ar := func(name string, index []byte) []byte {
		h := fmt.Sprintf("%-16s%-12d%-6d%-6d%-8o%-10d`\n", name, 0, 0, 0, 0o644, len(index))
		return append([]byte("!<arch>\n"+h), index...)
	}
	index := append([]byte{0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0}, "atexit\x00at_quick_exit\x00"...)
	if got := arSymbols(ar("/", index)); len(got) != 2 || !got["atexit"] || !got["at_quick_exit"] {
		t.Errorf("arSymbols = %v", got)
	}
	for _, bad := range [][]byte{ar("/", []byte{0xff, 0xff, 0xff, 0xff}), ar("x.o/", index), []byte("!<arch>\n"), ar("/", nil)[:70]} {
		if got := arSymbols(bad); len(got) != 0 {
			t.Errorf("arSymbols(%q) = %v", bad, got)
		}
	}
	var none *cPlatform
	if none.links("memmem", "") || none.header("stdio.h") || none.hasLib("c") {
		t.Error("the nil platform has something")
	}
}

// configure's checks, answered against the platform: a check's own
// definition wherever it is written, its branches as the answer decides
// them, a project's macros expanded with their arguments, and the
// definitions inside them only where configure makes them whatever runs.
func TestConfigureChecks(t *testing.T) {
	p := glibc(t)
	macros := []byte(`dnl The project's own macros, as in its m4 directory.
AC_DEFUN([MY_MATH], [
  AC_CHECK_LIB([m], [$1], [
    m4_define([my_name], [HAVE_]m4_toupper($1))
    AC_DEFINE(my_name, 1, [Define if you have $1.])
  ])
])
AC_DEFUN([MY_FIND], [
eval "ac_res=\$ac_cv_func_$1"
if false; then
	AC_CHECK_FUNCS($1)
fi
case "$ac_res" in
	yes) AC_DEFINE_UNQUOTED($ac_tr_func, 1) AC_DEFINE([SHELL_ONLY_$#]) ;;
esac
])
AC_DEFUN([RECURSE], [RECURSE([$1])])
`)
	src := `AC_INIT([demo], [1.0])
AC_CHECK_FUNCS([memmem strptime no_such_function_here $dynamic])
AC_CHECK_FUNCS_ONCE(timegm)
AC_CHECK_FUNC([gmtime_r], [AC_DEFINE([GMTIME_R_FOUND])], [AC_DEFINE([GMTIME_R_MISSING])])
AC_CHECK_FUNC([_isatty], [AC_DEFINE([UNDERSCORE_FOUND])], [AC_DEFINE([UNDERSCORE_MISSING])])
AC_CHECK_LIB([m], [cos])
AC_CHECK_LIB([no-such-lib], [cos], [AC_DEFINE([NO_LIB_FOUND])], [AC_DEFINE([NO_LIB_MISSING])])
AC_SEARCH_LIBS([sin], [m], [AC_DEFINE([SIN_FOUND])])
AC_CHECK_HEADERS([sys/time.h shlwapi.h])
AC_CHECK_HEADER([sys/cygwin.h], [AC_DEFINE([CYGWIN])], [AC_DEFINE([NOT_CYGWIN])])
AC_FUNC_ALLOCA
AC_C_BIGENDIAN([AC_DEFINE([BIG])], AC_DEFINE([LITTLE], 1, [little]), [AC_MSG_ERROR([unknown])])
AX_PTHREAD([AC_DEFINE([THREADS], [1])])
MY_MATH(acos)
MY_MATH([no_such_function_here])
MY_FIND([setenv])
MY_FIND([_isatty])
RECURSE([x])
if test "$host" = mingw; then
  AC_CHECK_FUNCS([gettimeofday], [AC_DEFINE([CONDITIONAL_BRANCH])])
  MY_MATH(asin)
fi
AS_IF([test "$x" = y], [AC_CHECK_HEADERS([stdint.h], [AC_DEFINE([CONDITIONAL_AS_IF])])])
`
	got := parseConfigureAC([]byte(src), p, macros)
	want := []string{
		"HAVE_MEMMEM=1", "HAVE_STRPTIME=1", "HAVE_TIMEGM=1", "GMTIME_R_FOUND=1", "UNDERSCORE_MISSING=1",
		"HAVE_LIBM=1", "NO_LIB_MISSING=1", "SIN_FOUND=1", "HAVE_SYS_TIME_H=1", "NOT_CYGWIN=1",
		"HAVE_ALLOCA_H=1", "HAVE_ALLOCA=1", "LITTLE=1", "THREADS=1", "HAVE_ACOS=1", "HAVE_SETENV=1",
		"HAVE_GETTIMEOFDAY=1", "HAVE_STDINT_H=1",
	}
	if !slices.Equal(got.Defines, want) {
		t.Errorf("parseConfigureAC:\n got %v\nwant %v", got.Defines, want)
	}
	// Texts at the top level: the case builtins and an m4_define's text
	// in the name of an AC_DEFINE.
	got = parseConfigureAC([]byte("m4_define([pfx], [MY_])\nAC_DEFINE(pfx[]AS_TR_CPP([a-b.c]), [2])\nAC_DEFINE([pfx], [3])\nAC_DEFINE(m4_tolower(LOW))\n"), p)
	if want := []string{"MY_A_B_C=2", "pfx=3", "low=1"}; !slices.Equal(got.Defines, want) {
		t.Errorf("texts: %v, want %v", got.Defines, want)
	}
	// Without the platform, no check passes; AX_PTHREAD takes its else.
	got = parseConfigureAC([]byte("AC_CHECK_FUNCS([memmem])\nAX_PTHREAD([AC_DEFINE([T])], [AC_DEFINE([NO_T])])\nAC_C_BIGENDIAN\n"), nil)
	if want := []string{"NO_T=1"}; !slices.Equal(got.Defines, want) {
		t.Errorf("no platform: %v, want %v", got.Defines, want)
	}
}

// jq's configure.ac with its macro directories (config/m4, m4):
// AC_USE_SYSTEM_EXTENSIONS at the top level (so builtin.c's own
// _XOPEN_SOURCE does not hide setenv), USE_DECNUM unless
// --disable-decnum, and the checks' definitions, answered against this
// machine's glibc, as its configure makes them here (HAVE_PTHREAD from
// AX_PTHREAD's action, HAVE_<func> from its AC_FIND_FUNC and
// AC_CHECK_MATH_FUNC macros, IEEE_8087 from AC_C_BIGENDIAN's). No config
// header.
func TestConfigureACReal(t *testing.T) {
	p := glibc(t)
	files, err := depstest.CorpusFiles("jqlang__jq", func(n string) bool {
		return n == "configure.ac" || n == "Makefile.am" || strings.HasSuffix(n, ".m4")
	})
	if errors.Is(err, os.ErrNotExist) {
		t.Skip("no corpus snapshot jqlang__jq")
	}
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	for rel, body := range files {
		f := filepath.Join(root, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	macros := configureMacros(root, []byte(files["configure.ac"]))
	if len(macros) < 8 {
		t.Fatalf("%d macro files read", len(macros))
	}
	got := parseConfigureAC([]byte(files["configure.ac"]), p, macros...)
	if got.Header || !got.COpt {
		t.Errorf("jq configure.ac: %+v", got)
	}
	for _, d := range append(slices.Clone(systemExtensions), "USE_DECNUM=1", "HAVE_MEMMEM=1", "HAVE_PTHREAD=1",
		"HAVE_STRPTIME=1", "HAVE_TIMEGM=1", "HAVE_GMTIME_R=1", "HAVE_SETENV=1", "HAVE_ISATTY=1", "HAVE_ARC4RANDOM=1",
		"HAVE_GETENTROPY=1", "HAVE_PTHREAD_KEY_CREATE=1", "HAVE_ACOS=1", "HAVE_SIGNIFICAND=1", "HAVE_YN=1",
		"HAVE_LGAMMA_R=1", "HAVE_ALLOCA=1", "IEEE_8087=1", "HAVE_ATEXIT=1") {
		if !slices.Contains(got.Defines, d) {
			t.Errorf("jq configure.ac: no %s", d)
		}
	}
	// Not glibc's; a compile test (__thread) or a struct member is
	// configure's to know.
	for _, d := range []string{"HAVE__ISATTY", "HAVE___EXP10", "IEEE_MC68k", "HAVE___THREAD", "HAVE_TM_TM_GMT_OFF", "HAVE_SHLWAPI_H"} {
		if slices.ContainsFunc(got.Defines, func(x string) bool { return strings.HasPrefix(x, d+"=") }) {
			t.Errorf("jq configure.ac: %s", d)
		}
	}
}

// fuzzPlatform is the nil platform: the fuzzer explores the reading, not
// the machine's libraries.
var fuzzPlatform *cPlatform

func FuzzParseConfigureAC(f *testing.F) {
	f.Add([]byte("AC_USE_SYSTEM_EXTENSIONS\nAC_DEFINE([A], [1])\nif x; then AC_DEFINE(B); fi\n"), []byte("AC_DEFUN([M], [AC_DEFINE([$1])])"))
	f.Add([]byte("AC_CONFIG_HEADERS([c.h])\nAS_IF([t], [AC_DEFINE([C])])\n# x\ndnl y\n[[q]]"), []byte("m4_define([t], [T]m4_toupper($1))"))
	f.Add([]byte("AC_ARG_ENABLE([a], [h], [], [enable_a=no])\nAS_IF([test \"x$enable_a\" = xno], [AS_IF([test \"$enable_a\" != yes], [AC_DEFINE([N])])])\n"), []byte{})
	f.Add([]byte("M(x)\nR\nAX_PTHREAD(,[AC_DEFINE([NT])])\nAC_CHECK_LIB([m],[cos],[m4_define([n],[HAVE_]AS_TR_CPP($2))AC_DEFINE(n)])"), []byte("AC_DEFUN([R],[R R])AC_DEFUN([M],[$0($@) $#])"))
	f.Fuzz(func(t *testing.T, data, macros []byte) {
		c := parseConfigureAC(data, fuzzPlatform, macros)
		if len(c.Defines) > maxCDefines {
			t.Fatalf("%d definitions", len(c.Defines))
		}
		for _, d := range c.Defines {
			if len(d) > maxCFlagLen || !macroRE.MatchString(d) {
				t.Fatalf("definition %q", d)
			}
		}
	})
}
