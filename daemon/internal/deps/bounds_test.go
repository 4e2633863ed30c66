package deps

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"testing"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
)

// allocated is the bytes f allocates (runtime.MemStats.TotalAlloc delta).
func allocated(f func()) uint64 {
	var before, after goruntime.MemStats
	goruntime.GC()
	goruntime.ReadMemStats(&before)
	f()
	goruntime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// hostileCMakeOption is a CMakeLists.txt whose option has a long default
// that one argument references many times.
func hostileCMakeOption(defLen, refs int) []byte {
	return []byte(fmt.Sprintf("option(O \"d\" \"%s\")\ninclude_directories(%s)\nadd_definitions(-D%s)\n",
		strings.Repeat("x", defLen), strings.Repeat("${O}", refs), strings.Repeat("${O}", refs)))
}

// hostileCMakeSet reaches a long value through bounded set()s: each
// variable is within maxCFlagLen, the argument referencing it many times
// is not.
func hostileCMakeSet(refs int) []byte {
	return []byte(fmt.Sprintf("set(A %s)\ninclude_directories(%s)\n",
		strings.Repeat("y", maxCFlagLen), strings.Repeat("${A}", refs)))
}

// hostileAutomake nests variables fan times each, four levels deep, so
// that a naive expansion makes fan^5 words.
func hostileAutomake(fan int) []byte {
	var b strings.Builder
	b.WriteString("V0 =" + strings.Repeat(" a.c", fan) + "\n")
	for i := 1; i <= 3; i++ {
		fmt.Fprintf(&b, "V%d =%s\n", i, strings.Repeat(fmt.Sprintf(" $(V%d)", i-1), fan))
	}
	b.WriteString("foo_SOURCES =" + strings.Repeat(" $(V3)", fan) + "\n")
	return []byte(b.String())
}

func TestCMakeOptionDefaultBounded(t *testing.T) {
	_, vars := parseCMake(hostileCMakeOption(maxCFlagLen+1, 1), ".", nil)
	if v, ok := vars["O"]; ok && len(v) > maxCFlagLen {
		t.Fatalf("option's default kept, %d bytes", len(v))
	}
}

func TestCMakeExpandRejectsLongInput(t *testing.T) {
	if v, ok := cmakeExpand(strings.Repeat("a", maxCFlagLen+1), nil); ok {
		t.Fatalf("an argument of %d bytes expanded to %d", maxCFlagLen+1, len(v))
	}
	vars := map[string]string{"A": strings.Repeat("y", maxCFlagLen)}
	if _, ok := cmakeExpand("${A}", vars); !ok {
		t.Fatal("a value of exactly the bound refused")
	}
	if _, ok := cmakeExpand("${A}${A}", vars); ok {
		t.Fatal("two references over the bound expanded")
	}
}

// The hostile inputs below allocate gigabytes (CMake) or hundreds of
// megabytes (automake) without the bounds; a few megabytes with them.
const hostileAllocLimit = 32 << 20

func TestCMakeExpansionAllocsBounded(t *testing.T) {
	for name, data := range map[string][]byte{
		"option": hostileCMakeOption(20_000, 2_000),
		"set":    hostileCMakeSet(20_000),
	} {
		var fl cFlags
		n := allocated(func() { fl, _ = parseCMake(data, ".", nil) })
		if n > hostileAllocLimit {
			t.Errorf("%s: %d-byte CMakeLists.txt allocated %d MiB", name, len(data), n>>20)
		}
		t.Logf("%s: %d-byte CMakeLists.txt, %d KiB allocated", name, len(data), n>>10)
		checkCFlags(t, fl)
	}
}

func TestMakeWordsFanOutBounded(t *testing.T) {
	data := hostileAutomake(16)
	var fl cFlags
	n := allocated(func() { fl = parseMakefile(data, ".", ".", true) })
	if n > hostileAllocLimit {
		t.Errorf("%d-byte Makefile.am allocated %d MiB", len(data), n>>20)
	}
	t.Logf("%d-byte Makefile.am, %d KiB allocated, %d sources", len(data), n>>10, len(fl.Sources))
	checkCFlags(t, fl)
	if len(fl.Sources) == 0 {
		t.Error("no sources from the bounded expansion")
	}
	// The budget is shared: at most maxCSources words come back in all.
	budget := maxCSources
	vars := map[string][]string{"A": strings.Fields(strings.Repeat(" x.c", 1000))}
	var refs []string
	for range 100 {
		refs = append(refs, "$(A)")
	}
	if got := expandMakeWords(refs, vars, 0, &budget); len(got) != maxCSources || budget != 0 {
		t.Errorf("%d words, %d budget left; want %d, 0", len(got), budget, maxCSources)
	}
}

// A file larger than it was at the Lstat is refused, not cut: /proc's
// files say size 0 and have content.
func TestReadRegularRefusesGrowth(t *testing.T) {
	b, err := readRegular("/proc/self/status", 16)
	if !errors.Is(err, errTooLarge) {
		t.Fatalf("a file over the bound read as %d bytes, err %v", len(b), err)
	}
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte("0123456789abcdef"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := readRegular(p, 16); err != nil || len(b) != 16 {
		t.Fatalf("a file of exactly the bound: %d bytes, %v", len(b), err)
	}
	if _, err := readRegular(p, 15); !errors.Is(err, errTooLarge) {
		t.Fatalf("one byte over: %v", err)
	}
}

// No Python warning shows the host's path: a manifest over the bound,
// and the text made for an unreadable one (an os.PathError).
func TestPythonWarningsNoHostPath(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "requirements.txt"), bytes.Repeat([]byte("a\n"), maxPyManifestBytes), 0o644); err != nil {
		t.Fatal(err)
	}
	w := pythonWarnings(root)
	if !slices.Contains(w, "python: manifest not read: requirements.txt: over the size bound") {
		t.Errorf("warnings %q", w)
	}
	_, err := os.Open(filepath.Join(root, "missing", "requirements.txt"))
	w = append(w, manifestRefused("missing/requirements.txt", err))
	for _, s := range w {
		if strings.Contains(s, root) {
			t.Errorf("host path in warning %q", s)
		}
	}
}

