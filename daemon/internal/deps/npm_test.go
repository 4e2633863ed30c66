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
		{"link climbing out", lock(map[string]any{"node_modules/a": map[string]any{"resolved": "../a", "link": true}}), "links outside the repository", 0},
		{"link to an absolute path", lock(map[string]any{"node_modules/a": map[string]any{"resolved": "/etc", "link": true}}), "links outside the repository", 0},
		{"link through dot segments", lock(map[string]any{"node_modules/a": map[string]any{"resolved": "packages/../../x", "link": true}}), "links outside the repository", 0},
		{"link into node_modules", lock(map[string]any{"node_modules/a": map[string]any{"resolved": "node_modules/b", "link": true}}), "links outside the repository", 0},
		{"link to a URL", lock(map[string]any{"node_modules/a": map[string]any{"resolved": "https://x.example/a", "link": true}}), "links outside the repository", 0},
		{"npm workspaces", lock(map[string]any{
			"":                            map[string]any{"workspaces": []string{"packages/*"}},
			"node_modules/a":              good,
			"node_modules/foo":            map[string]any{"resolved": "packages/foo", "link": true},
			"node_modules/@s/bar":         map[string]any{"resolved": "packages/bar", "link": true},
			"packages/foo":                map[string]any{"name": "foo", "version": "0.0.1", "dependencies": map[string]string{"a": "^2.0.0", "@s/bar": "*"}},
			"packages/foo/node_modules/a": with("version", "2.0.0"),
			"packages/bar":                map[string]any{"name": "@s/bar", "version": "0.0.1"},
		}), "", 4},
		{"in-repo file: dependency, linked", lock(map[string]any{
			"":                 map[string]any{"dependencies": map[string]string{"foo": "file:packages/foo", "bar": "./packages/bar"}},
			"node_modules/foo": map[string]any{"resolved": "packages/foo", "link": true},
			"node_modules/bar": map[string]any{"resolved": "packages/bar", "link": true},
			"packages/foo":     map[string]any{"name": "foo", "dependencies": map[string]string{"bar": "file:../bar"}},
			"packages/bar":     map[string]any{"name": "bar"},
		}), "", 2},
		{"file: dependency climbing out", lock(map[string]any{"": map[string]any{"dependencies": map[string]string{"a": "file:../a"}}}), "file dependency", 0},
		{"workspace's file: dependency climbing out", lock(map[string]any{
			"node_modules/foo": map[string]any{"resolved": "packages/foo", "link": true},
			"packages/foo":     map[string]any{"dependencies": map[string]string{"x": "file:../../../x"}},
		}), "file dependency", 0},
		{"registry package's file: dependency", lock(map[string]any{"node_modules/a": with("dependencies", map[string]string{"x": "file:x"})}), "file dependency", 0},
		{"file: tarball in the repository", lock(map[string]any{
			"":               map[string]any{"dependencies": map[string]string{"a": "file:vendor/a.tgz"}},
			"node_modules/a": map[string]any{"version": "1.0.0", "resolved": "file:vendor/a.tgz", "integrity": integrity},
		}), "resolves outside the registry", 0},
		{"in-repo key of no workspace", lock(map[string]any{"node_modules/foo": map[string]any{"resolved": "packages/foo", "link": true}, "other/node_modules/a": good}), "not under node_modules", 0},
		{"workspace package from outside the registry", lock(map[string]any{"node_modules/foo": map[string]any{"resolved": "packages/foo", "link": true}, "packages/foo/node_modules/a": with("resolved", "https://evil.example/a.tgz")}), "resolves outside the registry", 0},
		// Install leaves these out, with a warning (TestInstallSHA1Only).
		{"missing integrity", lock(map[string]any{"node_modules/a": with("integrity", nil)}), "", 1},
		{"sha1 integrity", lock(map[string]any{"node_modules/a": with("integrity", "sha1-2jmj7l5rSw0yVb/vlWAYkK/YBwk=")}), "", 1},
		{"missing resolved", lock(map[string]any{"node_modules/a": with("resolved", nil)}), "no resolved URL", 0},
		{"path outside node_modules", lock(map[string]any{"../x": good}), "not under node_modules", 0},
		{"dotted package path", lock(map[string]any{"node_modules/..": good}), "not under node_modules", 0},
		{"tilde range (jest's sprintf-js)", lock(map[string]any{"": map[string]any{"dependencies": map[string]string{"a": "~1.0.2"}}, "node_modules/a": with("dependencies", map[string]string{"sprintf-js": "~1.0.2"})}), "", 1},
		{"home path dependency", lock(map[string]any{"": map[string]any{"dependencies": map[string]string{"a": "~/a"}}}), "file dependency", 0},
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
		if len(w) != 1 || !strings.Contains(w[0], "package-lock.json refused") && !strings.Contains(w[0], "a@1.0.0: no sha512 or sha1 integrity") {
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

// TestSpecKind: dependency specs from real lockfiles (the corpus's
// package-lock.json and pnpm-lock.yaml files), classified by npm's
// grammar. "" is the registry's.
func TestSpecKind(t *testing.T) {
	for _, c := range []struct{ spec, want string }{
		// Ranges and versions, as jest's, babel's, eslint's and
		// typescript-eslint's trees carry them.
		{"~1.0.2", ""},  // sprintf-js, under argparse: the original refusal
		{"~1.1.4", ""},  // color-name
		{"~6.20.0", ""}, // undici-types under @types/node
		{"~0.10.x", ""}, // string_decoder
		{"~1.0.1 || ^2.0.0 || ^3.0.0", ""},
		{"^1.15.6", ""},
		{"^1.0.0-beta.2", ""},
		{"^7.0.0-0", ""},
		{"^7.4.0 || ^8.0.0-0 <8.0.0", ""},
		{"^1.20.0||^2.0.0||^3.0.0||^4.0.0", ""},
		{"2 >=2.2.1 || 3.x || 4 || 5 || 7", ""},
		{"1.1.x", ""},
		{"3", ""},
		{"*", ""},
		{"", ""},
		{">=4", ""},
		{">= 2.1.2 < 3.0.0", ""},
		{">=0.5 0", ""},
		{"=0.133.0", ""},
		{"1.2.3 - 2.3.4", ""},
		{"7.21.0-placeholder-for-preset-env.2", ""},
		{"0.1.6-no-external-plugins", ""},
		{"4.0.0(redux@5.0.1)", ""}, // a pnpm version with its peers
		{"latest", ""},
		{"next", ""},
		{"npm:string-width@^4.2.0", ""}, // @isaacs/cliui's aliases
		{"npm:@scope/name@~1.0.0", ""},
		{"npm:wrap-ansi@^7.0.0", ""},
		// Paths.
		{"~/x", "file"},
		{"file:../protocol", "file"},
		{"file:", "file"},
		{"./local", "file"},
		{"../sibling", "file"},
		{"/abs/pkg", "file"},
		{"C:\\pkg", "file"},
		{"./pkg.tgz", "file"},
		// Git.
		{"git+ssh://git@github.com/a/b.git#abc", "git"},
		{"git://github.com/a/b.git", "git"},
		{"git@github.com:a/b.git", "git"},
		{"github:a/b", "git"},
		{"gitlab:a/b#v1", "git"},
		{"a/b", "git"},
		{"a/b#main", "git"},
		{"ssh://git@host/a/b.git", "git"},
		{"npm:x@github:a/b", "git"},
		// Links and URLs.
		{"link:../a", "link"},
		{"workspace:*", "link"},
		{"workspace:^1.0.0", "link"},
		{"portal:../a", "link"},
		{"https://x.example/a.tgz", "URL"},
		{"http://x.example/a.tgz", "URL"},
	} {
		if got := specKind(c.spec); got != c.want {
			t.Errorf("specKind(%q) = %q, want %q", c.spec, got, c.want)
		}
	}
}

// TestCorpusPackageLocks: the corpus's real package-lock.json files
// validate whole: axios's v2 lockfile with its jest tree (sprintf-js
// ~1.0.2 and the like; its 712 sha1-only packages are install's to leave
// out), the v3 lockfiles of zustand and vscode-languageserver-node.
func TestCorpusPackageLocks(t *testing.T) {
	reg, _ := url.Parse("https://registry.npmjs.org")
	for _, c := range []struct {
		repo, file, want string
	}{
		{"axios__axios", "package-lock.json", ""},
		{"pmndrs__zustand", "package-lock.json", ""},
		{"microsoft__vscode-languageserver-node", "package-lock.json", ""},
		{"microsoft__vscode-languageserver-node", "client/package-lock.json", ""},
	} {
		t.Run(c.repo+"/"+c.file, func(t *testing.T) {
			data := corpusFile(t, c.repo, c.file)
			n, err := ValidateLockfile(data, reg)
			if c.want != "" {
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("%d, %v; want %q", n, err, c.want)
				}
				return
			}
			if err != nil || n == 0 {
				t.Fatalf("%d packages, %v", n, err)
			}
		})
	}
}

