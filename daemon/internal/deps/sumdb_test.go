package deps

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb"
	"golang.org/x/mod/sumdb/note"

	"github.com/hanzoai/lsp/daemon/internal/deps/depstest"
	"github.com/hanzoai/lsp/daemon/internal/runtime"
)

// sumdbMirror serves dir as a module mirror and, under
// /sumdb/<name>/, a checksum database signed with a fresh key holding
// lines (module@version → its go.sum lines). It returns the mirror and the
// database's verifier key.
func sumdbMirror(t *testing.T, dir string, lines map[string]string) (*url.URL, string) {
	t.Helper()
	skey, vkey, err := note.GenerateKey(rand.Reader, "sumdb.example")
	if err != nil {
		t.Fatal(err)
	}
	db := sumdb.NewTestServer(skey, func(path, vers string) ([]byte, error) {
		if l, ok := lines[path+"@"+vers]; ok {
			return []byte(l), nil
		}
		return nil, errors.New("not found")
	})
	mux := http.NewServeMux()
	mux.Handle("/sumdb/sumdb.example/", http.StripPrefix("/sumdb/sumdb.example", sumdb.NewServer(db)))
	mux.Handle("/", http.FileServer(http.Dir(dir)))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	return u, vkey
}

// folderEnv is the gopls env setting of the folder of dir in ws.
func folderEnv(t *testing.T, ws runtime.Workspace, dir string) map[string]string {
	t.Helper()
	for _, f := range GoFolders(ws) {
		if f.Dir != filepath.Join(ws.Root, dir) {
			continue
		}
		var st struct {
			Gopls struct {
				Env map[string]string `json:"env"`
			} `json:"gopls"`
		}
		if err := json.Unmarshal(f.Settings, &st); err != nil {
			t.Fatal(err)
		}
		return st.Gopls.Env
	}
	return nil
}

// goListFlags loads pkg in the module dir of ws with the serving
// environment and the module's folder env (GOFLAGS, GOWORK) from the
// index, as gopls would.
func goListFlags(t *testing.T, ws runtime.Workspace, dir, pkg string) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	env := folderEnv(t, ws, dir)
	if env["GOFLAGS"] == "" && env["GOWORK"] == "" {
		t.Fatalf("no flags for %s in %v", dir, env)
	}
	cmd := exec.Command(gobin, "list", "-deps", pkg)
	cmd.Dir = filepath.Join(ws.Root, dir)
	cmd.Env = append(runtime.Environment(runtime.Spec{Executable: gobin}, ws), "PATH="+filepath.Dir(gobin))
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	if err := os.MkdirAll(filepath.Join(ws.Home, "tmp"), 0o700); err != nil {
		t.Fatal(err)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list offline with %v: %v\n%s", env, err, out)
	}
	return string(out)
}

