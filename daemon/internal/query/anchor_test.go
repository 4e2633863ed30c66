package query

import (
	"os"
	"path/filepath"
	"testing"
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
