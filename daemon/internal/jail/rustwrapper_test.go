//go:build linux

package jail

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
)

// wrapperSource is a program a repository could ship with its exec bit: it
// leaves a marker in the server's home and then runs rustc, so cargo's
// probes still succeed and nothing else tells that it ran.
const wrapperSource = `package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

func main() {
	for _, d := range []string{os.Getenv("HOME"), os.Getenv("TMPDIR"), os.Getenv("CARGO_HOME")} {
		if d != "" {
			_ = os.WriteFile(filepath.Join(d, "tree-wrapper-ran"), []byte(strings.Join(os.Args, " ")), 0o644)
		}
	}
	args := os.Args[1:]
	if len(args) == 0 || !strings.HasSuffix(args[0], "rustc") {
		args = append([]string{"/usr/bin/rustc"}, args...)
	}
	_ = syscall.Exec(args[0], args, os.Environ())
	os.Exit(101)
}
`

// reviewedRustEntry is the rust-analyzer entry of the image's reviewed
// template, its sysroot at the dev install (LSP_TEST_BIN).
func reviewedRustEntry(t *testing.T, bin string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(filepath.Dir(filepath.Dir(filepath.Dir(mustGetwd(t)))), "deploy", "images", "servers.json.in"))
	if err != nil {
		t.Fatal(err)
	}
	s := regexp.MustCompile(`"@[^"@]*@"`).ReplaceAllString(string(raw), `"x"`)
	s = strings.ReplaceAll(s, "/opt/lsp/rust-sysroot", filepath.Join(bin, "rust-sysroot"))
	var doc struct {
		Servers []map[string]any `json:"servers"`
	}
	if err := json.Unmarshal([]byte(s), &doc); err != nil {
		t.Fatal(err)
	}
	for _, e := range doc.Servers {
		if e["id"] == "rust-analyzer" {
			return e
		}
	}
	t.Fatal("no rust-analyzer entry in the template")
	return nil
}

// preloadSource leaves the marker from a constructor, in any program that
// loads it.
const preloadSource = `#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void mark(void) {
	const char *h = getenv("HOME");
	char b[4096];
	FILE *f;
	if (!h) return;
	snprintf(b, sizeof b, "%s/tree-wrapper-ran", h);
	f = fopen(b, "w");
	if (f) fclose(f);
}
`

// The resets of cargo's program settings the reviewed entry makes.
var cargoResets = []string{"RUSTC_WRAPPER", "RUSTC_WORKSPACE_WRAPPER", "CARGO_BUILD_RUSTC_WRAPPER", "CARGO_BUILD_RUSTC_WORKSPACE_WRAPPER", "CARGO_BUILD_RUSTC", "RUSTC"}

