package soak

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
)

// countingServer answers 404 to everything and counts what it was asked:
// the npm registry the daemons are configured with, and the host hostile
// lockfiles resolve to. Lockfiles are validated, never installed, so both
// must end the run at zero.
type countingServer struct {
	*httptest.Server
	n atomic.Int64
}

func newCountingServer() *countingServer {
	c := &countingServer{}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		c.n.Add(1)
		http.NotFound(w, nil)
	}))
	return c
}

func (c *countingServer) Count() int64 { return c.n.Load() }

// tsRepo is a small TypeScript project with the given package-lock.json.
func tsRepo(name, lock string) map[string]string {
	return map[string]string{
		"package.json":      fmt.Sprintf(`{"name": %q, "version": "1.0.0", "private": true, "dependencies": {"left-pad": "1.3.0"}}`+"\n", name),
		"package-lock.json": lock,
		"tsconfig.json":     `{"compilerOptions": {"strict": true, "target": "es2022", "module": "es2022"}}` + "\n",
		"src/add.ts":        "// add sums two numbers.\nexport function add(a: number, b: number): number {\n  return a + b;\n}\n",
		"src/main.ts":       "import { add } from \"./add\";\n\nexport const three = add(1, 2);\n",
	}
}

// hostileLockfiles are TypeScript repositories whose package-lock.json
// the daemon must refuse (with a warning in the prepare answer) without
// making any request: name → (lockfile, a phrase the warning must hold).
func (r *run) hostileLockfiles() map[string][2]string {
	sum := sha512.Sum512([]byte("left-pad-1.3.0"))
	integrity := "sha512-" + base64.StdEncoding.EncodeToString(sum[:])
	lock := func(root map[string]any, pkg map[string]any) string {
		pkgs := map[string]any{"": root}
		if pkg != nil {
			pkgs["node_modules/left-pad"] = pkg
		}
		b, _ := json.MarshalIndent(map[string]any{"name": "x", "version": "1.0.0", "lockfileVersion": 3, "requires": true, "packages": pkgs}, "", "  ")
		return string(b)
	}
	root := map[string]any{"name": "x", "version": "1.0.0", "dependencies": map[string]string{"left-pad": "1.3.0"}}
	registry := strings.TrimSuffix(r.npm.URL, "/")
	return map[string][2]string{
		"lock-outside": {lock(root, map[string]any{"version": "1.3.0",
			"resolved": r.outside.URL + "/left-pad/-/left-pad-1.3.0.tgz", "integrity": integrity}), "resolves outside the registry"},
		"lock-gitssh": {lock(map[string]any{"name": "x", "version": "1.0.0",
			"dependencies": map[string]string{"evil": "git+ssh://git@" + strings.TrimPrefix(r.outside.URL, "http://") + "/evil.git"}}, nil), "git dependency"},
		"lock-nointegrity": {lock(root, map[string]any{"version": "1.3.0",
			"resolved": registry + "/left-pad/-/left-pad-1.3.0.tgz"}), "no sha512 or sha1 integrity"},
	}
}

// location is one entry of a locate answer.
type location struct {
	Path     string `json:"path"`
	External bool   `json:"external"`
	Module   string `json:"module"`
}

// externalIn checks a locate answer whose definition lies outside the
// workspace: every location external, in a module whose name starts with
// modPrefix, at a module-relative path, and no host path anywhere in the
// answer.
func externalIn(modPrefix, path string, hostPaths ...string) func(answer) string {
	return func(a answer) string {
		var body struct {
			Locations []location `json:"locations"`
		}
		if err := json.Unmarshal(a.raw, &body); err != nil {
			return "the answer is not JSON: " + err.Error()
		}
		if len(body.Locations) == 0 {
			return "no location"
		}
		for _, l := range body.Locations {
			if !l.External || !strings.HasPrefix(l.Module, modPrefix) || l.Path != path {
				return fmt.Sprintf("location %+v: want external in %s… at %s", l, modPrefix, path)
			}
		}
		for _, h := range hostPaths {
			if h != "" && strings.Contains(string(a.raw), h) {
				return fmt.Sprintf("the answer holds the host path %q", h)
			}
		}
		return ""
	}
}

