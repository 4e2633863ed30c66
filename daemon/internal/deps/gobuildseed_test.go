package deps

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
)

// TestBuildSeed makes the seed with the real toolchain, as the daemon does
// at start, and proves what a home gets from it: the go command of a
// seeded home lists net — a cgo package of the standard library — without
// running cgo or the C compiler, which it runs on an empty cache; a home
// with a build cache of its own keeps it; and a link a jailed server
// planted where the cache goes is never followed.
func TestBuildSeed(t *testing.T) {
	if _, err := os.Stat("/usr/bin/gcc"); err != nil {
		t.Skip("no C compiler: the seed's cgo outputs are what this test checks")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	ws := repo(t, map[string]string{"go.mod": "module example.com/app\n\ngo 1.22\n", "main.go": mainGo})
	// The Go servers' environment, as the jail gives it (runtime.Environment
	// with the compiler's variables over CGO_ENABLED=0).
	env := func(home string) []string {
		var out []string
		for _, kv := range runtime.Environment(runtime.Spec{Executable: goBin}, runtime.Workspace{Root: ws.Root, Home: home}) {
			if !strings.HasPrefix(kv, "CGO_ENABLED=") {
				out = append(out, kv)
			}
		}
		return append(out, "CGO_ENABLED=1", "CC=/usr/bin/gcc", "COMPILER_PATH=/usr/bin")
	}
	root := filepath.Join(t.TempDir(), "gobuild-seed")
	// Logged: a seed that was not made says why (CI saw one fail within
	// 40 ms once, 2026-12-07, its reason discarded).
	seed := NewBuildSeed(context.Background(), root, env(root), testLog(t))
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if !seed.Wait(ctx) {
		t.Fatal("the seed was not made")
	}
	if _, err := os.Stat(filepath.Join(root, "work")); !os.IsNotExist(err) {
		t.Errorf("the seed's scratch directory is left: %v", err)
	}
	// A fresh home, owned by another uid as a jail's is: seeded, and what
	// it got is its owner's.
	const uid = 1_800_000_123
	if os.Geteuid() == 0 {
		if err := os.Chown(ws.Home, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	f := New(Config{}, slog.New(slog.DiscardHandler))
	f.SetBuildSeed(seed)
	f.Fetch(context.Background(), ws)
	cache := filepath.Join(ws.Home, buildCacheRel)
	if os.Geteuid() == 0 {
		if err := filepath.WalkDir(cache, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			if st := fi.Sys().(*syscall.Stat_t); st.Uid != uid {
				t.Errorf("%s is owned by %d, not the home's owner", p, st.Uid)
				return filepath.SkipAll
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	// What the go command runs to list net with its compiled files, on
	// the seeded cache and on an empty one.
	if err := os.MkdirAll(filepath.Join(ws.Home, "tmp"), 0o755); err != nil { // PrepareHome's, at a server's start
		t.Fatal(err)
	}
	listNet := func(gocache string) string {
		t.Helper()
		cmd := exec.Command(goBin, "list", "-x", "-compiled=true", "-deps=true", "-json=ImportPath", "net")
		cmd.Dir = ws.Root
		e := env(ws.Home)
		for i, kv := range e {
			if strings.HasPrefix(kv, "GOCACHE=") {
				e[i] = "GOCACHE=" + gocache
			}
		}
		cmd.Env = e
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go list net: %v\n%s", err, out)
		}
		return string(out)
	}
	ran := func(out string) bool { return strings.Contains(out, "/cgo ") || strings.Contains(out, "gcc ") }
	if out := listNet(t.TempDir()); !ran(out) {
		t.Fatalf("on an empty cache the go command ran no cgo for net, so this test proves nothing:\n%s", out)
	}
	if out := listNet(cache); ran(out) {
		t.Errorf("the seeded cache did not spare cgo for net:\n%s", out)
	}

	// A home with a cache of its own keeps it.
	ws2 := repo(t, map[string]string{"go.mod": "module example.com/b\n\ngo 1.22\n"})
	own := filepath.Join(ws2.Home, buildCacheRel, "README")
	if err := os.MkdirAll(filepath.Dir(own), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(own, []byte("mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if seeded, err := seedBuildCache(ws2, filepath.Join(root, "go-build")); seeded || err != nil {
		t.Errorf("a home with its own cache: seeded %v, %v", seeded, err)
	}
	if ents, _ := os.ReadDir(filepath.Dir(own)); len(ents) != 1 {
		t.Errorf("a home's own cache changed: %d entries", len(ents))
	}

	// A link where the cache goes: nothing is written through it.
	ws3 := repo(t, map[string]string{"go.mod": "module example.com/c\n\ngo 1.22\n"})
	host := t.TempDir()
	if err := os.MkdirAll(filepath.Join(ws3.Home, ".cache"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(host, filepath.Join(ws3.Home, buildCacheRel)); err != nil {
		t.Fatal(err)
	}
	_, _ = seedBuildCache(ws3, filepath.Join(root, "go-build"))
	if ents, _ := os.ReadDir(host); len(ents) != 0 {
		t.Errorf("the seed was written through a planted link: %d entries in its target", len(ents))
	}

	// A tree with no Go module gets none.
	ws4 := repo(t, map[string]string{"a.py": "x = 1\n"})
	f.Fetch(context.Background(), ws4)
	if _, err := os.Stat(filepath.Join(ws4.Home, buildCacheRel)); !os.IsNotExist(err) {
		t.Errorf("a tree without Go got a build cache: %v", err)
	}

	// A daemon started again on the same root, with the same go command
	// and environment, keeps the seed it made; another environment makes
	// it anew.
	mark := filepath.Join(root, "go-build", "kept")
	if err := os.WriteFile(mark, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if !NewBuildSeed(context.Background(), root, env(root), slog.New(slog.DiscardHandler)).Wait(ctx) {
		t.Fatal("the seed was not found again")
	}
	if _, err := os.Stat(mark); err != nil {
		t.Errorf("a daemon's restart made the same seed again: %v", err)
	}
	other := append(env(root), "CGO_CFLAGS=-O1")
	if !NewBuildSeed(context.Background(), root, other, slog.New(slog.DiscardHandler)).Wait(ctx) {
		t.Fatal("the seed was not made for another environment")
	}
	if _, err := os.Stat(mark); !os.IsNotExist(err) {
		t.Errorf("a seed made for another environment was kept: %v", err)
	}

}

// TestBuildSeedTelemetryOff: the go command that makes the seed runs with
// telemetry off in its own HOME (XDG_CONFIG_HOME not inherited): in its
// default mode it leaves a child writing into HOME after it exits, and
// removing HOME then failed the whole seed ("rmdir …/telemetry: directory
// not empty", seen in make bench). A stand-in go command reports what it
// was given.
func TestBuildSeedTelemetryOff(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "seen")
	script := "#!/bin/sh\ncase \"$1\" in\nversion) echo go version go1.99 linux/amd64 ;;\n" +
		"list) mkdir -p \"$GOCACHE\" && { cat \"$HOME/" + runtime.TelemetryModeFile + "\"; echo \"XDG_CONFIG_HOME=$XDG_CONFIG_HOME\"; } > \"$SEEN\" ;;\nesac\n"
	if err := os.WriteFile(filepath.Join(dir, "go"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(t.TempDir(), "gobuild-seed")
	env := []string{"PATH=" + dir + ":/usr/bin:/bin", "SEEN=" + out, "XDG_CONFIG_HOME=" + filepath.Join(dir, "elsewhere")}
	seed := NewBuildSeed(context.Background(), root, env, testLog(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if !seed.Wait(ctx) {
		t.Fatal("the seed was not made")
	}
	seen, err := os.ReadFile(out)
	if want := runtime.TelemetryOff + "XDG_CONFIG_HOME=\n"; err != nil || string(seen) != want {
		t.Errorf("the go command saw %q (%v), want %q", seen, err, want)
	}
}