// hostileCIndex is a recorded C index of maxCSources sources sharing one
// set of maxCDefines definitions of defLen bytes.
func hostileCIndex(defLen int) cIndex {
	var fl cFlags
	for i := 0; i < maxCDefines; i++ {
		fl.Defines = append(fl.Defines, fmt.Sprintf("D%d=%s", i, strings.Repeat("v", defLen)))
	}
	fl.Includes = []string{"include"}
	idx := cIndex{From: []string{"CMakeLists.txt"}, Sets: []cFlags{fl}, Sources: maxCSources}
	for i := 0; i < maxCSources; i++ {
		idx.Files = append(idx.Files, cFile{Path: fmt.Sprintf("src/f%05d.c", i), Set: 0})
	}
	return idx
}

// The compilation database written at each clangd start has a byte
// bound for the whole file; the entries it cuts are named in the load
// problem.
func TestCDBBounded(t *testing.T) {
	dir := t.TempDir()
	ws := runtime.Workspace{Root: filepath.Join(dir, "tree"), Home: filepath.Join(dir, "home")}
	for _, p := range []string{ws.Root, ws.Home} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	idx := hostileCIndex(48) // ~130 MB without the bound
	if len(idx.Sets[0].Defines) > maxCDefines {
		t.Fatal("the index is over the parser's own bounds")
	}
	raw, err := json.Marshal(idx)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, cIndexFile), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	var cdb string
	n := allocated(func() { cdb, err = writeCDB(ws, idx) })
	if n > 4*maxCDBBytes {
		t.Errorf("writing the database allocated %d MiB", n>>20)
	}
	t.Logf("database: %d MiB allocated", n>>20)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(cdb, "compile_commands.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > maxCDBBytes {
		t.Fatalf("database of %d bytes, bound %d", len(data), maxCDBBytes)
	}
	var entries []struct{ File string }
	if err := json.Unmarshal(data, &entries); err != nil {
		t.Fatalf("the cut database is not JSON: %v", err)
	}
	cut := len(idx.Files) - len(entries)
	if len(entries) == 0 || cut == 0 {
		t.Fatalf("%d entries written of %d", len(entries), len(idx.Files))
	}
	t.Logf("database: %d bytes, %d of %d entries", len(data), len(entries), len(idx.Files))
	ps := CProblems(ws)
	if want := fmt.Sprintf("left %d of %d sources without an entry", cut, len(idx.Files)); len(ps) != 1 || !strings.Contains(ps[0], want) {
		t.Errorf("problems %q, want one saying %q", ps, want)
	}

	// A small budget: the file stays within it, and is still JSON.
	cdb, err = writeCDBBudget(ws, idx, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if data, err = os.ReadFile(filepath.Join(cdb, "compile_commands.json")); err != nil || len(data) > 1<<20 || json.Unmarshal(data, &entries) != nil {
		t.Fatalf("1 MiB budget: %d bytes, %v", len(data), err)
	}
}

// An include directory longer than maxCFlagLen is not recorded (each
// database entry repeats it).
func TestCIncludeBounded(t *testing.T) {
	long := strings.Repeat("d/", maxCFlagLen/2) + "x"
	fl := parseMakefile([]byte("AM_CPPFLAGS = -I"+long+" -Iok\n"), ".", ".", false)
	if slices.Contains(fl.Includes, long) || !slices.Contains(fl.Includes, "ok") {
		t.Fatalf("includes %q", fl.Includes)
	}
}
