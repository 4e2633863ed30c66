package httpapi

import (
	"strings"

	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
	"github.com/hanzoai/lsp/proxy/internal/operation"
)

// The answer shapes of CONTRACT §4: snake_case names, absent values as null.

type position struct {
	Line      uint32 `json:"line"`
	Character uint32 `json:"character"`
}

type rng struct {
	Start position `json:"start"`
	End   position `json:"end"`
}

func rangeJSON(r *daemonv1.Range) *rng {
	if r == nil {
		return nil
	}
	return &rng{
		Start: position{r.GetStart().GetLine(), r.GetStart().GetCharacter()},
		End:   position{r.GetEnd().GetLine(), r.GetEnd().GetCharacter()},
	}
}

func serverJSON(s *daemonv1.ServerInfo) map[string]any {
	return map[string]any{"id": s.GetId(), "version": s.GetVersion(), "generation": s.GetGeneration()}
}

func evidenceJSON(e *daemonv1.Evidence, extra []string) map[string]any {
	state := strings.TrimPrefix(strings.ToLower(e.GetState().String()), "evidence_state_")
	if state == "unspecified" {
		state = "unavailable"
	}
	warnings := append(append([]string{}, e.GetWarnings()...), extra...)
	if len(extra) > 0 && state == "current" {
		state = "partial"
	}
	var doc any
	if e.GetDocumentSha256() != "" {
		doc = e.GetDocumentSha256()
	}
	return map[string]any{
		"state":                  state,
		"server":                 serverJSON(e.GetServer()),
		"capability_fingerprint": e.GetCapabilityFingerprint(),
		"document_sha256":        doc,
		"query_fingerprint":      e.GetQueryFingerprint(),
		"warnings":               warnings,
	}
}

// answerHead is what every operation answer carries.
func answerHead(res *operation.Result) map[string]any {
	return map[string]any{
		"repo":     res.Repo,
		"commit":   res.Commit,
		"prepared": res.Prepared,
		// Tree warnings belong to the prepare answer; an answer that
		// touches a dropped file is marked by the daemon.
		"evidence": evidenceJSON(res.Answer.GetEvidence(), nil),
	}
}

func renderHover(out map[string]any, ans *daemonv1.QueryResponse) {
	h := ans.GetHover()
	if !h.GetPresent() {
		out["hover"] = nil
		return
	}
	out["hover"] = map[string]any{"markdown": h.GetMarkdown(), "range": rangeJSON(h.GetRange())}
}

type locationJSON struct {
	Path     string    `json:"path"`
	Range    *rng      `json:"range"`
	External bool      `json:"external"`
	Module   *string   `json:"module"`
	Code     *codeJSON `json:"code,omitempty"`
}

// codeJSON is the source around a location (context_lines): its lines
// from start_line, truncated when the service's bounds cut them.
type codeJSON struct {
	StartLine uint32   `json:"start_line"`
	Lines     []string `json:"lines"`
	Truncated bool     `json:"truncated"`
}

func codeOf(c *daemonv1.Code) *codeJSON {
	if c == nil {
		return nil
	}
	return &codeJSON{StartLine: c.GetStartLine(), Lines: nonNil(c.GetLines()), Truncated: c.GetTruncated()}
}

// withCode adds the code field to item when the daemon sent code: on a
// request without context_lines the field is absent.
func withCode(item map[string]any, c *daemonv1.Code, asked bool) map[string]any {
	if asked {
		item["code"] = codeOf(c)
	}
	return item
}

func locationOf(l *daemonv1.Location) locationJSON {
	var mod *string
	if l.GetModule() != "" {
		m := l.GetModule()
		mod = &m
	}
	return locationJSON{Path: l.GetPath(), Range: rangeJSON(l.GetRange()), External: l.GetExternal(), Module: mod, Code: codeOf(l.GetCode())}
}

func renderLocations(out map[string]any, ans *daemonv1.QueryResponse) {
	locs := []locationJSON{}
	for _, l := range ans.GetLocations().GetItems() {
		locs = append(locs, locationOf(l))
	}
	out["locations"] = locs
}

// renderResolved says where a symbol or text address put the position.
func renderResolved(out map[string]any, ans *daemonv1.QueryResponse) {
	if r := ans.GetResolved(); r != nil {
		out["resolved"] = locationOf(r)
	}
}

