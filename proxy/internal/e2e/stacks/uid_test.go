package stacks

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/devstack"
	"github.com/hanzoai/lsp/proxy/internal/lspdirect"
)

// productionUID is the uid deploy/k8s runs the daemon as, with every
// capability dropped.
const productionUID = 65532

// TestProductionUID: the daemon as production runs it — uid 65532, so its
// jails are unprivileged — prepares a Go repository whose requirement
// (github.com/google/uuid v1.6.0, from the Go module proxy) comes from the
// operator's mirror, and its definition of uuid.New is where gopls, run
// directly on an ordinary checkout with the same module cache, puts it.
// Every other test runs the daemon as root, whose permission override hid
// that as an ordinary uid every Go module failed its extraction (a
// read-only directory moved to another parent): the requirement was "not
// fetched" and the definition missing.
func TestProductionUID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("runs the daemon as another uid: needs root")
	}
	// The mirror: the module as the go command downloads it, in a cache
	// every uid can read.
	cache := filepath.Join(tmp, "uid-modcache")
	dl := exec.Command("go", "mod", "download", "-json", "github.com/google/uuid@v1.6.0")
	dl.Dir, dl.Env = tmp, append(os.Environ(), "GOMODCACHE="+cache, "GOFLAGS=-mod=mod")
	out, err := dl.Output()
	var mod struct{ Sum, GoModSum, Error string }
	if err != nil || json.Unmarshal(out, &mod) != nil || mod.Sum == "" {
		t.Fatalf("go mod download: %v %s %s", err, out, mod.Error)
	}
	// gopls where the daemon's uid can read it, wherever the checkout is.
	g := filepath.Join(tmp, "gopls-uid")
	if b, err := os.ReadFile(gopls); err != nil || os.WriteFile(g, b, 0o755) != nil {
		t.Fatalf("copy gopls: %v", err)
	}
	dir := stackDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s := startStack(t, devstack.Options{Dir: dir, Gopls: g, DaemonUID: productionUID,
		DaemonEnv: map[string]string{"LSP_DEPS_GO_PROXY": "file://" + filepath.Join(cache, "cache", "download")}})
	if pid := s.Daemon.Pid(); pid == 0 || !ownedBy(t, pid, productionUID) {
		t.Fatalf("the daemon (pid %d) does not run as uid %d", pid, productionUID)
	}
	const mainGo = "package main\n\nimport \"github.com/google/uuid\"\n\nfunc main() {\n\tprintln(uuid.New().String())\n}\n"
	files := map[string]string{
		"go.mod":  "module example.com/app\n\ngo 1.22\n\nrequire github.com/google/uuid v1.6.0\n",
		"go.sum":  "github.com/google/uuid v1.6.0 " + mod.Sum + "\ngithub.com/google/uuid v1.6.0/go.mod " + mod.GoModSum + "\n",
		"main.go": mainGo,
	}
	tn := newTenantWith(t, s, "uidorg", "app", files, 10)
	pos := lspdirect.Position{Line: 5, Character: strings.Index("\tprintln(uuid.New().String())", "New")}
	a := do(t, s, http.MethodPost, "/locate", map[string]any{"repo": "app", "path": "main.go", "line": pos.Line, "character": pos.Character},
		"Authorization", "Bearer "+tn.jwt, "X-Forge-Token", tn.forgeToken)
	locs, _ := a.body["locations"].([]any)
	if a.status != http.StatusOK || len(locs) != 1 {
		t.Fatalf("locate as uid %d: %d %s", productionUID, a.status, a.raw)
	}
	got := locs[0].(map[string]any)
	start := got["range"].(map[string]any)["start"].(map[string]any)

	// The ground truth: gopls directly on a checkout, offline on the same cache.
	co := filepath.Join(t.TempDir(), "app")
	for name, body := range files {
		if err := os.MkdirAll(co, 0o755); err != nil || os.WriteFile(filepath.Join(co, name), []byte(body), 0o644) != nil {
			t.Fatal("write the checkout")
		}
	}
	home := t.TempDir()
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "GOMODCACHE=" + cache, "GOPROXY=off", "GOFLAGS=-mod=mod",
		"GOTOOLCHAIN=local", "GOTELEMETRY=off", "GOCACHE=" + filepath.Join(home, "cache")}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := lspdirect.Start(ctx, co, env, gopls, "serve")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if err := srv.Open("main.go", "go"); err != nil {
		t.Fatal(err)
	}
	raw, err := srv.Definition(ctx, "main.go", pos)
	var direct []struct {
		URI   string `json:"uri"`
		Range struct {
			Start lspdirect.Position `json:"start"`
		} `json:"range"`
	}
	if err != nil || json.Unmarshal(raw, &direct) != nil || len(direct) != 1 {
		t.Fatalf("gopls directly: %v %s", err, raw)
	}
	wantPath := strings.TrimPrefix(direct[0].URI, "file://"+filepath.Join(cache, "github.com", "google", "uuid@v1.6.0")+"/")
	if got["external"] != true || got["module"] != "github.com/google/uuid@v1.6.0" || got["path"] != wantPath ||
		start["line"] != float64(direct[0].Range.Start.Line) || start["character"] != float64(direct[0].Range.Start.Character) {
		t.Fatalf("as uid %d: %v; gopls directly: %+v", productionUID, got, direct[0])
	}
	if w := a.raw; strings.Contains(w, "not fetched") {
		t.Fatalf("a warning says the requirement was not fetched: %s", w)
	}
}

// ownedBy says pid runs as uid (its real uid).
func ownedBy(t *testing.T, pid, uid int) bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == "Uid:" {
			return f[1] == strconv.Itoa(uid)
		}
	}
	return false
}
