package deps

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
)

// Real-world requirements lines (pip's format) and the distribution each
// names.
func TestParseRequirements(t *testing.T) {
	in := strings.Join([]string{
		"# comment",
		"requests>=2.31  # http",
		"Flask[async]==3.0.0",
		"-r other.txt",
		"--index-url https://example.invalid/simple",
		"-e .",
		"./local/pkg",
		"https://example.invalid/x-1.0.tar.gz",
		"pytest ; python_version >= \"3.8\"",
		"zope.interface \\",
		"    >=5",
		"attrs @ https://example.invalid/attrs.whl",
		"",
		"   ",
	}, "\n")
	got, err := parseRequirements([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"requests", "Flask", "pytest", "zope.interface", "attrs"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	if _, err := parseRequirements([]byte("a\x00b")); err == nil {
		t.Error("binary data parsed")
	}
}

// click's own pyproject.toml layout: [project] dependencies, dependency
// groups with include-group tables, and Poetry's tables.
func TestParsePyproject(t *testing.T) {
	in := `[project]
name = "click"
dependencies = ["colorama; platform_system == 'Windows'"]

[project.optional-dependencies]
docs = ["sphinx>=7", "pallets-sphinx-themes"]

[dependency-groups]
dev = ["ruff", {include-group = "tests"}]
tests = ["pytest"]

[tool.poetry.dependencies]
python = "^3.10"
Django = "^5"

[tool.poetry.group.lint.dependencies]
mypy = "*"
`
	own, got, err := parsePyproject([]byte(in))
	if err != nil || own != "click" {
		t.Fatal(own, err)
	}
	want := []string{"colorama", "sphinx", "pallets-sphinx-themes", "ruff", "pytest", "Django", "mypy"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	if _, _, err := parsePyproject([]byte("[project\n")); err == nil {
		t.Error("broken TOML parsed")
	}
}

// The prepare's warnings: one per declared distribution (names compared
// normalized), manifests found by the walk, hidden directories skipped.
func TestPythonWarnings(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{
		"pyproject.toml":                  "[project]\nname = \"p\"\ndependencies = [\"Requests>=2\"]\n",
		"requirements-dev.txt":            "requests\npytest\n",
		"docs/requirements.txt":           "sphinx\n",
		".venv/requirements.txt":          "hidden\n",
		"node_modules/x/requirements.txt": "hidden\n",
	}
	writeTree(t, root, files, 0o644)
	w := pythonWarnings(root)
	if len(w) != 3 {
		t.Fatalf("warnings %q, want requests, pytest, sphinx", w)
	}
	for _, want := range []string{"python: pytest (declared in requirements-dev.txt)", "python: Requests (declared in pyproject.toml, requirements-dev.txt)", "python: sphinx (declared in docs/requirements.txt)"} {
		if !slices.ContainsFunc(w, func(s string) bool { return strings.HasPrefix(s, want) }) {
			t.Errorf("no warning %q in %q", want, w)
		}
	}
	if got := (*Fetcher)(nil).Fetch(t.Context(), runtime.Workspace{Root: root, Home: t.TempDir()}); len(got) != 3 || !strings.HasPrefix(got[0], "dependencies: python: ") {
		t.Errorf("Fetch without mirrors: %q", got)
	}
}

// Many dependencies: one warning each up to maxPyWarnings, the rest named
// in the last.
func TestPythonWarningsBounded(t *testing.T) {
	root := t.TempDir()
	var req strings.Builder
	for i := 0; i < 25; i++ {
		fmt.Fprintf(&req, "pkg%02d\n", i)
	}
	if err := os.WriteFile(filepath.Join(root, "requirements.txt"), []byte(req.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	w := pythonWarnings(root)
	if len(w) != maxPyWarnings || !strings.HasPrefix(w[len(w)-1], "python: 16 more declared dependencies are not installed either: pkg09, ") || !strings.HasSuffix(w[len(w)-1], "pkg24") {
		t.Errorf("warnings %q", w)
	}
}

func FuzzParseRequirements(f *testing.F) {
	f.Add([]byte("requests>=2\n-r x.txt\nfoo \\\n  ==1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		names, err := parseRequirements(b)
		if err == nil && len(names) > maxPyDeps {
			t.Fatalf("%d names", len(names))
		}
		for _, n := range names {
			if !pyNameRE.MatchString(n) {
				t.Fatalf("name %q", n)
			}
		}
	})
}

func FuzzParsePyproject(f *testing.F) {
	f.Add([]byte("[project]\ndependencies = [\"a\", \"b>1\"]\n[tool.poetry.dependencies]\nc = \"*\"\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > maxPyManifestBytes {
			return
		}
		_, names, err := parsePyproject(b)
		if err == nil && len(names) > maxPyDeps {
			t.Fatalf("%d names", len(names))
		}
	})
}
