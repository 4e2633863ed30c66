//go:build linux

package jail

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hanzoai/lsp/daemon/internal/lsp"
	"github.com/hanzoai/lsp/daemon/internal/runtime"
)

// bash-language-server, jailed, runs ShellCheck only when the entry lists
// the program in read_only: the jail binds nothing its settings merely
// name. With read_only, an unquoted expansion gets ShellCheck's SC2086;
// without it, no ShellCheck finding at all (the program is not there).
func TestJailedBashShellCheck(t *testing.T) {
	node, cli, shellcheck := bashServer(t)
	opts := map[string]any{"shellcheckPath": shellcheck, "shfmt": map[string]any{"path": ""}, "explainshellEndpoint": "", "logLevel": "info"}
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

// bashServer is the node, bash-language-server's cli.js and the
// ShellCheck that make deps installed; the test is skipped without them.
func bashServer(t *testing.T) (node, cli, shellcheck string) {
	t.Helper()
	bin := os.Getenv("LSP_TEST_BIN")
	if bin == "" {
		bin = filepath.Join(filepath.Dir(filepath.Dir(filepath.Dir(mustGetwd(t)))), ".bin")
	}
	cli = filepath.Join(bin, "bash", "node_modules", "bash-language-server", "out", "cli.js")
	node, err := exec.LookPath("node")
	if err == nil {
		node, err = filepath.EvalSymlinks(node)
	}
	shellcheck = "/usr/bin/shellcheck"
	if _, serr := os.Stat(cli); serr != nil || err != nil {
		t.Skip("bash-language-server is not installed (make deps; LSP_TEST_BIN names the install directory)")
	}
	if _, err := os.Stat(shellcheck); err != nil {
		t.Skip("shellcheck is not installed (make deps)")
	}
	return node, cli, shellcheck
}

// bash-language-server, jailed, reads the workspace's scripts in the
// background after it starts, and its references come from what it has
// read: asked at once, references to a function of lib.sh miss most of
// the scripts that call it. The daemon counts the server as indexing from
// its start until the log line that ends the analysis (readiness's
// shellscript signs), so a query that waits for that (WaitIndexed) finds
// every caller — and one asked before it would be marked partial.
func TestJailedBashBackgroundAnalysis(t *testing.T) {
	node, cli, _ := bashServer(t)
	const callers = 400
	files := map[string]string{"lib.sh": "#!/bin/bash\ngreet() {\n\techo \"hello $1\"\n}\n"}
	for i := range callers {
		files[fmt.Sprintf("bin/tool%03d.sh", i)] = "#!/bin/bash\nsource ../lib.sh\ngreet " + strconv.Itoa(i) + "\n"
	}
	ws := treeWorkspace(t, files)
	// The reviewed entry's options (deploy/images/servers.json.in), less
	// ShellCheck: this test is about the analysis.
	opts := map[string]any{"shfmt": map[string]any{"path": ""}, "explainshellEndpoint": "", "backgroundAnalysisMaxFiles": 500, "logLevel": "info"}
	init, _ := json.Marshal(opts)
	settings, _ := json.Marshal(map[string]any{"bashIde": opts})
	srv := start(t, newSpawner(t, Options{}), runtime.Spec{
		ID: "bash", Language: "shellscript", Extensions: []string{".sh"},
		Executable: node, Args: []string{cli, "start"},
		InitializationOptions: init, Settings: settings,
	}, ws)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, _, err := srv.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if title, ok := c.Indexing(); !ok {
		t.Fatal("the server does not count as indexing at its start")
	} else if title != "background analysis" {
		t.Errorf("indexing title %q", title)
	}
	if err := c.WaitIndexed(ctx, time.Minute); err != nil {
		t.Fatalf("the analysis never ended in the log: %v; log: %+v", err, c.Logs())
	}
	lib, err := os.ReadFile(filepath.Join(ws.Root, "lib.sh"))
	if err != nil {
		t.Fatal(err)
	}
	var refs lsp.List[lsp.Location]
	err = srv.Do(ctx, func(ctx context.Context, c *lsp.Client, _ uint64) error {
		if err := c.DidOpen(ctx, srv.URI("lib.sh"), "shellscript", string(lib)); err != nil {
			return err
		}
		refs, err = c.References(ctx, srv.URI("lib.sh"), lsp.Position{Line: 1, Character: 1}, true)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[lsp.DocumentURI]bool{}
	for _, l := range refs.Items {
		seen[l.URI] = true
	}
	if len(seen) != callers+1 {
		t.Errorf("references to greet in %d files once the analysis ended; want lib.sh and its %d callers", len(seen), callers)
	}
	if p, _ := c.LoadProblems(); len(p) != 0 {
		t.Errorf("load problems %+v", p)
	}
}
