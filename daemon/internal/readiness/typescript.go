package readiness

import (
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
	register(lsp.LoadSigns{Diagnostic: tsDiagnostic}, "typescript", "typescriptreact", "javascript", "javascriptreact")
}

func tsDiagnostic(d lsp.Diagnostic) (string, bool) {
	if d.Source != "" && d.Source != "typescript" && d.Source != "ts" {
		return "", false
	}
	if !tsProjectCodes[d.Code] {
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
