package corpus

import (
	"encoding/json"
	"fmt"
	"github.com/hanzoai/lsp/proxy/internal/devstack"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Answer is one side's normalised answers at one position (hover,
// definition, references) or for one file (symbols, diagnostics): a list of
// comparable lines. Empty means the side answered nothing.
type Answer struct {
	Lines []string `json:"lines"`
	Err   string   `json:"error,omitempty"`
	// State is the service's evidence.state ("" on the ground truth).
	State    string   `json:"state,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
	// Seconds is how long the answer took (every page of it), which
	// tells a server that was slow from one that was wrong.
	Seconds float64 `json:"seconds,omitempty"`
}

func (a Answer) empty() bool { return len(a.Lines) == 0 }

func (a Answer) equal(b Answer) bool {
	if len(a.Lines) != len(b.Lines) {
		return false
	}
	for i := range a.Lines {
		if a.Lines[i] != b.Lines[i] {
			return false
		}
	}
	return true
}

// lspRange is an LSP range.
type lspRange struct {
	Start struct{ Line, Character int } `json:"start"`
	End   struct{ Line, Character int } `json:"end"`
}

func (r lspRange) String() string {
	return fmt.Sprintf("%d:%d-%d:%d", r.Start.Line, r.Start.Character, r.End.Line, r.End.Character)
}

// roots are the host directories a ground-truth location may fall in.
type roots struct {
	checkout string // the ground truth's checkout
	modcache string // its GOMODCACHE
	goroot   string
	// ext are the reviewed entry's external roots (dir → module).
	ext []devstack.ExternalRoot
}

// truthLocation names a direct server's location the way the service
// names its own: a repository path, or module@version + a path inside it.
// ok is false for a location outside every known root.
func (rt roots) truthLocation(uri string, rg lspRange) string {
	u, err := url.Parse(uri)
	p := uri
	if err == nil && u.Scheme == "file" {
		p = u.Path
	}
	if rel, ok := strings.CutPrefix(p, rt.checkout+"/"); ok && !strings.Contains("/"+rel, "/node_modules/") {
		return rel + " " + rg.String()
	}
	if rel, ok := strings.CutPrefix(p, rt.modcache+"/"); ok {
		if at := strings.IndexByte(rel, '@'); at > 0 {
			if slash := strings.IndexByte(rel[at:], '/'); slash > 0 {
				mod, ver := unescapeModule(rel[:at]), unescapeModule(rel[at+1:at+slash])
				return "ext " + mod + "@" + ver + " " + rel[at+slash+1:] + " " + rg.String()
			}
		}
	}
	if rel, ok := strings.CutPrefix(p, rt.goroot+"/src/"); ok {
		return "ext std " + rel + " " + rg.String()
	}
	if i := strings.LastIndex(p, "/node_modules/"); i >= 0 {
		rest := p[i+len("/node_modules/"):]
		parts := strings.SplitN(rest, "/", 3)
		name, inner := parts[0], ""
		if strings.HasPrefix(name, "@") && len(parts) == 3 {
			name, inner = parts[0]+"/"+parts[1], parts[2]
		} else if len(parts) > 1 {
			inner = strings.Join(parts[1:], "/")
		}
		ver := "?"
		if b, err := os.ReadFile(filepath.Join(p[:i], "node_modules", name, "package.json")); err == nil {
			var pj struct{ Version string }
			if json.Unmarshal(b, &pj) == nil {
				ver = pj.Version
			}
		}
		return "ext " + name + "@" + ver + " " + inner + " " + rg.String()
	}
	for _, x := range rt.ext {
		if rel, ok := strings.CutPrefix(p, x.Dir+"/"); ok {
			return "ext " + x.Module + " " + rel + " " + rg.String()
		}
	}
	return "outside " + p + " " + rg.String()
}

// externalNames names the reviewed entry's external roots in a direct
// server's text as the daemon's scrubber names them (clangd's hover of an
// include shows /usr/lib/llvm-19/lib/clang/19/include/fuzzer/…, the
// service clang-headers@19.1.7/fuzzer/…).
func (rt roots) externalNames(text string) string {
	for _, x := range rt.ext {
		if x.Dir != "" && x.Module != "" {
			text = strings.ReplaceAll(text, x.Dir+"/", x.Module+"/")
		}
	}
	return text
}

// serviceLocation is the same for a location in a service answer.
type serviceLocation struct {
	Path     string   `json:"path"`
	Range    lspRange `json:"range"`
	External bool     `json:"external"`
	Module   string   `json:"module"`
}

func (l serviceLocation) key() string {
	if !l.External {
		return l.Path + " " + l.Range.String()
	}
	if strings.HasPrefix(l.Module, "std@") || l.Module == "std" {
		// The service names std@goX.Y; the ground truth's GOROOT is the
		// same toolchain, so the version says nothing more.
		return "ext std " + strings.TrimPrefix(l.Path, "src/") + " " + l.Range.String()
	}
	return "ext " + l.Module + " " + l.Path + " " + l.Range.String()
}

// truthLocations decodes a direct server's Location | Location[] |
// LocationLink[] result.
func (rt roots) truthLocations(raw json.RawMessage) []string {
	var many []struct {
		URI                  string    `json:"uri"`
		Range                lspRange  `json:"range"`
		TargetURI            string    `json:"targetUri"`
		TargetSelectionRange *lspRange `json:"targetSelectionRange"`
	}
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	if raw[0] == '{' {
		raw = json.RawMessage("[" + string(raw) + "]")
	}
	if json.Unmarshal(raw, &many) != nil {
		return []string{"undecodable " + string(raw)}
	}
	var out []string
	for _, l := range many {
		if l.TargetURI != "" && l.TargetSelectionRange != nil {
			out = append(out, rt.truthLocation(l.TargetURI, *l.TargetSelectionRange))
		} else {
			out = append(out, rt.truthLocation(l.URI, l.Range))
		}
	}
	return sortUniq(out)
}

func sortUniq(xs []string) []string {
	sort.Strings(xs)
	out := xs[:0]
	for i, x := range xs {
		if i == 0 || x != xs[i-1] {
			out = append(out, x)
		}
	}
	return out
}

// The service's documented sanitising of server text (README, "hover and
// diagnostics are sanitised"): links keep their text and lose their
// targets, reference definitions and bare or angle-bracket URLs go, control
// characters other than newline and tab go. Applied to both sides, so it
// never counts as a disagreement; a second application changes nothing.
var (
	inlineLink = regexp.MustCompile(`\[([^\]\n]{0,512})\]\(([^)\s]{0,1000})(?:\s+"[^"\n]{0,256}")?\)`)
	refLink    = regexp.MustCompile(`(?m)^\s{0,3}\[[^\]\n]{1,256}\]:\s*\S+.*$`)
	autoLink   = regexp.MustCompile(`<((?:https?|ftp|file|mailto|data|javascript):[^>\s]{0,1000})>`)
	bareURL    = regexp.MustCompile(`(?i)(?:https?|ftp|file|data|javascript):(?://)?[^\s<>()\[\]"'` + "`" + `]{0,1000}`)
	spaces     = regexp.MustCompile(`[ \t]+\n`)
)

