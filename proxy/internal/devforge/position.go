package devforge

import (
	"context"
	"fmt"
	"os/exec"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
)

// Position is a place in a repository to show a newcomer: a function's
// name in a source file of the repository's main language.
type Position struct {
	Path      string
	Line      int // 0-based, as the API takes it
	Character int // 0-based UTF-16, as the API takes it
	Name      string
}

// languages are the served languages by the extensions the dev stack's
// servers take, each with the pattern of a function declaration whose
// group 1 is the name.
var languages = []struct {
	exts []string
	decl *regexp.Regexp
	test func(p string) bool
}{
	{[]string{".go"}, regexp.MustCompile(`^func (?:\([^)]*\) )?([A-Za-z_][A-Za-z0-9_]*)`),
		func(p string) bool { return strings.HasSuffix(p, "_test.go") }},
	{[]string{".ts", ".tsx", ".js", ".jsx"}, // what the dev stack's TypeScript server serves (servers.go)
		regexp.MustCompile(`^(?:export\s+)?(?:default\s+)?(?:async\s+)?function\*?\s+([A-Za-z_$][A-Za-z0-9_$]*)`),
		func(p string) bool {
			return strings.Contains(p, ".test.") || strings.Contains(p, ".spec.") || strings.HasSuffix(p, ".d.ts")
		}},
	{[]string{".py"}, // basedpyright (deploy/images/servers.json.in)
		regexp.MustCompile(`^(?:async\s+)?def\s+([A-Za-z_][A-Za-z0-9_]*)`),
		func(p string) bool {
			base := p[strings.LastIndex(p, "/")+1:]
			return strings.HasPrefix(base, "test_") || strings.HasSuffix(base, "_test.py") || base == "conftest.py"
		}},
	{[]string{".sh", ".bash"}, // bash-language-server
		regexp.MustCompile(`^(?:function\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*\(\)`),
		func(p string) bool { return false }},
}

// skipDirs are never where a newcomer's first question is.
var skipDirs = []string{"vendor/", "node_modules/", "testdata/", "test/", "tests/", "__tests__/", "examples/", "dist/", "build/"}

// maxScan bounds the files FindFunction reads, maxFile their size.
const (
	maxScan = 200
	maxFile = 1 << 20
)

// FindFunction picks a Position in the default branch of the bare
// repository gitDir: the main language is the served language with the
// most files; the position is the first function declaration (in path
// order, tests and vendored or generated folders last) of such a file.
// ok is false when the repository has no served source file with one.
func FindFunction(ctx context.Context, gitDir string) (pos Position, ok bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	git, err := exec.LookPath("git")
	if err != nil {
		return Position{}, false, fmt.Errorf("devforge: %w", err)
	}
	out, err := runGit(ctx, git, gitDir, nil, "ls-tree", "-r", "-z", "-l", "HEAD")
	if err != nil {
		return Position{}, false, err
	}
	var paths []string
	for _, rec := range strings.Split(string(out), "\x00") {
		// "<mode> blob <oid> <size>\t<path>"; large files are generated
		// or data, and are not read.
		meta, p, ok := strings.Cut(rec, "\t")
		f := strings.Fields(meta)
		if !ok || len(f) != 4 || f[1] != "blob" {
			continue
		}
		if n, err := strconv.Atoi(f[3]); err != nil || n > maxFile {
			continue
		}
		paths = append(paths, p)
	}
	best, bestN := -1, 0
	for i, l := range languages {
		n := 0
		for _, p := range paths {
			if hasExt(p, l.exts) {
				n++
			}
		}
		if n > bestN {
			best, bestN = i, n
		}
	}
	if best < 0 {
		return Position{}, false, nil
	}
	lang := languages[best]
	rank := func(p string) int {
		r := strings.Count(p, "/")
		if lang.test(p) {
			r += 1000
		}
		if strings.Contains(path.Base(p), ".config.") {
			r += 500 // build tool configuration, not the repository's code
		}
		for _, d := range skipDirs {
			if strings.HasPrefix(p, d) || strings.Contains(p, "/"+d) {
				r += 100
			}
		}
		return r
	}
	var cands []string
	for _, p := range paths {
		if hasExt(p, lang.exts) {
			cands = append(cands, p)
		}
	}
	sort.SliceStable(cands, func(i, j int) bool {
		if ri, rj := rank(cands[i]), rank(cands[j]); ri != rj {
			return ri < rj
		}
		return cands[i] < cands[j]
	})
	if len(cands) > maxScan {
		cands = cands[:maxScan]
	}
	for _, p := range cands {
		data, err := runGit(ctx, git, gitDir, nil, "cat-file", "blob", "HEAD:"+p)
		if err != nil {
			return Position{}, false, err
		}
		for i, line := range strings.Split(string(data), "\n") {
			m := lang.decl.FindStringSubmatchIndex(line)
			if m == nil {
				continue
			}
			return Position{
				Path:      p,
				Line:      i,
				Character: len(utf16.Encode([]rune(line[:m[2]]))),
				Name:      line[m[2]:m[3]],
			}, true, nil
		}
	}
	return Position{}, false, nil
}

func hasExt(p string, exts []string) bool {
	e := path.Ext(p)
	for _, x := range exts {
		if e == x {
			return true
		}
	}
	return false
}
