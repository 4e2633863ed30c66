package deps

import (
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/hanzoai/lsp/daemon/internal/deps/depstest"
	"github.com/hanzoai/lsp/daemon/internal/runtime"
)

func TestParseMakefile(t *testing.T) {
	src := "# flags\n" +
		"AM_CPPFLAGS = -I$(srcdir)/src -I$(top_srcdir)/vendor \\\n  -DONE -D TWO=2 -I$(unknown)/x\n" +
		"AM_CFLAGS = -Wall -std=gnu11\n" +
		"if WIN32\nAM_CPPFLAGS += -Iwin\nelse\nAM_CPPFLAGS += -DNOT_TAKEN\nendif\n" +
		"foo_CFLAGS := -I../../../etc -I/usr/include -Iok\n" +
		"all:\n\tgcc -Irecipe x.c\n" +
		"SRC = a.c b.h\nSRC += sub/c.cc\nfoo_SOURCES = ${SRC} $(srcdir)/d.c gram.y scan.l sub/g.yy\nEXTRA_foo_SOURCES = e.c\n"
	got := parseMakefile([]byte(src), "lib", ".", true)
	// A grammar's and a scanner's outputs are what the build compiles.
	if want := []string{"lib/a.c", "lib/sub/c.cc", "lib/d.c", "lib/gram.c", "lib/scan.c", "lib/sub/g.cc"}; !slices.Equal(got.Sources, want) {
		t.Errorf("sources %v, want %v", got.Sources, want)
	}
	got.Sources = nil
	want := cFlags{
		Includes: []string{"lib", "lib/src", "vendor", "lib/ok"},
		Defines:  []string{"ONE", "TWO=2"},
		CStd:     "gnu11",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("parseMakefile:\n got %+v\nwant %+v", got, want)
	}
}

func TestParseCMake(t *testing.T) {
	src := `cmake_minimum_required(VERSION 3.8)
project(demo CXX)
set(INC_DIR ${CMAKE_CURRENT_SOURCE_DIR}/include)
include_directories(BEFORE "${INC_DIR}" third_party)
#[[ include_directories(commented) ]]
function(setup target)
  target_include_directories(${target} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/api>
    $<INSTALL_INTERFACE:include>)
endfunction()
option(WITH_X "x" ON)
option(WITH_Y "y")
if (MSVC)
  add_definitions(-DNOT_TAKEN)
elseif (WITH_X AND NOT WITH_Y)
  add_definitions(-DWITH_X)
else ()
  add_definitions(-DNOT_TAKEN_EITHER)
endif ()
if (CMAKE_CXX_COMPILER_ID MATCHES "GNU")
  add_definitions(-DUNKNOWN_CONDITION)
else ()
  add_definitions(-DUNKNOWN_CONDITION_ELSE)
endif ()
add_compile_definitions(FOO=1 BAR)
target_compile_definitions(x PRIVATE -DBAZ $<$<CONFIG:Debug>:DBG>)
target_compile_features(x PUBLIC cxx_std_11)
target_compile_features(y INTERFACE cxx_std_20)
target_compile_definitions(y INTERFACE FOR_USERS)
set(CMAKE_CXX_STANDARD 14)
target_include_directories(x PRIVATE ../outside /abs ${UNKNOWN}/y) # dropped
`
	got, vars := parseCMake([]byte(src), ".", nil)
	want := cFlags{
		Includes: []string{"include", "third_party"},
		Global:   []string{"api"},
		Defines:  []string{"WITH_X", "FOO=1", "BAR"},
		CxxStd:   "gnu++14",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("parseCMake:\n got %+v\nwant %+v", got, want)
	}
	if vars["demo_SOURCE_DIR"] != "@/." {
		t.Errorf("project variable: %q", vars["demo_SOURCE_DIR"])
	}
	// A subdirectory inherits the variables.
	sub, _ := parseCMake([]byte("include_directories(${INC_DIR}/more ${CMAKE_CURRENT_SOURCE_DIR}/local)\nset(CMAKE_CXX_EXTENSIONS OFF)\nset(CMAKE_CXX_STANDARD 17)\n"), "test", vars)
	if want := []string{"include/more", "test/local"}; !slices.Equal(sub.Includes, want) || sub.CxxStd != "c++17" {
		t.Errorf("subdirectory: %+v", sub)
	}
}

