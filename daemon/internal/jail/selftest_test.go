//go:build linux

package jail

import (
	"context"
	"path/filepath"
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