func sanitizeText(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 && r != '\n' && r != '\t' || r == 0x7f || r >= 0x80 && r < 0xa0 || r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069 {
			return -1
		}
		return r
	}, s)
}

func sanitizeMarkdown(s string) string {
	s = sanitizeText(s)
	s = inlineLink.ReplaceAllString(s, "$1")
	s = refLink.ReplaceAllString(s, "")
	s = autoLink.ReplaceAllString(s, "")
	s = bareURL.ReplaceAllString(s, "")
	s = spaces.ReplaceAllString(s, "\n")
	return strings.TrimRight(s, "\n ")
}

// stdLink is a Go standard library file in the service's hover text
// (std@go1.26.8/os/file.go#81,2: a doc link's target, GOROOT scrubbed).
var stdLink = regexp.MustCompile(`\bstd@go[0-9][0-9A-Za-z.\-]*/`)

// docLinkDefs is a line of gopls's doc-link definitions as they reach a
// hover (`\[O\_RDONLY]: std/os/file.go#81,2 \*PathError]: …`).
var (
	docLinkDefs = regexp.MustCompile(`^(?:\S+\]: std/\S+#\d+,\d+\s*)+$`)
	docLinkDef  = regexp.MustCompile(`\S+\]: std/\S+#\d+,\d+`)
)

