//go:build linux

package jail

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hanzoai/lsp/daemon/internal/lsp"
	"github.com/hanzoai/lsp/daemon/internal/runtime"
)

// bash-language-server, jailed, runs ShellCheck only when the entry lists
// the program in read_only: the jail binds nothing its settings merely
// name. With read_only, an unquoted expansion gets ShellCheck's SC2086;
// without it, no ShellCheck finding at all (the program is not there).
func TestJailedBashShellCheck(t *testing.T) {
	bin := os.Getenv("LSP_TEST_BIN")
	if bin == "" {
		bin = filepath.Join(filepath.Dir(filepath.Dir(filepath.Dir(mustGetwd(t)))), ".bin")
	}
	cli := filepath.Join(bin, "bash", "node_modules", "bash-language-server", "out", "cli.js")
	node, err := exec.LookPath("node")
	if err == nil {
		node, err = filepath.EvalSymlinks(node)
	}
	const shellcheck = "/usr/bin/shellcheck"
	if _, serr := os.Stat(cli); serr != nil || err != nil {
		t.Skip("bash-language-server is not installed (make deps; LSP_TEST_BIN names the install directory)")
	}
	if _, err := os.Stat(shellcheck); err != nil {
		t.Skip("shellcheck is not installed (make deps)")
	}
	opts := map[string]any{"shellcheckPath": shellcheck, "shfmt": map[string]any{"path": ""}, "explainshellEndpoint": "", "logLevel": "warning"}
	init, _ := json.Marshal(opts)
	settings, _ := json.Marshal(map[string]any{"bashIde": opts})
	for _, tc := range []struct {
		name     string
		readOnly []string
		want     bool
	}{{"read_only", []string{shellcheck}, true}, {"named only", nil, false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ws := treeWorkspace(t, map[string]string{
				"run.sh": "#!/bin/bash\ngreet() {\n\techo hello $1\n}\ngreet \"$@\"\n",
			})
			srv := start(t, newSpawner(t, Options{}), runtime.Spec{
				ID: "bash", Language: "shellscript", Extensions: []string{".sh"},
				Executable: node, Args: []string{cli, "start"}, ReadOnly: tc.readOnly,
				InitializationOptions: init, Settings: settings,
			}, ws)
			ctx := context.Background()
			if _, err := hoverAt(ctx, srv, ws, "run.sh", "greet", 0); err != nil {
				t.Fatal(err)
			}
			c, _, err := srv.Client(ctx)
			if err != nil {
				t.Fatal(err)
			}
			d, err := c.Diagnostics(ctx, srv.URI("run.sh"))
			if err != nil {
				t.Fatal(err)
			}
			got := slices.ContainsFunc(d.Items, func(x lsp.Diagnostic) bool {
				return strings.Contains(x.Code, "2086") || strings.Contains(x.Message, "SC2086")
			})
			if got != tc.want {
				t.Errorf("diagnostics of run.sh = %+v; want ShellCheck's SC2086: %v", d.Items, tc.want)
			}
		})
	}
}
