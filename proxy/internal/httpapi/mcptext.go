package httpapi

import (
	"encoding/json"
	"fmt"
	"strings"
)

// The MCP text content of an answer: what a model reads. The structured
// content carries the answer's JSON; the text is a compact rendering of
// it — the signature or hover first, then each location as path:line with
// its code — so that an agent reads the answer without parsing JSON.
// Lines here are 1-based, as path:line is everywhere else; the structured
// content and every tool argument stay 0-based (LSP).

// maxTextRendering bounds the text content; the structured content has
// everything.
const maxTextRendering = 64 << 10

// renderText renders out, the answer of tool name; "" when the tool has
// no rendering (its JSON is the text then).
func renderText(name string, out map[string]any) string {
	var m map[string]any
	raw, err := json.Marshal(out)
	if err != nil || json.Unmarshal(raw, &m) != nil {
		return ""
	}
	var b strings.Builder
	if r, ok := m["resolved"].(map[string]any); ok {
		fmt.Fprintf(&b, "resolved to %s\n", place(r))
	}
	switch name {
	case "hover":
		h, _ := m["hover"].(map[string]any)
		if h == nil {
			b.WriteString("no hover information here\n")
		} else {
			b.WriteString(strings.TrimSpace(str(h["markdown"])) + "\n")
		}
	case "locate":
		locs := list(m["locations"])
		fmt.Fprintf(&b, "%d location(s)\n", len(locs))
		for _, l := range locs {
			writeItem(&b, "", l)
		}
	case "symbols":
		syms := list(m["symbols"])
		fmt.Fprintf(&b, "%d symbol(s)\n", len(syms))
		for _, s := range syms {
			writeItem(&b, symbolHead(s), s)
		}
	case "calls":
		calls := list(m["calls"])
		fmt.Fprintf(&b, "%d call(s)\n", len(calls))
		for _, c := range calls {
			writeItem(&b, symbolHead(c), c)
		}
	case "types":
		types := list(m["types"])
		fmt.Fprintf(&b, "%d type(s)\n", len(types))
		for _, t := range types {
			writeItem(&b, symbolHead(t), t)
		}
	case "diagnostics":
		ds := list(m["diagnostics"])
		fmt.Fprintf(&b, "%d diagnostic(s)\n", len(ds))
		for _, d := range ds {
			fmt.Fprintf(&b, "%s %s: %s\n", lineCol(d["range"]), str(d["severity"]), str(d["message"]))
		}
	case "complete":
		cs := list(m["completions"])
		fmt.Fprintf(&b, "%d completion(s)\n", len(cs))
		for _, c := range cs {
			fmt.Fprintf(&b, "%s\t%s\t%s\n", str(c["label"]), str(c["kind"]), str(c["detail"]))
		}
	case "signature":
		sigs := list(m["signatures"])
		if len(sigs) == 0 {
			b.WriteString("no signature here\n")
		}
		for _, s := range sigs {
			b.WriteString(str(s["label"]) + "\n")
			if d := strings.TrimSpace(str(s["documentation"])); d != "" {
				b.WriteString(d + "\n")
			}
		}
		if p, ok := m["active_parameter"].(float64); ok {
			fmt.Fprintf(&b, "active parameter: %d\n", int(p))
		}
	case "read":
		where := str(m["path"])
		if mod := str(m["module"]); mod != "" {
			where = mod + " " + where
		}
		lines := strs(m["lines"])
		start := int(num(m["start_line"]))
		fmt.Fprintf(&b, "%s lines %d-%d of %d\n", where, start+1, start+len(lines), int(num(m["line_count"])))
		writeLines(&b, start, lines)
		if m["truncated"] == true {
			b.WriteString("(truncated: read on from the next line)\n")
		}
	default:
		return ""
	}
	if ev, ok := m["evidence"].(map[string]any); ok && str(ev["state"]) != "current" {
		fmt.Fprintf(&b, "evidence: %s", str(ev["state"]))
		if ws := strs(ev["warnings"]); len(ws) > 0 {
			b.WriteString(" — " + strings.Join(ws, "; "))
		}
		b.WriteString("\n")
	}
	if c := str(m["next_cursor"]); c != "" {
		b.WriteString("more results: call again with cursor " + c + "\n")
	}
	s := b.String()
	if len(s) > maxTextRendering {
		s = clip(s, maxTextRendering) + "\n… (cut; the structured content has the whole answer)\n"
	}
	return s
}

// renderErrorText renders an error envelope: the code and message, and an
// ambiguous symbol's candidates.
func renderErrorText(env errorBody) string {
	var b strings.Builder
	fmt.Fprintf(&b, "error %s: %s\n", env.Error.Code, env.Error.Message)
	for _, c := range env.Error.Candidates {
		raw, _ := json.Marshal(c)
		var m map[string]any
		_ = json.Unmarshal(raw, &m)
		head := symbolHead(m)
		sel, _ := m["selection_range"].(map[string]any)
		fmt.Fprintf(&b, "  %s  %s:%s\n", head, str(m["path"]), lineCol(sel))
	}
	if n := env.Error.TotalCandidates; n != nil && int(*n) > len(env.Error.Candidates) {
		fmt.Fprintf(&b, "  … %d candidates in all\n", *n)
	}
	return b.String()
}

func symbolHead(s map[string]any) string {
	head := str(s["name"])
	if c := str(s["container"]); c != "" {
		head = c + "." + head
	}
	if k := str(s["kind"]); k != "" {
		head += " (" + k + ")"
	}
	return head
}

// writeItem writes one location: head, path:line:col, then its code.
func writeItem(b *strings.Builder, head string, it map[string]any) {
	if head != "" {
		b.WriteString(head + "  ")
	}
	b.WriteString(place(it) + "\n")
	if c, ok := it["code"].(map[string]any); ok {
		writeLines(b, int(num(c["start_line"])), strs(c["lines"]))
		if c["truncated"] == true {
			b.WriteString("    … (truncated)\n")
		}
	}
}

// place is "path:line:col" (1-based), with the module of an external one.
func place(it map[string]any) string {
	p := str(it["path"]) + ":" + lineCol(it["range"])
	if it["external"] == true && str(it["module"]) != "" {
		p = str(it["module"]) + " " + p
	}
	return p
}

func lineCol(r any) string {
	m, _ := r.(map[string]any)
	s, _ := m["start"].(map[string]any)
	return fmt.Sprintf("%d:%d", int(num(s["line"]))+1, int(num(s["character"]))+1)
}

func writeLines(b *strings.Builder, start int, lines []string) {
	for i, l := range lines {
		fmt.Fprintf(b, "%6d| %s\n", start+i+1, l)
	}
}

func list(v any) []map[string]any {
	a, _ := v.([]any)
	out := make([]map[string]any, 0, len(a))
	for _, x := range a {
		if m, ok := x.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

func strs(v any) []string {
	a, _ := v.([]any)
	out := make([]string, 0, len(a))
	for _, x := range a {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func num(v any) float64 {
	f, _ := v.(float64)
	return f
}
