package httpapi

import (
	"github.com/modelcontextprotocol/go-sdk/mcp"

	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
)

// toolNeeds maps an MCP tool to the daemon tools (what a language server
// negotiated) any one of which makes it useful on a revision.
var toolNeeds = map[string][]string{
	"hover":       {"hover"},
	"locate":      {"definition", "declaration", "type_definition", "implementation", "references"},
	"symbols":     {"document_symbols", "workspace_symbols"},
	"diagnostics": {"diagnostics"},
	"complete":    {"completion"},
	"signature":   {"signature_help"},
	"calls":       {"call_hierarchy"},
	"types":       {"type_hierarchy"},
	"read":        nil, // no server: every prepared revision can be read
}

// mcpContextLines is the context_lines an MCP call gets when it gives
// none: agents cannot open the files, so locations come with their code.
// An outline (symbols) gets each symbol's own lines only; include_body
// gives bodies.
const mcpContextLines = 3

func mcpDefaultContext(tool string) int64 {
	if tool == "symbols" {
		return 0
	}
	return mcpContextLines
}

// toolDescriptions say what each tool answers and when to use it.
var toolDescriptions = map[string]string{
	"prepare": "Make a repository revision ready and list the tools its language servers support, per language. " +
		"The first prepare of a revision is charged (2 cents, once per revision per day); later calls are free. " +
		"Call it first on a new revision: every other tool prepares implicitly, but this one reports progress and the supported tools.",
	"hover": "Type signature and documentation of a symbol (markdown), as the language server shows on hover. " +
		"Use it to learn what an identifier is without reading its definition. Address it by name (symbol: \"NewRandom\", \"Client.Do\", " +
		"\"uuid.NewRandom\"; add path to look only in that file) or by text on a line (path, line, text) — or by line and character.",
	"locate": "Where a symbol is defined (relation definition, the default), declared, its type is defined, " +
		"implemented, or referenced (relation reference; include_declaration adds the declaration), with the code at each location " +
		"(context_lines around it, default 3). Address the symbol by name (symbol: \"NewRandom\", \"Client.Do\"), or by path, line and text. " +
		"Use it to answer \"where is X defined and what does it do\" in one call. Locations in the standard " +
		"library or a dependency come back with external: true and their module, and their code too.",
	"symbols": "Symbols of one file (give path: its outline, containers first) or of the whole workspace matching a query " +
		"(give query). Give exactly one of path and query. A query searches every language of the repository (each symbol says " +
		"its language); language limits it to one (go, python, typescript, shellscript …). Each symbol comes with its name's line " +
		"of code (context_lines adds lines around it); include_body returns each symbol's whole source.",
	"read": "Lines of a file of the prepared revision (path, start_line, end_line; 0-based, inclusive), or of an external module " +
		"(module as a location names it, e.g. std@go1.26.8, and its path). Use it to read more around a location. Free; it never " +
		"prepares a revision unless prepare is true (a cold revision answers not_prepared).",
	"diagnostics": "Compiler and analyzer diagnostics (errors, warnings) of one file.",
	"complete":    "Completion candidates at a position, as an editor would offer while typing there.",
	"signature":   "Signature help at a position inside a call's parentheses: the callee's signatures and the active parameter.",
	"calls":       "Call hierarchy of the function at a position: its callers (direction incoming) or the functions it calls (direction outgoing).",
	"types":       "Type hierarchy of the type at a position: its supertypes (interfaces it implements) or subtypes (types implementing it).",
}

