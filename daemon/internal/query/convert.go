package query

import (
	"regexp"
	"sort"
	"strings"

	"github.com/hanzoai/lsp/daemon/internal/lsp"
	"github.com/hanzoai/lsp/daemon/internal/pool"
	"github.com/hanzoai/lsp/daemon/internal/sanitize"
	"github.com/hanzoai/lsp/daemon/internal/uri"
	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
)

// Bounds on what one answer may carry out of the daemon.
const (
	maxMarkdown = 64 << 10
	maxText     = 4 << 10
	maxName     = 512
)

func pbRange(r lsp.Range) *daemonv1.Range {
	return &daemonv1.Range{
		Start: &daemonv1.Position{Line: r.Start.Line, Character: r.Start.Character},
		End:   &daemonv1.Position{Line: r.End.Line, Character: r.End.Character},
	}
}

// converter applies the URI policy and the sanitiser, counting what it had
// to drop so that the answer can say partial.
type converter struct {
	pol     uri.Policy
	scrub   *strings.Replacer // host paths → repo-relative or placeholders
	dropped int
	// unexplained counts the dropped results no warning names: locations
	// the URI policy refused, elements the decoder could not read. The
	// evidence says how many, whatever else it warns of.
	unexplained int
	warnings    []string
	load        []string // the server's load problems (pool.LoadWarnings), or that it had not loaded (notLoaded)
	empty       bool     // the answer carries nothing
	// ext names the module of calls and type items outside the
	// workspace, whose wire shapes carry only a path.
	ext map[any]string
	// incomplete: the server was still building what the answer comes
	// from (lsp.Client.Indexing).
	incomplete bool
}

// clean rewrites the host paths the scrubber knows in s. Every string an
// answer carries from a server goes through it before it is cut (CONTRACT
// §4: no host path in an answer): a type printer that writes a tree's
// absolute path into a hover writes it into a signature's label too.
func (c *converter) clean(s string) string {
	if c.scrub == nil {
		return s
	}
	return c.scrub.Replace(s)
}

func (c *converter) external(item any, loc uri.Location) {
	if !loc.External {
		return
	}
	if c.ext == nil {
		c.ext = map[any]string{}
	}
	c.ext[item] = loc.Module
}

func (c *converter) location(u lsp.DocumentURI) (uri.Location, bool) {
	loc, err := c.pol.Map(string(u))
	if err != nil {
		c.dropped++
		c.unexplained++
		return uri.Location{}, false
	}
	return loc, true
}

func (c *converter) locations(in []lsp.Location) []*daemonv1.Location {
	out := make([]*daemonv1.Location, 0, len(in))
	for _, l := range in {
		loc, ok := c.location(l.URI)
		if !ok {
			continue
		}
		out = append(out, &daemonv1.Location{Path: loc.Path, Range: pbRange(l.Range), External: loc.External, Module: loc.Module})
	}
	// Stable order for stable pages: workspace files first, then by place.
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.External != b.External {
			return !a.External
		}
		if a.Module != b.Module {
			return a.Module < b.Module
		}
		if a.Path != b.Path {
			return a.Path < b.Path
		}
		return lessPos(a.Range.Start, b.Range.Start)
	})
	return out
}

func lessPos(a, b *daemonv1.Position) bool {
	if a.Line != b.Line {
		return a.Line < b.Line
	}
	return a.Character < b.Character
}

func (c *converter) hover(h *lsp.Hover) *daemonv1.Hover {
	if h == nil {
		return &daemonv1.Hover{}
	}
	md, cut := sanitize.MarkdownCut(c.clean(joinSplitPaths(h.Markdown, c.scrub)), maxMarkdown)
	out := &daemonv1.Hover{Present: true, Markdown: md}
	if h.Range != nil {
		out.Range = pbRange(*h.Range)
	}
	if h.Truncated || cut {
		// Not the server's whole answer: partial, as a list cut at a bound.
		c.warnings = append(c.warnings, "hover markdown truncated")
		c.dropped++
	}
	return out
}

// symbols are spec's symbols on the wire, each with its file's
// languageId as spec serves it.
func (c *converter) symbols(in []lsp.Symbol, spec *pool.Spec) []*daemonv1.Symbol {
	out := make([]*daemonv1.Symbol, 0, len(in))
	for _, s := range in {
		loc, ok := c.location(s.URI)
		if !ok || loc.External {
			// Workspace symbols outside the repository are not the
			// repository's symbols.
			if ok {
				continue
			}
			continue
		}
		out = append(out, &daemonv1.Symbol{
			Name: sanitize.Line(c.clean(s.Name), maxName), Kind: s.Kind.String(), Detail: sanitize.Line(c.clean(s.Detail), maxText),
			Path: loc.Path, Range: pbRange(s.Range), SelectionRange: pbRange(s.SelectionRange),
			Container: sanitize.Line(c.clean(s.Container), maxName), Language: spec.LanguageID(loc.Path),
		})
	}
	return out
}

