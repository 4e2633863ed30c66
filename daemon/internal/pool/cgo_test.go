package pool

import "testing"

func TestImportsC(t *testing.T) {
	for _, tc := range []struct {
		src  string
		want bool
	}{
		{"package a\n\n// #include <stdlib.h>\nimport \"C\"\n", true},
		{"package a\n\nimport (\n\t\"fmt\"\n\t\"C\"\n)\n", true},
		{"//go:build linux\n\npackage a\n\n/*\n#cgo LDFLAGS: -lm\n*/\nimport \"C\"\n\nfunc f() {", true}, // cut after its imports
		{"package a\n\nimport \"fmt\"\n\nvar s = \"C\"\n", false},
		{"package a\n\nimport c \"example.com/C\"\n", false},
		{"not go at all \"C\"", false},
		{"", false},
	} {
		if got := importsC([]byte(tc.src)); got != tc.want {
			t.Errorf("importsC(%q) = %v, want %v", tc.src, got, tc.want)
		}
	}
}

func FuzzImportsC(f *testing.F) {
	f.Add([]byte("package a\n\nimport \"C\"\n"))
	f.Add([]byte("package a\nimport (\"C\"; \"fmt\")\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		if len(src) > maxCgoScanBytes {
			src = src[:maxCgoScanBytes]
		}
		_ = importsC(src)
		_ = imports(src)
	})
}