// warnsOf checks that a prepare answer carries a warning holding phrase.
func warnsOf(phrase string) func(answer) string {
	return func(a answer) string {
		for _, w := range a.warnings {
			if strings.Contains(w, phrase) {
				return ""
			}
		}
		return fmt.Sprintf("no warning holds %q: %q", phrase, a.warnings)
	}
}

// The Go module mirror (LSP_DEPS_GO_PROXY=file://…) serves one module, so
// that a definition can land in a workspace's module cache: the answer must
// say external, name the module and give a module-relative path.
const (
	depModule  = "example.com/dep"
	depVersion = "v1.0.0"
)

var depFiles = map[string]string{
	"go.mod": "module " + depModule + "\n\ngo 1.22\n",
	"dep.go": "// Package dep is served by the soak's module mirror.\npackage dep\n\n// Hello greets.\nfunc Hello() string { return \"hello\" }\n",
}

// writeGoMirror writes depModule in the GOPROXY layout below dir and
// returns the go.sum lines a repository requiring it carries.
func writeGoMirror(dir string) (string, error) {
	v := filepath.Join(dir, filepath.FromSlash(depModule), "@v")
	if err := os.MkdirAll(v, 0o755); err != nil {
		return "", err
	}
	prefix := depModule + "@" + depVersion + "/"
	var zbuf bytes.Buffer
	zw := zip.NewWriter(&zbuf)
	names := sortedKeys(depFiles)
	var summary strings.Builder
	var zipNames []string
	for _, n := range names {
		zipNames = append(zipNames, prefix+n)
	}
	sort.Strings(zipNames)
	for _, zn := range zipNames {
		data := depFiles[strings.TrimPrefix(zn, prefix)]
		w, err := zw.Create(zn)
		if err != nil {
			return "", err
		}
		if _, err := w.Write([]byte(data)); err != nil {
			return "", err
		}
		fmt.Fprintf(&summary, "%x  %s\n", sha256.Sum256([]byte(data)), zn)
	}
	if err := zw.Close(); err != nil {
		return "", err
	}
	files := map[string][]byte{
		"list":               []byte(depVersion + "\n"),
		depVersion + ".info": []byte(`{"Version":"` + depVersion + `","Time":"2024-01-02T03:04:05Z"}`),
		depVersion + ".mod":  []byte(depFiles["go.mod"]),
		depVersion + ".zip":  zbuf.Bytes(),
	}
	for n, b := range files {
		if err := os.WriteFile(filepath.Join(v, n), b, 0o644); err != nil {
			return "", err
		}
	}
	modSummary := fmt.Sprintf("%x  go.mod\n", sha256.Sum256([]byte(depFiles["go.mod"])))
	return fmt.Sprintf("%s %s %s\n%s %s/go.mod %s\n", depModule, depVersion, h1(summary.String()), depModule, depVersion, h1(modSummary)), nil
}

// h1 is the go.sum hash of a dirhash summary (Hash1).
func h1(summary string) string {
	s := sha256.Sum256([]byte(summary))
	return "h1:" + base64.StdEncoding.EncodeToString(s[:])
}

// depRepo requires depModule; line 5 calls dep.Hello.
func depRepo(goSum string) map[string]string {
	return map[string]string{
		"go.mod":  "module example.com/withdep\n\ngo 1.22\n\nrequire " + depModule + " " + depVersion + "\n",
		"go.sum":  goSum,
		"main.go": "package main\n\nimport \"" + depModule + "\"\n\nfunc main() {\n\tprintln(dep.Hello())\n}\n",
	}
}
