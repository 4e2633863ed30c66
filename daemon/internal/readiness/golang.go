package readiness

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"

	"github.com/hanzoai/lsp/daemon/internal/lsp"
)

// gopls v0.21.1, run on a module whose imports cannot be resolved
// (GOPROXY=off, an empty module cache) or whose go list fails, says so in
// three ways (seen with the real server; readiness_test.go keeps them):
//
//   - window/logMessage, type 1: "2026/12/01 19:45:04 go/packages.Load #1:
//     err: exit status 1: stderr: go: go.mod requires go >= 1.99 …\n\n\tview_id=…"
//     and "… initial workspace load failed: packages.Load error: …";
//   - a diagnostic on go.mod, source "go list": "packages.Load error: err:
//     exit status 1: stderr: go: …";
//   - a diagnostic on each importing file, code "BrokenImport": "could not
//     import github.com/missing/dep (no required module provides package
//     \"github.com/missing/dep\")";
//   - once a document is open, a work-done progress that begins and never
//     ends, titled "Error loading workspace", whose message is the error.
var (
	goLogTime = regexp.MustCompile(`^\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2} `)
	// What the go command says when a dependency is not where gopls may
	// look; a diagnostic carrying it is a load problem whatever its code.
	goUnresolved = []string{
		"no required module provides package",
		"module lookup disabled by GOPROXY=off",
		"cannot find module providing package",
		"missing go.sum entry",
		"go: updates to go.mod needed",
		"packages.Load error",
	}
)

func init() {
	register(lsp.LoadSigns{Diagnostic: goDiagnostic, File: goFile, Log: goLog, Progress: goProgress, Expected: goDiagnose, Diagnosis: goDiagnosis}, "go")
}

// gopls v0.21.1 with verboseWorkDoneProgress (an option gopls keeps for
// its own tests' synchronisation) reports each diagnosis as work-done
// progress, its end sent once what it found is published
// (server/general.go, text_synchronization.go): "diagnosing initial
// workspace load" for the whole workspace once the first load is done,
// "diagnosing <cause>" for each didOpen, didChange and didClose, a report
// titled by the command for each workspace/executeCommand, and "Checking
// telemetry prompt" once.
//
// The initial one carries what the load found: go list's failure is
// logged and put on go.mod before the load's own progress ends, and the
// type check of every workspace package (a broken import in any file) is
// published within it. It runs without analyzers (no package is open),
// in 0.75 s on uuid with cold caches. A document opened during the load
// replaces the snapshot it diagnoses, and gopls then diagnoses only in the
// open's second pass, a second later and with the open package's
// analyzers: 3.7 s after the load on the same uuid. So gopls gets no
// anchor document; the first question opens its own.
//
// A question's open cuts the initial diagnosis short the same way: on
// aws-sdk-go (2026-12-04, jailed) the initial report ended 8 ms after the
// first question's "diagnosing opened files" began, half a minute before
// that one's own check of the workspace ended. gopls begins a change's
// report before the change replaces the snapshot, so a report that ends
// while another is in flight was cut short, and only one that ends alone
// says the workspace has been checked (lsp.DiagnosisReports.Workspace).
//
// Without the reports the first-load wait needs 2.5 s of silence after
// gopls's last word (pool.LoadQuiet), most of what a small module's cold
// prepare cost beyond gopls's own start.
var goDiagnosis = &lsp.DiagnosisReports{
	InitializationOptions: json.RawMessage(`{"verboseWorkDoneProgress":true}`),
	Is: func(title string) bool {
		return strings.HasPrefix(title, "diagnosing ") || strings.HasPrefix(title, "gopls.") || title == "Checking telemetry prompt"
	},
	// "diagnosing initial workspace load", then one per change ("diagnosing
	// opened files"): each checks the changed files, then every package.
	Workspace: func(title string) bool { return strings.HasPrefix(title, "diagnosing ") },
}

