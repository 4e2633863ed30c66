//go:build linux && !lspbench

package jail

import (
	"strings"
	"testing"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
)

// A product build has no way to switch a piece of the jail off: the bench's
// variable is not read, and a Spawner starts with no holes.
func TestBenchKnobsUnreachable(t *testing.T) {
	t.Setenv("LSP_BENCH_JAIL_OFF", "seccomp,init,pids,memory,jail-memory")
	if h := benchHoles(nil); h.benchOnly() {
		t.Fatalf("a production build read LSP_BENCH_JAIL_OFF: %+v", h)
	}
}

// The holes the bench opens do what they say: no seccomp argument, and the
// server run by bwrap itself rather than through the init.
func TestBenchHolesArgs(t *testing.T) {
	ws := runtime.Workspace{Root: "/var/lib/lsp/trees/t/r/c", Home: "/var/lib/lsp/homes/t/r"}
	spec := runtime.Spec{Executable: "/var/lib/lsp/bin/abc", Args: []string{"serve"}}
	js := jailSpec{exe: spec.Executable, args: spec.Args, ownBinds: true, initLimits: []string{"-nproc", "9"}}
	for _, tt := range []struct {
		holes      holes
		want, lack string
	}{
		{holes{}, "--seccomp 3", ""},
		{holes{}, "-- /.lsp-jail/init __lsp-jail-init -nproc 9 -- /var/lib/lsp/bin/abc serve", ""},
		{holes{noSeccomp: true}, "-- /.lsp-jail/init", "--seccomp"},
		{holes{noInit: true}, "--seccomp 3 ", "__lsp-jail-init"},
	} {
		s := &Spawner{opts: Options{Launcher: "/usr/local/bin/lsp-daemon"}.withDefaults(), libs: systemLibs(), seccomp: []byte{1}, holes: tt.holes}
		args, _ := s.bwrapArgs(spec, ws, js, false)
		joined := strings.Join(args, " ")
		if !strings.Contains(joined, tt.want) || tt.lack != "" && strings.Contains(joined, tt.lack) {
			t.Errorf("%+v: want %q, not %q, in:\n%s", tt.holes, tt.want, tt.lack, joined)
		}
		if tt.holes.noInit && !strings.HasSuffix(joined, "-- /var/lib/lsp/bin/abc serve") {
			t.Errorf("no init: the server is not bwrap's command: %s", joined)
		}
	}
}