func (c *converter) diagnostics(in []lsp.Diagnostic) []*daemonv1.Diagnostic {
	out := make([]*daemonv1.Diagnostic, 0, len(in))
	for _, d := range in {
		out = append(out, &daemonv1.Diagnostic{
			Range: pbRange(d.Range), Severity: d.Severity.String(), Code: sanitize.Line(c.clean(d.Code), maxName),
			Source: sanitize.Line(c.clean(d.Source), maxName), Message: sanitize.Text(c.clean(d.Message), maxText),
		})
	}
	sort.SliceStable(out, func(i, j int) bool { return lessPos(out[i].Range.Start, out[j].Range.Start) })
	return out
}

func (c *converter) completions(in []lsp.CompletionItem) []*daemonv1.Completion {
	out := make([]*daemonv1.Completion, 0, len(in))
	for _, it := range in {
		out = append(out, &daemonv1.Completion{
			Label: sanitize.Line(c.clean(it.Label), maxName), Kind: it.Kind.String(),
			Detail: sanitize.Line(c.clean(it.Detail), maxText), InsertText: sanitize.Text(c.clean(it.InsertText), maxText),
		})
	}
	return out
}

func (c *converter) signatures(h *lsp.SignatureHelp) *daemonv1.Signatures {
	out := &daemonv1.Signatures{}
	if h == nil {
		return out
	}
	for _, s := range h.Signatures {
		sig := &daemonv1.Signature{Label: sanitize.Line(c.clean(s.Label), maxText), Documentation: sanitize.Markdown(c.clean(s.Documentation), maxMarkdown)}
		for _, p := range s.Parameters {
			sig.Parameters = append(sig.Parameters, &daemonv1.Parameter{Label: sanitize.Line(c.clean(p.Label), maxName), Documentation: sanitize.Markdown(c.clean(p.Documentation), maxText)})
		}
		out.Items = append(out.Items, sig)
	}
	out.ActiveSignature, out.ActiveParameter = h.ActiveSignature, h.ActiveParameter
	return out
}

func (c *converter) calls(in []lsp.CallHierarchyCall) []*daemonv1.Call {
	out := make([]*daemonv1.Call, 0, len(in))
	for _, call := range in {
		loc, ok := c.location(call.Item.URI)
		if !ok {
			continue
		}
		item := &daemonv1.Call{
			Name: sanitize.Line(c.clean(call.Item.Name), maxName), Kind: call.Item.Kind.String(), Path: loc.Path,
			Range: pbRange(call.Item.Range), SelectionRange: pbRange(call.Item.SelectionRange),
		}
		for _, r := range call.FromRanges {
			item.FromRanges = append(item.FromRanges, pbRange(r))
		}
		c.external(item, loc)
		out = append(out, item)
	}
	return out
}

func (c *converter) types(in []lsp.TypeHierarchyItem) []*daemonv1.TypeItem {
	out := make([]*daemonv1.TypeItem, 0, len(in))
	for _, t := range in {
		loc, ok := c.location(t.URI)
		if !ok {
			continue
		}
		item := &daemonv1.TypeItem{
			Name: sanitize.Line(c.clean(t.Name), maxName), Kind: t.Kind.String(), Path: loc.Path,
			Range: pbRange(t.Range), SelectionRange: pbRange(t.SelectionRange),
		}
		c.external(item, loc)
		out = append(out, item)
	}
	return out
}

// page cuts items to [offset, offset+limit) and reports the total and the
// next offset when more remain.
func page[T any](items []T, offset, limit uint32) ([]T, uint32, *uint32) {
	total := uint32(len(items))
	if limit == 0 {
		limit = 100
	}
	if offset >= total {
		return nil, total, nil
	}
	end := min(uint64(offset)+uint64(limit), uint64(total))
	var next *uint32
	if end < uint64(total) {
		n := uint32(end)
		next = &n
	}
	return items[offset:end], total, next
}

// splitLiterals are adjacent string literals on consecutive lines: a C
// compiler concatenates them, and clang-format (which clangd runs on a
// hover's macro expansion) splits a literal longer than its column limit
// into them. RE2 matches in time linear in the text (bounded by the
// client's read of the answer).
var (
	splitLiterals = regexp.MustCompile(`"[^"\\\n]*"(?:[ \t]*\n[ \t]*"[^"\\\n]*")+`)
	literalPiece  = regexp.MustCompile(`"([^"\\\n]*)"`)
)

// joinSplitPaths joins the pieces of a literal clang-format split when
// the whole names a host path the scrubber rewrites: __FILE__ in an
// assert's expansion is the file's absolute path, longer than the column
// limit under the daemon's root, and split it would reach the tenant with
// the tree's host directory ($LSP_DAEMON_ROOT/trees/<tenant>/…) instead
// of its repo-relative path. Other split literals stay as the server wrote
// them.
func joinSplitPaths(md string, scrub *strings.Replacer) string {
	if scrub == nil || !strings.Contains(md, "\"\n") {
		return md
	}
	return splitLiterals.ReplaceAllStringFunc(md, func(run string) string {
		var b strings.Builder
		for _, m := range literalPiece.FindAllStringSubmatch(run, -1) {
			b.WriteString(m[1])
		}
		joined := b.String()
		if scrub.Replace(joined) == joined {
			return run
		}
		return `"` + joined + `"`
	})
}