// overlaySum is the go.sum the module dir of ws loads with: its go.work's
// go.work.sum, or its overlay's go.sum.
func overlaySum(t *testing.T, ws runtime.Workspace, dir string) string {
	t.Helper()
	env := folderEnv(t, ws, dir)
	sum := ""
	if w := env["GOWORK"]; w != "" {
		sum = w + ".sum"
	} else if mod, ok := strings.CutPrefix(env["GOFLAGS"], overlayFlags); ok {
		sum = strings.TrimSuffix(mod, ".mod") + ".sum"
	} else {
		t.Fatalf("no overlay for %s", dir)
	}
	b, err := os.ReadFile(sum)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestGoSumDB: go.sum lacks every line, and the go.mod has no go
// directive: the checksum database (through the mirror) vouches for the
// requirement and, walking its go.mod, for what the graph needs; the lines
// go into the overlay go.sum, never the tree, and the module loads
// offline. A module the database does not know stays a warning.
func TestGoSumDB(t *testing.T) {
	dir := t.TempDir()
	lines := map[string]string{}
	for _, m := range []depstest.Module{
		{Path: "example.com/top", Version: "v1.0.0", Files: map[string]string{
			// go 1.16: an unpruned graph, so the go command reads low's go.mod.
			"go.mod": "module example.com/top\n\ngo 1.16\n\nrequire example.com/low v1.0.0\n",
			"top.go": "package top\n\nimport \"example.com/low\"\n\n// Top calls low.\nfunc Top() string { return low.Low() }\n",
		}},
		{Path: "example.com/low", Version: "v1.0.0", Files: map[string]string{
			"go.mod": "module example.com/low\n\ngo 1.16\n",
			"low.go": "package low\n\n// Low is low.\nfunc Low() string { return \"low\" }\n",
		}},
	} {
		sum, err := depstest.Write(dir, m)
		if err != nil {
			t.Fatal(err)
		}
		lines[m.Path+"@"+m.Version] = sum
	}
	u, vkey := sumdbMirror(t, dir, lines)
	ws := repo(t, map[string]string{
		"go.mod": "module example.com/app\n\nrequire example.com/top v1.0.0\n",
		"app.go": "package app\n\nimport \"example.com/top\"\n\nvar X = top.Top()\n",
	})
	before := treeHash(t, ws.Root)
	w := fetcher(Config{GoProxies: []*url.URL{u}, GoSumDB: vkey}).Fetch(context.Background(), ws)
	if len(w) != 0 {
		t.Fatalf("warnings %q", w)
	}
	sum := overlaySum(t, ws, ".")
	for _, l := range []string{lines["example.com/top@v1.0.0"], lines["example.com/low@v1.0.0"]} {
		for _, line := range strings.Split(strings.TrimSpace(l), "\n") {
			if !strings.Contains(sum, line+"\n") {
				t.Errorf("overlay go.sum lacks %q:\n%s", line, sum)
			}
		}
	}
	if out := goListFlags(t, ws, ".", "."); !strings.Contains(out, "example.com/low\n") {
		t.Errorf("go list = %s", out)
	}
	if after := treeHash(t, ws.Root); !equalMaps(before, after) {
		t.Errorf("the tree changed")
	}

	// Unknown to the database: a warning, nothing fetched.
	ws = repo(t, map[string]string{"go.mod": "module example.com/app\n\ngo 1.22\n\nrequire example.com/unknown v1.0.0\n"})
	w = fetcher(Config{GoProxies: []*url.URL{u}, GoSumDB: vkey}).Fetch(context.Background(), ws)
	if len(w) != 1 || !strings.Contains(w[0], "example.com/unknown@v1.0.0: go.sum has no hash for it and the checksum database could not verify it") {
		t.Fatalf("warnings %q", w)
	}
}

// TestGoSumDBProxy: the real module proxy and sum.golang.org (through the
// proxy) vouch for github.com/google/uuid v1.6.0, whose go.mod has no go
// directive, for a repository whose go.sum lacks it. Skipped when the
// proxy cannot be reached.
func TestGoSumDBProxy(t *testing.T) {
	out, err := exec.Command("go", "env", "GOPROXY").Output()
	if err != nil {
		t.Skip("no go command")
	}
	first, _, _ := strings.Cut(strings.TrimSpace(string(out)), ",")
	first, _, _ = strings.Cut(first, "|")
	u, err := parseMirror(first)
	if err != nil {
		t.Skipf("GOPROXY %q has no mirror", out)
	}
	c := http.Client{Timeout: 10 * time.Second}
	if resp, err := c.Get(u.String() + "/github.com/google/uuid/@v/v1.6.0.info"); err != nil || resp.StatusCode != 200 {
		t.Skipf("the module proxy is not reachable: %v", err)
	} else {
		resp.Body.Close()
	}
	ws := repo(t, map[string]string{
		"go.mod": "module example.com/app\n\ngo 1.22\n\nrequire github.com/google/uuid v1.6.0\n",
		"app.go": "package app\n\nimport \"github.com/google/uuid\"\n\nvar X = uuid.New()\n",
	})
	if w := fetcher(Config{GoProxies: []*url.URL{u}}).Fetch(context.Background(), ws); len(w) != 0 {
		t.Fatalf("warnings %q", w)
	}
	sum := overlaySum(t, ws, ".")
	for _, l := range []string{
		"github.com/google/uuid v1.6.0 h1:NIvaJDMOsjHA8n1jAhLSgzrAzy1Hgr+hNrb57e+94F0=\n",
		"github.com/google/uuid v1.6.0/go.mod h1:TIyPZe4MgqvfeYDBFedMoGGpEw/LqOeaOT+nhxU+yHo=\n",
	} {
		if !strings.Contains(sum, l) {
			t.Errorf("overlay go.sum lacks %q:\n%s", l, sum)
		}
	}
	if out := goListFlags(t, ws, ".", "."); !strings.Contains(out, "github.com/google/uuid\n") {
		t.Errorf("go list = %s", out)
	}
}
