package deps

import (
	"strconv"
	"strings"
)

// goVersion is a Go version as go.mod and toolchains spell it, ordered as
// the go command orders them: 1.21 < 1.21rc1 < 1.21.0 < 1.21.1.
type goVersion struct {
	major, minor int
	kind         int // 0 language version, 1 beta, 2 rc, 3 release
	n            int // pre-release number or patch
}

// parseGo parses "1.21", "1.21rc2", "1.21.3" (an optional "go" prefix and a
// "-suffix" of a custom toolchain are dropped).
func parseGo(s string) (goVersion, bool) {
	s = strings.TrimPrefix(s, "go")
	if i := strings.IndexAny(s, "- "); i >= 0 {
		s = s[:i]
	}
	var v goVersion
	major, rest, _ := strings.Cut(s, ".")
	var ok bool
	if v.major, ok = atoi(major); !ok {
		return v, false
	}
	if rest == "" {
		return v, true
	}
	minor := rest
	for i, c := range rest {
		if c < '0' || c > '9' {
			minor, rest = rest[:i], rest[i:]
			break
		}
		if i == len(rest)-1 {
			rest = ""
		}
	}
	if v.minor, ok = atoi(minor); !ok {
		return v, false
	}
	switch {
	case rest == "":
	case strings.HasPrefix(rest, "."):
		v.kind = 3
		v.n, ok = atoi(rest[1:])
	case strings.HasPrefix(rest, "rc"):
		v.kind = 2
		v.n, ok = atoi(rest[2:])
	case strings.HasPrefix(rest, "beta"):
		v.kind = 1
		v.n, ok = atoi(rest[4:])
	default:
		ok = false
	}
	return v, ok
}

func atoi(s string) (int, bool) {
	if s == "" || len(s) > 9 {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	return n, err == nil && n >= 0
}

// newerGo reports whether want is a later Go than have. An unparsable want
// counts as newer (refused); an unparsable have (a development build)
// refuses nothing it cannot compare.
func newerGo(want, have string) bool {
	w, ok := parseGo(want)
	if !ok {
		return true
	}
	h, ok := parseGo(have)
	if !ok {
		return false
	}
	for _, d := range [][2]int{{w.major, h.major}, {w.minor, h.minor}, {w.kind, h.kind}, {w.n, h.n}} {
		if d[0] != d[1] {
			return d[0] > d[1]
		}
	}
	return false
}
