// Package sanitize cleans text that comes from a language server before it
// leaves the daemon: control characters are removed, links keep their text
// but lose their targets (a remote link never reaches evidence), secret-shaped
// strings are redacted, and everything is bounded.
//
// A scheme is recognised only where it really is a URL: "https://…",
// "ftp://…", "file://…", "data:" followed by a media type or a comma, and any
// scheme as the target of a markdown link or autolink. An identifier
// followed by a colon — "data: unknown", "file: string", "{ http: Agent }"
// in a signature — is code, and is kept as it is.
package sanitize

import (
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Redacted replaces a secret-shaped string.
const Redacted = "[redacted]"

// linkSpace is the space a link's parts may have between them: blanks and
// at most one line break.
const linkSpace = `[ \t]*\n?[ \t]*`

var (
	// [text](target) and [text]: target reference definitions, outside
	// code, in the forms CommonMark gives them: the target in <…> or bare,
	// space and one line break around it, a title in "…", '…' or (…); a
	// definition inside a block quote or a list item, its target on the
	// next line.
	inlineLink = regexp.MustCompile(`\[([^\]\n]{0,512})\]\(` + linkSpace + `(?:<[^<>\n]{0,1000}>|[^)\s]{0,1000})` +
		`(?:` + linkSpace + `(?:"[^"\n]{0,256}"|'[^'\n]{0,256}'|\([^()\n]{0,256}\)))?` + linkSpace + `\)`)
	refLink = regexp.MustCompile(`(?m)^(?:[ \t]{0,3}(?:>|[-*+]|[0-9]{1,9}[.)])[ \t]*){0,8}[ \t]{0,3}\[[^\]\n]{1,256}\]:` + linkSpace + `\S+.*$\n?`)
	// An HTML attribute that names a target (href="//host/…" is a remote
	// link without a scheme), outside code: its value goes.
	htmlTarget = regexp.MustCompile(`(?i)(\b(?:href|src|srcset|action|formaction|poster|background|xlink:href)[ \t]*=[ \t]*)(?:"[^"\n]{0,1000}"|'[^'\n]{0,1000}'|[^\s>]{1,1000})`)
	// A CommonMark autolink: <scheme:target>, any scheme (javascript:,
	// vbscript:, data: …), outside code.
	autoLink = regexp.MustCompile(`<[A-Za-z][A-Za-z0-9+.-]{1,31}:[^<>\s]{0,1000}>`)
	// A script scheme glued to what follows ("javascript:alert(1)", as in
	// raw HTML's href="…") outside code: the scheme goes, the rest stays.
	// "javascript: boolean" is a signature and stays whole.
	scriptScheme = regexp.MustCompile(`(?i)(?:java|vb)script:(\S)`)
	// URLs in text and code alike. No word boundary before the scheme:
	// "00http://x" must lose its link too, and the scheme may be the last
	// thing in the text. data: counts only with its media type or comma
	// (RFC 2397), so "data: unknown" stays.
	bareURL = regexp.MustCompile(`(?i)(?:(?:https?|ftp|file)://|data:(?:[a-z]+/[a-z0-9.+-]+|;base64|,))[^\s<>()\[\]"'` + "`" + `]{0,1000}`)
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

// Markdown cleans markdown from a server and bounds it to max bytes. Link
// syntax is rewritten only outside code: inside a fence or a code span
// "handlers[name](req)" and "[key: string]: unknown" are code. URLs are
// removed everywhere.
func Markdown(s string, max int) string {
	s, _ = MarkdownCut(s, max)
	return s
}

// MarkdownCut is Markdown, and whether the text was cut at a bound.
func MarkdownCut(s string, max int) (string, bool) {
	cut := len(s) > 4*max
	s = Text(s, 4*max)
	for _, re := range []struct {
		re   *regexp.Regexp
		repl string
	}{{inlineLink, "$1"}, {refLink, ""}, {autoLink, ""}, {htmlTarget, `$1""`}, {scriptScheme, "$1"}} {
		s = replaceOutsideCode(s, re.re, re.repl)
	}
	s = bareURL.ReplaceAllString(s, "")
	s = strings.TrimRight(s, "\n ")
	return truncate(s, max), cut || len(s) > max
}

// replaceOutsideCode replaces the matches of re that start outside code
// (a link's text may hold a code span: [`pkg.Add` on pkg.go.dev](…)).
func replaceOutsideCode(s string, re *regexp.Regexp, repl string) string {
	var code [][2]int
	off := 0
	for _, seg := range segments(s) {
		if seg.code {
			code = append(code, [2]int{off, off + len(seg.text)})
		}
		off += len(seg.text)
	}
	var b strings.Builder
	last := 0
	// Both the code ranges and the matches come in order: one walk over
	// each (a range per match was quadratic in a hostile text).
	j := 0
	for _, m := range re.FindAllStringSubmatchIndex(s, -1) {
		for j < len(code) && code[j][1] <= m[0] {
			j++
		}
		if j < len(code) && code[j][0] <= m[0] {
			continue // inside code
		}
		b.WriteString(s[last:m[0]])
		b.Write(re.ExpandString(nil, repl, s, m))
		last = m[1]
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// segment is a run of markdown that is code (a fenced block or a code
// span, delimiters included) or prose.
type segment struct {
	text string
	code bool
}

// segments splits markdown into code and prose: fenced blocks (``` or ~~~
// at the start of a line, up to a closing fence of the same character and
// at least the same length, or the end) and, in prose, code spans (a run of
// backticks up to the next run of the same length; an unmatched run is
// prose).
func segments(s string) []segment {
	var out []segment
	prose := func(t string) {
		for t != "" {
			i := strings.IndexByte(t, '`')
			if i < 0 {
				out = append(out, segment{text: t})
				return
			}
			n := runLen(t[i:], '`')
			end := closingRun(t[i+n:], n)
			if end < 0 {
				out = append(out, segment{text: t[:i+n]})
				t = t[i+n:]
				continue
			}
			out = append(out, segment{text: t[:i]}, segment{text: t[i : i+n+end+n], code: true})
			t = t[i+n+end+n:]
		}
	}
	start := 0 // of the prose not yet emitted
	for pos := 0; pos < len(s); {
		eol := strings.IndexByte(s[pos:], '\n')
		line := s[pos:]
		if eol >= 0 {
			line = s[pos : pos+eol+1]
		}
		if ch, n := fence(line); n > 0 {
			prose(s[start:pos])
			end := len(s)
			for q := pos + len(line); q < len(s); {
				e := strings.IndexByte(s[q:], '\n')
				l := s[q:]
				if e >= 0 {
					l = s[q : q+e+1]
				}
				if c, m := fence(l); c == ch && m >= n && strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(l), string(ch))) == "" {
					end = q + len(l)
					break
				}
				q += len(l)
			}
			out = append(out, segment{text: s[pos:end], code: true})
			pos, start = end, end
			continue
		}
		pos += len(line)
	}
	prose(s[start:])
	return out
}

// fence reports the fence character and length opening line, if any.
func fence(line string) (byte, int) {
	t := strings.TrimLeft(line, " ")
	if len(line)-len(t) > 3 || t == "" || (t[0] != '`' && t[0] != '~') {
		return 0, 0
	}
	if n := runLen(t, t[0]); n >= 3 {
		return t[0], n
	}
	return 0, 0
}

func runLen(s string, c byte) int {
	n := 0
	for n < len(s) && s[n] == c {
		n++
	}
	return n
}

// closingRun finds, in s, a run of exactly n backticks and returns its
// offset, or -1.
func closingRun(s string, n int) int {
	for i := 0; i < len(s); {
		j := strings.IndexByte(s[i:], '`')
		if j < 0 {
			return -1
		}
		k := runLen(s[i+j:], '`')
		if k == n {
			return i + j
		}
		i += j + k
	}
	return -1
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
