package corpus

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The ground truth of the C and C++ entries is what a developer does for
// clangd on an ordinary checkout: a compilation database from the
// project's own build system, never one written from what the service
// reads. For CMake (fmt): configure with CMAKE_EXPORT_COMPILE_COMMANDS
// into build/, where clangd finds it. For autotools (jq), with no bear to
// record a build: autoreconf and configure as the README says, then the
// compiler lines `make -n` prints (GNU make's dry run, which recurses and
// builds nothing), each turned into an entry: the same commands a build
// would run, from the directory make runs them in.

// installCMake configures the checkout with CMake into build/.
func installCMake(ctx context.Context, dir string) error {
	_, err := run(ctx, dir, nil, "cmake", "-S", ".", "-B", "build", "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON", "-DCMAKE_BUILD_TYPE=Debug")
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, "build", "compile_commands.json")); err != nil {
		return fmt.Errorf("cmake wrote no compile_commands.json: %w", err)
	}
	return nil
}

// installAutotools configures the checkout (autoreconf -i, ./configure
// with the options its README gives) and writes compile_commands.json at
// its root from make's dry run.
func installAutotools(ctx context.Context, dir string, configure ...string) error {
	// A clone without --recursive has each submodule as an empty
	// directory (git keeps none in the tree it commits): automake wants
	// the directories its SUBDIRS name to exist.
	if b, err := os.ReadFile(filepath.Join(dir, ".gitmodules")); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(strings.TrimSpace(l), "="); ok && strings.TrimSpace(k) == "path" {
				if p := filepath.Clean(strings.TrimSpace(v)); filepath.IsLocal(p) {
					if err := os.MkdirAll(filepath.Join(dir, p), 0o755); err != nil {
						return err
					}
				}
			}
		}
	}
	if _, err := run(ctx, dir, nil, "autoreconf", "-i"); err != nil {
		return err
	}
	if _, err := run(ctx, dir, nil, "./configure", configure...); err != nil {
		return err
	}
	out, err := run(ctx, dir, nil, "make", "-n", "-k", "-w")
	if err != nil && len(out) == 0 {
		return err
	}
	entries := dryRunEntries(string(out), dir)
	if len(entries) == 0 {
		return fmt.Errorf("make -n printed no compiler line")
	}
	data, err := json.MarshalIndent(entries, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "compile_commands.json"), data, 0o644)
}

type cdbEntry struct {
	Directory string   `json:"directory"`
	File      string   `json:"file"`
	Arguments []string `json:"arguments"`
}

// dryRunEntries turns make -n -w output into compilation-database entries:
// each line that runs a C or C++ compiler with -c on a source (also
// through libtool --mode=compile), from the directory make -w says it is
// in.
func dryRunEntries(out, root string) []cdbEntry {
	var entries []cdbEntry
	dirs := []string{root}
	seen := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		if i := strings.Index(line, "Entering directory '"); i >= 0 {
			d := strings.TrimSuffix(line[i+len("Entering directory '"):], "'")
			dirs = append(dirs, d)
			continue
		}
		if strings.Contains(line, "Leaving directory '") {
			if len(dirs) > 1 {
				dirs = dirs[:len(dirs)-1]
			}
			continue
		}
		for _, cmd := range strings.Split(line, "&&") {
			words := shellWords(cmd)
			start := -1
			for i, w := range words {
				if b := filepath.Base(w); b == "gcc" || b == "cc" || b == "g++" || b == "c++" || b == "clang" || b == "clang++" {
					start = i
					break
				}
			}
			if start < 0 || !containsWord(words[start:], "-c") {
				continue
			}
			args := words[start:]
			src := ""
			for _, a := range args {
				switch filepath.Ext(a) {
				case ".c", ".cc", ".cpp", ".cxx":
					src = a
				}
			}
			if src == "" {
				continue
			}
			dir := dirs[len(dirs)-1]
			abs := src
			if !filepath.IsAbs(abs) {
				abs = filepath.Join(dir, src)
			}
			if seen[abs] {
				continue
			}
			seen[abs] = true
			entries = append(entries, cdbEntry{Directory: dir, File: abs, Arguments: args})
		}
	}
	return entries
}

func containsWord(ws []string, w string) bool {
	for _, x := range ws {
		if x == w {
			return true
		}
	}
	return false
}

// shellWords splits a command line as sh would for the simple quoting make
// prints (single and double quotes, backslash escapes); enough for
// compiler lines.
func shellWords(s string) []string {
	var out []string
	var cur strings.Builder
	in := false
	var q byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case q != 0:
			if c == q {
				q = 0
			} else if c == '\\' && q == '"' && i+1 < len(s) {
				i++
				cur.WriteByte(s[i])
			} else {
				cur.WriteByte(c)
			}
		case c == '\'' || c == '"':
			q, in = c, true
		case c == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
			in = true
		case c == ' ' || c == '\t' || c == ';':
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if in {
		out = append(out, cur.String())
	}
	return out
}
