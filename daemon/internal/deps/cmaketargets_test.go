package deps

import (
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
)

// synthesizeTree writes files under a new tree, runs the phase on it and
// returns each source's flags from the index.
func synthesizeTree(t *testing.T, files map[string]string) (map[string]cFlags, cIndex) {
	t.Helper()
	dir := t.TempDir()
	ws := runtime.Workspace{Root: filepath.Join(dir, "tree"), Home: filepath.Join(dir, "home")}
	for rel, body := range files {
		p := filepath.Join(ws.Root, filepath.FromSlash(rel))
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
	f := New(Config{}, slog.New(slog.NewTextHandler(os_discard{}, nil)))
	f.Fetch(t.Context(), ws)
	idx, ok := readCIndex(ws)
	if !ok {
		t.Fatal("no index")
	}
	out := map[string]cFlags{}
	for _, fl := range idx.Files {
		out[fl.Path] = idx.Sets[fl.Set]
	}
	return out, idx
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func TestCMakeTargets(t *testing.T) {
	got, idx := synthesizeTree(t, map[string]string{
		"CMakeLists.txt": `project(p C CXX)
option(WITH_MOD "modules" OFF)
include_directories(common)
add_library(core src/core.c src/core.h)
target_include_directories(core PUBLIC include PRIVATE src)
target_compile_definitions(core PRIVATE CORE_BUILD INTERFACE CORE_USER)
add_library(hdr INTERFACE)
target_compile_definitions(hdr INTERFACE HDR_ONLY=1)
target_link_libraries(hdr INTERFACE core)
add_library(p::hdr ALIAS hdr)
if (WITH_MOD)
  add_library(mod src/mod.cc)
endif ()
if (NOT (MSVC AND BUILD_SHARED_LIBS))
  add_subdirectory(tests)
endif ()
try_compile(R ${CMAKE_CURRENT_BINARY_DIR} SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/probe.c)
add_library(vend vendor/v.c ${CMAKE_CURRENT_BINARY_DIR}/generated.c)
`,
		// A directory the build never enters, one of whose sources a
		// target compiles.
		"vendor/CMakeLists.txt": "add_library(v v.c w.c)\n", "vendor/v.c": "", "vendor/w.c": "",
		"tests/CMakeLists.txt": `set(COMMON util.c)
function(add_test_exe_here name)
  cmake_parse_arguments(T "HEADER" "" "EXTRA" ${ARGN})
  set(srcs ${name}.c ${T_UNPARSED_ARGUMENTS})
  if (T_HEADER)
    set(libs p::hdr)
  else ()
    set(libs core)
  endif ()
  add_executable(${name} ${srcs} ${COMMON} ${T_EXTRA})
  target_link_libraries(${name} ${libs})
endfunction()
add_subdirectory(sub)
foreach (n a b)
  add_test_exe_here(${n}-test)
endforeach ()
add_test_exe_here(h-test HEADER EXTRA extra.c)
find_package(Threads)
if (Threads_FOUND)
  target_compile_definitions(a-test PRIVATE THREADS)
else ()
  target_compile_definitions(a-test PRIVATE NO_THREADS)
endif ()
if (CMAKE_C_COMPILER_ID STREQUAL "Clang")
  target_compile_definitions(b-test PRIVATE CLANG)
else ()
  add_executable(maybe maybe.c)
  target_link_libraries(maybe PRIVATE core)
endif ()
`,
		// A stand-alone project no build enters: its target of the same
		// name as one of the build's is not read.
		"alone/CMakeLists.txt": "project(alone)\nadd_library(maybe alone.c)\n", "alone/alone.c": "",
		// A function of a parent directory, called in a subdirectory.
		"tests/sub/CMakeLists.txt": "add_test_exe_here(s-test)\n", "tests/sub/s-test.c": "", "tests/sub/util.c": "",
		"common/c.h": "", "include/core.h": "", "src/core.c": "", "src/core.h": "", "src/mod.cc": "", "probe.c": "",
		"tests/a-test.c": "", "tests/b-test.c": "", "tests/h-test.c": "", "tests/util.c": "", "tests/extra.c": "",
		"tests/maybe.c": "", "tests/unlisted.c": "", "tools/other.c": "",
	})
	// Only what a target compiles: not src/mod.cc (behind an option that
	// is OFF), probe.c (try_compile), tests/unlisted.c nor tools/other.c.
	want := []string{"src/core.c", "tests/a-test.c", "tests/b-test.c", "tests/extra.c", "tests/h-test.c", "tests/maybe.c", "tests/sub/s-test.c", "tests/sub/util.c", "tests/util.c", "vendor/v.c"}
	if k := keys(got); !slices.Equal(k, want) {
		t.Fatalf("sources %v, want %v", k, want)
	}
	check := func(src string, defines, includes []string) {
		t.Helper()
		fl := got[src]
		d, i := slices.Clone(fl.Defines), slices.Clone(fl.Includes)
		sort.Strings(d)
		sort.Strings(i)
		sort.Strings(defines)
		sort.Strings(includes)
		if !slices.Equal(d, defines) || !slices.Equal(i, includes) {
			t.Errorf("%s: defines %v includes %v, want %v %v", src, d, i, defines, includes)
		}
	}
	check("src/core.c", []string{"CORE_BUILD"}, []string{"common", "include", "src"})
	// The first target naming util.c gives its flags (a-test's).
	// Threads_FOUND is unknown: neither branch's definitions.
	check("tests/a-test.c", []string{"CORE_USER"}, []string{"common", "include"})
	check("tests/util.c", []string{"CORE_USER"}, []string{"common", "include"})
	// Through the alias: hdr's definitions and, transitively, core's
	// interface.
	check("tests/h-test.c", []string{"CORE_USER", "HDR_ONLY=1"}, []string{"common", "include"})
	check("tests/extra.c", []string{"CORE_USER", "HDR_ONLY=1"}, []string{"common", "include"})
	// A target in a branch a static read cannot rule out counts, with
	// its links.
	check("tests/maybe.c", []string{"CORE_USER"}, []string{"common", "include"})
	if !strings.Contains(idx.CMake, "per target") {
		t.Errorf("note %q", idx.CMake)
	}
}

// A macro's arguments do not replace its caller's (ARGN, parameters).
func TestCMakeMacroArguments(t *testing.T) {
	cd, _ := readCMakeTargets([]byte("macro(m name)\nset(x ${name})\nendmacro()\n"+
		"function(f)\n  m(other.c)\n  add_library(l ${ARGN} ${x})\nendfunction()\nf(a.c)\n"), ".", nil, newCMakeProject())
	if cd.Unknown != "" || len(cd.Targets) != 1 || !slices.Equal(cd.Targets[0].Sources, []string{"a.c", "other.c"}) {
		t.Errorf("%+v %q", cd.Targets, cd.Unknown)
	}
}

// A tree whose sources a static read cannot tell keeps the directory
// rule, and the warning says why.
func TestCMakeTargetsFallback(t *testing.T) {
	for name, tc := range map[string]struct {
		files map[string]string
		why   string
	}{
		"glob": {map[string]string{
			"CMakeLists.txt": "project(p)\nfile(GLOB SRCS src/*.c)\nadd_library(l ${SRCS})\n",
			"src/a.c":        "", "src/b.c": "", "other/c.c": "",
		}, "a source of l"},
		"generator expression": {map[string]string{
			"CMakeLists.txt": "project(p)\nadd_library(l src/a.c $<$<PLATFORM_ID:Linux>:src/b.c>)\n",
			"src/a.c":        "", "src/b.c": "", "other/c.c": "",
		}, "a source of l"},
		"module": {map[string]string{
			"CMakeLists.txt":      "project(p)\ninclude(cmake/Targets.cmake)\nadd_library(l src/a.c)\n",
			"cmake/Targets.cmake": "add_library(m src/b.c other/c.c)\n",
			"src/a.c":             "", "src/b.c": "", "other/c.c": "",
		}, "cmake/Targets.cmake makes targets"},
		"string": {map[string]string{
			"CMakeLists.txt": "project(p)\nset(SRCS src/a.c)\nstring(REPLACE \"a.c\" \"b.c\" SRCS \"${SRCS}\")\nadd_library(l ${SRCS})\n",
			"src/a.c":        "", "src/b.c": "", "other/c.c": "",
		}, "a source of l"},
		"override": {map[string]string{
			"CMakeLists.txt": "project(p)\nfunction(add_library name)\n  _add_library(${name} ${ARGN} extra.c)\nendfunction()\nadd_library(l src/a.c)\n",
			"src/a.c":        "", "src/b.c": "", "other/c.c": "",
		}, "replaces add_library"},
		"while": {map[string]string{
			"CMakeLists.txt": "project(p)\nset(i 0)\nwhile(i LESS 2)\nadd_library(l${i} src/a.c)\nendwhile()\n",
			"src/a.c":        "", "src/b.c": "", "other/c.c": "",
		}, "while()"},
	} {
		t.Run(name, func(t *testing.T) {
			got, idx := synthesizeTree(t, tc.files)
			if k := keys(got); !slices.Equal(k, []string{"other/c.c", "src/a.c", "src/b.c"}) {
				t.Errorf("sources %v", k)
			}
			if !strings.Contains(idx.CMake, "not followed") || !strings.Contains(idx.CMake, tc.why) {
				t.Errorf("note %q, want %q", idx.CMake, tc.why)
			}
		})
	}
}

func TestCMakeCondParentheses(t *testing.T) {
	vars := map[string]string{"ON_": "ON", "U": cmakeUnknown}
	for _, tc := range []struct {
		expr string
		want cond
	}{
		{"NOT ( MSVC AND BUILD_SHARED_LIBS )", condTrue},
		{"ON_ AND NOT ( MSVC OR ON_ )", condFalse},
		{"U AND MSVC", condFalse},
		{"U OR ON_", condTrue},
		{"U AND ON_", condUnknown},
		{"ON_ OR MSVC AND U", condTrue},
		{"( ON_", condUnknown},
		{"DEFINED U", condUnknown},
		{"X STREQUAL Y", condUnknown},
	} {
		if got := cmakeCond(strings.Fields(tc.expr), vars); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.expr, got, tc.want)
		}
	}
	// The tokenizer makes the parentheses of a condition arguments.
	cmds := cmakeCommands([]byte("if (NOT (A AND B))\nadd_library(x (y))\n"))
	if !slices.Equal(cmds[0].args, []string{"NOT", "(", "A", "AND", "B", ")"}) || !slices.Equal(cmds[1].args, []string{"x", "y"}) {
		t.Errorf("tokens %q", cmds)
	}
}

