package deps

import (
	"bytes"
	"fmt"
	"io/fs"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"
)

// Python (python.go, the one place that knows Python's manifests): no
// PyPI mirror is configured on this service, so nothing is installed and
// basedpyright answers from the project, the standard library and the
// typeshed stubs it bundles. What the project declares — requirements*.txt
// and pyproject.toml ([project] dependencies and optional-dependencies,
// [dependency-groups], [tool.poetry] dependencies) — is read, never run,
// and each declared distribution becomes one warning of the prepare: an
// answer that reaches into it may be partial, and the prepare says so
// rather than stay silent. The server's own "could not be resolved"
// diagnostics (readiness/python.go) then mark the answers of the files
// that import one.

// Bounds of the Python manifests read per tree.
const (
	maxPyManifests     = 64
	maxPyManifestBytes = 256 << 10
	maxPyDeps          = 200
	maxPyLines         = 20000
	// maxPyWarnings bounds the prepare warnings of Python dependencies:
	// one each up to it, the rest named in the last.
	maxPyWarnings = 10
)

// pythonWarnings are the prepare's warnings for the Python dependencies
// declared under root.
func pythonWarnings(root string) []string {
	files, more := findPythonManifests(root)
	byName := map[string][]string{} // normalized name → manifests declaring it
	var display = map[string]string{}
	var refused []string
	// Distributions the tree itself is (a pyproject.toml's [project]
	// name: click's examples depend on click) resolve from the project.
	local := map[string]bool{}
	for _, rel := range files {
		b, err := readRegular(filepath.Join(root, filepath.FromSlash(rel)), maxPyManifestBytes)
		if err != nil {
			refused = append(refused, manifestRefused(rel, err))
			continue
		}
		var names []string
		if filepath.Base(rel) == "pyproject.toml" {
			var own string
			own, names, err = parsePyproject(b)
			if own != "" {
				local[normalizePyName(own)] = true
			}
		} else {
			names, err = parseRequirements(b)
		}
		if err != nil {
			// A parse error: made from the manifest's text, no host path.
			refused = append(refused, fmt.Sprintf("%s: %v", rel, err))
			continue
		}
		for _, n := range names {
			k := normalizePyName(n)
			if _, ok := display[k]; !ok {
				display[k] = n
			}
			if len(byName[k]) < 3 && !contains(byName[k], rel) {
				byName[k] = append(byName[k], rel)
			}
			if len(byName) >= maxPyDeps {
				more = true
				break
			}
		}
	}
	var out []string
	keys := make([]string, 0, len(byName))
	for k := range byName {
		if !local[k] {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for i, k := range keys {
		if i == maxPyWarnings-1 && len(keys) > maxPyWarnings {
			// The rest in one line: the prepare's warnings are bounded,
			// and other languages' must not be crowded out.
			var rest []string
			for _, r := range keys[i:] {
				rest = append(rest, display[r])
			}
			out = append(out, fmt.Sprintf("python: %d more declared dependencies are not installed either: %s", len(rest), strings.Join(rest, ", ")))
			break
		}
		out = append(out, fmt.Sprintf("python: %s (declared in %s) is not installed: no PyPI mirror is configured; answers use the project, the standard library and the bundled typeshed stubs only",
			display[k], strings.Join(byName[k], ", ")))
	}
	for _, r := range refused {
		out = append(out, "python: manifest not read: "+r)
	}
	if more {
		out = append(out, "python: more manifests or dependencies than are read; the rest are not listed")
	}
	return out
}

// findPythonManifests lists requirements*.txt and pyproject.toml files.
func findPythonManifests(root string) (files []string, more bool) {
	return findManifests(root, isPythonManifest, maxPyManifests)
}

// findManifests lists, by a bounded walk that skips hidden, vendored and
// installed directories, up to limit regular files whose name match
// accepts (tree-relative slash paths); more says the walk or the list was
// cut.
func findManifests(root string, match func(name string) bool, limit int) (files []string, more bool) {
	visited := 0
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." {
				n := d.Name()
				if strings.HasPrefix(n, ".") || n == "node_modules" || n == "vendor" || n == "site-packages" || n == "__pycache__" {
					return filepath.SkipDir
				}
				if strings.Count(rel, "/") >= maxWalkDepth {
					more = true
					return filepath.SkipDir
				}
			}
			if visited++; visited > maxWalkDirs {
				more = true
				return filepath.SkipAll
			}
			return nil
		}
		if !d.Type().IsRegular() || !match(d.Name()) {
			return nil
		}
		if len(files) == limit {
			more = true
			return filepath.SkipAll
		}
		files = append(files, rel)
		return nil
	})
	return files, more
}

// manifestRefused is the warning's text for a manifest that could not be
// read: its tree path and the reason, never the error itself (an
// os.PathError carries the host's staging path).
func manifestRefused(rel string, err error) string {
	return rel + ": " + reason(err)
}

func isPythonManifest(name string) bool {
	return name == "pyproject.toml" || strings.HasPrefix(name, "requirements") && strings.HasSuffix(name, ".txt")
}

