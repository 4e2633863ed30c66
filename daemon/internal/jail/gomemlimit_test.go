//go:build linux

package jail

import (
	"bufio"
	"context"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
)

// TestJailGoMemLimit: a Go program whose live heap fits its jail's memory
// but whose garbage would not (GOGC=100 lets the heap reach twice what is
// live) runs to the end, because the jail gives it GOMEMLIMIT below the
// limit; with the server's own GOMEMLIMIT=off, as before, the kernel
// kills it. gopls on aws-sdk-go was killed that way at 4.2 GB under the
// default 4 GiB.
func TestJailGoMemLimit(t *testing.T) {
	t.Parallel()
	if raceEnabled {
		t.Skip("under -race the detector's shadow memory, which GOMEMLIMIT does not bound, fills the jail")
	}
	const memory = 256 << 20
	for _, tc := range []struct {
		name   string
		env    []string
		wantOK bool
	}{
		{"jail's limit", nil, true},
		{"no limit", []string{"GOMEMLIMIT=off"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newSpawner(t, Options{Memory: memory})
			if s.cg == nil {
				t.Skip("no memory cgroup: RLIMIT_DATA counts address space, not what the kernel reclaims")
			}
			ws := newLayout(t).workspace(t, "tenant", map[string]string{"a.txt": "a\n"})
			env := append([]string{serverEnv + "=churn", "JAILTEST_ALLOC=" + strconv.Itoa(150<<20)}, tc.env...)
			p, err := s.Spawn(context.Background(), runtime.Spec{ID: "churn", Language: "plaintext", Executable: testExecutable(t), Env: env}, ws)
			if err != nil {
				t.Fatal(err)
			}
			line, _ := bufio.NewReader(p.Stdout()).ReadString('\n')
			_, _ = io.Copy(io.Discard, p.Stdout())
			_ = p.Wait()
			if ok := strings.HasPrefix(line, "churned"); ok != tc.wantOK {
				t.Errorf("finished: %v (%q), want %v", ok, line, tc.wantOK)
			}
		})
	}
}