// gopls v0.21.1 publishes a file whose build constraints exclude the
// default port twice: an empty list from the default view at once, then,
// about three seconds later, what the view it creates for the file's port
// finds ("unused parameter: name [js,wasm]" on uuid's node_js.go), with
// no work-done progress between. The daemon's quiet window closed on the
// empty list. gopls.diagnose_files diagnoses the file's snapshot (in the
// view that owns the file) and publishes before it answers: once it has
// answered, what it computed has been published; the quiet window then
// runs from the last publication (not from the end of the command's own
// work-done progress, which would restart it on every call), since gopls
// publishes the "No packages found" warning of a file no package holds
// apart, after the views' diagnoses. It answers null: no count.
var goDiagnose = &lsp.ExpectedDiagnostics{
	Command: "gopls.diagnose_files",
	Arguments: func(u lsp.DocumentURI) []any {
		return []any{map[string]any{"Files": []string{string(u)}}}
	},
	Count: func(raw json.RawMessage) (int, bool) {
		r := bytes.TrimSpace(raw)
		return 0, len(r) == 0 || string(r) == "null"
	},
	Publishes: true,
}

// gopls v0.21.1 publishes, on an open file no package of the build
// contains, a warning with source "go list" (seen on aws-sdk-go's
// awstesting/…/config.go, excluded by a build tag):
//
//	No packages found for open file /…/config.go.
//	This file may be excluded due to its build tags; try adding "-tags=<build tag>" …
//
// or, for a file of a module outside the workspace, "This file is within
// module "…", which is not included in your workspace." The rest of the
// workspace loaded: only answers about that file lack a package.
var goFilePrefixes = []string{"No packages found for open file", "This file is within module"}

func goFile(d lsp.Diagnostic) (string, bool) {
	if d.Source != "go list" {
		return "", false
	}
	for _, p := range goFilePrefixes {
		if strings.HasPrefix(d.Message, p) {
			return goFileMessage(d.Message), true
		}
	}
	return "", false
}

// goFileMessage keeps gopls's reason, without its advice on configuring
// gopls (the daemon's, not the caller's, to change) or its links: the
// first line, and of the second the text before "; try".
func goFileMessage(m string) string {
	lines := strings.Split(strings.TrimSpace(m), "\n")
	out := strings.TrimSpace(lines[0])
	if len(lines) > 1 {
		why := strings.TrimSpace(lines[1])
		if i := strings.Index(why, "; try"); i >= 0 {
			why = why[:i] + "."
		}
		if why != "" && !strings.HasPrefix(why, "To fix") && !strings.HasPrefix(why, "See the") {
			out += " " + why
		}
	}
	return out
}

func goProgress(title, msg string) (string, bool) {
	if !strings.HasPrefix(title, "Error loading workspace") {
		return "", false
	}
	if strings.TrimSpace(msg) == "" {
		return title, true
	}
	return goMessage(msg), true
}

func goDiagnostic(d lsp.Diagnostic) (string, bool) {
	switch {
	case d.Code == "BrokenImport", d.Source == "go list":
		return goMessage(d.Message), true
	}
	for _, s := range goUnresolved {
		if strings.Contains(d.Message, s) {
			return goMessage(d.Message), true
		}
	}
	return "", false
}

func goLog(typ int, msg string) (string, bool) {
	if typ != 1 {
		return "", false
	}
	m := goLogTime.ReplaceAllString(strings.TrimSpace(msg), "")
	if !strings.Contains(m, "packages.Load") && !strings.Contains(m, "workspace load failed") && !strings.Contains(m, "go list") {
		return "", false
	}
	return goMessage(m), true
}

// goMessage keeps the go command's own words: the text after the last
// "stderr: " when gopls wraps them, its first line, no timestamp. The three
// reports of one failed load then read the same and count once.
func goMessage(m string) string {
	m = goLogTime.ReplaceAllString(strings.TrimSpace(m), "")
	if i := strings.LastIndex(m, "stderr: "); i >= 0 {
		m = m[i+len("stderr: "):]
	}
	if i := strings.IndexByte(m, '\n'); i >= 0 {
		m = m[:i]
	}
	return strings.TrimSpace(m)
}