func symbolJSON(s *daemonv1.Symbol) map[string]any {
	m := map[string]any{
		"name": s.GetName(), "kind": s.GetKind(), "detail": nullable(s.GetDetail()),
		"path": s.GetPath(), "range": rangeJSON(s.GetRange()), "selection_range": rangeJSON(s.GetSelectionRange()),
		"container": nullable(s.GetContainer()), "language": nullable(s.GetLanguage()),
	}
	if c := s.GetCode(); c != nil {
		m["code"] = codeOf(c)
	}
	return m
}

func renderRead(out map[string]any, ans *daemonv1.QueryResponse) {
	rd := ans.GetRead()
	out["path"] = rd.GetPath()
	out["module"] = nullable(rd.GetModule())
	out["start_line"] = rd.GetCode().GetStartLine()
	out["lines"] = nonNil(rd.GetCode().GetLines())
	out["truncated"] = rd.GetCode().GetTruncated()
	out["line_count"] = rd.GetLineCount()
}

func renderSymbols(out map[string]any, ans *daemonv1.QueryResponse) {
	syms := []map[string]any{}
	for _, s := range ans.GetSymbols().GetItems() {
		syms = append(syms, symbolJSON(s))
	}
	out["symbols"] = syms
}

func renderDiagnostics(out map[string]any, ans *daemonv1.QueryResponse) {
	ds := []map[string]any{}
	for _, d := range ans.GetDiagnostics().GetItems() {
		ds = append(ds, map[string]any{
			"range": rangeJSON(d.GetRange()), "severity": nullable(d.GetSeverity()), "code": nullable(d.GetCode()),
			"source": nullable(d.GetSource()), "message": d.GetMessage(),
		})
	}
	out["diagnostics"] = ds
}

func renderCompletions(out map[string]any, ans *daemonv1.QueryResponse) {
	cs := []map[string]any{}
	for _, c := range ans.GetCompletions().GetItems() {
		cs = append(cs, map[string]any{
			"label": c.GetLabel(), "kind": nullable(c.GetKind()), "detail": nullable(c.GetDetail()),
			"insert_text": nullable(c.GetInsertText()),
		})
	}
	out["completions"] = cs
	out["incomplete"] = ans.GetCompletions().GetIncomplete()
}

func renderSignatures(out map[string]any, ans *daemonv1.QueryResponse) {
	sigs := []map[string]any{}
	for _, s := range ans.GetSignatures().GetItems() {
		params := []map[string]any{}
		for _, p := range s.GetParameters() {
			params = append(params, map[string]any{"label": p.GetLabel(), "documentation": nullable(p.GetDocumentation())})
		}
		sigs = append(sigs, map[string]any{"label": s.GetLabel(), "documentation": nullable(s.GetDocumentation()), "parameters": params})
	}
	out["signatures"] = sigs
	sh := ans.GetSignatures()
	out["active_signature"], out["active_parameter"] = nil, nil
	if sh != nil && sh.ActiveSignature != nil {
		out["active_signature"] = *sh.ActiveSignature
	}
	if sh != nil && sh.ActiveParameter != nil {
		out["active_parameter"] = *sh.ActiveParameter
	}
}

func renderCalls(out map[string]any, ans *daemonv1.QueryResponse) {
	calls := []map[string]any{}
	for _, c := range ans.GetCalls().GetItems() {
		from := []*rng{}
		for _, r := range c.GetFromRanges() {
			from = append(from, rangeJSON(r))
		}
		calls = append(calls, withCode(map[string]any{
			"name": c.GetName(), "kind": c.GetKind(), "path": c.GetPath(), "range": rangeJSON(c.GetRange()),
			"selection_range": rangeJSON(c.GetSelectionRange()), "from_ranges": from,
		}, c.GetCode(), c.GetCode() != nil))
	}
	out["calls"] = calls
}

func renderTypes(out map[string]any, ans *daemonv1.QueryResponse) {
	types := []map[string]any{}
	for _, t := range ans.GetTypes().GetItems() {
		types = append(types, withCode(map[string]any{
			"name": t.GetName(), "kind": t.GetKind(), "path": t.GetPath(), "range": rangeJSON(t.GetRange()),
			"selection_range": rangeJSON(t.GetSelectionRange()),
		}, t.GetCode(), t.GetCode() != nil))
	}
	out["types"] = types
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
