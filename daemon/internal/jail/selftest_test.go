//go:build linux

package jail

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func newSpawner(t *testing.T, opts Options) *Spawner {
	t.Helper()
	if opts.StateDir == "" {
		opts.StateDir = t.TempDir()
	}
	s, err := New(opts, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func TestSelfTestPasses(t *testing.T) {
	t.Parallel()
	s := newSpawner(t, Options{})
	t.Log(s.Describe())
	if err := SelfTest(context.Background(), s, SelfTestParams{Scratch: filepath.Join(t.TempDir(), "selftest")}); err != nil {
		t.Fatal(err)
	}
}

// TestSelfTestInRootsHome: a daemon whose root is in root's 0700 home, as a
// checkout there puts it, passes the self-test: /root exists in the jail
// only as the empty parent of its mounts, and what else is in it (a file
// beside the daemon's root, root's own dot-directories) stays invisible.
func TestSelfTestInRootsHome(t *testing.T) {
	t.Parallel()
	if fi, err := os.Stat("/root"); err != nil || !fi.IsDir() {
		t.Skip("no /root")
	}
	parent, err := os.MkdirTemp("/root", "lsp-selftest-")
	if err != nil {
		t.Skipf("cannot write in /root: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(parent) })
	secret := filepath.Join(parent, "secret.txt")
	if err := os.WriteFile(secret, []byte("not for the jail\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := newSpawner(t, Options{})
	if err := SelfTest(context.Background(), s, SelfTestParams{Scratch: filepath.Join(parent, "daemon", "selftest"), Hidden: []string{secret}}); err != nil {
		t.Fatal(err)
	}
}

func TestHiddenBeside(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"a/b/c", "other", "x"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ms := []mount{{op: "--ro-bind", src: "/s", dst: filepath.Join(dir, "a/b/c")}}
	got := hiddenBeside([]string{"/etc/shadow", dir, filepath.Join(dir, "a/b/c/in")}, ms)
	want := []string{"/etc/shadow", filepath.Join(dir, "other"), filepath.Join(dir, "x"), filepath.Join(dir, "a/b/c/in")}
	if !slices.Equal(got, want) {
		t.Errorf("hiddenBeside = %q, want %q", got, want)
	}
}

// Each hole opened on purpose must fail the self-test, naming it.
func TestSelfTestCatchesHoles(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		holes holes
		want  string
	}{
		{name: "network", holes: holes{shareNet: true}, want: "network:"},
		{name: "no limits", holes: holes{noLimits: true}, want: "processes:"},
		{name: "extra path", holes: holes{bindExtra: "/etc"}, want: "paths: /etc/passwd is visible"},
		{name: "any socket family", holes: holes{anySocket: true}, want: "sockets: socket(inet) succeeded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newSpawner(t, Options{})
			s.holes = tt.holes
			err := SelfTest(context.Background(), s, SelfTestParams{Scratch: filepath.Join(t.TempDir(), "selftest")})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("SelfTest = %v, want an error naming %q", err, tt.want)
			}
		})
	}
}
