package query

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestFindAnchor(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files []string
		exts  []string
		want  string
	}{
		{"first in path order", []string{"src/b.ts", "src/a.ts", "z.ts"}, []string{".ts"}, "src/a.ts"},
		{"node_modules and hidden dirs skipped", []string{"node_modules/typescript/lib/x.ts", ".git/y.ts", "app/main.tsx"}, []string{".ts", ".tsx"}, "app/main.tsx"},
		{"other languages ignored", []string{"go.mod", "main.go", "web/index.js"}, []string{".js"}, "web/index.js"},
		{"none", []string{"README.md", "node_modules/x.ts"}, []string{".ts"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for _, f := range tc.files {
				p := filepath.Join(root, filepath.FromSlash(f))
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if got := findAnchor(root, tc.exts); got != tc.want {
				t.Fatalf("findAnchor = %q; want %q", got, tc.want)
			}
		})
	}
}

// TestAwaitLoadNamesTheUndiagnosed: a server that reports its diagnoses
// (a fake speaking as gopls, under gopls's signs) and has not ended its
// initial diagnosis when the first-load wait ends is named, for the
// prepare to say so; one whose report ended is not.
func TestAwaitLoadNamesTheUndiagnosed(t *testing.T) {
	for _, report := range []string{"runs", "ends"} {
		s := fakeSpec(t, "go", "-diagnosis="+report)
		s.LoadQuiet = 100 * time.Millisecond
		r, w := fakeWorkspace(t, s)
		notAwaited, undiagnosed := r.AwaitLoad(ctxFor(t, time.Minute), w, "")
		if len(notAwaited) != 0 {
			t.Errorf("%s: not awaited %q", report, notAwaited)
		}
		if want := report == "runs"; slices.Equal(undiagnosed, []string{"go-server"}) != want || len(undiagnosed) > 1 {
			t.Errorf("diagnosis %s: undiagnosed %q", report, undiagnosed)
		}
	}
}