// The real build files of the corpus's C and C++ repositories: what an
// ordinary build's flags need for clangd to find the project's headers.
func TestCBuildFilesReal(t *testing.T) {
	for _, tc := range []struct {
		repo, file string
		cmake      bool
		includes   []string
		std        string
	}{
		{repo: "jqlang__jq", file: "Makefile.am", includes: []string{".", "src", "vendor"}},
		// cxx_std_11 is met by clang's default (gnu++17): no -std, as
		// CMake's own database for fmt has none.
		{repo: "fmtlib__fmt", file: "CMakeLists.txt", cmake: true, includes: []string{"include"}, std: ""},
	} {
		files, err := depstest.CorpusFiles(tc.repo, func(n string) bool { return n == tc.file })
		if errors.Is(err, os.ErrNotExist) {
			t.Skipf("no corpus snapshot %s", tc.repo)
		}
		if err != nil {
			t.Fatal(err)
		}
		var fl cFlags
		if tc.cmake {
			fl, _ = parseCMake([]byte(files[tc.file]), ".", nil)
			fl.Includes = append(fl.Includes, fl.Global...)
		} else {
			fl = parseMakefile([]byte(files[tc.file]), ".", ".", true)
		}
		if !tc.cmake {
			// jq's Makefile.am: libjq's and jq's sources, not the other
			// files of decNumber nor the fuzzers.
			if !slices.Contains(fl.Sources, "src/builtin.c") || !slices.Contains(fl.Sources, "src/main.c") ||
				!slices.Contains(fl.Sources, "vendor/decNumber/decNumber.c") || slices.Contains(fl.Sources, "vendor/decNumber/decBasic.c") ||
				// src/parser.y and src/lexer.l are listed; the build
				// compiles the parser.c and lexer.c jq commits.
				!slices.Contains(fl.Sources, "src/parser.c") || !slices.Contains(fl.Sources, "src/lexer.c") {
				t.Errorf("jq sources: %v", fl.Sources)
			}
			fl.Sources = nil
		}
		if !slices.Equal(fl.Includes, tc.includes) || fl.CxxStd != tc.std {
			t.Errorf("%s %s: %+v, want includes %v std %q", tc.repo, tc.file, fl, tc.includes, tc.std)
		}
	}
}