// fmtTruth is the translation units of fmt's own CMake database
// (cmake -DCMAKE_EXPORT_COMPILE_COMMANDS=ON on the corpus snapshot, 51
// entries for 31 files).
var fmtTruth = []string{
	"src/fmt-c.cc", "src/format.cc", "src/os.cc",
	"test/args-test.cc", "test/assert-test.cc", "test/base-test.cc", "test/c-test.c", "test/chrono-test.cc",
	"test/color-test.cc", "test/compile-test.cc", "test/enforce-checks-test.cc", "test/format-impl-test.cc",
	"test/format-test.cc", "test/gtest-extra-test.cc", "test/gtest-extra.cc", "test/gtest/gmock-gtest-all.cc",
	"test/header-only-test.cc", "test/no-builtin-types-test.cc", "test/os-test.cc", "test/ostream-test.cc",
	"test/perf-sanity.cc", "test/posix-mock-test.cc", "test/printf-test.cc", "test/ranges-odr-test.cc",
	"test/ranges-test.cc", "test/scan-test.cc", "test/std-test.cc", "test/test-main.cc", "test/unicode-test.cc",
	"test/util.cc", "test/xchar-test.cc",
}

func fmtSynthesized(t *testing.T) (map[string]cFlags, cIndex) {
	t.Helper()
	files := corpusFiles(t, "fmtlib__fmt", func(n string) bool {
		_, src := cSourceExts[path.Ext(n)]
		return src || path.Base(n) == "CMakeLists.txt" || strings.HasSuffix(n, ".cmake")
	})
	return synthesizeTree(t, files)
}

