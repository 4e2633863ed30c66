package readiness

import (
	"encoding/json"
	"testing"

	"github.com/hanzoai/lsp/daemon/internal/lsp"
)

// What the real servers said (gopls v0.21.1; typescript-language-server
// 6.0.0 with TypeScript 5.9.3), and what each sign makes of it.
func TestGoSigns(t *testing.T) {
	s := For("go")
	for _, tc := range []struct {
		name string
		d    lsp.Diagnostic
		want string // "" when it is not a load problem
	}{
		{"broken import", lsp.Diagnostic{Code: "BrokenImport", Source: "compiler", Message: `could not import github.com/missing/dep (no required module provides package "github.com/missing/dep")`},
			`could not import github.com/missing/dep (no required module provides package "github.com/missing/dep")`},
		{"go list on go.mod", lsp.Diagnostic{Source: "go list", Message: "packages.Load error: err: exit status 1: stderr: go: go.mod requires go >= 1.99 (running go 1.26.8; GOTOOLCHAIN=local)"},
			"go: go.mod requires go >= 1.99 (running go 1.26.8; GOTOOLCHAIN=local)"},
		{"module lookup", lsp.Diagnostic{Source: "go list", Message: "err: exit status 1: stderr: go: github.com/a/b@v1.0.0: module lookup disabled by GOPROXY=off"},
			"go: github.com/a/b@v1.0.0: module lookup disabled by GOPROXY=off"},
		{"a type error", lsp.Diagnostic{Code: "UndeclaredName", Source: "compiler", Message: "undefined: x"}, ""},
		{"an analyzer", lsp.Diagnostic{Code: "unusedparams", Source: "unusedparams", Message: "unused parameter: unused"}, ""},
	} {
		got, ok := s.Diagnostic(tc.d)
		if ok != (tc.want != "") || got != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.name, got, ok, tc.want)
		}
	}
	for _, tc := range []struct {
		typ       int
		msg, want string
	}{
		{1, "2026/12/01 19:45:04 go/packages.Load #1: err: exit status 1: stderr: go: go.mod requires go >= 1.99 (running go 1.26.8; GOTOOLCHAIN=local)\n\n\tview_id=\"1\"\n\tsnapshot=0\n", "go: go.mod requires go >= 1.99 (running go 1.26.8; GOTOOLCHAIN=local)"},
		{1, "2026/12/01 19:45:04 initial workspace load failed: packages.Load error: err: exit status 1: stderr: go: go.mod requires go >= 1.99 (running go 1.26.8; GOTOOLCHAIN=local)\n\n", "go: go.mod requires go >= 1.99 (running go 1.26.8; GOTOOLCHAIN=local)"},
		{3, "2026/12/01 19:40:32 go/packages.Load #1\n\tview_id=\"1\"\n\tpackages=2\n", ""},
		{1, "2026/12/01 19:40:32 hover: no package metadata for file", ""},
	} {
		got, ok := s.Log(tc.typ, tc.msg)
		if ok != (tc.want != "") || got != tc.want {
			t.Errorf("log %q: %q, %v; want %q", tc.msg, got, ok, tc.want)
		}
	}
	if got, ok := s.Progress("Error loading workspace", "packages.Load error: err: exit status 1: stderr: go: go.mod requires go >= 1.99 (running go 1.26.8; GOTOOLCHAIN=local)"); !ok || got != "go: go.mod requires go >= 1.99 (running go 1.26.8; GOTOOLCHAIN=local)" {
		t.Errorf("progress: %q, %v", got, ok)
	}
	if _, ok := s.Progress("Setting up workspace", "Loading packages..."); ok {
		t.Error("loading progress taken for a problem")
	}
	// gopls.diagnose_files answers null once it has published.
	e := s.Expected
	if e == nil || e.Command != "gopls.diagnose_files" || !e.Publishes {
		t.Fatalf("gopls's flush: %+v", e)
	}
	if _, ok := e.Count(json.RawMessage("null")); !ok {
		t.Error("diagnose_files's null answer not understood")
	}
	if _, ok := e.Count(json.RawMessage(`{"unexpected":1}`)); ok {
		t.Error("an unexpected answer taken for a flush")
	}
	if args, _ := json.Marshal(e.Arguments("file:///w/a.go")); string(args) != `[{"Files":["file:///w/a.go"]}]` {
		t.Errorf("diagnose_files arguments: %s", args)
	}
}

