package deps

import (
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
)

func TestParseConfigureAC(t *testing.T) {
	src := `AC_INIT([demo], [1.0])
dnl AC_DEFINE([IN_A_COMMENT])
# AC_DEFINE([IN_A_COMMENT_TOO])
AC_USE_SYSTEM_EXTENSIONS
AC_DEFINE([TOP], [2], [always])
AC_DEFINE(PLAIN)
AC_DEFINE_UNQUOTED([FROM_SHELL], ["$host"])
AC_ARG_ENABLE([x], [AS_HELP_STRING([--enable-x])], [AC_DEFINE([IN_AN_ARGUMENT])])
AS_IF([test "x$enable_x" = xyes], [AC_DEFINE([IN_AS_IF])])
if test "$foo" = yes; then
  AC_DEFINE([IN_SHELL_IF])
fi
if test "$bar" = yes; then AC_DEFINE([ONE_LINE_IF]); fi
case $host in
  *linux*) AC_DEFINE([IN_CASE]) ;;
esac
AC_DEFINE([AFTER], ["str"])
[AC_DEFINE([QUOTED])]
AC_ARG_ENABLE([on-by-default], [AS_HELP_STRING([--disable-on-by-default])])
AS_IF([test "x$enable_on_by_default" != "xno"], [AC_DEFINE([ON_BY_DEFAULT], 1)], [AC_DEFINE([NOT_TAKEN])])
AC_ARG_ENABLE([off], [help], [], [enable_off=no])
AS_IF([test "x$enable_off" = xyes], [AC_DEFINE([OFF_TAKEN])], [AC_DEFINE([OFF_ELSE])])
AC_ARG_WITH([computed], [help], [], [with_computed=$(probe)])
AS_IF([test "$with_computed" = yes], [AC_DEFINE([COMPUTED])], [AC_DEFINE([COMPUTED_ELSE])])
AC_ARG_ENABLE([reassigned], [help])
AS_IF([test -z "$CC"], [enable_reassigned=no])
AS_IF([test "x$enable_reassigned" != "xno"], [AC_DEFINE([REASSIGNED])], [AC_DEFINE([REASSIGNED_ELSE])])
AS_IF([test "x$unknown" = "x"], [AC_DEFINE([UNKNOWN_VAR])], [AC_DEFINE([UNKNOWN_VAR_ELSE])])
`
	got := parseConfigureAC([]byte(src), glibc(t))
	want := append(slices.Clone(systemExtensions), "TOP=2", "PLAIN=1", `AFTER="str"`, "ON_BY_DEFAULT=1", "OFF_ELSE=1")
	if got.Header || !slices.Equal(got.Defines, want) || got.COpt || got.CxxOpt {
		t.Fatalf("parseConfigureAC: %+v\nwant %v", got, want)
	}
	// AC_PROG_CC's default -g -O2, unless CFLAGS is set before it.
	if c := parseConfigureAC([]byte("AC_INIT([p], [1])\nAC_PROG_CC\nCFLAGS=\"$CFLAGS -pthread\"\nAC_PROG_CXX\n"), nil); !c.COpt || !c.CxxOpt {
		t.Errorf("AC_PROG_CC: %+v", c)
	}
	if c := parseConfigureAC([]byte(": ${CFLAGS=\"\"}\nAC_PROG_CC\nAS_IF([x], [AC_PROG_CXX])\n"), nil); c.COpt || c.CxxOpt {
		t.Errorf("CFLAGS set first: %+v", c)
	}
	if !parseConfigureAC([]byte("AC_CONFIG_HEADERS([config.h])\nAC_DEFINE([X])\n"), nil).Header {
		t.Error("config header not seen")
	}
	// A branch longer than a flag's bound is read whole; a call the
	// file's end cuts is not read.
	long := "AC_ARG_ENABLE([big], [h])\nAS_IF([test \"x$enable_big\" != xno], [\n" + strings.Repeat("dnl padding\n", 100) + "AC_DEFINE([LATE], [1])])\nAC_DEFINE([CUT], [12"
	if c := parseConfigureAC([]byte(long), nil); !slices.Equal(c.Defines, []string{"LATE=1"}) {
		t.Errorf("long branch: %v", c.Defines)
	}
	// Unbalanced input ends at the file's end.
	for _, s := range []string{"AC_DEFINE([X", "AC_DEFINE(", "((((", "]]]]AC_DEFINE(Y)", "if\nAC_DEFINE(Z)"} {
		if c := parseConfigureAC([]byte(s), nil); slices.ContainsFunc(c.Defines, func(d string) bool { return d == "Z=1" }) {
			t.Errorf("%q: %v", s, c.Defines)
		}
	}
}

// configure's definitions are on every entry of an autotools tree, and
// on none when they go into a config header.
func TestSynthesizeConfigure(t *testing.T) {
	for _, tc := range []struct {
		configure string
		want      []string
	}{
		{"AC_INIT([p], [1])\nAC_DEFINE([TOP])\nAM_INIT_AUTOMAKE\nAC_PROG_CC\n", []string{"TOP=1", "LOCAL"}},
		{"AC_INIT([p], [1])\nAC_CONFIG_HEADERS([config.h])\nAC_DEFINE([TOP])\n", []string{"LOCAL"}},
	} {
		dir := t.TempDir()
		ws := runtime.Workspace{Root: filepath.Join(dir, "tree"), Home: filepath.Join(dir, "home")}
		for rel, body := range map[string]string{
			"configure.ac":    tc.configure,
			"Makefile.am":     "SUBDIRS = lib\n",
			"lib/Makefile.am": "AM_CPPFLAGS = -DLOCAL\nlib_a_SOURCES = a.c\n",
			"lib/a.c":         "int a;\n",
		} {
			p := filepath.Join(ws.Root, rel)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.MkdirAll(ws.Home, 0o755); err != nil {
			t.Fatal(err)
		}
		New(Config{}, slog.New(slog.NewTextHandler(os_discard{}, nil))).Fetch(t.Context(), ws)
		idx, ok := readCIndex(ws)
		if !ok || len(idx.Files) != 1 || !slices.Equal(idx.Sets[idx.Files[0].Set].Defines, tc.want) || idx.From[0] != "configure.ac" ||
			idx.Sets[0].COpt != strings.Contains(tc.configure, "AC_PROG_CC") {
			t.Errorf("%q: %+v, want definitions %v", tc.configure, idx, tc.want)
		}
	}
}