func TestSynthesizeC(t *testing.T) {
	dir := t.TempDir()
	// The phase runs on the tree before it is published (renamed into
	// place with the directory around it): the database must name the
	// published paths.
	ws := runtime.Workspace{Root: filepath.Join(dir, "staging", "tree"), Home: filepath.Join(dir, "home")}
	write := func(rel, s string) {
		p := filepath.Join(ws.Root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("CMakeLists.txt", "project(p)\ninclude_directories(include)\nset(CMAKE_CXX_STANDARD 17)\nadd_subdirectory(test)\n"+
		"option(WITH_FUZZ \"f\" OFF)\nif (WITH_FUZZ)\n  add_subdirectory(fuzz)\nendif ()\n"+
		"if (CMAKE_CXX_COMPILER_ID MATCHES \"GNU\")\n  add_subdirectory(gnu)\nendif ()\n"+
		"add_subdirectory(lib)\nadd_subdirectory(../outside x)\n")
	// Directories no build enters: behind an option that is OFF, or
	// never named by add_subdirectory (a test project configured on
	// its own). One behind a condition a static read cannot tell is
	// kept.
	write("fuzz/CMakeLists.txt", "include_directories(fuzzinc)\nadd_definitions(-DFUZZ)\n")
	write("fuzz/f.cc", "int f;\n")
	write("alone/CMakeLists.txt", "project(alone)\nadd_library(a a.c)\ntarget_include_directories(a PUBLIC pub)\n")
	write("alone/a.c", "int a;\n")
	write("gnu/CMakeLists.txt", "add_definitions(-DGNU)\n")
	write("gnu/g.c", "int g;\n")
	write("test/CMakeLists.txt", "include_directories(${PROJECT_SOURCE_DIR}/test/gtest)\nadd_definitions(-DTESTING)\n")
	write("lib/CMakeLists.txt", "add_library(l x.c)\ntarget_include_directories(l PUBLIC pub PRIVATE priv)\ntarget_include_directories(l SYSTEM PUBLIC sys)\n")
	write("src/a.cc", "int a;\n")
	write("src/b.c", "int b;\n")
	write("test/t.cpp", "int t;\n")
	write("include/p.h", "int p;\n")
	write("lib/x.c", "int x;\n")
	if err := os.MkdirAll(ws.Home, 0o755); err != nil {
		t.Fatal(err)
	}
	f := New(Config{}, slog.New(slog.NewTextHandler(os_discard{}, nil)))
	if w := f.Fetch(t.Context(), ws); len(w) != 0 {
		t.Fatalf("warnings: %v", w)
	}
	if err := os.Rename(filepath.Join(dir, "staging"), filepath.Join(dir, "published")); err != nil {
		t.Fatal(err)
	}
	ws.Root = filepath.Join(dir, "published", "tree")
	var init struct {
		CompilationDatabasePath string `json:"compilationDatabasePath"`
	}
	if err := json.Unmarshal(CInit(ws), &init); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(init.CompilationDatabasePath, ws.Home+"/clangd/") {
		t.Fatalf("database outside the home: %q", init.CompilationDatabasePath)
	}
	data, err := os.ReadFile(filepath.Join(init.CompilationDatabasePath, "compile_commands.json"))
	if err != nil {
		t.Fatal(err)
	}
	var entries []struct {
		Directory string
		File      string
		Arguments []string
	}
	if err := json.Unmarshal(data, &entries); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range entries {
		rel, _ := filepath.Rel(ws.Root, e.File)
		got[rel] = strings.ReplaceAll(strings.Join(e.Arguments, " "), ws.Root, "R")
	}
	// A SYSTEM directory is -isystem (clang reports nothing from it).
	want := map[string]string{
		"src/a.cc":   "clang++ -std=gnu++17 -IR/include -IR/lib/pub -isystem R/lib/sys -c R/src/a.cc",
		"src/b.c":    "clang -IR/include -IR/lib/pub -isystem R/lib/sys -c R/src/b.c",
		"test/t.cpp": "clang++ -std=gnu++17 -DTESTING -IR/include -IR/test/gtest -IR/lib/pub -isystem R/lib/sys -c R/test/t.cpp",
		"lib/x.c":    "clang -IR/include -IR/lib/pub -IR/lib/priv -isystem R/lib/sys -c R/lib/x.c",
		"gnu/g.c":    "clang -DGNU -IR/include -IR/lib/pub -isystem R/lib/sys -c R/gnu/g.c",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("entries:\n got %v\nwant %v", got, want)
	}
	if p := CProblems(ws); len(p) != 1 || !strings.Contains(p[0], "CMakeLists.txt, gnu/CMakeLists.txt, lib/CMakeLists.txt, test/CMakeLists.txt (") {
		t.Errorf("problems: %q", p)
	}
	// Nothing was written into the tree.
	if _, err := os.Stat(filepath.Join(ws.Root, "compile_commands.json")); err == nil {
		t.Error("a database in the tree")
	}

	// An add_subdirectory a static read cannot follow (a function's
	// argument): no directory is left out.
	ws3 := runtime.Workspace{Root: filepath.Join(dir, "t3", "tree"), Home: filepath.Join(dir, "t3", "home")}
	for rel, body := range map[string]string{
		"CMakeLists.txt":      "project(p)\nfunction(add name)\n  add_subdirectory(${name})\nendfunction()\nadd(fuzz)\n",
		"fuzz/CMakeLists.txt": "add_definitions(-DFUZZ)\n",
		"fuzz/f.c":            "int f;\n",
	} {
		p := filepath.Join(ws3.Root, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(body), 0o644)
	}
	os.MkdirAll(ws3.Home, 0o755)
	f.Fetch(t.Context(), ws3)
	if idx, ok := readCIndex(ws3); !ok || len(idx.Files) != 1 || idx.Files[0].Path != "fuzz/f.c" || !slices.Equal(idx.Sets[0].Defines, []string{"FUZZ"}) {
		t.Errorf("unknown add_subdirectory: %+v", idx)
	}

	// A committed database is clangd's own to find: nothing synthesized.
	ws2 := runtime.Workspace{Root: filepath.Join(dir, "t2", "tree"), Home: filepath.Join(dir, "t2", "home")}
	for _, p := range []string{ws2.Root + "/build", ws2.Home} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(ws2.Root, "a.c"), []byte("int a;\n"), 0o644)
	os.WriteFile(filepath.Join(ws2.Root, "build", "compile_commands.json"), []byte("[]"), 0o644)
	f.Fetch(t.Context(), ws2)
	if CInit(ws2) != nil || CProblems(ws2) != nil {
		t.Error("synthesized beside a committed compile_commands.json")
	}
}

type os_discard struct{}

func (os_discard) Write(b []byte) (int, error) { return len(b), nil }

func TestParseCargoLock(t *testing.T) {
	lock := `# This file is automatically @generated by Cargo.
version = 4

[[package]]
name = "anyhow"
version = "1.0.104"

[[package]]
name = "syn"
version = "2.0.100"
source = "registry+https://github.com/rust-lang/crates.io-index"
checksum = "abc"
dependencies = [
 "proc-macro2",
]

[[package]]
name = "bad name!"
version = "1"
source = "registry+x"

[metadata]
name = "not-a-package"
`
	got := parseCargoLock([]byte(lock))
	want := []cargoCrate{{Name: "anyhow", Version: "1.0.104"}, {Name: "syn", Version: "2.0.100", Source: "registry+https://github.com/rust-lang/crates.io-index"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v", got)
	}
}

func TestCargoTomlDeps(t *testing.T) {
	files, err := depstest.CorpusFiles("dtolnay__anyhow", func(n string) bool { return n == "Cargo.toml" })
	if errors.Is(err, os.ErrNotExist) {
		t.Skip("no corpus snapshot")
	}
	if err != nil {
		t.Fatal(err)
	}
	got := cargoTomlDeps([]byte(files["Cargo.toml"]))
	if want := []string{"futures", "rustversion", "syn", "thiserror", "trybuild"}; !slices.Equal(got, want) {
		t.Fatalf("anyhow's dependencies: %v, want %v", got, want)
	}
	extra := "[dependencies]\nlocal = { path = \"local\" }\nserde = { version = \"1\", features = [\"derive\"] }\n[target.'cfg(unix)'.dependencies]\nlibc = \"0.2\"\n[dependencies.rand]\nversion = \"0.8\"\n"
	if got, want := cargoTomlDeps([]byte(extra)), []string{"libc", "rand", "serde"}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func FuzzParseMakefile(f *testing.F) {
	f.Add([]byte("AM_CPPFLAGS = -I$(srcdir)/src -DX=1 \\\n -I ../y\nif A\nCFLAGS += -Iz\nelse\nendif\n"), "d/e")
	f.Add([]byte("\t-I\nx_CFLAGS=-I"), ".")
	f.Add(hostileAutomake(8), ".")
	f.Fuzz(func(t *testing.T, data []byte, dir string) {
		if _, ok := inTree(".", dir); !ok {
			return
		}
		fl := parseMakefile(data, dir, ".", true)
		checkCFlags(t, fl)
	})
}

func FuzzParseCMake(f *testing.F) {
	f.Add([]byte("project(p)\nset(A ${CMAKE_CURRENT_SOURCE_DIR}/x)\ninclude_directories(${A} \"q\" [[r]])\nif(X)\nadd_definitions(-DY)\nelse()\nendif()\ntarget_compile_features(t PUBLIC cxx_std_20)\n"), ".")
	f.Add([]byte("#[==[ x ]==]\nset(A ${A}${A}${A})\nset(B ${${A}})\ntarget_include_directories(t $<BUILD_INTERFACE:${A}>)"), "sub")
	f.Add(hostileCMakeOption(maxCFlagLen+100, 64), ".")
	f.Add(hostileCMakeSet(64), "sub")
	f.Fuzz(func(t *testing.T, data []byte, dir string) {
		if _, ok := inTree(".", dir); !ok {
			return
		}
		fl, vars := parseCMake(data, dir, nil)
		checkCFlags(t, fl)
		if len(vars) > maxCMakeVars+8 {
			t.Fatalf("%d variables", len(vars))
		}
	})
}

func checkCFlags(t *testing.T, fl cFlags) {
	t.Helper()
	if len(fl.Includes) > maxCIncludes || len(fl.Defines) > maxCDefines {
		t.Fatalf("over the bounds: %d includes, %d defines", len(fl.Includes), len(fl.Defines))
	}
	if len(fl.Global) > maxCIncludes || len(fl.System) > maxCIncludes || len(fl.Subdirs) > maxCBuildFiles {
		t.Fatalf("%d global includes, %d system, %d subdirectories", len(fl.Global), len(fl.System), len(fl.Subdirs))
	}
	if len(fl.Sources) > maxCSources {
		t.Fatalf("%d sources", len(fl.Sources))
	}
	for _, i := range slices.Concat(fl.Includes, fl.Global, fl.Sources, fl.System, fl.Subdirs) {
		if _, ok := inTree(".", i); !ok || i != filepath.Clean(i) {
			t.Fatalf("include outside the tree: %q", i)
		}
	}
	for _, d := range fl.Defines {
		if !macroRE.MatchString(d) || len(d) > maxCFlagLen {
			t.Fatalf("bad define %q", d)
		}
	}
	for _, s := range []string{fl.CStd, fl.CxxStd} {
		if s != "" && !stdRE.MatchString(s) {
			t.Fatalf("bad standard %q", s)
		}
	}
}

func FuzzParseCargoLock(f *testing.F) {
	f.Add([]byte("[[package]]\nname = \"a\"\nversion = \"1\"\nsource = \"registry+x\"\n"))
	f.Add([]byte("[[package]]\nname = \"a\\\"b\"\n[[package]]\n"))
	f.Add([]byte("[[package]]\nname = \"serde\"\nversion = \"../../../other/*\"\nsource = \"registry+x\"\n[[package]]\nname = \"..\"\nversion = \"1.0.0+b..c\"\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cs := parseCargoLock(data)
		if len(cs) > maxCargoCrate {
			t.Fatalf("%d crates", len(cs))
		}
		for _, c := range cs {
			if !crateNameRE.MatchString(c.Name) {
				t.Fatalf("bad crate name %q", c.Name)
			}
			if !crateVersionRE.MatchString(c.Version) || strings.ContainsAny(c.Version, "/*?[") || strings.Contains(c.Version, "..") {
				t.Fatalf("bad crate version %q", c.Version)
			}
		}
		for _, n := range cargoTomlDeps(data) {
			if !crateNameRE.MatchString(n) {
				t.Fatalf("bad dependency name %q", n)
			}
		}
	})
}
