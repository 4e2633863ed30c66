//go:build linux

package jail

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
)

// spawners are the two runtime.Spawners: every lifecycle test runs on both.
func spawners(t *testing.T) []struct {
	name string
	sp   runtime.Spawner
	jail *Spawner
} {
	j := newSpawner(t, Options{})
	return []struct {
		name string
		sp   runtime.Spawner
		jail *Spawner
	}{
		{name: "unjailed", sp: runtime.Unjailed(testLogger(t))},
		{name: "jailed", sp: j, jail: j},
	}
}

// TestLifecycle drives a real gopls through runtime.Server on each
// spawner: it answers, a killed server comes back as generation 2, and
// Close leaves no process, zombie or cgroup.
func TestLifecycle(t *testing.T) {
	t.Parallel()
	gopls := goplsPath(t)
	for _, tt := range spawners(t) {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ws := newLayout(t).workspace(t, "tenant", goModule)
			rec := &recorder{Spawner: tt.sp}
			srv := start(t, rec, runtime.Spec{ID: "gopls", Language: "go", Executable: gopls, Args: []string{"serve"}}, ws)
			ctx := context.Background()

			h, err := hoverAt(ctx, srv, ws, "app/app.go", "shapes.Describe(3)", len("shapes."))
			if err != nil {
				t.Fatal(err)
			}
			if h == nil || !strings.Contains(h.Markdown, "func shapes.Describe(n int) string") || !strings.Contains(h.Markdown, "one-line description") {
				t.Fatalf("hover = %+v, want the signature and doc comment", h)
			}

			first := rec.all()[0]
			if err := first.Kill(); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "a restarted server to answer", func() bool {
				h, err := hoverAt(ctx, srv, ws, "app/app.go", "shapes.Describe(3)", len("shapes."))
				return err == nil && h != nil && srv.Info().Generation == 2
			})
			assertGone(t, first.Pid())

			if err := srv.Close(ctx); err != nil {
				t.Fatal(err)
			}
			for _, p := range rec.all() {
				assertGone(t, p.Pid())
			}
			if tt.jail != nil {
				assertNoJailCgroups(t, tt.jail)
			}
		})
	}
}

// TestJailKillsEscapees: a server's child that left its process group
// (setsid) still dies with the jail, because it cannot leave the PID
// namespace.
func TestJailKillsEscapees(t *testing.T) {
	t.Parallel()
	s := newSpawner(t, Options{})
	ws := newLayout(t).workspace(t, "tenant", map[string]string{"a.txt": "a\n"})
	exe := testExecutable(t)
	cfg, _ := json.Marshal(adversaryConfig{})
	srv := start(t, s, runtime.Spec{ID: "adversary", Language: "plaintext", Executable: exe, Args: []string{string(cfg)}, Env: []string{serverEnv + "=adversary"}}, ws)
	ctx := context.Background()
	h, err := hoverLine(ctx, srv, "a.txt", attackEscape)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := hex.DecodeString(strings.TrimSpace(h.Markdown)); !strings.Contains(string(b), `"setsid child":""`) {
		t.Fatalf("the escapee did not start: %s", h.Markdown)
	}
	if len(processesWith("escapee-marker")) == 0 {
		t.Fatal("no escapee process found")
	}
	if err := srv.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if left := processesWith("escapee-marker"); len(left) > 0 {
		t.Fatalf("escapees %v survived Close", left)
	}
	assertNoJailCgroups(t, s)
}
