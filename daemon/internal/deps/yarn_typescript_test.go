package deps

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
	"github.com/hanzoai/lsp/daemon/internal/uri"
)

// TestTypeScriptResolvesYarn: the real typescript-language-server
// resolves a Yarn project's imports, v1 and Berry, into what the phase
// installed from the yarn.lock, named by package.
func TestTypeScriptResolvesYarn(t *testing.T) {
	node, dir := tsServer(t)
	r := newRegistry(t)
	greet := berryAdd(t, r, "greet", "1.0.0", tgz(t,
		tarEntry{name: "package/package.json", body: `{"name":"greet","version":"1.0.0","types":"index.d.ts"}`},
		tarEntry{name: "package/index.d.ts", body: greetDTS},
	))
	shout := berryAdd(t, r, "@types/shout", "2.0.0", tgz(t,
		tarEntry{name: "shout/package.json", body: `{"name":"@types/shout","version":"2.0.0","types":"index.d.ts"}`},
		tarEntry{name: "shout/index.d.ts", body: "/** Shouts. */\nexport declare function shout(s: string): string;\n"},
	))
	pkg := `{"name":"app","devDependencies":{"greet":"^1.0.0","@types/shout":"^2.0.0"}}`
	v1 := "# yarn lockfile v1\n\n\"@types/shout@^2.0.0\":\n  version \"2.0.0\"\n  resolved \"https://registry.yarnpkg.com/@types/shout/-/shout-2.0.0.tgz#00\"\n  integrity " + shout +
		"\n\ngreet@^1.0.0:\n  version \"1.0.0\"\n  resolved \"https://registry.yarnpkg.com/greet/-/greet-1.0.0.tgz#00\"\n  integrity " + greet + "\n"
	berry := "__metadata:\n  version: 8\n  cacheKey: 10\n\n\"@types/shout@npm:^2.0.0\":\n  version: 2.0.0\n  resolution: \"@types/shout@npm:2.0.0\"\n\n" +
		"\"app@workspace:.\":\n  version: 0.0.0-use.local\n  resolution: \"app@workspace:.\"\n  dependencies:\n    \"@types/shout\": \"npm:^2.0.0\"\n    greet: \"npm:^1.0.0\"\n\n" +
		"\"greet@npm:^1.0.0\":\n  version: 1.0.0\n  resolution: \"greet@npm:1.0.0\"\n"
	for _, tc := range []struct{ name, lock string }{{"v1", v1}, {"berry", berry}} {
		t.Run(tc.name, func(t *testing.T) {
			ws := repo(t, map[string]string{"yarn.lock": tc.lock, "package.json": pkg, ".yarnrc.yml": "nodeLinker: node-modules\n", "src/main.ts": mainTS})
			if w := fetcher(Config{NPMRegistry: r.url}).Fetch(context.Background(), ws); len(w) != 0 {
				t.Fatalf("warnings %q", w)
			}
			initOpts, _ := json.Marshal(map[string]any{
				"tsserver":                          map[string]any{"path": filepath.Join(dir, "node_modules/typescript/lib/tsserver.js"), "useSyntaxServer": "never"},
				"disableAutomaticTypingAcquisition": true,
			})
			spec := runtime.Spec{
				ID: "typescript", Language: "typescript", Extensions: []string{".ts"},
				Executable: node, Args: []string{filepath.Join(dir, "node_modules/typescript-language-server/lib/cli.mjs"), "--stdio"},
				InitializationOptions: initOpts,
				RequestTimeout:        2 * time.Minute,
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
			srv, err := runtime.Start(context.Background(), runtime.Unjailed(log), spec, ws, log)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = srv.Close(context.Background()) })
			ctx := context.Background()
			c, _, err := srv.Client(ctx)
			if err != nil {
				t.Fatal(err)
			}
			u := srv.URI("src/main.ts")
			if err := c.DidOpen(ctx, u, "typescript", mainTS); err != nil {
				t.Fatal(err)
			}
			pol := uri.Policy{Root: ws.Root, Externals: NPMExternals(ws)}
			for needle, want := range map[string]uri.Location{
				`greet("x")`: {Path: "index.d.ts", External: true, Module: "greet@1.0.0"},
				`shout("y")`: {Path: "index.d.ts", External: true, Module: "@types/shout@2.0.0"},
			} {
				locs, err := c.Definition(ctx, u, position(t, mainTS, needle))
				if err != nil || len(locs.Items) == 0 {
					t.Fatalf("definition of %s: %+v, %v", needle, locs, err)
				}
				for _, l := range locs.Items {
					if got, err := pol.Map(string(l.URI)); err != nil || got != want {
						t.Fatalf("definition of %s at %s maps to %+v, %v; want %+v", needle, l.URI, got, err, want)
					}
				}
			}
		})
	}
}
