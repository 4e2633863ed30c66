package corpus

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"unicode/utf16"
)

// Position is a query position: a repository-relative file and a 0-based
// LSP position (UTF-16 columns) inside an identifier.
type Position struct {
	Path      string `json:"path"`
	Line      int    `json:"line"`
	Character int    `json:"character"`
	Ident     string `json:"ident"`
	Test      bool   `json:"test"`
}

// hashCommentExt are the extensions whose line comments start with #.
var hashCommentExt = map[string]bool{".sh": true, ".bash": true, ".py": true, ".pyi": true, ".yaml": true, ".yml": true}

// skipDirs are never chosen from: installed or generated code, and what a
// repository keeps of others'.
var skipDirs = map[string]bool{"node_modules": true, "dist": true, "build": true, "out": true, "lib-cov": true,
	".yarn": true, ".git": true, "vendor": true, "testdata": true, "coverage": true, "_site": true,
	"target": true, "CMakeFiles": true}

func isTestFile(rel string) bool {
	base := filepath.Base(rel)
	if strings.HasSuffix(base, "_test.go") || strings.Contains(base, ".test.") || strings.Contains(base, ".spec.") {
		return true
	}
	for _, seg := range strings.Split(filepath.ToSlash(filepath.Dir(rel)), "/") {
		switch seg {
		case "test", "tests", "__tests__", "__test__", "spec":
			return true
		}
	}
	return false
}

