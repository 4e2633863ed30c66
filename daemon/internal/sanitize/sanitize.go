// Package sanitize cleans text that comes from a language server before it
// leaves the daemon: control characters are removed, links keep their text
// but lose their targets (a remote link never reaches evidence), secret-shaped
// strings are redacted, and everything is bounded.
package sanitize

import (
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Redacted replaces a secret-shaped string.
const Redacted = "[redacted]"

var (
	// [text](target) and [text]: target reference definitions.
	inlineLink = regexp.MustCompile(`\[([^\]\n]{0,512})\]\(([^)\s]{0,1000})(?:\s+"[^"\n]{0,256}")?\)`)
	refLink    = regexp.MustCompile(`(?m)^\s{0,3}\[[^\]\n]{1,256}\]:\s*\S+.*$`)
	autoLink   = regexp.MustCompile(`<((?:https?|ftp|file|mailto|data|javascript):[^>\s]{0,1000})>`)
	// No word boundary before the scheme: "00http://x" must lose its link
	// too, and the scheme may be the last thing in the text.
	bareURL = regexp.MustCompile(`(?i)(?:https?|ftp|file|data|javascript):(?://)?[^\s<>()\[\]"'` + "`" + `]{0,1000}`)
	secrets = []*regexp.Regexp{
		regexp.MustCompile(`-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)`),
		regexp.MustCompile(`\b(?:AKIA|ASIA)[0-9A-Z]{16}\b`),
		regexp.MustCompile(`\b(?:ghp|gho|ghu|ghs|ghr|github_pat)_[A-Za-z0-9_]{20,}\b`),
		regexp.MustCompile(`\bglpat-[A-Za-z0-9_-]{20,}\b`),
		regexp.MustCompile(`\bxox[abposr]-[A-Za-z0-9-]{10,}\b`),
		regexp.MustCompile(`\bsk-[A-Za-z0-9_-]{20,}\b`),
		regexp.MustCompile(`\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\b`),
		regexp.MustCompile(`(?i)\b((?:password|passwd|secret|token|api[_-]?key|access[_-]?key)\s*[:=]\s*)["']?[^\s"',;]{8,}`),
	}
)

// Markdown cleans markdown from a server and bounds it to max bytes.
func Markdown(s string, max int) string {
	s = Text(s, 4*max)
	s = inlineLink.ReplaceAllString(s, "$1")
	s = refLink.ReplaceAllString(s, "")
	s = autoLink.ReplaceAllString(s, "")
	s = bareURL.ReplaceAllString(s, "")
	return truncate(strings.TrimRight(s, "\n "), max)
}

// Text removes control characters (keeping newline and tab), replaces
// invalid UTF-8, redacts secret-shaped strings and bounds s to max bytes.
func Text(s string, max int) string {
	if len(s) > 4*max {
		s = s[:4*max]
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\t':
			return r
		case r == '\r':
			return -1
		case unicode.IsControl(r), r == '\u2028', r == '\u2029',
			r >= '\u202a' && r <= '\u202e', r >= '\u2066' && r <= '\u2069': // bidi overrides
			return -1
		}
		return r
	}, s)
	for _, re := range secrets {
		s = re.ReplaceAllStringFunc(s, func(m string) string {
			if sub := re.FindStringSubmatch(m); len(sub) > 1 && sub[1] != "" {
				return sub[1] + Redacted
			}
			return Redacted
		})
	}
	return truncate(s, max)
}

// Line is Text for one-line fields (names, details): newlines become spaces.
func Line(s string, max int) string {
	return strings.Join(strings.Fields(Text(s, max)), " ")
}

// truncate cuts s to at most max bytes on a rune boundary.
func truncate(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
