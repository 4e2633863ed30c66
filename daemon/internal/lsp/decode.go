package lsp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// errShape reports a top-level answer whose shape the protocol does not
// allow; element-level oddities are dropped and counted instead.
var errShape = errors.New("unexpected result shape")

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || bytes.Equal(raw, []byte("null"))
}

// eachElement calls fn with each element of the JSON array raw, at most
// max of them; truncated reports elements left over. The elements are views
// of raw's bytes, not copies: a copy per element, made again at every level
// of a nested answer (document symbols' children), held the answer's size
// once per level. raw must be valid JSON (checked: errShape otherwise).
func eachElement(raw json.RawMessage, max int, fn func(json.RawMessage) bool) (truncated bool, err error) {
	raw = bytes.TrimSpace(raw)
	if !isNull(raw) && !json.Valid(raw) {
		return false, errShape
	}
	return eachValid(raw, max, fn)
}

// eachValid is eachElement over raw already known to be valid JSON (an
// element of an array eachElement checked): checked again at every level
// of a nested answer, the checks cost its size once per level.
func eachValid(raw json.RawMessage, max int, fn func(json.RawMessage) bool) (truncated bool, err error) {
	raw = bytes.TrimSpace(raw)
	if isNull(raw) {
		return false, nil
	}
	if raw[0] != '[' {
		return false, errShape
	}
	i := skipSpace(raw, 1)
	if raw[i] == ']' {
		return false, nil
	}
	for n := 0; ; n++ {
		if n >= max {
			return true, nil
		}
		end := valueEnd(raw, i)
		if !fn(json.RawMessage(raw[i:end:end])) {
			return raw[skipSpace(raw, end)] == ',', nil
		}
		i = skipSpace(raw, end)
		if raw[i] == ']' {
			return false, nil
		}
		i = skipSpace(raw, i+1) // the comma
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// valueEnd is the offset just past the JSON value starting at b[i]; b is
// valid JSON.
func valueEnd(b []byte, i int) int {
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '[', '{':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				i = stringEnd(b, i) - 1
			case '[', '{':
				depth++
			case ']', '}':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return i
	}
	for i < len(b) && !strings.ContainsRune(",]} \t\n\r", rune(b[i])) {
		i++ // a number, true, false or null
	}
	return i
}

// stringEnd is the offset just past the JSON string starting at b[i].
func stringEnd(b []byte, i int) int {
	for i++; i < len(b) && b[i] != '"'; i++ {
		if b[i] == '\\' {
			i++
		}
	}
	return i + 1
}

// clipText cuts s to at most max bytes on a rune boundary. A cut string
// is a copy: a slice of s would keep all of s alive wherever it is kept
// (a published diagnostic's message, a log line).
func clipText(s string, max int) (string, bool) {
	if len(s) <= max {
		return s, false
	}
	i := max
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return strings.Clone(s[:i]), true
}

// plainToMarkdown escapes the characters markdown would interpret, so plain
// text renders as itself.
func plainToMarkdown(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		if strings.ContainsRune("\\`*_[]<>#|~", r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// fence wraps code in a fenced block longer than any backtick run inside it.
func fence(lang, code string) string {
	longest, run := 0, 0
	for i := 0; i < len(code); i++ {
		if code[i] == '`' {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	f := strings.Repeat("`", max(3, longest+1))
	clean := strings.Map(func(r rune) rune {
		if r < 0x80 && (r == '-' || r == '+' || r == '#' || r == '.' || r == '_' ||
			(r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z')) {
			return r
		}
		return -1
	}, lang)
	return f + clean + "\n" + code + "\n" + f
}

// markupToMarkdown normalises documentation that is a string (plain text,
// as CompletionItem and SignatureInformation define it) or MarkupContent.
func markupToMarkdown(raw json.RawMessage) string {
	if isNull(raw) {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return plainToMarkdown(s)
	}
	var m MarkupContent
	if json.Unmarshal(raw, &m) == nil {
		if m.Kind == "markdown" {
			return m.Value
		}
		return plainToMarkdown(m.Value)
	}
	return ""
}

// markedString normalises one MarkedString: a string is markdown already,
// {language, value} is a code block.
func markedString(raw json.RawMessage) (string, bool) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, true
	}
	var m struct {
		Language *string `json:"language"`
		Value    string  `json:"value"`
		Kind     *string `json:"kind"`
	}
	if json.Unmarshal(raw, &m) != nil {
		return "", false
	}
	switch {
	case m.Kind != nil && *m.Kind == "markdown":
		return m.Value, true
	case m.Kind != nil:
		return plainToMarkdown(m.Value), true
	case m.Language != nil:
		return fence(*m.Language, m.Value), true
	}
	return "", false
}

func decodeHover(raw json.RawMessage, lim Limits) (*Hover, error) {
	if isNull(raw) {
		return nil, nil
	}
	var w struct {
		Contents json.RawMessage `json:"contents"`
		Range    json.RawMessage `json:"range"`
	}
	if err := json.Unmarshal(raw, &w); err != nil {
		return nil, fmt.Errorf("%w: %v", errShape, err)
	}
	h := &Hover{}
	if !isNull(w.Range) {
		var r Range
		if json.Unmarshal(w.Range, &r) == nil {
			h.Range = &r
		}
	}
	contents := bytes.TrimSpace(w.Contents)
	if isNull(contents) {
		return nil, nil
	}
	var parts []string
	if contents[0] == '[' {
		size := 0
		truncated, err := eachElement(contents, lim.MaxItems, func(e json.RawMessage) bool {
			s, ok := markedString(e)
			if ok && s != "" {
				parts = append(parts, s)
				size += len(s) + 2
			}
			return size <= lim.MaxMarkdownBytes
		})
		if err != nil {
			return nil, err
		}
		h.Truncated = truncated
	} else {
		s, ok := markedString(contents)
		if !ok {
			return nil, fmt.Errorf("%w: hover contents", errShape)
		}
		parts = append(parts, s)
	}
	md, cut := clipText(strings.Join(parts, "\n\n"), lim.MaxMarkdownBytes)
	h.Markdown = md
	h.Truncated = h.Truncated || cut
	if strings.TrimSpace(h.Markdown) == "" && h.Range == nil {
		return nil, nil
	}
	return h, nil
}

// wireLocation accepts both Location and LocationLink.
type wireLocation struct {
	URI                  DocumentURI `json:"uri"`
	Range                *Range      `json:"range"`
	TargetURI            DocumentURI `json:"targetUri"`
	TargetRange          *Range      `json:"targetRange"`
	TargetSelectionRange *Range      `json:"targetSelectionRange"`
}

func (w wireLocation) location() (Location, bool) {
	switch {
	case w.TargetURI != "" && w.TargetSelectionRange != nil:
		return Location{URI: w.TargetURI, Range: *w.TargetSelectionRange}, true
	case w.TargetURI != "" && w.TargetRange != nil:
		return Location{URI: w.TargetURI, Range: *w.TargetRange}, true
	case w.URI != "" && w.Range != nil:
		return Location{URI: w.URI, Range: *w.Range}, true
	}
	return Location{}, false
}

// decodeLocations folds Location | Location[] | LocationLink[] | null.
func decodeLocations(raw json.RawMessage, lim Limits) (List[Location], error) {
	raw = bytes.TrimSpace(raw)
	if isNull(raw) {
		return List[Location]{}, nil
	}
	if l, ok := decodeLocationsFast(raw, lim); ok {
		return l, nil
	}
	return decodeLocationsEach(raw, lim)
}

// decodeLocationsEach decodes element by element: a malformed element is
// dropped and counted, and reading stops at MaxItems.
func decodeLocationsEach(raw json.RawMessage, lim Limits) (List[Location], error) {
	var out List[Location]
	add := func(e json.RawMessage) bool {
		var w wireLocation
		if json.Unmarshal(e, &w) != nil {
			out.Dropped++
			return true
		}
		loc, ok := w.location()
		if !ok {
			out.Dropped++
			return true
		}
		out.Items = append(out.Items, loc)
		return true
	}
	if raw[0] == '{' {
		add(raw)
		return out, nil
	}
	truncated, err := eachElement(raw, lim.MaxItems, add)
	out.Truncated = truncated
	return out, err
}

// fastDecodeMax bounds the replies decodeLocationsFast takes: a warm
// definition is a few hundred bytes, and a large reply is left to the
// element-wise path, which stops reading at MaxItems.
const fastDecodeMax = 64 << 10

// decodeLocationsFast decodes a small, well-formed array in one pass: a
// warm query's reply was scanned three times element by element (the
// decoder's tokens, each element's bytes, each element's struct), a tenth
// of the daemon's CPU per definition. It answers exactly what the
// element-wise path would, or reports false (an element that is not an
// object, a syntax error, a large reply) and leaves the reply to it.
func decodeLocationsFast(raw json.RawMessage, lim Limits) (List[Location], bool) {
	var out List[Location]
	if len(raw) > fastDecodeMax || raw[0] != '[' {
		return out, false
	}
	var ws []wireLocation
	if json.Unmarshal(raw, &ws) != nil {
		return out, false
	}
	if len(ws) > lim.MaxItems {
		ws, out.Truncated = ws[:lim.MaxItems], true
	}
	for _, w := range ws {
		if loc, ok := w.location(); ok {
			out.Items = append(out.Items, loc)
		} else {
			out.Dropped++
		}
	}
	return out, true
}

func decodeDiagnostic(raw json.RawMessage, lim Limits) (Diagnostic, bool) {
	var w struct {
		Range    *Range          `json:"range"`
		Severity int             `json:"severity"`
		Code     json.RawMessage `json:"code"`
		Source   string          `json:"source"`
		Message  string          `json:"message"`
	}
	if json.Unmarshal(raw, &w) != nil || w.Range == nil {
		return Diagnostic{}, false
	}
	d := Diagnostic{Range: *w.Range, Severity: DiagnosticSeverity(w.Severity)}
	if d.Severity < 0 || d.Severity > 4 {
		d.Severity = 0
	}
	var code string
	if json.Unmarshal(w.Code, &code) != nil {
		var n json.Number
		if json.Unmarshal(w.Code, &n) == nil {
			code = n.String()
		}
	}
	d.Code, _ = clipText(code, lim.MaxTextBytes)
	d.Source, _ = clipText(w.Source, lim.MaxTextBytes)
	d.Message, _ = clipText(w.Message, lim.MaxTextBytes)
	return d, true
}

func decodeDiagnostics(raw json.RawMessage, max int, lim Limits) (List[Diagnostic], error) {
	var out List[Diagnostic]
	truncated, err := eachElement(raw, max, func(e json.RawMessage) bool {
		if d, ok := decodeDiagnostic(e, lim); ok {
			out.Items = append(out.Items, d)
		} else {
			out.Dropped++
		}
		return true
	})
	out.Truncated = truncated
	return out, err
}

// rawView is json.RawMessage without its copy: the value's bytes as a
// view of the bytes being decoded, for json.Unmarshal of bytes the caller
// keeps unchanged (never a Decoder's buffer). A symbol's children, copied
// at every level of the tree, held its size once per level.
type rawView []byte

func (v *rawView) UnmarshalJSON(b []byte) error {
	*v = b[:len(b):len(b)]
	return nil
}

// wireSymbol accepts DocumentSymbol, SymbolInformation and WorkspaceSymbol.
type wireSymbol struct {
	Name           string     `json:"name"`
	Detail         string     `json:"detail"`
	Kind           SymbolKind `json:"kind"`
	Range          *Range     `json:"range"`
	SelectionRange *Range     `json:"selectionRange"`
	Children       rawView    `json:"children"`
	ContainerName  string     `json:"containerName"`
	Location       *struct {
		URI   DocumentURI `json:"uri"`
		Range *Range      `json:"range"`
	} `json:"location"`
}

// maxSymbolDepth bounds DocumentSymbol nesting; real code nests a handful
// of levels.
const maxSymbolDepth = 32

// decodeSymbols flattens DocumentSymbol[] (children get their parent's name
// as container) and SymbolInformation[] / WorkspaceSymbol[] (container is
// containerName). doc is the document asked about, for DocumentSymbols,
// which carry no URI.
func decodeSymbols(raw json.RawMessage, doc DocumentURI, lim Limits) (List[Symbol], error) {
	var out List[Symbol]
	var walk func(raw json.RawMessage, container string, depth int) (bool, error)
	walk = func(raw json.RawMessage, container string, depth int) (bool, error) {
		each := eachElement
		if depth > 0 {
			each = eachValid // children of an element the top level checked
		}
		return each(raw, lim.MaxItems, func(e json.RawMessage) bool {
			if len(out.Items) >= lim.MaxItems {
				out.Truncated = true
				return false
			}
			var w wireSymbol
			if json.Unmarshal(e, &w) != nil || w.Name == "" {
				out.Dropped++
				return true
			}
			s := Symbol{Kind: w.Kind}
			s.Name, _ = clipText(w.Name, lim.MaxTextBytes)
			s.Detail, _ = clipText(w.Detail, lim.MaxTextBytes)
			switch {
			case w.Location != nil:
				if w.Location.URI == "" {
					out.Dropped++
					return true
				}
				s.URI = w.Location.URI
				if w.Location.Range != nil {
					s.Range = *w.Location.Range
					s.SelectionRange = *w.Location.Range
				}
				s.Container, _ = clipText(w.ContainerName, lim.MaxTextBytes)
			case w.Range != nil:
				s.URI = doc
				s.Range = *w.Range
				s.SelectionRange = *w.Range
				if w.SelectionRange != nil {
					s.SelectionRange = *w.SelectionRange
				}
				s.Container = container
			default:
				out.Dropped++
				return true
			}
			out.Items = append(out.Items, s)
			if !isNull(json.RawMessage(w.Children)) && w.Location == nil {
				if depth >= maxSymbolDepth {
					out.Truncated = true
					return true
				}
				t, err := walk(json.RawMessage(w.Children), s.Name, depth+1)
				if err != nil {
					// A malformed child list loses the children, not the parent.
					out.Dropped++
				}
				out.Truncated = out.Truncated || t
			}
			return len(out.Items) < lim.MaxItems
		})
	}
	truncated, err := walk(raw, "", 0)
	out.Truncated = out.Truncated || truncated
	return out, err
}

func decodeCompletion(raw json.RawMessage, lim Limits) (Completion, error) {
	var out Completion
	raw = bytes.TrimSpace(raw)
	if isNull(raw) {
		return out, nil
	}
	items := raw
	if raw[0] == '{' {
		var list struct {
			IsIncomplete bool            `json:"isIncomplete"`
			Items        json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(raw, &list); err != nil {
			return out, fmt.Errorf("%w: %v", errShape, err)
		}
		out.Incomplete = list.IsIncomplete
		items = list.Items
	}
	truncated, err := eachElement(items, lim.MaxItems, func(e json.RawMessage) bool {
		var w struct {
			Label         string          `json:"label"`
			Kind          int             `json:"kind"`
			Detail        string          `json:"detail"`
			Documentation json.RawMessage `json:"documentation"`
			InsertText    string          `json:"insertText"`
			TextEdit      *struct {
				NewText string `json:"newText"`
			} `json:"textEdit"`
			SortText   string `json:"sortText"`
			FilterText string `json:"filterText"`
		}
		if json.Unmarshal(e, &w) != nil || w.Label == "" {
			out.Dropped++
			return true
		}
		it := CompletionItem{Kind: CompletionItemKind(w.Kind)}
		it.Label, _ = clipText(w.Label, lim.MaxTextBytes)
		it.Detail, _ = clipText(w.Detail, lim.MaxTextBytes)
		it.Documentation, _ = clipText(markupToMarkdown(w.Documentation), lim.MaxTextBytes)
		insert := w.InsertText
		if insert == "" && w.TextEdit != nil {
			insert = w.TextEdit.NewText
		}
		if insert == "" {
			insert = w.Label
		}
		it.InsertText, _ = clipText(insert, lim.MaxTextBytes)
		it.SortText, _ = clipText(w.SortText, lim.MaxTextBytes)
		it.FilterText, _ = clipText(w.FilterText, lim.MaxTextBytes)
		out.Items = append(out.Items, it)
		return true
	})
	out.Truncated = truncated
	return out, err
}

// utf16Slice returns the byte range of s[start:end] with the offsets
// counted in UTF-16 code units, as signature parameter label offsets are.
// It scans s up to end, at most all of s. With clamp (s is the kept head of
// a longer label), offsets past s's end are its end.
func utf16Slice(s string, start, end uint32, clamp bool) (from, to int, ok bool) {
	if start > end {
		return 0, 0, false
	}
	var units uint32
	from, to = -1, -1
	for i, r := range s {
		if units == start && from < 0 {
			from = i
		}
		if units == end {
			to = i
			break
		}
		n := uint32(utf16.RuneLen(r))
		if n == 0 || n > 2 {
			n = 1
		}
		units += n
	}
	if to < 0 && (units == end || clamp) {
		to = len(s)
	}
	if from < 0 && (units == start || clamp) {
		from = len(s)
	}
	if from < 0 || to < 0 || from > to {
		return 0, 0, false
	}
	return from, to, true
}

// maxSignatureParams bounds the parameters of one signature help answer,
// all its signatures together: each is a scan of its signature's label
// (utf16Slice), and real signatures have tens.
const maxSignatureParams = 1024

func decodeSignatureHelp(raw json.RawMessage, lim Limits) (*SignatureHelp, error) {
	if isNull(raw) {
		return nil, nil
	}
	var w struct {
		Signatures      json.RawMessage `json:"signatures"`
		ActiveSignature *uint32         `json:"activeSignature"`
		ActiveParameter *uint32         `json:"activeParameter"`
	}
	if err := json.Unmarshal(raw, &w); err != nil {
		return nil, fmt.Errorf("%w: %v", errShape, err)
	}
	out := &SignatureHelp{ActiveSignature: w.ActiveSignature, ActiveParameter: w.ActiveParameter}
	params := 0 // in the whole answer (maxSignatureParams)
	truncated, err := eachElement(w.Signatures, lim.MaxItems, func(e json.RawMessage) bool {
		var ws struct {
			Label           string          `json:"label"`
			Documentation   json.RawMessage `json:"documentation"`
			Parameters      json.RawMessage `json:"parameters"`
			ActiveParameter *uint32         `json:"activeParameter"`
		}
		if json.Unmarshal(e, &ws) != nil {
			return true
		}
		sig := SignatureInformation{ActiveParameter: ws.ActiveParameter}
		var cut bool
		sig.Label, cut = clipText(ws.Label, lim.MaxTextBytes)
		sig.Documentation, _ = clipText(markupToMarkdown(ws.Documentation), lim.MaxTextBytes)
		t, _ := eachElement(ws.Parameters, lim.MaxItems, func(pe json.RawMessage) bool {
			if params++; params > maxSignatureParams {
				out.Truncated = true
				return false
			}
			var wp struct {
				Label         json.RawMessage `json:"label"`
				Documentation json.RawMessage `json:"documentation"`
			}
			if json.Unmarshal(pe, &wp) != nil {
				return true
			}
			var p ParameterInformation
			var offsets [2]uint32
			if json.Unmarshal(wp.Label, &p.Label) == nil {
				p.Label, _ = clipText(p.Label, lim.MaxTextBytes)
			} else if json.Unmarshal(wp.Label, &offsets) == nil {
				// Offsets index the signature label; the parameter's label
				// is the kept (clipped) signature label's bytes there,
				// shared, not copied (a copy per parameter let a small
				// reply of many parameters over one long label hold
				// gigabytes), and only the kept label is scanned.
				if from, to, ok := utf16Slice(sig.Label, offsets[0], offsets[1], cut); ok {
					p.Label = sig.Label[from:to]
				}
			}
			p.Documentation, _ = clipText(markupToMarkdown(wp.Documentation), lim.MaxTextBytes)
			sig.Parameters = append(sig.Parameters, p)
			return true
		})
		out.Truncated = out.Truncated || t
		out.Signatures = append(out.Signatures, sig)
		return true
	})
	if err != nil {
		return nil, err
	}
	out.Truncated = out.Truncated || truncated
	if len(out.Signatures) == 0 {
		return nil, nil
	}
	return out, nil
}

// hierarchyItem is the shared wire shape of call and type hierarchy items.
// raw keeps the item exactly as the server sent it, because the follow-up
// request must hand it back verbatim (including the opaque data field).
type hierarchyItem struct {
	Name           string      `json:"name"`
	Kind           SymbolKind  `json:"kind"`
	Detail         string      `json:"detail"`
	URI            DocumentURI `json:"uri"`
	Range          *Range      `json:"range"`
	SelectionRange *Range      `json:"selectionRange"`
	raw            json.RawMessage
}

func decodeHierarchyItem(raw json.RawMessage, lim Limits) (hierarchyItem, bool) {
	var w hierarchyItem
	if json.Unmarshal(raw, &w) != nil || w.Name == "" || w.URI == "" || w.Range == nil {
		return hierarchyItem{}, false
	}
	if w.SelectionRange == nil {
		w.SelectionRange = w.Range
	}
	w.Name, _ = clipText(w.Name, lim.MaxTextBytes)
	w.Detail, _ = clipText(w.Detail, lim.MaxTextBytes)
	w.raw = bytes.Clone(raw) // raw is a view of the whole answer (eachElement)
	return w, true
}

func (h hierarchyItem) callItem() CallHierarchyItem {
	return CallHierarchyItem{Name: h.Name, Kind: h.Kind, Detail: h.Detail, URI: h.URI, Range: *h.Range, SelectionRange: *h.SelectionRange}
}

func (h hierarchyItem) typeItem() TypeHierarchyItem {
	return TypeHierarchyItem{Name: h.Name, Kind: h.Kind, Detail: h.Detail, URI: h.URI, Range: *h.Range, SelectionRange: *h.SelectionRange}
}

func decodeHierarchyItems(raw json.RawMessage, max int, lim Limits) ([]hierarchyItem, bool, int, error) {
	var items []hierarchyItem
	dropped := 0
	truncated, err := eachElement(raw, max, func(e json.RawMessage) bool {
		if it, ok := decodeHierarchyItem(e, lim); ok {
			items = append(items, it)
		} else {
			dropped++
		}
		return true
	})
	return items, truncated, dropped, err
}

// decodeCalls decodes CallHierarchyIncomingCall[] (field "from") or
// CallHierarchyOutgoingCall[] (field "to") into out, up to lim.MaxItems in
// total.
func decodeCalls(raw json.RawMessage, field string, out *List[CallHierarchyCall], lim Limits) error {
	budget := lim.MaxItems - len(out.Items)
	if budget <= 0 {
		if !isNull(raw) && !bytes.Equal(bytes.TrimSpace(raw), []byte("[]")) {
			out.Truncated = true
		}
		return nil
	}
	truncated, err := eachElement(raw, budget, func(e json.RawMessage) bool {
		var w map[string]json.RawMessage
		if json.Unmarshal(e, &w) != nil {
			out.Dropped++
			return true
		}
		it, ok := decodeHierarchyItem(w[field], lim)
		if !ok {
			out.Dropped++
			return true
		}
		call := CallHierarchyCall{Item: it.callItem()}
		t, err := eachElement(w["fromRanges"], lim.MaxItems, func(re json.RawMessage) bool {
			var r Range
			if json.Unmarshal(re, &r) == nil {
				call.FromRanges = append(call.FromRanges, r)
			}
			return true
		})
		if err != nil {
			out.Dropped++
			return true
		}
		out.Truncated = out.Truncated || t
		out.Items = append(out.Items, call)
		return true
	})
	out.Truncated = out.Truncated || truncated
	return err
}
