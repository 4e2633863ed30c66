package rpc

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hanzoai/lsp/daemon/internal/pool"
	"github.com/hanzoai/lsp/daemon/internal/workspace"
	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
)

// TestLoadProblemsGo: a module whose imports cannot be resolved (the
// serving environment's GOPROXY=off, an empty module cache) is loaded by
// the real gopls with broken imports. The prepare answer, the capability
// probe and every answer from the workspace say so in gopls's own words,
// without a host path; an empty answer is unavailable, not current.
func TestLoadProblemsGo(t *testing.T) {
	if fx.gopls == "" {
		t.Skip("no gopls: set LSP_TEST_GOPLS")
	}
	k := keyFor(t, "unresolved")
	resp := prepareTree(t, k, newID(),
		file{"go.mod", []byte("module example.com/unresolved\n\ngo 1.22\n\nrequire github.com/missing/dep v1.2.3\n")},
		file{"main.go", []byte("package main\n\nimport \"github.com/missing/dep\"\n\n// Run runs.\nfunc Run() string { return dep.Name() }\n\nfunc main() { _ = Run() }\n")},
	)
	const want = `gopls could not load the project: main.go: could not import github.com/missing/dep (no required module provides package "github.com/missing/dep")`
	langs := resp.GetLanguages()
	if len(langs) != 1 || !contains(langs[0].GetWarnings(), want) {
		t.Fatalf("prepare languages %v, want the warning %q", langs, want)
	}
	noHostPaths(t, langs[0].GetWarnings())
	goplsDiagnosed(t, k)

	caps, err := fx.client.Capabilities(ctxT(t), &daemonv1.CapabilitiesRequest{Workspace: k})
	if err != nil || len(caps.GetLanguages()) != 1 || !contains(caps.GetLanguages()[0].GetWarnings(), want) {
		t.Fatalf("capabilities %v, %v", caps, err)
	}

	for _, tc := range []struct {
		name  string
		req   *daemonv1.QueryRequest
		state daemonv1.EvidenceState
	}{
		// dep.Name is unresolved: gopls has nothing to say about it.
		{"hover on the unresolved call", &daemonv1.QueryRequest{Op: daemonv1.Op_OP_HOVER, Path: "main.go", Position: &daemonv1.Position{Line: 5, Character: 32}},
			daemonv1.EvidenceState_EVIDENCE_STATE_UNAVAILABLE},
		{"document symbols", &daemonv1.QueryRequest{Op: daemonv1.Op_OP_DOCUMENT_SYMBOLS, Path: "main.go"},
			daemonv1.EvidenceState_EVIDENCE_STATE_PARTIAL},
		{"diagnostics", &daemonv1.QueryRequest{Op: daemonv1.Op_OP_DIAGNOSTICS, Path: "main.go"},
			daemonv1.EvidenceState_EVIDENCE_STATE_PARTIAL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.Workspace = k
			q, err := fx.client.Query(ctxT(t), tc.req)
			if err != nil || q.GetStatus() != daemonv1.Status_STATUS_OK {
				t.Fatalf("query: %v %v", q, err)
			}
			e := q.GetEvidence()
			if e.GetState() != tc.state || !contains(e.GetWarnings(), want) {
				t.Fatalf("evidence %v, want %v with %q", e, tc.state, want)
			}
			noHostPaths(t, e.GetWarnings())
			for _, d := range q.GetDiagnostics().GetItems() {
				noHostPaths(t, []string{d.GetMessage()})
			}
		})
	}
	// Logged once for the workspace and server, however often answered.
	ws := parseKey(t, k).String()
	var lines []string
	for _, l := range strings.Split(daemonLog.String(), "\n") {
		if strings.Contains(l, "level=WARN") && strings.Contains(l, `msg="language server could not load the project"`) && strings.Contains(l, "workspace="+ws) {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "server=gopls") || !strings.Contains(lines[0], "no required module provides package") {
		t.Fatalf("log lines for the workspace: %q", lines)
	}
	noHostPaths(t, lines)
}

