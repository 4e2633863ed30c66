package deps

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
	"github.com/hanzoai/lsp/daemon/internal/uri"
)

// probeTS imports immer's test framework as its tests do.
const probeTS = "import {vi} from \"vitest\"\n\nexport const f = vi.fn()\n"

// definitionIntoVitest: the real TypeScript server, on immer's tree with
// the phase's node_modules in it, answers a definition into vitest as
// an external package.
func definitionIntoVitest(t *testing.T, ws runtime.Workspace) {
	node, dir := tsServer(t)
	initOpts, _ := json.Marshal(map[string]any{
		"tsserver":                          map[string]any{"path": filepath.Join(dir, "node_modules/typescript/lib/tsserver.js"), "useSyntaxServer": "never"},
		"disableAutomaticTypingAcquisition": true,
	})
	spec := runtime.Spec{
		ID: "typescript", Language: "typescript", Extensions: []string{".ts"},
		Executable: node, Args: []string{filepath.Join(dir, "node_modules/typescript-language-server/lib/cli.mjs"), "--stdio"},
		InitializationOptions: initOpts,
		RequestTimeout:        3 * time.Minute,
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv, err := runtime.Start(context.Background(), runtime.Unjailed(log), spec, ws, log)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close(context.Background())
	ctx := context.Background()
	c, _, err := srv.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	u := srv.URI("__tests__/lsp-probe.ts")
	if err := c.DidOpen(ctx, u, "typescript", probeTS); err != nil {
		t.Fatal(err)
	}
	locs, err := c.Definition(ctx, u, position(t, probeTS, "vi.fn"))
	if err != nil || len(locs.Items) == 0 {
		t.Fatalf("definition of vi: %+v, %v", locs, err)
	}
	pol := uri.Policy{Root: ws.Root, Externals: NPMExternals(ws)}
	for _, l := range locs.Items {
		got, err := pol.Map(string(l.URI))
		if err != nil || !got.External || !strings.Contains(got.Module, "vitest") {
			t.Fatalf("definition of vi at %s maps to %+v, %v; want an external vitest package", l.URI, got, err)
		}
		t.Logf("vi is defined in %+v", got)
	}
}

// TestInstallYarnCorpus installs immer's (v1) and redux's (Berry)
// real lockfiles from the npm registry: hundreds of megabytes, so only
// when LSP_TEST_YARN_CORPUS=1.
func TestInstallYarnCorpus(t *testing.T) {
	if os.Getenv("LSP_TEST_YARN_CORPUS") != "1" {
		t.Skip("set LSP_TEST_YARN_CORPUS=1 to install immer's and redux's lockfiles from the npm registry")
	}
	reg := npmReachable(t)
	for _, tc := range []struct {
		repo  string
		files []string
		// on disk afterwards
		want []string
		// the only warnings allowed, by substring
		warn []string
	}{
		{"immerjs__immer", []string{"yarn.lock", "package.json", "tsconfig.json"},
			[]string{"typescript/lib/lib.d.ts", "@types/node/index.d.ts", "vitest/package.json"},
			nil},
		{"reduxjs__redux", []string{"yarn.lock", "package.json", ".yarnrc.yml"},
			[]string{"typescript/lib/lib.d.ts", "@types/node/index.d.ts", "@arethetypeswrong/core/node_modules/typescript/package.json"},
			nil},
	} {
		t.Run(tc.repo, func(t *testing.T) {
			files := corpus(t, tc.repo, tc.files...)
			if tc.repo == "immerjs__immer" {
				files["__tests__/lsp-probe.ts"] = probeTS
			}
			ws := repo(t, files)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			start := time.Now()
			w := fetcher(Config{NPMRegistry: reg, Timeout: 10 * time.Minute}).Fetch(ctx, ws)
			t.Logf("%s: %s, warnings %q", tc.repo, time.Since(start).Round(time.Second), w)
		next:
			for _, s := range w {
				for _, ok := range tc.warn {
					if strings.Contains(s, ok) {
						continue next
					}
				}
				t.Errorf("warning %q", s)
			}
			for _, p := range tc.want {
				if _, err := os.Stat(filepath.Join(runtime.NodeModules(ws), p)); err != nil {
					t.Errorf("%s: %v", p, err)
				}
			}
			t.Logf("%d packages installed", len(NPMExternals(ws)))
			if tc.repo == "immerjs__immer" {
				definitionIntoVitest(t, ws)
			}
		})
	}
}
