package rpc

import (
	"fmt"
	"slices"
	"testing"

	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
)

// diagSet renders diagnostics as comparable lines.
func diagSet(items []*daemonv1.Diagnostic) []string {
	var out []string
	for _, d := range items {
		out = append(out, fmt.Sprintf("%d:%d %s %s %s: %s", d.GetRange().GetStart().GetLine(), d.GetRange().GetStart().GetCharacter(),
			d.GetSeverity(), d.GetSource(), d.GetCode(), d.GetMessage()))
	}
	slices.Sort(out)
	return out
}

// TestDiagnosticsAnalyzers: gopls publishes a file's type-check
// diagnostics first and its analyzers' findings (unusedparams, the
// modernize "any" hint) about a second later, under the same version. The
// first diagnostics query after the open must wait for the second pass:
// the answer is what gopls publishes for the file when run directly.
func TestDiagnosticsAnalyzers(t *testing.T) {
	if fx.gopls == "" {
		t.Skip("no gopls: set LSP_TEST_GOPLS")
	}
	k := keyFor(t, "analyzers")
	prepareTree(t, k, newID(),
		file{"go.mod", []byte("module example.com/analyzers\n\ngo 1.22\n")},
		file{"main.go", []byte("package main\n\nfunc fmtIt(v any) string { _ = v; return \"\" }\n\nfunc main() { _ = parsedType(1, 2) }\n")},
		file{"parse.go", []byte("package main\n\nfunc parsedType(data interface{}, unused int) string {\n\treturn fmtIt(data)\n}\n")},
	)
	// What gopls v0.21.1 publishes for parse.go, run directly over stdio
	// (GOPROXY=off, an empty module cache) once it settles.
	want := []string{
		"2:21 hint any default: interface{} can be replaced by any",
		"2:34 information unusedparams unusedparams: unused parameter: unused",
	}
	for i := range 2 { // the first query after the open, and a later one
		resp, err := fx.client.Query(ctxT(t), &daemonv1.QueryRequest{Workspace: k, Op: daemonv1.Op_OP_DIAGNOSTICS, Path: "parse.go"})
		if err != nil || resp.GetStatus() != daemonv1.Status_STATUS_OK {
			t.Fatalf("query %d: %v %v", i, resp, err)
		}
		if got := diagSet(resp.GetDiagnostics().GetItems()); !slices.Equal(got, want) {
			t.Fatalf("query %d: diagnostics\n%q\nwant\n%q", i, got, want)
		}
		if e := resp.GetEvidence(); e.GetState() != daemonv1.EvidenceState_EVIDENCE_STATE_CURRENT || len(e.GetWarnings()) != 0 {
			t.Fatalf("query %d: evidence %v", i, e)
		}
	}
}
