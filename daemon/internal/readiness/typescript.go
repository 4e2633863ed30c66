package readiness

import (
	"encoding/json"
	"regexp"
	"strings"

	"github.com/hanzoai/lsp/daemon/internal/lsp"
)

// typescript-language-server 6.0.0 (TypeScript 5.9.3) publishes what
// tsserver found as diagnostics with source "typescript" and the
// compiler's numeric code; a project whose declared dependency is missing
// gets, on each importing file, 2307 "Cannot find module 'zod' or its
// corresponding type declarations." (seen with the real server). The codes
// that mean the project, not the file, is broken:
var tsProjectCodes = map[string]bool{
	"2307":  true, // Cannot find module '…' (bare specifiers only: see tsDiagnostic)
	"2792":  true, // Cannot find module '…'. Did you mean to set the 'moduleResolution' option …
	"2688":  true, // Cannot find type definition file for '…'
	"7016":  true, // Could not find a declaration file for module '…' (it is implicitly any)
	"5023":  true, // Unknown compiler option '…'
	"5024":  true, // Compiler option '…' requires a value of type …
	"5083":  true, // Cannot read file '…' (a tsconfig's extends)
	"6053":  true, // File '…' not found
	"18003": true, // No inputs were found in config file …
}

// tsModule is the specifier quoted in a module diagnostic.
var tsModule = regexp.MustCompile(`module '([^']*)'`)

func init() {
	register(lsp.LoadSigns{Diagnostic: tsDiagnostic, Expected: tsSuggestions, AnchorCounts: tsAnchorCounts}, "typescript", "typescriptreact", "javascript", "javascriptreact")
}

// tsAnchorCounts: tsserver's three kinds of a document's diagnostics,
// each asked synchronously (typescript.tsserverRequest), which tsserver
// answers once it has loaded the document's project. The server
// republishes the union after each of its passes (below), so the anchor's
// publication that carries all of them is its last: what the project's
// load found on the anchor (a module it cannot find, 2307) is in it. On
// zustand the quiet window closed 3.5 s after tsserver's load, 1 s of
// passes and 2.5 s of quiet.
var tsAnchorCounts = []*lsp.ExpectedDiagnostics{tsSync("syntacticDiagnosticsSync"), tsSync("semanticDiagnosticsSync"), tsSync("suggestionDiagnosticsSync")}

func tsSync(command string) *lsp.ExpectedDiagnostics {
	return &lsp.ExpectedDiagnostics{
		Command: "typescript.tsserverRequest",
		Arguments: func(u lsp.DocumentURI) []any {
			return []any{command, map[string]any{"file": string(u)}}
		},
		Count: tsCount,
	}
}

// typescript-language-server 6.0.0 publishes a document's diagnostics as
// tsserver's geterr reports them, one kind at a time (syntaxDiag,
// semanticDiag, then suggestionDiag, each republishing the union after a
// 50 ms debounce), and tsserver runs each step only between the other
// requests queued before it. Under load the suggestions (hint severity:
// unused names, "could be converted to an async function") came seconds
// after the other kinds, after the daemon's quiet window had closed, so
// two of immer's files answered with none. The server has no
// notification that a document's pass is complete, but it forwards
// tsserver requests (typescript.tsserverRequest): suggestionDiagnosticsSync
// answers once tsserver has computed the document's suggestions, and
// their count is what the publication must carry.
var tsSuggestions = func() *lsp.ExpectedDiagnostics {
	e := tsSync("suggestionDiagnosticsSync")
	// Hint: what the server makes of tsserver's category "suggestion".
	e.Match = func(d lsp.Diagnostic) bool { return d.Severity == 4 }
	return e
}()

// maxTSResult bounds the suggestionDiagnosticsSync answer read.
const maxTSResult = 4 << 20

// tsCount reads tsserver's response as the command returns it:
// {"type":"response","success":true,"body":[…]}.
func tsCount(raw json.RawMessage) (int, bool) {
	if len(raw) > maxTSResult {
		return 0, false
	}
	var r struct {
		Success bool              `json:"success"`
		Body    []json.RawMessage `json:"body"`
	}
	if json.Unmarshal(raw, &r) != nil || !r.Success {
		return 0, false
	}
	return len(r.Body), true
}

func tsDiagnostic(d lsp.Diagnostic) (string, bool) {
	if d.Source != "" && d.Source != "typescript" && d.Source != "ts" {
		return "", false
	}
	if !tsProjectCodes[d.Code] {
		return "", false
	}
	if d.Code == "7016" && d.Severity == 4 {
		// A hint, in a JavaScript file: the module resolved to its
		// JavaScript and has no types, as on any checkout (immer's
		// deep-freeze); the project loaded.
		return "", false
	}
	if d.Code == "2307" || d.Code == "2792" || d.Code == "7016" {
		// A relative import that does not exist is the file's own error;
		// a bare one is a dependency the project could not resolve.
		m := tsModule.FindStringSubmatch(d.Message)
		if m == nil || strings.HasPrefix(m[1], ".") || strings.HasPrefix(m[1], "/") {
			return "", false
		}
	}
	msg := strings.TrimSpace(d.Message)
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	return msg, true
}
