package forge

import (
	"strings"
	"unicode/utf8"
)

// maxRevLen bounds a revision; git itself has no limit, requests must.
const maxRevLen = 1024

type revKind uint8

const (
	revDefault revKind = iota // the default branch
	revSHA                    // a full commit sha
	revBranch                 // refs/heads/X
	revTag                    // refs/tags/X
	revName                   // X: a branch, else a tag
)

// Rev is a parsed revision. The zero Rev is the default branch.
type Rev struct {
	kind revKind
	name string // the sha, or the branch/tag name without its refs/ prefix
	// hex: an unqualified all-hex name shorter than a full sha ("cafe",
	// "abc1234"). It is looked up as a ref, as git does; when no branch or
	// tag has that name it is an abbreviated sha, which is refused.
	hex bool
}

// ParseRev parses a revision as callers give it:
//
//   - "" (or "HEAD"): the default branch;
//   - a full 40- or 64-hex commit sha (case-insensitive; kept lowercase);
//   - refs/heads/X or refs/tags/X;
//   - an unqualified name X, looked up as a branch first, then as a tag.
//
// A shorter all-hex string ("cafe", "add", "b1") is such a name too, as git
// resolves it: a ref of that name wins. Only when no branch or tag has it is
// it an abbreviated sha, and then Resolve refuses it with ErrBadRev (a short
// sha is ambiguous and the forge cannot be asked to expand one). A hex
// string longer than 40 but not 64 characters, other refs/ namespaces,
// control characters, invalid UTF-8, ".." and every name git's
// check-ref-format rejects are ErrBadRev here.
func ParseRev(s string) (Rev, error) {
	if s == "" || s == "HEAD" {
		return Rev{}, nil
	}
	if len(s) > maxRevLen {
		return Rev{}, newError("rev", ErrBadRev, "revision too long")
	}
	if isHex(s) {
		switch {
		case len(s) == 40 || len(s) == 64:
			return Rev{kind: revSHA, name: strings.ToLower(s)}, nil
		case len(s) > 40:
			return Rev{}, newError("rev", ErrBadRev, "malformed commit sha: give the full 40- or 64-character sha")
		}
		return Rev{kind: revName, name: s, hex: true}, nil
	}
	if !utf8.ValidString(s) {
		return Rev{}, newError("rev", ErrBadRev, "revision is not valid UTF-8")
	}
	kind, name := revName, s
	if rest, ok := strings.CutPrefix(s, "refs/heads/"); ok {
		kind, name = revBranch, rest
	} else if rest, ok := strings.CutPrefix(s, "refs/tags/"); ok {
		kind, name = revTag, rest
	} else if strings.HasPrefix(s, "refs/") {
		return Rev{}, newError("rev", ErrBadRev, "only refs/heads/ and refs/tags/ revisions are supported")
	}
	if !validRefName(name) {
		return Rev{}, newError("rev", ErrBadRev, "invalid branch or tag name")
	}
	return Rev{kind: kind, name: name}, nil
}

// String returns the revision in canonical form: "", the sha, refs/heads/X,
// refs/tags/X or X. ParseRev(r.String()) == r.
func (r Rev) String() string {
	switch r.kind {
	case revBranch:
		return "refs/heads/" + r.name
	case revTag:
		return "refs/tags/" + r.name
	}
	return r.name
}

// IsDefault reports whether r names the default branch.
func (r Rev) IsDefault() bool { return r.kind == revDefault }

// errNoSuchRef is Resolve's answer when no ref matches r: a hex name that
// names no branch or tag is an abbreviated sha, refused; anything else is
// simply not there.
func (r Rev) errNoSuchRef(op string) error {
	if r.hex {
		return newError(op, ErrBadRev, "no branch or tag has this name, and an abbreviated commit sha is not accepted: give the full 40- or 64-character sha")
	}
	return newError(op, ErrNotFound, revNotFound)
}

// Commit returns the sha when r is a full commit sha.
func (r Rev) Commit() (string, bool) { return r.name, r.kind == revSHA }

func isHex(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

func isFullSHA(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// validRefName applies git's check-ref-format rules to a branch or tag name
// (the part after refs/heads/ or refs/tags/), and also refuses a leading '-'
// so a name can never read as an option.
func validRefName(name string) bool {
	if name == "" || name == "@" || name[0] == '-' || name[0] == '/' {
		return false
	}
	if strings.HasSuffix(name, "/") || strings.HasSuffix(name, ".") {
		return false
	}
	if strings.Contains(name, "..") || strings.Contains(name, "@{") || strings.Contains(name, "//") {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c < 0x20 || c == 0x7f || strings.IndexByte(" ~^:?*[\\", c) >= 0 {
			return false
		}
	}
	for _, comp := range strings.Split(name, "/") {
		if comp == "" || comp[0] == '.' || strings.HasSuffix(comp, ".lock") {
			return false
		}
	}
	return true
}
