package devstack

import (
	"maps"
	"testing"
)

func TestParseDaemonEnv(t *testing.T) {
	got, err := ParseDaemonEnv(" LSP_LOG_LEVEL=info, LSP_JAIL_MEMORY=12G,,LSP_X=a=b ")
	want := map[string]string{"LSP_LOG_LEVEL": "info", "LSP_JAIL_MEMORY": "12G", "LSP_X": "a=b"}
	if err != nil || !maps.Equal(got, want) {
		t.Fatalf("ParseDaemonEnv = %v, %v; want %v", got, err, want)
	}
	if got, err := ParseDaemonEnv(""); err != nil || len(got) != 0 {
		t.Fatalf("empty: %v, %v", got, err)
	}
	for _, bad := range []string{"PATH=/bin", "LSP_LOG_LEVEL", "LSP_=x", "=x"} {
		if _, err := ParseDaemonEnv(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