// chooseFiles picks up to n source files spread evenly over the sorted
// list, three in four outside tests.
func chooseFiles(root string, exts []string, n int) (all int, files []string) {
	var src, tests []string
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() {
			if p != root && (skipDirs[d.Name()] || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		ok := false
		for _, e := range exts {
			ok = ok || strings.HasSuffix(d.Name(), e)
		}
		if !ok || strings.HasSuffix(d.Name(), ".min.js") {
			return nil
		}
		all++
		if fi, err := d.Info(); err != nil || fi.Size() > 200<<10 || fi.Size() < 200 {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if isTestFile(rel) {
			tests = append(tests, rel)
		} else {
			src = append(src, rel)
		}
		return nil
	})
	sort.Strings(src)
	sort.Strings(tests)
	nt := n / 4
	if nt > len(tests) {
		nt = len(tests)
	}
	// Interleaved, three sources then a test, so that a caller taking a
	// prefix keeps the proportion.
	ss, ts := spread(src, n-nt), spread(tests, nt)
	for len(ss) > 0 || len(ts) > 0 {
		k := min(3, len(ss))
		files, ss = append(files, ss[:k]...), ss[k:]
		if len(ts) > 0 {
			files, ts = append(files, ts[0]), ts[1:]
		}
	}
	if len(files) < n {
		files = append(files, spread(without(tests, files), n-len(files))...)
	}
	return all, files
}

func without(xs, drop []string) []string {
	var out []string
	for _, x := range xs {
		found := false
		for _, d := range drop {
			found = found || d == x
		}
		if !found {
			out = append(out, x)
		}
	}
	return out
}

// spread takes n items evenly spaced from xs (all of them when fewer).
func spread[T any](xs []T, n int) []T {
	if n <= 0 {
		return nil
	}
	if len(xs) <= n {
		return xs
	}
	out := make([]T, 0, n)
	for i := 0; i < n; i++ {
		out = append(out, xs[i*len(xs)/n])
	}
	return out
}

var keywords = map[string]bool{}

func init() {
	for _, k := range strings.Fields(`break case chan const continue default defer else fallthrough for func go goto if
	import interface map package range return select struct switch type var nil true false iota
	string int int8 int16 int32 int64 uint uint8 uint16 uint32 uint64 uintptr byte rune bool error any float32 float64
	len cap make new append copy delete panic recover print println close complex real imag min max clear
	abstract as async await boolean catch class constructor debugger declare do enum export extends finally
	from function get implements in instanceof keyof let module namespace never null number object of readonly
	require set static super this throw try typeof undefined unique unknown void while with yield symbol
	public private protected override satisfies infer is asserts global arguments`) {
		keywords[k] = true
	}
}

// candidates scans a file for identifier uses worth asking about: a call
// (`name(`), a selector (`.name`), or a capitalised name (a type or an
// exported identifier), outside comments and strings, not right after a
// declaring keyword. Columns are UTF-16.
func candidates(rel string, text []byte) []Position {
	if ext := filepath.Ext(rel); ext == ".sh" || ext == ".bash" {
		return shellCandidates(rel, text)
	}
	// Shell, Python and YAML comments run from # to the end of the line:
	// their words are no identifier uses.
	hashComments := hashCommentExt[filepath.Ext(rel)]
	var out []Position
	s := string(text)
	line, lineStart := 0, 0
	prevWord := ""
	i := 0
	isStart := func(c byte) bool { return c == '_' || c == '$' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
	isPart := func(c byte) bool { return isStart(c) || c >= '0' && c <= '9' }
	newline := func(at int) { line++; lineStart = at + 1 }
	for i < len(s) {
		c := s[i]
		switch {
		case c == '\n':
			newline(i)
			i++
		case c == '#' && hashComments:
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(s) && s[i+1] == '/':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(s) && s[i+1] == '*':
			i += 2
			for i < len(s) && !(s[i] == '*' && i+1 < len(s) && s[i+1] == '/') {
				if s[i] == '\n' {
					newline(i)
				}
				i++
			}
			i += 2
		case c == '"' || c == '\'' || c == '`':
			i++
			for i < len(s) && s[i] != c {
				if s[i] == '\\' && c != '`' {
					i++
				} else if s[i] == '\n' {
					if c != '`' {
						break
					}
					newline(i)
				}
				i++
			}
			if i < len(s) && s[i] == c {
				i++
			}
		case isStart(c) && (i == 0 || !isPart(s[i-1])):
			j := i
			for j < len(s) && isPart(s[j]) {
				j++
			}
			w := s[i:j]
			k := j
			for k < len(s) && (s[k] == ' ' || s[k] == '\t') {
				k++
			}
			call := k < len(s) && s[k] == '('
			sel := i > 0 && s[i-1] == '.'
			upper := w[0] >= 'A' && w[0] <= 'Z'
			decl := false
			switch prevWord {
			case "func", "function", "class", "type", "interface", "const", "let", "var", "enum", "namespace", "package", "import":
				decl = true
			}
			if !keywords[w] && !decl && (call || sel || upper) && len(w) > 1 {
				col := len(utf16.Encode([]rune(s[lineStart:i])))
				out = append(out, Position{Path: rel, Line: line, Character: col + 1, Ident: w, Test: isTestFile(rel)})
			}
			prevWord = w
			i = j
		default:
			if c != ' ' && c != '\t' {
				prevWord = ""
			}
			i++
		}
	}
	return out
}

func readFile(root, rel string) ([]byte, error) {
	return os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
}

var (
	shellFuncDef = regexp.MustCompile(`^\s*(?:function\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*\(\)`)
	shellWord    = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)
)

// shellCandidates are a shell script's uses: parameter expansions ($name,
// ${name}, inside double quotes too) and calls of the functions the file
// defines, outside comments and single quotes. Columns are UTF-16.
func shellCandidates(rel string, text []byte) []Position {
	lines := strings.Split(string(text), "\n")
	funcs := map[string]bool{}
	for _, l := range lines {
		if m := shellFuncDef.FindStringSubmatch(l); m != nil {
			funcs[m[1]] = true
		}
	}
	var out []Position
	add := func(line int, l string, at int, w string) {
		col := len(utf16.Encode([]rune(l[:at])))
		out = append(out, Position{Path: rel, Line: line, Character: col + 1, Ident: w, Test: isTestFile(rel)})
	}
	for n, l := range lines {
		def := shellFuncDef.FindStringSubmatchIndex(l)
		single := false
		for i := 0; i < len(l); i++ {
			c := l[i]
			switch {
			case c == '\'':
				single = !single
			case single:
			case c == '\\':
				i++
			case c == '#' && (i == 0 || l[i-1] == ' ' || l[i-1] == '\t'):
				i = len(l)
			case c == '$' && i+1 < len(l):
				j := i + 1
				if l[j] == '{' {
					j++
				}
				if m := shellWord.FindStringIndex(l[j:]); m != nil && m[0] == 0 && m[1] > 1 {
					add(n, l, j, l[j:j+m[1]])
					i = j + m[1] - 1
				}
			case (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_') && (i == 0 || !isShellWordByte(l[i-1])):
				m := shellWord.FindStringIndex(l[i:])
				w := l[i : i+m[1]]
				if funcs[w] && !(def != nil && def[2] == i) && len(w) > 1 {
					add(n, l, i, w)
				}
				i += m[1] - 1
			}
		}
	}
	return out
}

func isShellWordByte(c byte) bool {
	return c == '_' || c == '$' || c == '-' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
