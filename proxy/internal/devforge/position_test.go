package devforge

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestFindFunction: the position is a function's name in a served file of
// the main language, not in a test, a build tool's configuration, a
// declaration file or an extension no server takes, shallowest first.
func TestFindFunction(t *testing.T) {
	files := map[string]string{
		"rollup.config.js":     "export function external(id) { return true }\n",
		"tools/build.mjs":      "export function build() {}\n",
		"src/index.test.ts":    "function inTest() {}\n",
		"src/a/deep.ts":        "export function deep() {}\n",
		"src/store.ts":         "// ü\nconst x = 1\nexport function createStore(init: number) { return init }\n",
		"README.md":            "function notCode() {}\n",
		"scripts/helper.go":    "package main\n\nfunc helper() {}\n",
		"package.json":         "{}\n",
		"src/types/index.d.ts": "export declare function declared(): void\n",
	}
	pos := findIn(t, files)
	if want := (Position{Path: "src/store.ts", Line: 2, Character: 16, Name: "createStore"}); pos != want {
		t.Errorf("FindFunction = %+v, want %+v", pos, want)
	}
	// A Python repository: its first function outside the tests.
	pos = findIn(t, map[string]string{
		"tests/test_cli.py": "def test_x():\n    pass\n",
		"pkg/core.py":       "import os\n\n\nasync def run(argv):\n    return os.getcwd()\n",
		"pkg/util.py":       "def helper():\n    pass\n",
		"run.sh":            "main() {\n  echo hi\n}\n",
	})
	if want := (Position{Path: "pkg/core.py", Line: 3, Character: 10, Name: "run"}); pos != want {
		t.Errorf("FindFunction (Python) = %+v, want %+v", pos, want)
	}
}

func findIn(t *testing.T, files map[string]string) Position {
	t.Helper()
	dir := t.TempDir()
	for p, c := range files {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "-A"}, {"-c", "user.name=t", "-c", "user.email=t@localhost", "commit", "-q", "-m", "x"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	pos, ok, err := FindFunction(context.Background(), filepath.Join(dir, ".git"))
	if err != nil || !ok {
		t.Fatalf("FindFunction: %v, %v", ok, err)
	}
	return pos
}