// TestLoadProblemsGoElsewhere: the broken import is in a file after the
// anchor document (a.go, first in path order, is clean). The prepare's
// load wait must outlast gopls's diagnosis of the whole workspace, not the
// anchor's alone: the answer already carries what gopls found in the rest
// of the workspace, and so does an answer about the clean file.
func TestLoadProblemsGoElsewhere(t *testing.T) {
	if fx.gopls == "" {
		t.Skip("no gopls: set LSP_TEST_GOPLS")
	}
	k := keyFor(t, "unresolved-elsewhere")
	resp := prepareTree(t, k, newID(),
		file{"a.go", []byte("package main\n\n// A is clean.\nfunc A() int { return 1 }\n")},
		file{"go.mod", []byte("module example.com/elsewhere\n\ngo 1.22\n\nrequire github.com/missing/dep v1.2.3\n")},
		file{"main.go", []byte("package main\n\nimport \"github.com/missing/dep\"\n\nfunc main() { _ = dep.Name() + A() }\n")},
	)
	const want = `gopls could not load the project: main.go: could not import github.com/missing/dep (no required module provides package "github.com/missing/dep")`
	if langs := resp.GetLanguages(); len(langs) != 1 || !contains(langs[0].GetWarnings(), want) {
		t.Fatalf("prepare languages %v, want the warning %q", langs, want)
	}
	goplsDiagnosed(t, k)
	q, err := fx.client.Query(ctxT(t), &daemonv1.QueryRequest{Workspace: k, Op: daemonv1.Op_OP_DOCUMENT_SYMBOLS, Path: "a.go"})
	if err != nil || q.GetEvidence().GetState() != daemonv1.EvidenceState_EVIDENCE_STATE_PARTIAL || !contains(q.GetEvidence().GetWarnings(), want) {
		t.Fatalf("an answer about the clean file: %v %v", q, err)
	}
}

// TestLoadProblemsGoBeforeAQuestion: an implicit prepare (query_follows)
// does not wait for gopls's check of the workspace, so the question that
// follows may come before gopls has found the broken import in the file
// beside it. Every answer must then say one or the other: the problem
// (partial), or that the project was not yet checked (current). Once
// gopls has checked it, the answer names the problem. The prepare answer
// leaves the saying to the answers.
func TestLoadProblemsGoBeforeAQuestion(t *testing.T) {
	if fx.gopls == "" {
		t.Skip("no gopls: set LSP_TEST_GOPLS")
	}
	k := keyFor(t, "unresolved-asked")
	entries, data := treeOf(
		file{"a.go", []byte("package main\n\n// A is clean.\nfunc A() int { return 1 }\n")},
		file{"go.mod", []byte("module example.com/asked\n\ngo 1.22\n\nrequire github.com/missing/dep v1.2.3\n")},
		file{"main.go", []byte("package main\n\nimport \"github.com/missing/dep\"\n\nfunc main() { _ = dep.Name() + A() }\n")},
	)
	hdr := headerMsg(k, newID(), entries)
	hdr.GetHeader().QueryFollows = true
	hdr.GetHeader().FocusPath = "a.go"
	r := push(ctxT(t), append([]*daemonv1.PrepareRequest{hdr}, dataMsgs(data, 7)...)...)
	if r.err != nil || !r.resp.GetPrepared() {
		t.Fatalf("prepare: %v %v", r.resp, r.err)
	}
	for _, w := range r.resp.GetWarnings() {
		if strings.Contains(w, "still loading or checking") {
			t.Fatalf("the prepare answer said what its question's answer says: %q", w)
		}
	}
	const want = `gopls could not load the project: main.go: could not import github.com/missing/dep (no required module provides package "github.com/missing/dep")`
	unchecked := func(ws []string) bool {
		return slices.ContainsFunc(ws, func(w string) bool { return strings.HasPrefix(w, "gopls had not finished checking the whole project") })
	}
	ask := func() (daemonv1.EvidenceState, []string) {
		t.Helper()
		q, err := fx.client.Query(ctxT(t), &daemonv1.QueryRequest{Workspace: k, Op: daemonv1.Op_OP_DOCUMENT_SYMBOLS, Path: "a.go"})
		if err != nil || q.GetStatus() != daemonv1.Status_STATUS_OK || len(q.GetSymbols().GetItems()) != 1 {
			t.Fatalf("document symbols of a.go: %v %v", q, err)
		}
		e := q.GetEvidence()
		switch {
		case contains(e.GetWarnings(), want) && e.GetState() == daemonv1.EvidenceState_EVIDENCE_STATE_PARTIAL:
		case unchecked(e.GetWarnings()) && e.GetState() == daemonv1.EvidenceState_EVIDENCE_STATE_CURRENT:
		default:
			t.Fatalf("an answer neither names the broken import nor says the project was not yet checked: %v", e)
		}
		return e.GetState(), e.GetWarnings()
	}
	first, _ := ask()
	t.Logf("the first answer: %v", first)
	ctx := ctxT(t)
	for !diagnosedNow(t, k, "gopls") {
		select {
		case <-ctx.Done():
			t.Fatal("gopls never said it had checked the workspace")
		case <-time.After(50 * time.Millisecond):
		}
	}
	if state, ws := ask(); state != daemonv1.EvidenceState_EVIDENCE_STATE_PARTIAL || unchecked(ws) {
		t.Fatalf("once checked: %v %q", state, ws)
	}
}

