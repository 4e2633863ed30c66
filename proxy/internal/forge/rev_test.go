package forge

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParseRev(t *testing.T) {
	sha1 := strings.Repeat("0a", 20)
	sha256 := strings.Repeat("b1", 32)
	for _, tc := range []struct {
		in      string
		want    string // canonical String()
		kind    revKind
		wantErr bool
	}{
		{"", "", revDefault, false},
		{"HEAD", "", revDefault, false},
		{sha1, sha1, revSHA, false},
		{strings.ToUpper(sha1), sha1, revSHA, false},
		{sha256, sha256, revSHA, false},
		{"refs/heads/main", "refs/heads/main", revBranch, false},
		{"refs/tags/v1.2.3", "refs/tags/v1.2.3", revTag, false},
		{"main", "main", revName, false},
		{"feature/x-y_z", "feature/x-y_z", revName, false},
		{"refs/heads/cafe", "refs/heads/cafe", revBranch, false}, // an all-hex branch, qualified
		{"v1", "v1", revName, false},
		{"ünïcode", "ünïcode", revName, false},
		// Shorter all-hex strings are names first, as git resolves them
		// (Resolve refuses one that no ref has: an abbreviated sha).
		{"abc1234", "abc1234", revName, false},
		{"cafe", "cafe", revName, false},
		{"CAFE", "CAFE", revName, false},
		{sha1[:39], sha1[:39], revName, false},
		{sha256[:63], "", 0, true},
		{sha1 + "0", "", 0, true},
		// Names git rejects.
		{"a..b", "", 0, true},
		{"..", "", 0, true},
		{"a b", "", 0, true},
		{"a\x00b", "", 0, true},
		{"a\nb", "", 0, true},
		{"a\x7fb", "", 0, true},
		{"a~1", "", 0, true},
		{"a^", "", 0, true},
		{"a:b", "", 0, true},
		{"a?", "", 0, true},
		{"a*", "", 0, true},
		{"a[b", "", 0, true},
		{`a\b`, "", 0, true},
		{"a@{1}", "", 0, true},
		{"@", "", 0, true},
		{"/a", "", 0, true},
		{"a/", "", 0, true},
		{"a//b", "", 0, true},
		{".a", "", 0, true},
		{"a/.b", "", 0, true},
		{"a.lock", "", 0, true},
		{"a/b.lock/c", "", 0, true},
		{"a.", "", 0, true},
		{"-a", "", 0, true},
		{"refs/heads/", "", 0, true},
		{"refs/tags/", "", 0, true},
		{"refs/pull/1/head", "", 0, true},
		{"refs/remotes/origin/main", "", 0, true},
		{"\xff", "", 0, true},
		{strings.Repeat("a", maxRevLen+1), "", 0, true},
	} {
		r, err := ParseRev(tc.in)
		if tc.wantErr {
			if !errors.Is(err, ErrBadRev) {
				t.Errorf("ParseRev(%q) = %v, %v; want ErrBadRev", tc.in, r, err)
			}
			continue
		}
		if err != nil || r.String() != tc.want || r.kind != tc.kind {
			t.Errorf("ParseRev(%q) = %q (kind %d), %v; want %q (kind %d)", tc.in, r.String(), r.kind, err, tc.want, tc.kind)
		}
	}
	if _, err := ParseRev(sha1 + "0"); err == nil || !strings.Contains(err.Error(), "full") {
		t.Errorf("a malformed sha's error should ask for the full sha: %v", err)
	}
	if r, _ := ParseRev("cafe"); !r.hex {
		t.Errorf("ParseRev(cafe) is not marked as a possible abbreviated sha")
	}
}

// TestRefNamesAgreeWithGit checks validRefName against git's own
// check-ref-format on tricky names. validRefName is stricter in two ways
// that are tested in TestParseRev instead: "@" alone (git's shorthand for
// HEAD) and a leading '-'.
func TestRefNamesAgreeWithGit(t *testing.T) {
	names := []string{
		"main", "a/b", "a..b", "a.lock", "a/b.lock", "a.lock/b", ".a", "a/.b", "a.", "a/", "/a",
		"a//b", "a@{b", "a@b", "@@", "a/@", "a b", "a~", "a^", "a:", "a?", "a*", "a[", `a\`, "a\tb",
		"a\x7f", "ä", "a/./b", "a/../b", "x.y.z", "{a}", "a#b", "a%b", "a!b", "a'b", `a"b`, "a,b",
		"a;b", "a=b", "a+b", "a&b", "a|b", "a<b", "a>b", "lock", ".lock", "a..", "...", "a.b.",
	}
	for _, n := range names {
		err := exec.Command("git", "check-ref-format", "refs/heads/"+n).Run()
		gitOK := err == nil
		if got := validRefName(n); got != gitOK {
			t.Errorf("validRefName(%q) = %v, git says %v", n, got, gitOK)
		}
	}
}

func FuzzParseRev(f *testing.F) {
	for _, s := range []string{"", "HEAD", "main", "refs/heads/a", "refs/tags/v1", strings.Repeat("a", 40),
		strings.Repeat("F", 64), "abc", "a..b", "a/b.lock", "refs/pull/1", "x\x00y", "@{", "ü/ß"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRev(s)
		if err != nil {
			if !errors.Is(err, ErrBadRev) {
				t.Fatalf("ParseRev(%q) error %v is not ErrBadRev", s, err)
			}
			// Messages are fixed text: short, printable, never the input.
			if msg := err.Error(); len(msg) > 120 || strings.ContainsFunc(msg, func(r rune) bool { return r < 0x20 || r > 0x7e }) {
				t.Fatalf("error message %q", msg)
			}
			return
		}
		c := r.String()
		again, err := ParseRev(c)
		if err != nil || again != r {
			t.Fatalf("ParseRev(%q).String() = %q does not round-trip: %v, %v", s, c, again, err)
		}
		if !utf8.ValidString(c) || strings.Contains(c, "..") || strings.ContainsAny(c, " \x00\n\r\t~^:?*[\\") {
			t.Fatalf("accepted an unsafe revision %q", c)
		}
		if sha, ok := r.Commit(); ok && !isFullSHA(sha) {
			t.Fatalf("sha %q is not a full lowercase sha", sha)
		}
		for _, p := range refPrefixes(r) {
			if strings.ContainsAny(p, "\n\x00") {
				t.Fatalf("ref prefix %q would break the ls-refs request", p)
			}
		}
	})
}