// sortDocLinks puts gopls's doc-link definitions in one order: gopls
// writes them from a map (golang/hover.go, "the non-deterministic order is
// acceptable"), so two runs of the same server differ there, and the
// markdown escaping of the first one's bracket follows its place.
func sortDocLinks(md string) string {
	lines := strings.Split(md, "\n")
	for i, l := range lines {
		if !docLinkDefs.MatchString(l) {
			continue
		}
		defs := docLinkDef.FindAllString(l, -1)
		for j, d := range defs {
			defs[j] = strings.TrimPrefix(d, `\[`)
		}
		sort.Strings(defs)
		lines[i] = strings.Join(defs, " ")
	}
	return strings.Join(lines, "\n")
}

// sortUnions puts the members of each union in a TypeScript hover's code
// in one order. tsserver prints a union's members by type id, the order
// the checker first created them, and typescript-language-server checks
// open documents (geterr) between requests: the same server asked the
// same questions printed immer's `"push" | "pop" | …` in source order in
// one run and in lib.d.ts's order in the next, on either side. A line of
// code with " | " keeps what comes before its first " = " and sorts the
// rest's members.
func sortUnions(md string) string {
	lines := strings.Split(md, "\n")
	in := false
	for i, l := range lines {
		switch {
		case strings.HasPrefix(l, "```"):
			in = l == "```typescript" || l == "```ts" || l == "```javascript"
		case in && strings.Contains(l, " | "):
			head, rest := "", l
			if j := strings.Index(l, " = "); j >= 0 {
				head, rest = l[:j+3], l[j+3:]
			}
			members := strings.Split(rest, " | ")
			sort.Strings(members)
			lines[i] = head + strings.Join(members, " | ")
		}
	}
	return strings.Join(lines, "\n")
}

// hoverLines is a hover's comparable form: its sanitised text, the
// ground truth's checkout path taken out (the service never shows a host
// path; a direct server does), and a standard library file named std/…
// on both sides: gopls links a doc comment's [os.O_RDONLY] to
// file://GOROOT/src/os/file.go#81,2 where it has no pkg.go.dev link (a
// file outside every package), which the service shows as
// std@goX/os/file.go#81,2 and the sanitiser would take away on the ground
// truth's side only.
func hoverLines(md, checkout string, goroot ...string) []string {
	if checkout != "" {
		md = strings.ReplaceAll(md, checkout+"/", "")
	}
	for _, g := range goroot {
		if g != "" {
			md = strings.ReplaceAll(md, "file://"+g+"/src/", "std/")
		}
	}
	md = stdLink.ReplaceAllString(md, "std/")
	md = expansionLayout(md)
	md = sortUnions(sortDocLinks(sanitizeMarkdown(md)))
	if md == "" {
		return nil
	}
	return []string{md}
}

var symbolKinds = []string{"", "file", "module", "namespace", "package", "class", "method",
	"property", "field", "constructor", "enum", "interface", "function", "variable", "constant",
	"string", "number", "boolean", "array", "object", "key", "null", "enum_member", "struct",
	"event", "operator", "type_parameter"}

func kindName(k int) string {
	if k > 0 && k < len(symbolKinds) {
		return symbolKinds[k]
	}
	return fmt.Sprint(k)
}

// truthSymbols flattens DocumentSymbol[] (children get their parent's
// name as container) or SymbolInformation[].
func truthSymbols(raw json.RawMessage) []string {
	type sym struct {
		Name          string                    `json:"name"`
		Kind          int                       `json:"kind"`
		Range         *lspRange                 `json:"range"`
		Location      *struct{ Range lspRange } `json:"location"`
		ContainerName string                    `json:"containerName"`
		Children      json.RawMessage           `json:"children"`
	}
	var out []string
	var walk func(raw json.RawMessage, container string)
	walk = func(raw json.RawMessage, container string) {
		var syms []sym
		if json.Unmarshal(raw, &syms) != nil {
			return
		}
		for _, s := range syms {
			rg, c := lspRange{}, container
			if s.Range != nil {
				rg = *s.Range
			} else if s.Location != nil {
				rg, c = s.Location.Range, s.ContainerName
			}
			out = append(out, symbolLine(s.Name, kindName(s.Kind), c, rg))
			if len(s.Children) > 0 {
				walk(s.Children, s.Name)
			}
		}
	}
	walk(raw, "")
	return sortUniq(out)
}

