package deps

import (
	"context"
	"encoding/json"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
)

const integrity = "sha512-" + "z4PhNX7vuL3xVChQ1m2AB9Yg5AULVxXcg/SpIdNs6c5H0NE8XYXysP+DGNKHfuwvY7kxvUdBeoGlODJ6+SfaPg=="

func lock(pkgs map[string]any) string {
	b, _ := json.Marshal(map[string]any{"name": "app", "lockfileVersion": 3, "packages": pkgs})
	return string(b)
}

func TestValidateLockfile(t *testing.T) {
	reg, _ := url.Parse("https://npm.example/registry")
	good := map[string]any{"version": "1.0.0", "resolved": "https://npm.example/registry/a/-/a-1.0.0.tgz", "integrity": integrity}
	with := func(k string, v any) map[string]any {
		m := map[string]any{}
		for a, b := range good {
			m[a] = b
		}
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	cases := []struct {
		name string
		data string
		want string // "" valid
		n    int
	}{
		{"valid", lock(map[string]any{"": map[string]any{"dependencies": map[string]string{"a": "^1.0.0"}}, "node_modules/a": good, "node_modules/@s/b": good, "node_modules/a/node_modules/c": good, "node_modules/a/node_modules/d": map[string]any{"version": "1.0.0", "inBundle": true}}), "", 3},
		{"lockfile version 1", `{"lockfileVersion":1,"dependencies":{}}`, "lockfileVersion 1", 0},
		{"not JSON", `{`, "not JSON", 0},
		{"resolved outside the registry", lock(map[string]any{"node_modules/a": with("resolved", "https://evil.example/a.tgz")}), "resolves outside the registry", 0},
		{"resolved by prefix trick", lock(map[string]any{"node_modules/a": with("resolved", "https://npm.example/registry-evil/a.tgz")}), "resolves outside the registry", 0},
		{"resolved with dot segments", lock(map[string]any{"node_modules/a": with("resolved", "https://npm.example/registry/../x/a.tgz")}), "resolves outside the registry", 0},
		{"resolved with credentials", lock(map[string]any{"node_modules/a": with("resolved", "https://u:p@npm.example/registry/a.tgz")}), "resolves outside the registry", 0},
		{"resolved over http", lock(map[string]any{"node_modules/a": with("resolved", "http://npm.example/registry/a.tgz")}), "resolves outside the registry", 0},
		{"git resolved", lock(map[string]any{"node_modules/a": with("resolved", "git+ssh://git@github.com/a/a.git#abc")}), "outside the registry", 0},
		{"git version", lock(map[string]any{"node_modules/a": with("version", "git+https://github.com/a/a.git")}), "git version", 0},
		{"git dependency", lock(map[string]any{"": map[string]any{"dependencies": map[string]string{"a": "github:a/a"}}}), "git dependency", 0},
		{"shorthand dependency", lock(map[string]any{"": map[string]any{"devDependencies": map[string]string{"a": "a/a#main"}}}), "git dependency", 0},
		{"file dependency", lock(map[string]any{"": map[string]any{"dependencies": map[string]string{"a": "file:../a"}}}), "file dependency", 0},
		{"tarball URL dependency", lock(map[string]any{"": map[string]any{"dependencies": map[string]string{"a": "https://x.example/a.tgz"}}}), "URL dependency", 0},
		{"link", lock(map[string]any{"node_modules/a": map[string]any{"resolved": "../a", "link": true}}), "is a link", 0},
		{"missing integrity", lock(map[string]any{"node_modules/a": with("integrity", nil)}), "no sha512 integrity", 0},
		{"sha1 integrity", lock(map[string]any{"node_modules/a": with("integrity", "sha1-2jmj7l5rSw0yVb/vlWAYkK/YBwk=")}), "no sha512 integrity", 0},
		{"missing resolved", lock(map[string]any{"node_modules/a": with("resolved", nil)}), "no resolved URL", 0},
		{"path outside node_modules", lock(map[string]any{"../x": good}), "not under node_modules", 0},
		{"dotted package path", lock(map[string]any{"node_modules/..": good}), "not under node_modules", 0},
		{"npm alias", lock(map[string]any{"": map[string]any{"dependencies": map[string]string{"a": "npm:b@^1.0.0"}}, "node_modules/a": good}), "", 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n, err := ValidateLockfile([]byte(c.data), reg)
			if c.want == "" {
				if err != nil || n != c.n {
					t.Fatalf("got %d, %v; want %d packages", n, err, c.n)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want %q", err, c.want)
			}
		})
	}
}

// TestHostileLockfileNoRequest: a refused lockfile reaches no registry
// and installs nothing.
func TestHostileLockfileNoRequest(t *testing.T) {
	dir, _ := mirrorDir(t)
	reg, n := countingMirror(t, dir)
	for _, data := range []string{
		lock(map[string]any{"node_modules/a": map[string]any{"version": "1.0.0", "resolved": "https://evil.example/a.tgz", "integrity": integrity}}),
		lock(map[string]any{"node_modules/a": map[string]any{"version": "1.0.0", "resolved": "git+ssh://git@evil.example/a.git#abc", "integrity": integrity}}),
		lock(map[string]any{"": map[string]any{"dependencies": map[string]string{"a": "git+ssh://git@evil.example/a.git"}}, "node_modules/b": map[string]any{"version": "1.0.0", "resolved": reg.String() + "/b/-/b-1.0.0.tgz", "integrity": integrity}}),
		lock(map[string]any{"node_modules/a": map[string]any{"version": "1.0.0", "resolved": reg.String() + "/a/-/a-1.0.0.tgz"}}),
	} {
		ws := repo(t, map[string]string{"package-lock.json": data})
		w := fetcher(Config{NPMRegistry: reg}).Fetch(context.Background(), ws)
		if len(w) != 1 || !strings.Contains(w[0], "package-lock.json refused") {
			t.Fatalf("warnings %q", w)
		}
		if _, err := os.Lstat(runtime.NodeModules(ws)); err == nil {
			t.Fatal("a refused lockfile installed packages")
		}
	}
	if n.Load() != 0 {
		t.Fatalf("%d requests reached the registry", n.Load())
	}
}
