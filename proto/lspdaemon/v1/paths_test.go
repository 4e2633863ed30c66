package lspdaemonv1

import (
	"path"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCheckTreePath(t *testing.T) {
	long := strings.Repeat("d/", 511) + "x" // 1023 bytes
	for _, p := range []string{"a.go", "dir/a.go", "a b/ü.go", ".github/x.yml", ".git/config", long + "y", strings.Repeat("n", 255)} {
		if err := CheckTreePath(p); err != nil {
			t.Errorf("%q refused: %v", p, err)
		}
	}
	for _, p := range []string{"", "/a", "a//b", "a/", "./a", "a/../b", "..", `a\b.go`, "a\x00b", "a\nb", "a\x7fb", "\xff.go",
		long + "yz", strings.Repeat("n", 256), "a/" + strings.Repeat("n", 256) + "/b"} {
		if err := CheckTreePath(p); err == nil {
			t.Errorf("%q accepted", p)
		}
	}
}

// FuzzValidTreePath: whatever the rule accepts is a local, clean path that
// stays within a directory on every system, within the bounds.
func FuzzValidTreePath(f *testing.F) {
	for _, s := range []string{"a.go", `a\b.go`, "a/../b", "/etc/passwd", "a//b", strings.Repeat("x", 1025), "ü/é.ts", "C:/x", "a\tb"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if !ValidTreePath(p) {
			return
		}
		switch {
		case len(p) > MaxTreePathBytes, !utf8.ValidString(p):
			t.Fatalf("%q: out of bounds", p)
		case path.Clean(p) != p, !filepath.IsLocal(p), strings.HasPrefix(p, "/"):
			t.Fatalf("%q: not a clean local path", p)
		case strings.ContainsAny(p, "\\\x00"), strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }):
			t.Fatalf("%q: backslash or control character", p)
		}
		for _, seg := range strings.Split(p, "/") {
			if len(seg) > MaxTreeNameBytes || seg == ".." {
				t.Fatalf("%q: segment %q", p, seg)
			}
		}
	})
}