func symbolLine(name, kind, container string, rg lspRange) string {
	return fmt.Sprintf("%s %s in %q %s", kind, name, container, rg)
}

var severities = []string{"", "error", "warning", "information", "hint"}

func truthDiagnostics(raw json.RawMessage, checkout string) []string {
	var ds []struct {
		Range    lspRange        `json:"range"`
		Severity int             `json:"severity"`
		Code     json.RawMessage `json:"code"`
		Source   string          `json:"source"`
		Message  string          `json:"message"`
	}
	if json.Unmarshal(raw, &ds) != nil {
		return nil
	}
	var out []string
	for _, d := range ds {
		sev := "error"
		if d.Severity > 0 && d.Severity < len(severities) {
			sev = severities[d.Severity]
		}
		code := strings.Trim(string(d.Code), `"`)
		if code == "null" {
			code = ""
		}
		out = append(out, diagLine(d.Range, sev, code, d.Source, strings.ReplaceAll(d.Message, checkout+"/", "")))
	}
	return sortUniq(out)
}

func diagLine(rg lspRange, severity, code, source, message string) string {
	at := rg.String()
	if source == "typescript" && firstUseCodes[code] {
		at = "(first use)"
	}
	return fmt.Sprintf("%s %s [%s %s] %s", at, severity, source, code, packagePaths(strings.TrimSpace(sanitizeText(message))))
}

// firstUseCodes are TypeScript errors the checker reports once per file,
// at the first node whose check needed what is missing: which node that
// is follows the order in which requests and the background diagnostics
// had the checker visit the file. redux's examples/counter-ts/src/App.tsx
// got 2875 ("This JSX tag requires the module path 'react/jsx-runtime'")
// at 6:4 in one run and at 13:8 in the next, from the same daemon binary
// against the same ground truth. They compare without their range: the
// error and its file still must agree.
var firstUseCodes = map[string]bool{"2875": true}

// A path into an npm package, as each side writes it in a message: the
// checkout's "node_modules/a/node_modules/@s/b/x.js" and the service's
// host-path scrubbing ("@s/b@1.2.3/x.js", the package as external roots
// name it). Both become "@s/b/x.js": the same file, named by its package.
var (
	truthPackagePath   = regexp.MustCompile(`(?:node_modules/(?:@[^/\s'"]+/)?[^/\s'"]+/)*node_modules/((?:@[^/\s'"]+/)?[^/\s'"]+)/`)
	servicePackagePath = regexp.MustCompile(`((?:@[^/\s'"@]+/)?[^/\s'"@]+)@[0-9][^/\s'"]*/`)
)

func packagePaths(s string) string {
	return servicePackagePath.ReplaceAllString(truthPackagePath.ReplaceAllString(s, "$1/"), "$1/")
}

// unescapeModule undoes the module cache's case escaping ("!x" is "X").
func unescapeModule(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '!' && i+1 < len(s) {
			i++
			b.WriteString(strings.ToUpper(s[i : i+1]))
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// expansionLayout is a clangd hover's macro expansion ("// Expands to",
// clang-format's layout of it) with its layout taken out: each run of
// whitespace one space, none after "(" or before ")" and ",". clang-format
// breaks lines by the length of what it lays out, and __FILE__ there is
// the file's absolute path: the ground truth's checkout and the daemon's
// tree are different directories of different lengths, so the same
// expansion is laid out differently on the two sides (jq's assert, fmt's
// FMT_ASSERT), as it would be in two developers' checkouts. The tokens and
// the path itself (repo-relative on both sides) are still compared.
func expansionLayout(md string) string {
	const mark = "\n// Expands to\n"
	i := strings.Index(md, mark)
	if i < 0 {
		return md
	}
	body := md[i+len(mark):]
	end := strings.Index(body, "\n```")
	if end < 0 {
		end = len(body)
	}
	flat := strings.Join(strings.Fields(body[:end]), " ")
	flat = strings.NewReplacer("( ", "(", " )", ")", " ,", ",").Replace(flat)
	return md[:i+len(mark)] + flat + body[end:]
}