// toolSpec is the MCP tool for a route, with an input schema of exactly
// the route's body fields and bounds (the call is checked by the same
// strict decoder as the REST body, so the schema never promises more).
// A session bound to a revision takes no repo or rev.
func toolSpec(name string, bound bool) *mcp.Tool {
	props := map[string]any{}
	var required []string
	add := func(field string, schema map[string]any) { props[field] = schema }
	if !bound {
		add("repo", map[string]any{"type": "string", "pattern": `^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$`,
			"description": "The repository's name inside your org (not owner/name)."})
		add("rev", map[string]any{"type": "string", "maxLength": 255,
			"description": "A branch, tag, full ref or full 40-hex commit sha. Default: the default branch."})
		required = append(required, "repo")
	}
	pathSchema := map[string]any{"type": "string", "minLength": 1, "maxLength": 1024,
		"description": "A repository-relative path with '/' separators, e.g. cmd/main.go."}
	var anyOf []any
	rt, isOp := routeByName(name)
	if isOp {
		f := rt.fields
		if f["symbol"] {
			add("symbol", map[string]any{"type": "string", "minLength": 1, "maxLength": 256,
				"description": "The symbol by name or container path (NewRandom, Client.Do, uuid.NewRandom, pkg/sub.Type.Method): " +
					"looked up in path's symbols when path is given, else in the workspace's. Instead of line and character. " +
					"An ambiguous name answers ambiguous_symbol with the candidates."})
			add("path", map[string]any{"type": "string", "minLength": 1, "maxLength": 1024,
				"description": "A repository-relative path with '/' separators, e.g. cmd/main.go. Optional with symbol."})
			add("line", map[string]any{"type": "integer", "minimum": 0, "maximum": 1 << 31, "description": "0-based line."})
			add("text", map[string]any{"type": "string", "minLength": 1, "maxLength": 256,
				"description": "With path and line, instead of character: the position is the first occurrence of this text on the line."})
			add("character", map[string]any{"type": "integer", "minimum": 0, "maximum": 1 << 31,
				"description": "0-based character offset in UTF-16 code units (the LSP's own). Prefer symbol or text."})
			anyOf = []any{
				map[string]any{"required": []string{"symbol"}},
				map[string]any{"required": []string{"path", "line", "text"}},
				map[string]any{"required": []string{"path", "line", "character"}},
			}
		} else if f["path"] {
			add("path", pathSchema)
		}
		if f["context_lines"] {
			add("context_lines", map[string]any{"type": "integer", "minimum": 0, "maximum": 50, "default": mcpDefaultContext(name),
				"description": "Lines of code around each location to return with it."})
		}
		if f["include_body"] {
			add("include_body", map[string]any{"type": "boolean", "description": "Return each symbol's whole source (its range) as its code."})
		}
		if f["start_line"] {
			add("start_line", map[string]any{"type": "integer", "minimum": 0, "maximum": 1 << 31, "default": 0, "description": "First line to read, 0-based."})
			add("end_line", map[string]any{"type": "integer", "minimum": 0, "maximum": 1 << 31,
				"description": "Last line to read, inclusive; default start_line + 199. At most 2000 lines come back (truncated)."})
			add("module", map[string]any{"type": "string", "minLength": 3, "maxLength": 512,
				"description": "An external module as a location names it (std@go1.26.8, example.com/dep@v1.0.0, axios@1.7.0); path is then inside it."})
			add("prepare", map[string]any{"type": "boolean", "default": false,
				"description": "Prepare the revision if it is not (charged like any first prepare). Without it a cold revision answers not_prepared."})
			required = append(required, "path")
		}
		if f["relation"] {
			add("relation", map[string]any{"type": "string", "enum": []string{"definition", "declaration", "type", "implementation", "reference"},
				"default": "definition", "description": "What to locate."})
			add("include_declaration", map[string]any{"type": "boolean", "description": "With relation reference: include the declaration itself."})
		}
		if f["query"] {
			add("query", map[string]any{"type": "string", "maxLength": 256, "description": "Workspace symbol query (instead of path)."})
		}
		if f["language"] {
			add("language", map[string]any{"type": "string", "pattern": daemonv1.LanguageIDPattern,
				"description": "With query: search only this language's server (an LSP language id: go, python, typescript, shellscript)."})
		}
		if f["direction"] {
			dirs := []string{"incoming", "outgoing"}
			if name == "types" {
				dirs = []string{"supertypes", "subtypes"}
			}
			add("direction", map[string]any{"type": "string", "enum": dirs, "description": "Which way to walk the hierarchy."})
			required = append(required, "direction")
		}
		if name == "diagnostics" {
			required = append(required, "path")
		}
		if rt.list {
			add("limit", map[string]any{"type": "integer", "minimum": 1, "maximum": 1000, "default": 100, "description": "At most this many results."})
			add("cursor", map[string]any{"type": "string", "maxLength": 4096,
				"description": "The next_cursor of a previous answer, to continue the listing (same other arguments)."})
		}
	}
	if !isOp {
		add("path", map[string]any{"type": "string", "minLength": 1, "maxLength": 1024,
			"description": "The file you will ask about first (repository-relative, '/' separators). Optional: a cold prepare " +
				"then waits only for the language server of that file to load, and names those it did not wait for."})
	}
	schema := map[string]any{
		"type":                 "object",
		"properties":           props,
		"additionalProperties": false,
	}
	if len(required) > 0 {
		schema["required"] = required
	}
	if anyOf != nil {
		schema["anyOf"] = anyOf
	}
	if name == "symbols" {
		schema["oneOf"] = []any{
			map[string]any{"required": []string{"path"}},
			map[string]any{"required": []string{"query"}},
		}
	}
	readOnly := name != "prepare"
	return &mcp.Tool{
		Name:        name,
		Description: toolDescriptions[name],
		InputSchema: schema,
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: readOnly, IdempotentHint: true, OpenWorldHint: boolPtr(false)},
	}
}

func boolPtr(v bool) *bool { return &v }
