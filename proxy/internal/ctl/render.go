package ctl

import (
	"fmt"
	"io"
	"regexp"
	"strings"
	"text/tabwriter"
)

// answer is every field an operation answer may carry (CONTRACT §4): the
// one decoding of an answer, for the CLI's rendering and the editor bridge
// alike.
type answer struct {
	Repo     string `json:"repo"`
	Commit   string `json:"commit"`
	Prepared bool   `json:"prepared"`
	Evidence struct {
		State          string   `json:"state"`
		Warnings       []string `json:"warnings"`
		DocumentSHA256 *string  `json:"document_sha256"`
	} `json:"evidence"`
	NextCursor *string `json:"next_cursor"`

	Hover *struct {
		Markdown string `json:"markdown"`
		Range    *rng   `json:"range"`
	} `json:"hover"`
	Locations []location `json:"locations"`
	// Resolved is where a symbol or text address put the position.
	Resolved *location `json:"resolved"`
	Symbols  []struct {
		Name      string  `json:"name"`
		Kind      string  `json:"kind"`
		Detail    *string `json:"detail"`
		Path      string  `json:"path"`
		Range     *rng    `json:"range"`
		Container *string `json:"container"`
		Code      *code   `json:"code"`
	} `json:"symbols"`
	Diagnostics []struct {
		Range    *rng    `json:"range"`
		Severity *string `json:"severity"`
		Code     *string `json:"code"`
		Source   *string `json:"source"`
		Message  string  `json:"message"`
	} `json:"diagnostics"`
	Completions []struct {
		Label      string  `json:"label"`
		Kind       *string `json:"kind"`
		Detail     *string `json:"detail"`
		InsertText *string `json:"insert_text"`
	} `json:"completions"`
	Incomplete bool `json:"incomplete"`
	Signatures []struct {
		Label         string  `json:"label"`
		Documentation *string `json:"documentation"`
		Parameters    []struct {
			Label string `json:"label"`
		} `json:"parameters"`
	} `json:"signatures"`
	ActiveSignature *int                `json:"active_signature"`
	ActiveParameter *int                `json:"active_parameter"`
	Calls           []hierItem          `json:"calls"`
	Types           []hierItem          `json:"types"`
	Languages       []string            `json:"languages"`
	Tools           map[string][]string `json:"tools"`
	Warnings        []string            `json:"warnings"`

	// A read's answer.
	Path      string   `json:"path"`
	Module    *string  `json:"module"`
	StartLine int      `json:"start_line"`
	Lines     []string `json:"lines"`
	Truncated bool     `json:"truncated"`
	LineCount int      `json:"line_count"`
}

type location struct {
	Path     string  `json:"path"`
	Range    *rng    `json:"range"`
	External bool    `json:"external"`
	Module   *string `json:"module"`
	Code     *code   `json:"code"`
}

// code is the source the service sent with a location (--context).
type code struct {
	StartLine int      `json:"start_line"`
	Lines     []string `json:"lines"`
	Truncated bool     `json:"truncated"`
}

// printCode prints c's lines numbered 1-based, indented under their
// location.
func printCode(w io.Writer, c *code) {
	if c == nil {
		return
	}
	for i, l := range c.Lines {
		fmt.Fprintf(w, "  %6d| %s\n", c.StartLine+i+1, l)
	}
	if c.Truncated {
		fmt.Fprintln(w, "  … (truncated)")
	}
}

type hierItem struct {
	Name           string `json:"name"`
	Kind           string `json:"kind"`
	Path           string `json:"path"`
	Range          *rng   `json:"range"`
	SelectionRange *rng   `json:"selection_range"`
	FromRanges     []*rng `json:"from_ranges"`
	Code           *code  `json:"code"`
}

type rng struct {
	Start struct {
		Line      int `json:"line"`
		Character int `json:"character"`
	} `json:"start"`
	End struct {
		Line      int `json:"line"`
		Character int `json:"character"`
	} `json:"end"`
}