// pyNameRE is the distribution name at the start of a PEP 508
// requirement.
var pyNameRE = regexp.MustCompile(`^([A-Za-z0-9](?:[A-Za-z0-9._-]{0,98}[A-Za-z0-9])?)`)

// requirementName is the distribution a PEP 508 requirement names; ""
// for a URL, a path or anything else that names none.
func requirementName(req string) string {
	req = strings.TrimSpace(req)
	first, _, _ := strings.Cut(req, " ")
	if req == "" || strings.Contains(first, "://") || strings.HasPrefix(req, ".") || strings.HasPrefix(req, "/") {
		return ""
	}
	m := pyNameRE.FindString(req)
	if m == "" {
		return ""
	}
	// "name @ url" is a direct reference: still the name's distribution.
	return m
}

// parseRequirements reads pip's requirements format: one requirement per
// line, # comments, backslash continuations; option lines (-r, -c, -e,
// --index-url, …) name no distribution of their own here (an included
// file is read where the walk finds it).
func parseRequirements(b []byte) ([]string, error) {
	if bytes.IndexByte(b, 0) >= 0 {
		return nil, fmt.Errorf("binary data")
	}
	var out []string
	lines := strings.Split(strings.ReplaceAll(string(b), "\r\n", "\n"), "\n")
	if len(lines) > maxPyLines {
		return nil, fmt.Errorf("more than %d lines", maxPyLines)
	}
	var cur strings.Builder
	flush := func() {
		line := cur.String()
		cur.Reset()
		if i := strings.Index(line, " #"); i >= 0 {
			line = line[:i]
		}
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			return
		}
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "-") {
			return
		}
		if n := requirementName(line); n != "" && len(out) < maxPyDeps {
			out = append(out, n)
		}
	}
	for _, l := range lines {
		if strings.HasSuffix(l, "\\") && !strings.HasPrefix(strings.TrimSpace(l), "#") {
			cur.WriteString(strings.TrimSuffix(l, "\\"))
			cur.WriteByte(' ')
			continue
		}
		cur.WriteString(l)
		flush()
	}
	if cur.Len() > 0 {
		flush()
	}
	return out, nil
}

// pyproject is what parsePyproject reads of pyproject.toml.
type pyproject struct {
	Project struct {
		Name                 string              `toml:"name"`
		Dependencies         []string            `toml:"dependencies"`
		OptionalDependencies map[string][]string `toml:"optional-dependencies"`
	} `toml:"project"`
	// Entries of a group are requirements or {include-group = "…"} tables.
	DependencyGroups map[string][]any `toml:"dependency-groups"`
	Tool             struct {
		Poetry struct {
			Dependencies    map[string]any `toml:"dependencies"`
			DevDependencies map[string]any `toml:"dev-dependencies"`
			Group           map[string]struct {
				Dependencies map[string]any `toml:"dependencies"`
			} `toml:"group"`
		} `toml:"poetry"`
	} `toml:"tool"`
}

// parsePyproject returns the project's own name and lists the
// distributions pyproject.toml declares, in file order within each table
// (sorted where TOML tables have no order).
func parsePyproject(b []byte) (string, []string, error) {
	var p pyproject
	if _, err := toml.NewDecoder(bytes.NewReader(b)).Decode(&p); err != nil {
		return "", nil, fmt.Errorf("pyproject.toml: %s", firstLineOf(err.Error()))
	}
	var out []string
	add := func(req string) {
		if n := requirementName(req); n != "" && len(out) < maxPyDeps {
			out = append(out, n)
		}
	}
	for _, r := range p.Project.Dependencies {
		add(r)
	}
	for _, g := range pySorted(p.Project.OptionalDependencies) {
		for _, r := range p.Project.OptionalDependencies[g] {
			add(r)
		}
	}
	for _, g := range pySorted(p.DependencyGroups) {
		for _, e := range p.DependencyGroups[g] {
			if r, ok := e.(string); ok {
				add(r)
			}
		}
	}
	poetry := []map[string]any{p.Tool.Poetry.Dependencies, p.Tool.Poetry.DevDependencies}
	for _, g := range pySorted(p.Tool.Poetry.Group) {
		poetry = append(poetry, p.Tool.Poetry.Group[g].Dependencies)
	}
	for _, deps := range poetry {
		for _, n := range pySorted(deps) {
			if strings.EqualFold(n, "python") {
				continue
			}
			add(n)
		}
	}
	return requirementName(p.Project.Name), out, nil
}

func pySorted[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// normalizePyName is PEP 503's normalized name: runs of -, _ and . become
// one -, lower case.
func normalizePyName(n string) string {
	n = strings.ToLower(n)
	var b strings.Builder
	dash := false
	for _, r := range n {
		if r == '-' || r == '_' || r == '.' {
			if !dash {
				b.WriteByte('-')
			}
			dash = true
			continue
		}
		dash = false
		b.WriteRune(r)
	}
	return b.String()
}

func firstLineOf(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