// TestNestedLockfilesWarned: a lockfile below the root is a project whose
// packages are not installed (only the root's lockfile is read): each one
// is named, but not a workspace of the root's lockfile, which the root's
// installs.
func TestNestedLockfilesWarned(t *testing.T) {
	dir, _ := mirrorDir(t)
	reg, _ := countingMirror(t, dir)
	root := lock(map[string]any{
		"":               map[string]any{"name": "mono", "workspaces": []string{"packages/*"}},
		"node_modules/a": map[string]any{"resolved": "packages/a", "link": true},
		"packages/a":     map[string]any{"name": "a", "version": "1.0.0"},
	})
	nested := lock(map[string]any{})
	ws := repo(t, map[string]string{
		"package-lock.json":            root,
		"package.json":                 `{"name":"mono","workspaces":["packages/*"]}`,
		"packages/a/package.json":      `{"name":"a","version":"1.0.0"}`,
		"packages/a/package-lock.json": nested,
		"web/package.json":             `{"name":"web","dependencies":{"react":"^19.0.0"}}`,
		"web/package-lock.json":        nested,
		"docs/site/yarn.lock":          "",
		"web/node_modules/x/yarn.lock": "",
	})
	w := strings.Join(fetcher(Config{NPMRegistry: reg}).Fetch(context.Background(), ws), "\n")
	for _, want := range []string{"web/package-lock.json: a project below the repository's root", "docs/site/yarn.lock: a project below"} {
		if !strings.Contains(w, want) {
			t.Errorf("warnings %q; want one with %q", w, want)
		}
	}
	for _, not := range []string{"packages/a/package-lock.json", "node_modules/x"} {
		if strings.Contains(w, not) {
			t.Errorf("warnings %q name %s", w, not)
		}
	}
}