// at is path:line:col with 1-based line and column, as people and
// compilers write positions (the API's are 0-based).
func at(path string, r *rng) string {
	if r == nil {
		return path
	}
	return fmt.Sprintf("%s:%d:%d", path, r.Start.Line+1, r.Start.Character+1)
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// render prints an answer for a person: results on stdout, what the call
// cost and whether more remain on stderr. path is the asked document (a
// diagnostic carries no path of its own).
func render(cmd, path string, a *answer, stdout, stderr io.Writer) {
	if a.Prepared {
		fmt.Fprintf(stderr, "prepared %s@%s (this request was charged for the prepare)\n", a.Repo, short(a.Commit))
	}
	if a.Resolved != nil {
		fmt.Fprintf(stderr, "resolved to %s\n", at(a.Resolved.Path, a.Resolved.Range))
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	switch cmd {
	case "read":
		tw.Flush()
		where := a.Path
		if m := deref(a.Module); m != "" {
			where = m + " " + where
		}
		fmt.Fprintf(stderr, "%s lines %d-%d of %d\n", where, a.StartLine+1, a.StartLine+len(a.Lines), a.LineCount)
		printCode(stdout, &code{StartLine: a.StartLine, Lines: a.Lines, Truncated: a.Truncated})
	case "prepare":
		fmt.Fprintf(tw, "%s@%s is ready\n", a.Repo, short(a.Commit))
		for _, l := range a.Languages {
			fmt.Fprintf(tw, "  %s\t%s\n", l, strings.Join(a.Tools[l], " "))
		}
		for _, w := range a.Warnings {
			fmt.Fprintf(stderr, "warning: %s\n", w)
		}
	case "hover":
		if a.Hover == nil {
			fmt.Fprintln(stderr, "no hover information at that position")
			return
		}
		fmt.Fprintln(tw, PlainText(a.Hover.Markdown))
	case "locate":
		for _, l := range a.Locations {
			if l.External {
				fmt.Fprintf(tw, "%s\t(%s)\n", at(l.Path, l.Range), deref(l.Module))
			} else {
				fmt.Fprintln(tw, at(l.Path, l.Range))
			}
			if l.Code != nil {
				tw.Flush()
				printCode(stdout, l.Code)
			}
		}
	case "symbols":
		depth := map[string]int{}
		for _, s := range a.Symbols {
			d := 0
			if c := deref(s.Container); c != "" {
				if cd, ok := depth[c]; ok {
					d = cd + 1
				}
			}
			depth[s.Name] = d
			fmt.Fprintf(tw, "%s%s %s\t%s\t%s\n", strings.Repeat("  ", d), s.Kind, s.Name, deref(s.Detail), at(s.Path, s.Range))
			if s.Code != nil {
				tw.Flush()
				printCode(stdout, s.Code)
			}
		}
	case "diagnostics":
		for _, d := range a.Diagnostics {
			sev := deref(d.Severity)
			if sev == "" {
				sev = "diagnostic"
			}
			src := strings.TrimSpace(deref(d.Source) + " " + deref(d.Code))
			if src != "" {
				src = " [" + src + "]"
			}
			fmt.Fprintf(tw, "%s: %s: %s%s\n", at(path, d.Range), sev, d.Message, src)
		}
	case "complete":
		for _, c := range a.Completions {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Label, deref(c.Kind), deref(c.Detail))
		}
		if a.Incomplete {
			fmt.Fprintln(stderr, "(the list is incomplete: type more and ask again)")
		}
	case "signature":
		for i, s := range a.Signatures {
			mark := " "
			if a.ActiveSignature != nil && *a.ActiveSignature == i {
				mark = "*"
			}
			fmt.Fprintf(tw, "%s %s\n", mark, s.Label)
			if i == activeOr0(a.ActiveSignature) && a.ActiveParameter != nil && *a.ActiveParameter < len(s.Parameters) {
				fmt.Fprintf(tw, "  parameter: %s\n", s.Parameters[*a.ActiveParameter].Label)
			}
			if doc := PlainText(deref(s.Documentation)); doc != "" {
				fmt.Fprintf(tw, "  %s\n", strings.ReplaceAll(doc, "\n", "\n  "))
			}
		}
	case "calls", "types":
		items := a.Calls
		if cmd == "types" {
			items = a.Types
		}
		for _, it := range items {
			fmt.Fprintf(tw, "%s %s\t%s\n", it.Kind, it.Name, at(it.Path, it.Range))
			for _, r := range it.FromRanges {
				fmt.Fprintf(tw, "  from\t%s\n", at(it.Path, r))
			}
			if it.Code != nil {
				tw.Flush()
				printCode(stdout, it.Code)
			}
		}
	}
	if a.Evidence.State != "" && a.Evidence.State != "current" {
		fmt.Fprintf(stderr, "evidence: %s %s\n", a.Evidence.State, strings.Join(a.Evidence.Warnings, "; "))
	}
	if a.NextCursor != nil {
		fmt.Fprintf(stderr, "more results: add --cursor %s\n", *a.NextCursor)
	}
}

func activeOr0(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

func short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}

var (
	mdLink     = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	mdEscape   = regexp.MustCompile("\\\\([!-/:-@\\[-`{-~])")
	mdHeading  = regexp.MustCompile(`^#{1,6}\s+`)
	mdRule     = regexp.MustCompile(`^\s*(-{3,}|\*{3,}|_{3,})\s*$`)
	mdStrong   = regexp.MustCompile(`\*\*([^*]+)\*\*|__([^_]+)__`)
	mdBacktick = regexp.MustCompile("`([^`]*)`")
)

// PlainText renders the hover markdown a language server sends as text a
// person reads in a terminal: code blocks without their fences, links as
// their text, no heading marks, rules, emphasis or backslash escapes, and
// at most one blank line in a row. Code is left exactly as it is.
func PlainText(md string) string {
	var out []string
	inCode := false
	blank := false
	for _, line := range strings.Split(strings.ReplaceAll(md, "\r\n", "\n"), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inCode = !inCode
			continue
		}
		if !inCode {
			if mdRule.MatchString(line) {
				line = ""
			}
			line = mdHeading.ReplaceAllString(line, "")
			line = mdLink.ReplaceAllString(line, "$1")
			line = mdStrong.ReplaceAllString(line, "$1$2")
			line = mdBacktick.ReplaceAllString(line, "$1")
			line = mdEscape.ReplaceAllString(line, "$1")
			line = strings.TrimRight(line, " \t")
		}
		if strings.TrimSpace(line) == "" {
			if blank || len(out) == 0 {
				continue
			}
			blank = true
			out = append(out, "")
			continue
		}
		blank = false
		out = append(out, line)
	}
	for len(out) > 0 && out[len(out)-1] == "" {
		out = out[:len(out)-1]
	}
	return strings.Join(out, "\n")
}