func TestTypeScriptSigns(t *testing.T) {
	s := For("typescript")
	for _, tc := range []struct {
		name string
		d    lsp.Diagnostic
		want string
	}{
		{"missing dependency", lsp.Diagnostic{Code: "2307", Source: "typescript", Message: "Cannot find module 'zod' or its corresponding type declarations."},
			"Cannot find module 'zod' or its corresponding type declarations."},
		{"scoped dependency", lsp.Diagnostic{Code: "2307", Source: "typescript", Message: "Cannot find module '@acme/core' or its corresponding type declarations."},
			"Cannot find module '@acme/core' or its corresponding type declarations."},
		{"untyped dependency", lsp.Diagnostic{Code: "7016", Source: "typescript", Message: "Could not find a declaration file for module 'left-pad'. '/w/node_modules/left-pad/index.js' implicitly has an 'any' type."},
			"Could not find a declaration file for module 'left-pad'. '/w/node_modules/left-pad/index.js' implicitly has an 'any' type."},
		{"untyped dependency of a JavaScript file", lsp.Diagnostic{Code: "7016", Source: "typescript", Severity: 4, Message: "Could not find a declaration file for module 'deep-freeze'. '/w/node_modules/deep-freeze/index.js' implicitly has an 'any' type."}, ""},
		{"missing relative file", lsp.Diagnostic{Code: "2307", Source: "typescript", Message: "Cannot find module './nope' or its corresponding type declarations."}, ""},
		{"type error", lsp.Diagnostic{Code: "2322", Source: "typescript", Message: "Type 'number' is not assignable to type 'string'."}, ""},
		{"unused local", lsp.Diagnostic{Code: "6133", Source: "typescript", Message: "'unusedLocal' is declared but its value is never read."}, ""},
		{"tsconfig option", lsp.Diagnostic{Code: "5023", Source: "typescript", Message: "Unknown compiler option 'strictest'."}, "Unknown compiler option 'strictest'."},
	} {
		got, ok := s.Diagnostic(tc.d)
		if ok != (tc.want != "") || got != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.name, got, ok, tc.want)
		}
	}
	if For("typescriptreact").Diagnostic == nil || For("javascript").Diagnostic == nil {
		t.Error("the TypeScript server's other languages have no signs")
	}
	if s := For("yaml"); s.Diagnostic != nil || s.Log != nil || s.Progress != nil {
		t.Error("a language without signs got some")
	}
}

func TestPythonSigns(t *testing.T) {
	s := For("python")
	for _, tc := range []struct {
		name string
		d    lsp.Diagnostic
		want string
	}{
		{"missing dependency", lsp.Diagnostic{Code: "reportMissingImports", Source: "basedpyright", Message: `Import "pytest" could not be resolved`},
			`Import "pytest" could not be resolved`},
		{"stub only", lsp.Diagnostic{Code: "reportMissingModuleSource", Source: "basedpyright", Message: `Import "yaml" could not be resolved from source`},
			`Import "yaml" could not be resolved from source`},
		{"missing relative module", lsp.Diagnostic{Code: "reportMissingImports", Source: "basedpyright", Message: `Import ".nope" could not be resolved`}, ""},
		{"type error", lsp.Diagnostic{Code: "reportArgumentType", Source: "basedpyright", Message: `Argument of type "int" cannot be assigned to parameter "s" of type "str"`}, ""},
		{"other tool", lsp.Diagnostic{Code: "reportMissingImports", Source: "mypy", Message: `Import "pytest" could not be resolved`}, ""},
	} {
		got, ok := s.Diagnostic(tc.d)
		if ok != (tc.want != "") || got != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.name, got, ok, tc.want)
		}
	}
}

// TestGoFileSigns: gopls's warning on an open file no package contains
// (seen on aws-sdk-go, a file its build tags exclude) concerns that file,
// not the workspace's load.
func TestGoFileSigns(t *testing.T) {
	s := For("go")
	tagged := lsp.Diagnostic{Source: "go list", Message: "No packages found for open file /w/tree/awstesting/config.go.\nThis file may be excluded due to its build tags; try adding \"-tags=<build tag>\" to your gopls \"buildFlags\" configuration\nSee the documentation for more information on working with build tags:\nhttps://github.com/golang/tools/blob/master/gopls/doc/settings.md#buildflags."}
	got, ok := s.File(tagged)
	if want := "No packages found for open file /w/tree/awstesting/config.go. This file may be excluded due to its build tags."; !ok || got != want {
		t.Errorf("file sign: %q, %v; want %q", got, ok, want)
	}
	outside := lsp.Diagnostic{Source: "go list", Message: "This file is within module \"sub\", which is not included in your workspace.\nTo fix this problem, you can add a go.work file that uses this directory.\nSee the documentation …"}
	if got, ok := s.File(outside); !ok || got != "This file is within module \"sub\", which is not included in your workspace." {
		t.Errorf("outside module: %q, %v", got, ok)
	}
	for _, d := range []lsp.Diagnostic{
		{Source: "go list", Message: "packages.Load error: err: exit status 1: stderr: go: go.mod requires go >= 1.99"},
		{Code: "BrokenImport", Source: "compiler", Message: "could not import x"},
		{Source: "compiler", Message: "No packages found for open file a.go."},
	} {
		if _, ok := s.File(d); ok {
			t.Errorf("%q taken for a file's own problem", d.Message)
		}
	}
}

