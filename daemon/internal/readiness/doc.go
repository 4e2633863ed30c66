// Package readiness knows, per language, how a reviewed language server
// says that it could not load a project: gopls's go/packages and go list
// errors and its broken imports, tsserver's unresolvable modules and
// project errors. It is the one place for those patterns; the LSP client
// that applies them (lsp.LoadSigns), the runtime, the pool and the query
// path stay language-blind, and a server that shows the user an error
// (window/showMessage, type error) reports a load problem whatever its
// language.
//
// A load problem makes every answer of the workspace partial (unavailable
// when the answer is empty) with the server's own words among the
// warnings: an answer computed without the project's dependencies may be
// empty or any-typed, and must not pass for current. A problem of one file
// (LoadSigns.File: gopls has no package for a file its build tags
// exclude) qualifies only the answers about that file.
package readiness

import "github.com/hanzoai/lsp/daemon/internal/lsp"

// signs maps an LSP languageId (a server spec's Language) to its signs.
var signs = map[string]lsp.LoadSigns{}

func register(s lsp.LoadSigns, languages ...string) {
	for _, l := range languages {
		signs[l] = s
	}
}

// For returns the signs of a language; a language without any gets none
// (shown errors still count).
func For(language string) lsp.LoadSigns { return signs[language] }
