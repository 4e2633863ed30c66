package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckDaemonRoot: an argument (or tsserver.path) naming a path inside
// LSP_DAEMON_ROOT, the root itself, or a directory above it is refused at
// load, naming the server and the argument; unrelated paths pass.
func TestCheckDaemonRoot(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "var", "lib", "lsp-daemon")
	if err := os.MkdirAll(filepath.Join(root, "trees"), 0o700); err != nil {
		t.Fatal(err)
	}
	// A link to the root names it too.
	link := filepath.Join(base, "alias")
	if err := os.Symlink(root, link); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []any
		want string // "" passes
	}{
		{"plain", []any{"serve", "-rpc.trace"}, ""},
		{"sibling with a common prefix", []any{root + "-tools/gopls.log"}, ""},
		{"unrelated absolute", []any{"/opt/tools/data"}, ""},
		{"the root", []any{"serve", root}, `servers[0] ("gopls").arguments[1]`},
		{"inside the root", []any{filepath.Join(root, "trees")}, `servers[0] ("gopls").arguments[0]`},
		{"the root's parent", []any{filepath.Dir(root)}, "arguments[0]"},
		{"/", []any{"/"}, "arguments[0]"},
		{"after =", []any{"-logfile=" + filepath.Join(root, "x.log")}, "arguments[0]"},
		{"unclean", []any{root + "/../lsp-daemon/trees"}, "arguments[0]"},
		{"through a link", []any{filepath.Join(link, "trees")}, "arguments[0]"},
		{"node_modules inside", []any{filepath.Join(root, "node_modules/x/cli.js")}, "arguments[0]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := server()
			s["arguments"] = c.args
			f, err := Parse(mustJSON(t, doc(s)))
			if err != nil {
				t.Fatal(err)
			}
			err = f.CheckDaemonRoot(root)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("error %v, want one naming %s", err, c.want)
			}
		})
	}
	t.Run("tsserver.path", func(t *testing.T) {
		s := tsServer()
		s["initialization_options"] = map[string]any{
			"tsserver":                          map[string]any{"path": filepath.Join(root, "ts/node_modules/typescript/lib/tsserver.js"), "useSyntaxServer": "never"},
			"disableAutomaticTypingAcquisition": true,
		}
		f, err := Parse(mustJSON(t, doc(s)))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.CheckDaemonRoot(root); err == nil || !strings.Contains(err.Error(), "tsserver.path") {
			t.Fatalf("error %v, want one naming tsserver.path", err)
		}
		ok, _ := Parse(mustJSON(t, doc(tsServer())))
		if err := ok.CheckDaemonRoot(root); err != nil {
			t.Fatal(err)
		}
	})
}