func TestTSCount(t *testing.T) {
	for _, tc := range []struct {
		raw string
		n   int
		ok  bool
	}{
		{`{"seq":0,"type":"response","command":"suggestionDiagnosticsSync","request_seq":7,"success":true,"body":[{"text":"a"},{"text":"b"}]}`, 2, true},
		{`{"type":"response","success":true,"body":[]}`, 0, true},
		{`{"type":"response","success":false,"message":"No Project."}`, 0, false},
		{`null`, 0, false},
		{`[1]`, 0, false},
	} {
		n, ok := tsCount(json.RawMessage(tc.raw))
		if n != tc.n || ok != tc.ok {
			t.Errorf("tsCount(%s) = %d, %v; want %d, %v", tc.raw, n, ok, tc.n, tc.ok)
		}
	}
}

func FuzzTSCount(f *testing.F) {
	f.Add([]byte(`{"type":"response","success":true,"body":[{}]}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		if n, ok := tsCount(raw); n < 0 || (!ok && n != 0) {
			t.Fatalf("tsCount = %d, %v", n, ok)
		}
	})
}

// What bash-language-server 5.8.1 logged (the first three jailed, on
// TestJailedBashBackgroundAnalysis's workspace; the warnings are its
// source's words): only the end of the analysis ends the indexing, and
// only giving up is a load problem.
func TestShellSigns(t *testing.T) {
	s := For("shellscript")
	if s.IndexLog == nil || s.IndexLog.Title == "" {
		t.Fatal("no log-reported index for shellscript")
	}
	for _, tc := range []struct {
		typ     int
		msg     string
		done    bool
		problem string
	}{
		{3, `00:56:12.611 INFO BackgroundAnalysis: resolving glob "**/*@(.sh|.inc|.bash|.command)" inside "file:///w/tree"...`, false, ""},
		{3, "00:56:12.627 INFO BackgroundAnalysis: Glob resolved with 401 files after 0.016 seconds", false, ""},
		{3, `00:56:12.700 INFO BackgroundAnalysis: Skipping file file:///w/tree/a.sh with dialect "{}"`, false, ""},
		{3, "00:56:12.977 INFO BackgroundAnalysis: Completed after 0.366 seconds.", true, ""},
		{3, "00:56:12.611 INFO BackgroundAnalysis: skipping as backgroundAnalysisMaxFiles was 0...", true, ""},
		{2, "00:56:22.611 WARNING ⛔️ BackgroundAnalysis: stopped after 10000ms; workspace symbols may be incomplete. Exclude large folders with backgroundAnalysisIgnore or narrow globPattern.", true,
			"BackgroundAnalysis: stopped after 10000ms; workspace symbols may be incomplete. Exclude large folders with backgroundAnalysisIgnore or narrow globPattern."},
		{2, "00:56:13.000 WARNING ⛔️ BackgroundAnalysis: stopped discovery at the directories limit; workspace symbols may be incomplete.", false,
			"BackgroundAnalysis: stopped discovery at the directories limit; workspace symbols may be incomplete."},
		{2, `00:56:13.000 WARNING ⛔️ BackgroundAnalysis: failed resolving glob "**/*.sh". The experience across files will be degraded. Error: EACCES`, true,
			`BackgroundAnalysis: failed resolving glob "**/*.sh". The experience across files will be degraded. Error: EACCES`},
		{2, "00:56:13.000 WARNING ⛔️ BackgroundAnalysis: Failed analyzing file:///w/tree/b.sh. Error: x", false, ""},
		{3, "00:56:12.606 INFO Shfmt formatting is disabled as \"shfmt.path\" was not set", false, ""},
	} {
		if got := s.IndexLog.Done(tc.msg); got != tc.done {
			t.Errorf("%q: ends the analysis %v; want %v", tc.msg, got, tc.done)
		}
		got, ok := s.Log(tc.typ, tc.msg)
		if ok != (tc.problem != "") || got != tc.problem {
			t.Errorf("%q: problem %q, %v; want %q", tc.msg, got, ok, tc.problem)
		}
	}
}
