package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// queryCommands are the client commands and the flags each takes beyond
// --repo, --rev and --json. The names are the routes'.
var queryCommands = map[string][]string{
	"prepare":     {"progress"},
	"hover":       {"path", "line", "character", "at", "symbol", "text"},
	"signature":   {"path", "line", "character", "at", "symbol", "text"},
	"locate":      {"path", "line", "character", "at", "symbol", "text", "relation", "include-declaration", "context", "limit", "cursor"},
	"complete":    {"path", "line", "character", "at", "symbol", "text", "limit", "cursor"},
	"calls":       {"path", "line", "character", "at", "symbol", "text", "direction", "context", "limit", "cursor"},
	"types":       {"path", "line", "character", "at", "symbol", "text", "direction", "context", "limit", "cursor"},
	"symbols":     {"path", "query", "language", "include-body", "context", "limit", "cursor"},
	"diagnostics": {"path", "limit", "cursor"},
	"read":        {"path", "start", "end", "module", "prepare"},
}

// positional reports whether cmd asks about a position.
func positional(cmd string) bool {
	for _, f := range queryCommands[cmd] {
		if f == "line" {
			return true
		}
	}
	return false
}

// queryCmd runs one client command: flags → body → POST → output.
func queryCmd(ctx context.Context, cmd string, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // the error is reported once, by Main
	repo := fs.String("repo", "", "the repository (inside the org)")
	rev := fs.String("rev", "", "a branch, tag, ref or full commit sha (default: the default branch)")
	path := fs.String("path", "", "a repository-relative path")
	line := fs.Int64("line", -1, "0-based line (LSP)")
	character := fs.Int64("character", -1, "0-based UTF-16 character (LSP)")
	at := fs.String("at", "", "PATH:LINE:COL with 1-based line and column, as printed by lspctl")
	relation := fs.String("relation", "", "definition, declaration, type, implementation or reference")
	inclDecl := fs.Bool("include-declaration", false, "with --relation reference: include the declaration")
	direction := fs.String("direction", "", "calls: incoming or outgoing; types: supertypes or subtypes")
	query := fs.String("query", "", "workspace symbols matching this query")
	language := fs.String("language", "", "with --query: only this language's server (an LSP language id: go, python)")
	symbol := fs.String("symbol", "", "the position by name or container path (NewRandom, Client.Do, uuid.NewRandom)")
	text := fs.String("text", "", "with --path and --line: the position of the first occurrence of this text on the line")
	contextLines := fs.Int64("context", 0, "lines of code to print around each location (0-50)")
	includeBody := fs.Bool("include-body", false, "symbols: print each symbol's whole source")
	start := fs.Int64("start", 0, "read: first line, 0-based")
	end := fs.Int64("end", -1, "read: last line, inclusive (default start + 199)")
	module := fs.String("module", "", "read: an external module as locations name it (std@go1.26.8)")
	prep := fs.Bool("prepare", false, "read: prepare the revision if it is not (charged)")
	limit := fs.Int64("limit", 0, "at most this many results (1-1000; default 100)")
	cursor := fs.String("cursor", "", "continue a listing from its next_cursor")
	asJSON := fs.Bool("json", false, "print the service's JSON answer as is")
	bar := fs.Bool("progress", false, "prepare: draw the progress bar on stderr even when it is not a terminal")
	if err := fs.Parse(args); err != nil {
		return usageError(fmt.Sprintf("%s: %v", cmd, err))
	}
	if fs.NArg() > 0 {
		return usageError(fmt.Sprintf("%s: unexpected argument %q", cmd, fs.Arg(0)))
	}
	allowed := map[string]bool{"repo": true, "rev": true, "json": true}
	for _, f := range queryCommands[cmd] {
		allowed[f] = true
	}
	set := map[string]bool{}
	var bad string
	fs.Visit(func(f *flag.Flag) {
		set[f.Name] = true
		if !allowed[f.Name] && bad == "" {
			bad = f.Name
		}
	})
	if bad != "" {
		return usageError(fmt.Sprintf("%s does not take --%s", cmd, bad))
	}
	if *repo == "" {
		return usageError(cmd + ": --repo is required")
	}
	body := map[string]any{"repo": *repo}
	if *rev != "" {
		body["rev"] = *rev
	}
	if set["at"] {
		if set["path"] || set["line"] || set["character"] {
			return usageError(cmd + ": give --at or --path/--line/--character, not both")
		}
		p, l, c, err := parseAt(*at)
		if err != nil {
			return err
		}
		*path, *line, *character = p, l, c
		set["path"], set["line"], set["character"] = true, true, true
	}
	if positional(cmd) {
		switch {
		case set["symbol"]:
			if set["line"] || set["character"] || set["text"] {
				return usageError(cmd + ": give --symbol alone (with --path to look in one file), or a position")
			}
			body["symbol"] = *symbol
		case set["text"]:
			if !set["path"] || !set["line"] || set["character"] {
				return usageError(cmd + ": --text needs --path and --line (and no --character)")
			}
			body["line"], body["text"] = *line, *text
		default:
			if !set["path"] || !set["line"] || !set["character"] {
				return usageError(cmd + ": --path, --line and --character (or --at PATH:LINE:COL, --symbol NAME, or --path --line --text) are required")
			}
			body["line"], body["character"] = *line, *character
		}
	}
	if set["context"] {
		body["context_lines"] = *contextLines
	}
	if set["include-body"] {
		body["include_body"] = *includeBody
	}
	if cmd == "read" {
		if !set["path"] {
			return usageError("read: --path is required")
		}
		body["start_line"] = *start
		if set["end"] {
			body["end_line"] = *end
		}
		if set["module"] {
			body["module"] = *module
		}
		if set["prepare"] {
			body["prepare"] = *prep
		}
	}
	if set["path"] {
		body["path"] = *path
	}
	if cmd == "diagnostics" && !set["path"] {
		return usageError("diagnostics: --path is required")
	}
	if cmd == "symbols" && set["path"] == set["query"] {
		return usageError("symbols: give --path (document symbols) or --query (workspace symbols)")
	}
	if (cmd == "calls" || cmd == "types") && !set["direction"] {
		return usageError(map[string]string{
			"calls": "calls: --direction incoming or outgoing is required",
			"types": "types: --direction supertypes or subtypes is required",
		}[cmd])
	}
	for name, v := range map[string]any{"relation": *relation, "direction": *direction, "query": *query, "language": *language, "limit": *limit, "cursor": *cursor} {
		if set[name] {
			body[name] = v
		}
	}
	if set["include-declaration"] {
		body["include_declaration"] = *inclDecl
	}

	c, err := newClient(getenv)
	if err != nil {
		return err
	}
	var raw []byte
	if cmd == "prepare" {
		raw, err = c.prepare(ctx, body, progressTo(stderr, *bar, *asJSON))
	} else {
		raw, err = c.post(ctx, cmd, body)
	}
	if *asJSON && raw != nil {
		var out bytes.Buffer
		if json.Indent(&out, raw, "", "  ") == nil {
			out.WriteByte('\n')
			_, _ = stdout.Write(out.Bytes())
		}
	}
	if err != nil {
		return err
	}
	if *asJSON {
		return nil
	}
	var a answer
	if err := json.Unmarshal(raw, &a); err != nil {
		return &exitError{exitTransport, fmt.Errorf("%s: the answer does not have the contract's shape: %w", cmd, err)}
	}
	render(cmd, *path, &a, stdout, stderr)
	return nil
}

// parseAt reads PATH:LINE:COL with 1-based line and column (what lspctl
// and compilers print) into the API's 0-based position.
func parseAt(s string) (string, int64, int64, error) {
	bad := usageError("--at wants PATH:LINE:COL with 1-based line and column, e.g. main.go:11:21")
	i := strings.LastIndexByte(s, ':')
	if i <= 0 {
		return "", 0, 0, bad
	}
	j := strings.LastIndexByte(s[:i], ':')
	if j <= 0 {
		return "", 0, 0, bad
	}
	l, err1 := strconv.ParseInt(s[j+1:i], 10, 64)
	c, err2 := strconv.ParseInt(s[i+1:], 10, 64)
	if err1 != nil || err2 != nil || l < 1 || c < 1 {
		return "", 0, 0, bad
	}
	return s[:j], l - 1, c - 1, nil
}

// isTerminal reports whether w is a character device (a person is
// watching), for the progress bar.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
