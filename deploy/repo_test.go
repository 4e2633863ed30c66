package deploy_test

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// The repository facts the deployment must agree with, read as text: the
// README's configuration tables, the variables the code reads, the Makefile's
// pins, the TypeScript lock, go.work and the proxy's routes.

// repoRoot is the checkout: the tests run in deploy/.
const repoRoot = ".."

func readRepoFile(t testing.TB, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var readmeVarRE = regexp.MustCompile(`^\|([^|]*)\|`)
var lspVarRE = regexp.MustCompile(`\bLSP_[A-Z0-9_]+\b`)

// readmeVars are the LSP_* names in the first column of README.md's tables.
func readmeVars(t testing.TB) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, line := range strings.Split(readRepoFile(t, "README.md"), "\n") {
		m := readmeVarRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		for _, v := range lspVarRE.FindAllString(m[1], -1) {
			out[v] = true
		}
	}
	if len(out) < 10 {
		t.Fatalf("README.md: found only %d LSP_* variables in its tables; has the format changed?", len(out))
	}
	return out
}

var (
	codeVarsOnce sync.Once
	codeVarsSet  map[string]bool
	codeVarsErr  error
)

// codeVars are the LSP_* names that appear as string literals in the
// non-test Go code of the proxy and the daemon: what the services read.
func codeVars(t testing.TB) map[string]bool {
	t.Helper()
	codeVarsOnce.Do(func() {
		codeVarsSet = map[string]bool{}
		lit := regexp.MustCompile(`"(LSP_[A-Z0-9_]+)"`)
		for _, dir := range []string{"proxy", "daemon"} {
			codeVarsErr = filepath.WalkDir(filepath.Join(repoRoot, dir), func(p string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
					return err
				}
				b, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				for _, m := range lit.FindAllStringSubmatch(string(b), -1) {
					codeVarsSet[m[1]] = true
				}
				return nil
			})
			if codeVarsErr != nil {
				return
			}
		}
	})
	if codeVarsErr != nil {
		t.Fatal(codeVarsErr)
	}
	return codeVarsSet
}

// checkDocumentedVar fails unless name is in README.md's tables and read by
// the code.
func checkDocumentedVar(t testing.TB, where, name string) {
	t.Helper()
	if !readmeVars(t)[name] {
		t.Errorf("%s: %s is not in README.md's configuration tables", where, name)
	}
	if !codeVars(t)[name] {
		t.Errorf("%s: %s is not read by any proxy or daemon code", where, name)
	}
}

// makefileVar is the value of NAME := value in the Makefile.
func makefileVar(t testing.TB, name string) string {
	t.Helper()
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\s*:?=\s*(\S+)\s*$`)
	m := re.FindStringSubmatch(readRepoFile(t, "Makefile"))
	if m == nil {
		t.Fatalf("Makefile: no %s", name)
	}
	return m[1]
}

// goWorkVersion is the go directive of go.work.
func goWorkVersion(t testing.TB) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^go\s+(\S+)\s*$`).FindStringSubmatch(readRepoFile(t, "go.work"))
	if m == nil {
		t.Fatal("go.work: no go directive")
	}
	return m[1]
}

// tsLock is what deploy/typescript pins: the declared dependency versions,
// the locked versions and the engines each locked package declares.
type tsLock struct {
	Declared map[string]string
	Locked   map[string]string
	Engines  map[string]string
}

func readTSLock(t testing.TB) tsLock { return readNPMLock(t, "typescript") }

// readNPMLock reads deploy/<dir>'s package.json and package-lock.json.
func readNPMLock(t testing.TB, dir string) tsLock {
	t.Helper()
	var pkg struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	if err := json.Unmarshal([]byte(readRepoFile(t, "deploy/"+dir+"/package.json")), &pkg); err != nil {
		t.Fatal(err)
	}
	var lock struct {
		Packages map[string]struct {
			Version string            `json:"version"`
			Engines map[string]string `json:"engines"`
		} `json:"packages"`
	}
	if err := json.Unmarshal([]byte(readRepoFile(t, "deploy/"+dir+"/package-lock.json")), &lock); err != nil {
		t.Fatal(err)
	}
	l := tsLock{Declared: pkg.Dependencies, Locked: map[string]string{}, Engines: map[string]string{}}
	for path, p := range lock.Packages {
		if name, ok := strings.CutPrefix(path, "node_modules/"); ok {
			l.Locked[name] = p.Version
			l.Engines[name] = p.Engines["node"]
		}
	}
	return l
}

// unauthenticatedRoutes are the GET paths the proxy registers on the echo
// instance itself (not the authenticated /v1/lsp group): the probe targets.
func unauthenticatedRoutes(t testing.TB) map[string]bool {
	t.Helper()
	re := regexp.MustCompile(`\be\.GET\("([^"]+)"`)
	out := map[string]bool{}
	for _, m := range re.FindAllStringSubmatch(readRepoFile(t, "proxy/internal/httpapi/server.go"), -1) {
		out[m[1]] = true
	}
	if len(out) == 0 {
		t.Fatal("proxy/internal/httpapi/server.go: no e.GET routes found; has the registration changed?")
	}
	return out
}
