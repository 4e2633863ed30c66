package readiness

import (
	"regexp"
	"strings"

	"github.com/hanzoai/lsp/daemon/internal/lsp"
)

// basedpyright 1.40.1 publishes (or, to a client that pulls, answers)
// diagnostics with source "basedpyright" and its rule name as the code;
// an import it cannot resolve is reportMissingImports ("Import \"pytest\"
// could not be resolved"), one it resolves only to a bundled typeshed stub
// reportMissingModuleSource ("Import \"yaml\" could not be resolved from
// source"). No PyPI mirror is configured here, so a project's third-party
// imports are these: the answers of the workspace are partial, with the
// server's words among the warnings. A relative import ("from .x import
// y") that does not resolve is the file's own error.
var pyImport = regexp.MustCompile(`^Import "([^"]*)" could not be resolved`)

func init() {
	register(lsp.LoadSigns{Diagnostic: pyDiagnostic}, "python")
}

func pyDiagnostic(d lsp.Diagnostic) (string, bool) {
	if d.Source != "" && d.Source != "basedpyright" && d.Source != "Pyright" && d.Source != "pyright" {
		return "", false
	}
	if d.Code != "reportMissingImports" && d.Code != "reportMissingModuleSource" {
		return "", false
	}
	msg := strings.TrimSpace(d.Message)
	m := pyImport.FindStringSubmatch(msg)
	if m == nil || strings.HasPrefix(m[1], ".") {
		return "", false
	}
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	return msg, true
}