// rust-analyzer, jailed with the reviewed entry, never runs a program the
// repository names in its .cargo/config.toml (build.rustc-wrapper,
// build.rustc-workspace-wrapper, build.rustc, a target runner, an [env]
// LD_PRELOAD of a tree file) or in a rust-analyzer.toml (build scripts and
// proc macros back on, override commands): the tree's wrapper or preload
// would leave a marker in the home. The jail shows the tree's cargo
// configs empty; a cargo config the jail does not mask (CARGO_HOME's)
// naming the wrapper is overridden by the entry's resets. Without the
// resets the wrapper runs through that config, so the marker is a real
// signal.
func TestJailedRustAnalyzerRunsNoTreeProgram(t *testing.T) {
	bin := os.Getenv("LSP_TEST_BIN")
	if bin == "" {
		bin = filepath.Join(filepath.Dir(filepath.Dir(filepath.Dir(mustGetwd(t)))), ".bin")
	}
	for _, p := range []string{"/usr/bin/rust-analyzer", "/usr/bin/cargo", "/usr/bin/rustc", filepath.Join(bin, "rust-sysroot", "library")} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("%s is not installed (make native-servers)", p)
		}
	}
	src := filepath.Join(t.TempDir(), "w")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(wrapperSource), 0o644); err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-o", "w", "main.go")
	build.Dir = src
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GO111MODULE=off", "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the wrapper: %v\n%s", err, out)
	}
	wrapper, err := os.ReadFile(filepath.Join(src, "w"))
	if err != nil {
		t.Fatal(err)
	}
	// A shared object whose constructor leaves the same marker, for the
	// tree's [env] LD_PRELOAD (force: it reaches every rustc cargo runs).
	var so []byte
	if cc, err := exec.LookPath("gcc"); err == nil {
		csrc := filepath.Join(src, "p.c")
		if err := os.WriteFile(csrc, []byte(preloadSource), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(cc, "-shared", "-fPIC", "-o", filepath.Join(src, "p.so"), csrc).CombinedOutput(); err != nil {
			t.Fatalf("building the preload: %v\n%s", err, out)
		}
		if so, err = os.ReadFile(filepath.Join(src, "p.so")); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		"Cargo.toml": "[package]\nname = \"p\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n",
		"build.rs":   "fn main() {}\n",
		"src/lib.rs": "/// Twice doubles n.\npub fn twice(n: u32) -> u32 {\n    n * 2\n}\n\npub fn four() -> u32 {\n    twice(2)\n}\n",
		".cargo/config.toml": "[build]\nrustc-wrapper = \"tools/w\"\nrustc-workspace-wrapper = \"tools/w\"\nrustc = \"tools/w\"\n\n" +
			"[env]\nLD_PRELOAD = { value = \"tools/p.so\", force = true, relative = true }\n\n[target.x86_64-unknown-linux-gnu]\nrunner = \"tools/w\"\n\n[alias]\nmetadata = \"run --\"\nrustc = \"run --\"\n",
		"rust-analyzer.toml": "[cargo.buildScripts]\nenable = true\noverrideCommand = [\"tools/w\"]\n\n[procMacro]\nenable = true\n\n" +
			"[check]\ncommand = \"clippy\"\noverrideCommand = [\"tools/w\"]\n\n[checkOnSave]\nenable = true\n",
		"tools/w": string(wrapper),
		// A member's own config, in the older file name.
		"member/.cargo/config": "[build]\nrustc-wrapper = \"../tools/w\"\n",
	}
	if so != nil {
		files["tools/p.so"] = string(so)
	}
	for _, tc := range []struct {
		name   string
		resets bool
	}{{"reviewed entry", true}, {"without the resets", false}} {
		t.Run(tc.name, func(t *testing.T) {
			e := reviewedRustEntry(t, bin)
			init, _ := json.Marshal(e["initialization_options"])
			settings, _ := json.Marshal(e["settings"])
			var env []string
			for _, v := range e["env"].([]any) {
				env = append(env, v.(string))
			}
			var ro []string
			for _, v := range e["read_only"].([]any) {
				ro = append(ro, v.(string))
			}
			if tc.resets {
				for _, name := range cargoResets {
					if !slices.ContainsFunc(env, func(v string) bool { return strings.HasPrefix(v, name+"=") }) {
						t.Errorf("the entry's env does not set %s", name)
					}
					for _, raw := range []string{string(init), string(settings)} {
						if !strings.Contains(raw, `"`+name+`":`) {
							t.Errorf("the entry's cargo.extraEnv does not set %s", name)
						}
					}
				}
			} else {
				env = slices.DeleteFunc(env, func(v string) bool {
					n, _, _ := strings.Cut(v, "=")
					return slices.Contains(cargoResets, n) && n != "RUSTC"
				})
				for _, name := range cargoResets {
					if name == "RUSTC" {
						continue
					}
					init = regexp.MustCompile(`"`+name+`":"[^"]*",?`).ReplaceAll(init, nil)
					settings = regexp.MustCompile(`"`+name+`":"[^"]*",?`).ReplaceAll(settings, nil)
				}
				init = []byte(strings.ReplaceAll(string(init), ",}", "}"))
				settings = []byte(strings.ReplaceAll(string(settings), ",}", "}"))
			}
			ws := treeWorkspace(t, files)
			if err := os.Chmod(filepath.Join(ws.Root, "tools", "w"), 0o555); err != nil {
				t.Fatal(err)
			}
			// The home's cargo config (CARGO_HOME) names the tree's
			// wrapper too: the tree's own configs are masked in the jail,
			// this one only the entry's resets override.
			if err := os.MkdirAll(runtime.CargoHome(ws), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(runtime.CargoHome(ws), "config.toml"), []byte("[build]\nrustc-wrapper = \""+filepath.Join(ws.Root, "tools", "w")+"\"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			srv := start(t, newSpawner(t, Options{}), runtime.Spec{
				ID: "rust-analyzer", Language: "rust", Extensions: []string{".rs"},
				Executable: "/usr/bin/rust-analyzer", Env: env, ReadOnly: ro,
				InitializationOptions: init, Settings: settings,
			}, ws)
			ran := func() bool {
				found := false
				_ = filepath.WalkDir(ws.Home, func(p string, d fs.DirEntry, err error) error {
					if err == nil && d.Name() == "tree-wrapper-ran" {
						found = true
					}
					return nil
				})
				return found
			}
			ctx := context.Background()
			// The workspace is loaded (cargo metadata and the rustc probes
			// done) once a hover on a project function answers.
			deadline := time.Now().Add(90 * time.Second)
			for {
				h, err := hoverAt(ctx, srv, ws, "src/lib.rs", "twice(2)", 1)
				if err == nil && h != nil && strings.Contains(h.Markdown, "Twice doubles n") {
					break
				}
				if !tc.resets && ran() {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("rust-analyzer never loaded the workspace: hover %+v, %v", h, err)
				}
				time.Sleep(time.Second)
			}
			if tc.resets {
				// Anything still to run after the load has had time.
				time.Sleep(3 * time.Second)
				if ran() {
					t.Fatal("the tree's wrapper ran under the reviewed entry")
				}
			} else {
				waitFor(t, "the tree's wrapper without the resets", ran)
			}
		})
	}
}
