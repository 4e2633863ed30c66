//go:build linux

package jail

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
)

// basedpyright, jailed, with the reviewed settings: python.pythonPath
// names no interpreter, so nothing runs python from PATH, and a stdlib
// type still resolves from the bundled typeshed.
func TestJailedBasedpyright(t *testing.T) {
	bin := os.Getenv("LSP_TEST_BIN")
	if bin == "" {
		bin = filepath.Join(filepath.Dir(filepath.Dir(filepath.Dir(mustGetwd(t)))), ".bin")
	}
	cli := filepath.Join(bin, "basedpyright", "node_modules", "basedpyright", "langserver.index.js")
	node, err := exec.LookPath("node")
	if err == nil {
		node, err = filepath.EvalSymlinks(node)
	}
	if _, serr := os.Stat(cli); serr != nil || err != nil {
		t.Skip("basedpyright is not installed (make deps; LSP_TEST_BIN names the install directory)")
	}
	ws := treeWorkspace(t, map[string]string{
		"pyproject.toml":  "[project]\nname = \"p\"\ndependencies = [\"requests>=2\"]\n\n[tool.pyright]\npythonVersion = \"3.10\"\n",
		"pkg/__init__.py": "",
		"pkg/util.py":     "import os.path\n\n\ndef join(a: str, b: str) -> str:\n    return os.path.join(a, b)\n",
		"main.py":         "from pkg.util import join\n\nprint(join(\"a\", \"b\"))\n",
	})
	settings, _ := json.Marshal(map[string]any{"python": map[string]any{"pythonPath": filepath.Join(bin, "basedpyright", "no-interpreter")}})
	srv := start(t, newSpawner(t, Options{}), runtime.Spec{
		ID: "basedpyright", Language: "python", Extensions: []string{".py"},
		Executable: node, Args: []string{cli, "--stdio"}, Settings: settings,
	}, ws)
	ctx := context.Background()
	h, err := hoverAt(ctx, srv, ws, "main.py", "join(\"a\"", 1)
	if err != nil {
		t.Fatal(err)
	}
	if h == nil || !strings.Contains(h.Markdown, "def join") {
		t.Fatalf("hover on a project function: %+v", h)
	}
	h, err = hoverAt(ctx, srv, ws, "pkg/util.py", "os.path.join", 9)
	if err != nil {
		t.Fatal(err)
	}
	if h == nil || !strings.Contains(h.Markdown, "join") {
		t.Fatalf("hover on a stdlib function (typeshed): %+v", h)
	}
}

func mustGetwd(t *testing.T) string {
	d, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return d
}
