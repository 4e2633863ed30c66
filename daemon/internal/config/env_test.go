package config

import (
	"testing"
	"time"
)

func TestLoadEnvShutdownGrace(t *testing.T) {
	load := func(grace string) (*Env, error) {
		env := map[string]string{"LSP_DAEMON_CONFIG": "/etc/servers.json", "LSP_SHUTDOWN_GRACE": grace}
		return LoadEnv(func(k string) string { return env[k] })
	}
	for _, tc := range []struct {
		grace string
		want  time.Duration
	}{{"", 20 * time.Second}, {"45s", 45 * time.Second}, {"2m", 2 * time.Minute}} {
		e, err := load(tc.grace)
		if err != nil {
			t.Fatalf("LSP_SHUTDOWN_GRACE=%q: %v", tc.grace, err)
		}
		if e.ShutdownGrace != tc.want {
			t.Errorf("LSP_SHUTDOWN_GRACE=%q: ShutdownGrace = %v, want %v", tc.grace, e.ShutdownGrace, tc.want)
		}
	}
	for _, bad := range []string{"soon", "20", "0s", "-5s"} {
		if _, err := load(bad); err == nil {
			t.Errorf("LSP_SHUTDOWN_GRACE=%q accepted", bad)
		}
	}
}

func TestLoadEnvDaemonMaxPrepares(t *testing.T) {
	load := func(v string) (*Env, error) {
		env := map[string]string{"LSP_DAEMON_CONFIG": "/etc/servers.json", "LSP_DAEMON_MAX_PREPARES": v}
		return LoadEnv(func(k string) string { return env[k] })
	}
	for v, want := range map[string]int{"": 0, "4": 4, " 32 ": 32} {
		if e, err := load(v); err != nil || e.MaxPrepares != want {
			t.Errorf("LSP_DAEMON_MAX_PREPARES=%q: %v, %v; want %d", v, e, err, want)
		}
	}
	for _, bad := range []string{"0", "-1", "many"} {
		if _, err := load(bad); err == nil {
			t.Errorf("LSP_DAEMON_MAX_PREPARES=%q accepted", bad)
		}
	}
}