func TestCMakeTargetsFmt(t *testing.T) {
	got, idx := fmtSynthesized(t)
	if k := keys(got); !slices.Equal(k, fmtTruth) {
		t.Fatalf("%d units (%s):\n got %v\nwant %v", len(k), idx.CMake, k, fmtTruth)
	}
	for _, src := range []string{"test/format-impl-test.cc", "test/header-only-test.cc", "test/no-builtin-types-test.cc", "test/scan-test.cc", "test/unicode-test.cc"} {
		if !slices.Contains(got[src].Defines, "FMT_HEADER_ONLY=1") {
			t.Errorf("%s: %v", src, got[src].Defines)
		}
	}
	// The library's own sources and test-main's (its first target) not.
	for _, src := range []string{"src/format.cc", "src/os.cc", "test/test-main.cc", "test/format-test.cc"} {
		if slices.Contains(got[src].Defines, "FMT_HEADER_ONLY=1") {
			t.Errorf("%s: %v", src, got[src].Defines)
		}
	}
	if !strings.Contains(idx.CMake, "per target") {
		t.Errorf("note %q", idx.CMake)
	}
}

// Against CMake itself, where it is installed: per file, the -D and -I
// sets of its first entry (the one clangd reads) and ours.
func TestCMakeTargetsFmtAgainstCMake(t *testing.T) {
	cmake, err := exec.LookPath("cmake")
	if err != nil {
		t.Skip("no cmake")
	}
	if _, err := exec.LookPath("c++"); err != nil {
		t.Skip("no C++ compiler for cmake")
	}
	got, _ := fmtSynthesized(t)
	dir := t.TempDir()
	files := corpusFiles(t, "fmtlib__fmt", func(string) bool { return true })
	src := filepath.Join(dir, "src")
	for rel, body := range files {
		p := filepath.Join(src, filepath.FromSlash(rel))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	build := filepath.Join(dir, "build")
	cmd := exec.CommandContext(t.Context(), cmake, "-S", src, "-B", build, "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("cmake failed (not this code's): %v\n%s", err, out)
	}
	data, err := os.ReadFile(filepath.Join(build, "compile_commands.json"))
	if err != nil {
		t.Fatal(err)
	}
	var entries []struct {
		File    string `json:"file"`
		Command string `json:"command"`
	}
	if err := json.Unmarshal(data, &entries); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range entries {
		rel, _ := filepath.Rel(src, e.File)
		rel = filepath.ToSlash(rel)
		if seen[rel] {
			continue
		}
		seen[rel] = true
		var defines, includes []string
		words := strings.Fields(e.Command)
		for i, w := range words {
			switch {
			case strings.HasPrefix(w, "-D") && w != "-DNDEBUG": // the build type's, not the tree's
				defines = append(defines, w[2:])
			case strings.HasPrefix(w, "-I"):
				includes = append(includes, w[2:])
			case w == "-isystem" && i+1 < len(words):
				includes = append(includes, words[i+1])
			}
		}
		for i, inc := range includes {
			r, _ := filepath.Rel(src, filepath.Clean(inc))
			includes[i] = filepath.ToSlash(r)
		}
		fl, ok := got[rel]
		if !ok {
			t.Errorf("%s: no entry", rel)
			continue
		}
		gd, gi := slices.Clone(fl.Defines), slices.Clone(fl.Includes)
		for _, l := range [][]string{defines, includes, gd, gi} {
			sort.Strings(l)
		}
		if !slices.Equal(gd, defines) || !slices.Equal(gi, includes) {
			t.Errorf("%s:\n ours  -D %v -I %v\n cmake -D %v -I %v", rel, gd, gi, defines, includes)
		}
	}
	if len(seen) != len(got) {
		t.Errorf("cmake %d files, ours %d", len(seen), len(got))
	}
}

// Hostile CMake: recursion, nested loops and calls that copy large
// scopes end at the bounds, quickly, and say so.
func TestCMakeTargetsBounded(t *testing.T) {
	var many strings.Builder
	for i := 0; i < maxCMakeVars; i++ {
		many.WriteString("set(V" + strconv.Itoa(i) + " x)\n")
	}
	for name, src := range map[string]string{
		"recursion": "function(f)\n  f()\n  add_library(x a.c)\nendfunction()\nf()\n",
		"loops":     "foreach(i RANGE 4000)\nforeach(j RANGE 4000)\nforeach(k RANGE 4000)\nset(x y)\nendforeach()\nendforeach()\nendforeach()\n",
		"scopes":    many.String() + "function(f)\nendfunction()\nforeach(i RANGE 4000)\nforeach(j RANGE 4000)\nf()\nendforeach()\nendforeach()\n",
	} {
		start := time.Now()
		cd, _ := readCMakeTargets([]byte(src), ".", nil, newCMakeProject())
		if cd.Unknown == "" {
			t.Errorf("%s: no bound reached", name)
		}
		if d := time.Since(start); d > 20*time.Second {
			t.Errorf("%s: %v", name, d)
		}
	}
}

func FuzzReadCMakeTargets(f *testing.F) {
	f.Add([]byte("project(p)\nadd_library(l a.c ${X})\ntarget_link_libraries(l PUBLIC m)\nadd_library(m INTERFACE)\ntarget_compile_definitions(m INTERFACE A=1)\n"), ".")
	f.Add([]byte("function(f n)\n cmake_parse_arguments(P \"O\" \"V\" \"M\" ${ARGN})\n add_executable(${n} ${n}.cc ${P_M})\nendfunction()\nforeach(i IN ITEMS a b)\nf(${i} O M x.c)\nendforeach()\n"), "sub")
	f.Add([]byte("if (NOT (A AND (B OR C)))\nadd_library(x x.c)\nelseif(D)\nelse()\nendif()\nforeach(i RANGE 1 9 2)\nendforeach()\nwhile(x)\nadd_library(y y.c)\nendwhile()\n"), ".")
	f.Add([]byte("macro(m)\nset(${ARGV0} ${ARGN} PARENT_SCOPE)\nm(m)\nendmacro()\nm(A B)\nadd_library(a ALIAS b)\ntarget_sources(a PRIVATE ../../x.c /abs.c $<TARGET_OBJECTS:z>)\n"), "d/e")
	f.Fuzz(func(t *testing.T, data []byte, dir string) {
		if _, ok := inTree(".", dir); !ok {
			return
		}
		proj := newCMakeProject()
		cd, vars := readCMakeTargets(data, dir, nil, proj)
		if len(vars) > maxCMakeVars+16 {
			t.Fatalf("%d variables", len(vars))
		}
		checkCFlags(t, cd.Flags)
		if len(cd.Targets) > maxCMakeTargets {
			t.Fatalf("%d targets", len(cd.Targets))
		}
		for _, tg := range cd.Targets {
			if len(tg.Sources) > maxCSources {
				t.Fatalf("%d sources", len(tg.Sources))
			}
			for _, s := range tg.Sources {
				if _, ok := inTree(".", s); !ok || s != path.Clean(s) {
					t.Fatalf("source outside the tree: %q", s)
				}
			}
			checkCFlags(t, cmakeSourceFlags(tg, proj, map[string]*cmakeDir{dir: cd}))
		}
	})
}
