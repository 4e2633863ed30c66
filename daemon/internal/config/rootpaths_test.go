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

// TestCheckDaemonRootExternalRoots: the daemon reads files under an
// external root itself, outside the jail, so one inside LSP_DAEMON_ROOT or
// above it is refused, and so is one under nothing the entry's jail binds
// read-only (its read_only, the system libraries, a script argument's
// node_modules); a root under one of those passes.
func TestCheckDaemonRootExternalRoots(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "var", "lib", "lsp-daemon")
	tools := filepath.Join(base, "opt", "tools")
	for _, d := range []string{filepath.Join(root, "trees"), filepath.Join(tools, "include"), filepath.Join(tools, "srv", "node_modules", "pkg")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A link under a bound directory that leads into the root.
	sneaky := filepath.Join(tools, "include", "up")
	if err := os.Symlink(filepath.Join(root, "trees"), sneaky); err != nil {
		t.Fatal(err)
	}
	// A link under a bound directory that leads out of it.
	out := filepath.Join(tools, "include", "out")
	if err := os.Symlink(filepath.Join(tools, "srv"), out); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name     string
		dir      string
		readOnly []any
		args     []any
		want     string // "" passes
	}{
		{"under read_only", filepath.Join(tools, "include"), []any{tools}, nil, ""},
		{"the read_only dir itself", tools, []any{tools}, nil, ""},
		{"system libraries", "/usr/lib/gcc", nil, nil, ""},
		{"node_modules of a script", filepath.Join(tools, "srv", "node_modules", "pkg"), nil, []any{filepath.Join(tools, "srv", "node_modules", "pkg", "cli.js")}, ""},
		{"bound by nothing", filepath.Join(tools, "include"), nil, nil, "external_roots[0].dir"},
		{"beside the executable", "/opt/tools", nil, nil, "external_roots[0].dir"},
		{"inside the root", filepath.Join(root, "trees"), []any{tools}, nil, "LSP_DAEMON_ROOT"},
		{"the root", root, nil, nil, "LSP_DAEMON_ROOT"},
		{"above the root", base, []any{base + "/opt"}, nil, "LSP_DAEMON_ROOT"},
		{"through a link into the root", sneaky, []any{tools}, nil, "LSP_DAEMON_ROOT"},
		{"through a link out of read_only", out, []any{filepath.Join(tools, "include")}, nil, "external_roots[0].dir"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := server()
			s["external_roots"] = []any{map[string]any{"dir": c.dir, "module": "x@1"}}
			if c.readOnly != nil {
				s["read_only"] = c.readOnly
			}
			if c.args != nil {
				s["arguments"] = c.args
			}
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
}