// goplsDiagnosed fails unless the workspace's gopls said, through its
// diagnosis reports, that its initial diagnosis of the workspace had
// ended: what ended the prepare's load wait, rather than a quiet window,
// so the warnings it carried came from a finished diagnosis.
func goplsDiagnosed(t *testing.T, k *daemonv1.WorkspaceKey) {
	t.Helper()
	serverDiagnosed(t, k, "gopls", "gopls's diagnosis reports do not say its diagnoses are published")
}

// serverDiagnosed fails with msg unless the workspace's server id says it
// has published what its first load found.
func serverDiagnosed(t *testing.T, k *daemonv1.WorkspaceKey, id, msg string) {
	t.Helper()
	if !diagnosedNow(t, k, id) {
		t.Fatal(msg)
	}
}

// diagnosedNow reports whether the workspace's server id has published
// what its first load found (lsp.Client.Diagnosed: for gopls, checked the
// whole workspace).
func diagnosedNow(t *testing.T, k *daemonv1.WorkspaceKey, id string) bool {
	t.Helper()
	w, release, ok := fx.pool.Acquire(parseKey(t, k))
	if !ok {
		t.Fatal("the workspace is not live")
	}
	defer release()
	for _, r := range w.Running() {
		if r.Spec.ID != id {
			continue
		}
		c, _, err := r.Server.Client(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		return c.Diagnosed()
	}
	t.Fatalf("no %s runs on the workspace", id)
	return false
}

// TestLoadProblemsGoList: a go.mod the local go command refuses
// (GOTOOLCHAIN=local) fails gopls's go list; its words come back, once,
// from the log line and the go.mod diagnostic alike.
func TestLoadProblemsGoList(t *testing.T) {
	if fx.gopls == "" {
		t.Skip("no gopls: set LSP_TEST_GOPLS")
	}
	k := keyFor(t, "golist")
	resp := prepareTree(t, k, newID(),
		file{"go.mod", []byte("module example.com/golist\n\ngo 1.99\n")},
		file{"main.go", []byte("package main\n\nfunc main() {}\n")},
	)
	langs := resp.GetLanguages()
	if len(langs) != 1 {
		t.Fatalf("prepare languages %v", langs)
	}
	var found int
	for _, w := range langs[0].GetWarnings() {
		if strings.HasPrefix(w, "gopls could not load the project: ") && strings.Contains(w, "go: go.mod requires go >= 1.99") {
			found++
		}
	}
	if found == 0 {
		t.Fatalf("prepare warnings %q, want go list's refusal", langs[0].GetWarnings())
	}
	noHostPaths(t, langs[0].GetWarnings())
	q, err := fx.client.Query(ctxT(t), &daemonv1.QueryRequest{Workspace: k, Op: daemonv1.Op_OP_DOCUMENT_SYMBOLS, Path: "main.go"})
	if err != nil || q.GetStatus() != daemonv1.Status_STATUS_OK {
		t.Fatalf("query: %v %v", q, err)
	}
	if s := q.GetEvidence().GetState(); s == daemonv1.EvidenceState_EVIDENCE_STATE_CURRENT {
		t.Fatalf("an answer from a project go list refused is current: %v", q.GetEvidence())
	}
}

// TestNoLoadProblems: a module that loads has no warnings anywhere and
// its answers are current.
func TestNoLoadProblems(t *testing.T) {
	k, _ := goWorkspace(t)
	for _, l := range goModule.prepare.GetLanguages() {
		if len(l.GetWarnings()) != 0 {
			t.Fatalf("warnings for a module that loads: %q", l.GetWarnings())
		}
	}
	q, err := fx.client.Query(ctxT(t), &daemonv1.QueryRequest{Workspace: k, Op: daemonv1.Op_OP_DOCUMENT_SYMBOLS, Path: "main.go"})
	if err != nil || q.GetEvidence().GetState() != daemonv1.EvidenceState_EVIDENCE_STATE_CURRENT || len(q.GetEvidence().GetWarnings()) != 0 {
		t.Fatalf("query: %v %v", q, err)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// noHostPaths: no text names the daemon's root (trees, homes) or a
// file:// URI.
func noHostPaths(t *testing.T, texts []string) {
	t.Helper()
	for _, s := range texts {
		if strings.Contains(s, fx.root) || strings.Contains(s, "file://") || strings.Contains(s, "/trees/") || strings.Contains(s, "/homes/") {
			t.Fatalf("a host path in %q", s)
		}
	}
}

// TestLoadProblemsTypeScript: a project whose declared dependency is not
// installed. The real tsserver cannot resolve the import, and the prepare
// answer and the answers say so; a signature keeps its "data: unknown".
// By the time the prepare answered, the anchor had been published with
// every diagnostic tsserver counted for it (lsp.LoadSigns.AnchorCounts,
// what ends the first-load wait before the quiet window).
func TestLoadProblemsTypeScript(t *testing.T) {
	if !fx.typescript {
		t.Skip("no TypeScript server: set LSP_TEST_TYPESCRIPT")
	}
	k := keyFor(t, "ts-missing")
	index := "import { z } from \"zod\";\n\nexport function parsedType(data: unknown): string {\n  return z.string().parse(data);\n}\n\nexport const n = parsedType(1);\n"
	resp := prepareTree(t, k, newID(),
		file{"package.json", []byte(`{"name":"t","version":"1.0.0","dependencies":{"zod":"^3.22.0"}}`)},
		file{"tsconfig.json", []byte(`{"compilerOptions":{"strict":true,"module":"nodenext","moduleResolution":"nodenext","target":"es2022"},"include":["src"]}`)},
		file{"src/index.ts", []byte(index)},
	)
	const want = "typescript-language-server could not load the project: src/index.ts: Cannot find module 'zod' or its corresponding type declarations."
	var warnings []string
	for _, l := range resp.GetLanguages() {
		warnings = append(warnings, l.GetWarnings()...)
	}
	if !contains(warnings, want) {
		t.Fatalf("prepare languages %v, want the warning %q", resp.GetLanguages(), want)
	}
	noHostPaths(t, warnings)
	serverDiagnosed(t, k, "typescript-language-server", "the anchor was not published with every diagnostic tsserver counted for it by the prepare's answer")
	q, err := fx.client.Query(ctxT(t), &daemonv1.QueryRequest{Workspace: k, Op: daemonv1.Op_OP_HOVER, Path: "src/index.ts", Position: &daemonv1.Position{Line: 2, Character: 18}})
	if err != nil || q.GetStatus() != daemonv1.Status_STATUS_OK {
		t.Fatalf("hover: %v %v", q, err)
	}
	if md := q.GetHover().GetMarkdown(); !strings.Contains(md, "parsedType(data: unknown): string") {
		t.Fatalf("hover markdown %q lost the signature", md)
	}
	if e := q.GetEvidence(); e.GetState() != daemonv1.EvidenceState_EVIDENCE_STATE_PARTIAL || !contains(e.GetWarnings(), want) {
		t.Fatalf("hover evidence %v", e)
	}
}

// TestLoadProblemsClangd: clangd's load problems are its anchor's
// diagnostics (an include it cannot resolve). The real clangd publishes
// the anchor once parsed, that publication ends the first-load wait (the
// client says so: Diagnosed), and the missing header is in the prepare
// answer.
func TestLoadProblemsClangd(t *testing.T) {
	if !fx.clangd {
		t.Skip("no clangd at " + pinnedClangd)
	}
	k := keyFor(t, "c-missing")
	resp := prepareTree(t, k, newID(),
		file{"main.c", []byte("#include \"config.h\"\n\nint main(void) { return CONFIGURED; }\n")},
		file{"util.c", []byte("int twice(int x) { return 2 * x; }\n")},
	)
	const want = "clangd could not load the project: main.c: 'config.h' file not found"
	var warnings []string
	for _, l := range resp.GetLanguages() {
		warnings = append(warnings, l.GetWarnings()...)
	}
	if !contains(warnings, want) {
		t.Fatalf("prepare warnings %q, want %q", warnings, want)
	}
	serverDiagnosed(t, k, "clangd", "clangd's anchor publication did not end its first load")
}

// TestDiagnosticsScrubbed: go list's "found packages a (a.go) and b (b.go)
// in DIR" names the package's host directory; it comes back repo-relative,
// in the diagnostic and in the load warning alike.
func TestDiagnosticsScrubbed(t *testing.T) {
	if fx.gopls == "" {
		t.Skip("no gopls: set LSP_TEST_GOPLS")
	}
	k := keyFor(t, "twopkgs")
	resp := prepareTree(t, k, newID(),
		file{"go.mod", []byte("module example.com/twopkgs\n\ngo 1.22\n")},
		file{"main.go", []byte("package main\n\nimport _ \"example.com/twopkgs/two\"\n\nfunc main() {}\n")},
		file{"two/a.go", []byte("package a\n")},
		file{"two/b.go", []byte("package b\n")},
	)
	var all []string
	for _, l := range resp.GetLanguages() {
		all = append(all, l.GetWarnings()...)
	}
	for _, p := range []string{"main.go", "two/a.go"} {
		q, err := fx.client.Query(ctxT(t), &daemonv1.QueryRequest{Workspace: k, Op: daemonv1.Op_OP_DIAGNOSTICS, Path: p})
		if err != nil || q.GetStatus() != daemonv1.Status_STATUS_OK {
			t.Fatalf("diagnostics of %s: %v %v", p, q, err)
		}
		all = append(all, q.GetEvidence().GetWarnings()...)
		for _, d := range q.GetDiagnostics().GetItems() {
			all = append(all, d.GetMessage())
		}
	}
	t.Logf("texts: %q", all)
	noHostPaths(t, all)
	found := false
	for _, s := range all {
		found = found || strings.Contains(s, "found packages a (a.go) and b (b.go) in two")
	}
	if !found {
		t.Fatalf("no diagnostic or warning names the package directory repo-relative: %q", all)
	}
}

// TestLoadProblemsAfterRestart: a killed server comes back as a new
// generation whose answers still say the project did not load (the
// workspace also keeps what earlier generations reported, for the moment
// before the new one says so again; this test does not isolate that
// moment).
func TestLoadProblemsAfterRestart(t *testing.T) {
	if fx.gopls == "" {
		t.Skip("no gopls: set LSP_TEST_GOPLS")
	}
	k := keyFor(t, "restart-unresolved")
	prepareTree(t, k, newID(),
		file{"go.mod", []byte("module example.com/restart\n\ngo 1.22\n\nrequire github.com/missing/dep v1.2.3\n")},
		file{"main.go", []byte("package main\n\nimport \"github.com/missing/dep\"\n\nfunc main() { _ = dep.Name() }\n")},
	)
	const want = `gopls could not load the project: main.go: could not import github.com/missing/dep (no required module provides package "github.com/missing/dep")`
	w, release, ok := fx.pool.Acquire(parseKey(t, k))
	if !ok {
		t.Fatal("the workspace is not live")
	}
	home := w.Home
	release()
	pids := processesWithEnv("HOME=" + home)
	if len(pids) == 0 {
		t.Fatal("no server process runs with the workspace's home")
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		q, err := fx.client.Query(ctxT(t), &daemonv1.QueryRequest{Workspace: k, Op: daemonv1.Op_OP_DOCUMENT_SYMBOLS, Path: "main.go"})
		if err != nil {
			t.Fatal(err)
		}
		if q.GetStatus() == daemonv1.Status_STATUS_OK && q.GetEvidence().GetServer().GetGeneration() >= 2 {
			if e := q.GetEvidence(); e.GetState() == daemonv1.EvidenceState_EVIDENCE_STATE_CURRENT || !contains(e.GetWarnings(), want) {
				t.Fatalf("the restarted server's answer: %v", e)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer from a restarted server: %v", q)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// processesWithEnv are the pids whose environment holds entry.
func processesWithEnv(entry string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue
		}
		for _, kv := range strings.Split(string(b), "\x00") {
			if kv == entry {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

// TestFileExcludedByBuildTags: a file its build tags exclude (aws-sdk-go
// has such files) makes the real gopls warn "No packages found for open
// file" once it is open. That qualifies the answers about that file, with
// gopls's reason, and no other: the rest of the module loaded.
func TestFileExcludedByBuildTags(t *testing.T) {
	if fx.gopls == "" {
		t.Skip("no gopls: set LSP_TEST_GOPLS")
	}
	k := keyFor(t, "buildtags")
	resp := prepareTree(t, k, newID(),
		file{"go.mod", []byte("module example.com/buildtags\n\ngo 1.22\n")},
		file{"main.go", []byte("package main\n\n// Run runs.\nfunc Run() string { return \"run\" }\n\nfunc main() { _ = Run() }\n")},
		file{"tagged.go", []byte("//go:build integration\n\npackage main\n\nfunc tagged() string { return Run() }\n")},
	)
	for _, l := range resp.GetLanguages() {
		if len(l.GetWarnings()) != 0 {
			t.Fatalf("prepare warnings %q for a module that loads", l.GetWarnings())
		}
	}
	const want = "gopls did not load this file: No packages found for open file tagged.go. This file may be excluded due to its build tags."
	q, err := fx.client.Query(ctxT(t), &daemonv1.QueryRequest{Workspace: k, Op: daemonv1.Op_OP_DIAGNOSTICS, Path: "tagged.go"})
	if err != nil || q.GetStatus() != daemonv1.Status_STATUS_OK {
		t.Fatalf("diagnostics: %v %v", q, err)
	}
	if e := q.GetEvidence(); e.GetState() == daemonv1.EvidenceState_EVIDENCE_STATE_CURRENT || !contains(e.GetWarnings(), want) {
		t.Fatalf("the excluded file's evidence %v, want partial with %q", e, want)
	}
	noHostPaths(t, q.GetEvidence().GetWarnings())
	for _, req := range []*daemonv1.QueryRequest{
		{Op: daemonv1.Op_OP_DOCUMENT_SYMBOLS, Path: "main.go"},
		{Op: daemonv1.Op_OP_HOVER, Path: "main.go", Position: &daemonv1.Position{Line: 5, Character: 19}},
	} {
		req.Workspace = k
		q, err := fx.client.Query(ctxT(t), req)
		if err != nil || q.GetStatus() != daemonv1.Status_STATUS_OK {
			t.Fatalf("%v: %v %v", req.GetOp(), q, err)
		}
		if e := q.GetEvidence(); e.GetState() != daemonv1.EvidenceState_EVIDENCE_STATE_CURRENT || len(e.GetWarnings()) != 0 {
			t.Fatalf("%v on main.go: evidence %v, want current (only tagged.go is excluded)", req.GetOp(), e)
		}
	}
	caps, err := fx.client.Capabilities(ctxT(t), &daemonv1.CapabilitiesRequest{Workspace: k})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range caps.GetLanguages() {
		if len(l.GetWarnings()) != 0 {
			t.Fatalf("capability warnings %q: one excluded file is not a load problem", l.GetWarnings())
		}
	}
}

// TestCgoOff: a Go server without a C compiler (the unjailed spawner's
// CGO_ENABLED=0, as the jail's LSP_JAIL_CC=off) does not load the files
// that import "C": the prepare says so, and the answers in those files
// and in their package, and in the files that import that package, are
// partial, not current — the hover on a name a
// cgo file declares is empty there, where an ordinary checkout answers.
func TestCgoOff(t *testing.T) {
	if fx.gopls == "" {
		t.Skip("no gopls: set LSP_TEST_GOPLS")
	}
	k := keyFor(t, "cgooff")
	resp := prepareTree(t, k, newID(),
		file{"go.mod", []byte("module example.com/cgofix\n\ngo 1.22\n")},
		file{"native.go", []byte("package cgofix\n\n/*\n#include <stdlib.h>\nstatic int twice(int n) { return 2 * n; }\n*/\nimport \"C\"\n\n// Twice doubles n in C.\nfunc Twice(n int) int { return int(C.twice(C.int(n))) }\n")},
		file{"use.go", []byte("package cgofix\n\n// Use doubles 3.\nfunc Use() int { return Twice(3) }\n")},
		file{"other/other.go", []byte("package other\n\n// Other is plain Go.\nfunc Other() int { return 1 }\n")},
		file{"user/user.go", []byte("package user\n\nimport \"example.com/cgofix\"\n\n// U uses the cgo package.\nfunc U() int { return cgofix.Twice(2) }\n")},
	)
	const want = `gopls runs without a C compiler (CGO_ENABLED=0): the 1 file(s) that import "C" (native.go) are not loaded; answers in their packages are partial`
	if !contains(resp.GetWarnings(), want) {
		t.Fatalf("prepare warnings %q, want %q", resp.GetWarnings(), want)
	}
	for _, tc := range []struct {
		req  *daemonv1.QueryRequest
		want string // "" for a current answer
	}{
		{&daemonv1.QueryRequest{Op: daemonv1.Op_OP_HOVER, Path: "use.go", Position: &daemonv1.Position{Line: 3, Character: 26}},
			`gopls runs without a C compiler (CGO_ENABLED=0): this file's package has files that import "C", which are not loaded`},
		{&daemonv1.QueryRequest{Op: daemonv1.Op_OP_DOCUMENT_SYMBOLS, Path: "native.go"},
			`gopls runs without a C compiler (CGO_ENABLED=0): this file imports "C" and is not loaded`},
		{&daemonv1.QueryRequest{Op: daemonv1.Op_OP_HOVER, Path: "user/user.go", Position: &daemonv1.Position{Line: 5, Character: 30}},
			`gopls runs without a C compiler (CGO_ENABLED=0): this file imports example.com/cgofix, whose files that import "C" are not loaded`},
		{&daemonv1.QueryRequest{Op: daemonv1.Op_OP_HOVER, Path: "other/other.go", Position: &daemonv1.Position{Line: 3, Character: 6}}, ""},
	} {
		tc.req.Workspace = k
		q, err := fx.client.Query(ctxT(t), tc.req)
		if err != nil || q.GetStatus() != daemonv1.Status_STATUS_OK {
			t.Fatalf("%v %s: %v %v", tc.req.GetOp(), tc.req.GetPath(), q, err)
		}
		e := q.GetEvidence()
		if tc.want == "" {
			if e.GetState() != daemonv1.EvidenceState_EVIDENCE_STATE_CURRENT {
				t.Errorf("%s outside the cgo package: %v, want current", tc.req.GetPath(), e)
			}
			continue
		}
		if e.GetState() == daemonv1.EvidenceState_EVIDENCE_STATE_CURRENT || !contains(e.GetWarnings(), tc.want) {
			t.Errorf("%v %s: evidence %v, want partial or unavailable with %q", tc.req.GetOp(), tc.req.GetPath(), e, tc.want)
		}
	}
}

// TestTypeScriptSuggestions: the real typescript-language-server says, on
// being asked (suggestionDiagnosticsSync), how many suggestions a file
// has; the answer carries them (hint severity), and a clean file still
// answers at once, empty.
func TestTypeScriptSuggestions(t *testing.T) {
	if !fx.typescript {
		t.Skip("no TypeScript server: set LSP_TEST_TYPESCRIPT")
	}
	k := keyFor(t, "ts-suggest")
	prepareTree(t, k, newID(),
		file{"package.json", []byte(`{"name":"t","version":"1.0.0"}`)},
		file{"tsconfig.json", []byte(`{"compilerOptions":{"strict":true,"target":"es2022"},"include":["src"]}`)},
		file{"src/hint.ts", []byte("export function f(unused: number): number {\n  return 1;\n}\n")},
		file{"src/clean.ts", []byte("export const n: number = 1;\n")},
	)
	q, err := fx.client.Query(ctxT(t), &daemonv1.QueryRequest{Workspace: k, Op: daemonv1.Op_OP_DIAGNOSTICS, Path: "src/hint.ts"})
	if err != nil || q.GetStatus() != daemonv1.Status_STATUS_OK {
		t.Fatalf("diagnostics: %v %v", q, err)
	}
	var hints int
	for _, d := range q.GetDiagnostics().GetItems() {
		if strings.Contains(d.GetMessage(), "'unused' is declared but its value is never read") {
			hints++
		}
	}
	if hints != 1 || q.GetEvidence().GetState() != daemonv1.EvidenceState_EVIDENCE_STATE_CURRENT {
		t.Fatalf("diagnostics of hint.ts %v, %v; want the unused-parameter suggestion, current", q.GetDiagnostics().GetItems(), q.GetEvidence())
	}
	start := time.Now()
	q, err = fx.client.Query(ctxT(t), &daemonv1.QueryRequest{Workspace: k, Op: daemonv1.Op_OP_DIAGNOSTICS, Path: "src/clean.ts"})
	if err != nil || q.GetStatus() != daemonv1.Status_STATUS_OK || len(q.GetDiagnostics().GetItems()) != 0 || q.GetEvidence().GetState() != daemonv1.EvidenceState_EVIDENCE_STATE_CURRENT {
		t.Fatalf("diagnostics of clean.ts: %v %v", q, err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("a clean file's diagnostics took %v", took)
	}
	if strings.Contains(daemonLog.String(), "did not say how many diagnostics to expect") {
		t.Fatalf("the real server did not answer suggestionDiagnosticsSync through typescript.tsserverRequest: %s", daemonLog.String()[max(0, strings.Index(daemonLog.String(), "did not say how many")-200):][:600])
	}
}

// TestPrepareFocus (real gopls and tsserver): a prepare with a focus
// waits for the first load of that file's server only and names the
// servers it did not wait for; the focus's server answers at once, with
// nothing left to load. Without a focus, or with one no server serves,
// it waits for every server and says nothing of the kind.
func TestPrepareFocus(t *testing.T) {
	if fx.gopls == "" || !fx.typescript {
		t.Skip("needs gopls and the TypeScript server: set LSP_TEST_GOPLS and LSP_TEST_TYPESCRIPT")
	}
	tree := []file{
		{"go.mod", []byte("module example.com/poly\n\ngo 1.22\n")},
		{"main.go", []byte("package main\n\nfunc main() { _ = answer() }\n\nfunc answer() int { return 42 }\n")},
		{"web/tsconfig.json", []byte(`{"compilerOptions":{"strict":true}}` + "\n")},
		{"web/index.ts", []byte("export const answer: number = 42;\n")},
		{"README.md", []byte("# poly\n")},
	}
	const notAwaited = "typescript-language-server's first load was not awaited (this prepare waited for the server of main.go only): its load problems, if any, come with its answers"
	prepare := func(k *daemonv1.WorkspaceKey, focus string) *daemonv1.PrepareResponse {
		t.Helper()
		entries, data := treeOf(tree...)
		hdr := &daemonv1.PrepareHeader{Workspace: k, PrepareId: newID(), Files: entries, FocusPath: focus}
		r := push(ctxT(t), append([]*daemonv1.PrepareRequest{{Part: &daemonv1.PrepareRequest_Header{Header: hdr}}}, dataMsgs(data, 64)...)...)
		if r.err != nil || !r.resp.GetPrepared() {
			t.Fatalf("prepare (focus %q): %v, %v", focus, r.resp, r.err)
		}
		return r.resp
	}
	// running says whether k's workspace runs the TypeScript server.
	running := func(k *daemonv1.WorkspaceKey) bool {
		t.Helper()
		wk, err := workspace.ParseKey(k)
		if err != nil {
			t.Fatal(err)
		}
		w, release, ok := fx.pool.Acquire(wk)
		if !ok {
			t.Fatalf("workspace %s is not live", wk)
		}
		defer release()
		return slices.ContainsFunc(w.Running(), func(r pool.Running) bool { return r.Spec.ID == "typescript-language-server" })
	}
	// awaitRunning waits for it to, for less than the fixture's grace: a
	// start that waited out the grace instead fails.
	awaitRunning := func(k *daemonv1.WorkspaceKey, why string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for !running(k) {
			select {
			case <-ctx.Done():
				t.Fatalf("the deferred server did not start %s", why)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	k := keyFor(t, "focus-go")
	focused := prepare(k, "main.go")
	if !contains(focused.GetWarnings(), notAwaited) {
		t.Fatalf("focused prepare's warnings %q lack %q", focused.GetWarnings(), notAwaited)
	}
	// The other server waits for the workspace's first answer (this
	// fixture's grace is a minute): it does not share the cores with the
	// question about the focus. Started at once, it runs within a second
	// or two; the window only bounds how long this test looks.
	for until := time.Now().Add(3 * time.Second); time.Now().Before(until); time.Sleep(50 * time.Millisecond) {
		if running(k) {
			t.Fatal("the deferred server started before the workspace's first answer")
		}
	}
	q, err := fx.client.Query(ctxT(t), &daemonv1.QueryRequest{Workspace: k, Op: daemonv1.Op_OP_HOVER, Path: "main.go",
		Position: &daemonv1.Position{Line: 2, Character: 19}})
	if err != nil || q.GetStatus() != daemonv1.Status_STATUS_OK || q.GetEvidence().GetState() != daemonv1.EvidenceState_EVIDENCE_STATE_CURRENT ||
		!strings.Contains(q.GetHover().GetMarkdown(), "func answer() int") {
		t.Fatalf("hover on the focus: %v, %v", q, err)
	}
	awaitRunning(k, "after the first answer")
	// The answer lists the deferred language all the same, and it serves.
	if !slices.ContainsFunc(focused.GetLanguages(), func(l *daemonv1.LanguageTools) bool { return l.GetLanguage() == "typescript" }) {
		t.Fatalf("focused prepare's languages %v lack typescript", focused.GetLanguages())
	}
	q, err = fx.client.Query(ctxT(t), &daemonv1.QueryRequest{Workspace: k, Op: daemonv1.Op_OP_HOVER, Path: "web/index.ts",
		Position: &daemonv1.Position{Line: 0, Character: 14}})
	if err != nil || q.GetStatus() != daemonv1.Status_STATUS_OK || !strings.Contains(q.GetHover().GetMarkdown(), "answer: number") {
		t.Fatalf("hover on the deferred server's file: %v, %v", q, err)
	}
	// Without any question, the deferred servers start after the grace
	// (a server of its own here, with a short one, over the same pool).
	k = keyFor(t, "focus-unasked")
	prepare(k, "main.go")
	if running(k) {
		t.Fatal("the deferred server started before the workspace's first answer")
	}
	wk, err := workspace.ParseKey(k)
	if err != nil {
		t.Fatal(err)
	}
	ts, ok := fx.pool.SpecFor("web/index.ts")
	if !ok {
		t.Fatal("no server for web/index.ts")
	}
	(&Server{Pool: fx.pool, Runner: fx.runner, Log: slog.New(slog.DiscardHandler), DeferGrace: 50 * time.Millisecond}).startDeferred(wk, []*pool.Spec{ts})
	awaitRunning(k, "after the grace")
	// An answer ends the fixture's own wait (a minute) on this workspace.
	if q, err := fx.client.Query(ctxT(t), &daemonv1.QueryRequest{Workspace: k, Op: daemonv1.Op_OP_HOVER, Path: "main.go",
		Position: &daemonv1.Position{Line: 2, Character: 19}}); err != nil || q.GetStatus() != daemonv1.Status_STATUS_OK {
		t.Fatalf("hover on the focus: %v, %v", q, err)
	}
	for tag, focus := range map[string]string{"focus-none": "", "focus-unserved": "README.md"} {
		for _, w := range prepare(keyFor(t, tag), focus).GetWarnings() {
			if strings.Contains(w, "not awaited") {
				t.Fatalf("prepare with focus %q: %q", focus, w)
			}
		}
	}
}
