package readiness

import (
	"strings"

	"github.com/hanzoai/lsp/daemon/internal/lsp"
)

// clangd 19.1.7 (Debian clangd-19) publishes an include it cannot resolve
// as a diagnostic with source "clang" and code "pp_file_not_found":
// "'version.h' file not found" (seen on jq, whose build generates
// src/version.h). A header the build would have made, or an include path
// the compilation database lacks, is the project's problem, not the
// file's: what depends on it is missing from every answer. It publishes
// an open document's diagnostics once, when it has parsed it, clean or
// not (fmt's include/fmt/args.h, src/format.cc, test/args-test.cc:
// 0.5–0.9 s after the open, nothing more in the 8 s after, 2026-12-04),
// so the anchor's publication ends the first load (AnchorPublishes).
func clangDiagnostic(d lsp.Diagnostic) (string, bool) {
	if d.Code != "pp_file_not_found" {
		return "", false
	}
	return firstLine(d.Message), true
}

// rust-analyzer 1.96.0 (Debian rust-web-analyzer), when cargo metadata
// cannot resolve the workspace's dependencies offline, falls back to
// loading it without them and says so with window/showMessage, type 2
// (warning): "Failed to read Cargo metadata with dependencies for
// `…/Cargo.toml`: `cargo metadata` exited with an error: error: no
// matching package named `futures` found …" (seen on anyhow, whose
// dev-dependencies are not in the home). A sysroot it cannot load is
// reported the same way ("… for sysroot of …"), and a workspace it cannot
// load at all as "Failed to load workspaces" or "Failed to discover
// workspace".
var rustLoadFailures = []string{
	"Failed to read Cargo metadata",
	"Failed to load workspaces",
	"Failed to discover workspace",
	"failed to find sysroot",
	"Failed to load sysroot",
}

func rustLog(typ int, msg string) (string, bool) {
	if typ > 2 || !containsAny(msg, rustLoadFailures) {
		return "", false
	}
	return rustMessage(msg), true
}

// rustMessage keeps the cause: the first line, and cargo's error line
// when there is one.
func rustMessage(msg string) string {
	first := strings.Replace(firstLine(msg), "`cargo metadata` exited with an error: ", "", 1)
	if strings.Contains(first, "error: ") {
		return first
	}
	for _, l := range strings.Split(msg, "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "error: ") {
			return strings.TrimSuffix(strings.TrimSpace(first), ":") + ": " + l
		}
	}
	return first
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

// clangd reports its background index as work-done progress titled
// "indexing" (token backgroundIndexProgress, "12/47" as message):
// references and workspace symbols come from that index, so until it ends
// they miss the files not yet indexed. rust-analyzer's project loading
// ("Fetching", "Loading", "Roots Scanned", "Building CrateGraph") leaves it
// answering without the workspace; its cache priming ("Indexing") does
// not change answers, which it computes on demand, so nothing waits for
// it (rustPriming). clangd's index comes
// after its load and feeds only some answers (IndexInBackground): a
// prepare need not wait for it, nor a hover (whose answer says it came
// during indexing).
func clangIndexing(title string) bool { return title == "indexing" }

func rustIndexing(title string) bool {
	for _, p := range []string{"Fetching", "Loading", "Roots Scanned", "Building CrateGraph"} {
		if strings.HasPrefix(title, p) {
			return true
		}
	}
	return false
}

// rustPriming: on anyhow (2026-12-04) the project was loaded 1.1 s after
// the start and cache priming ran 5 s more, all of which the first load
// used to wait for. rust-analyzer primes only once it is quiescent (no
// fetch, crate graph or file scan in flight), so the priming's begin is
// the load's end (BackgroundAfterLoad): the first load no longer waits a
// quiet second after it (anyhow, 2026-12-06: the crate graph 1.3 s after
// the start, the wait's end 1.0 s later, at the quiet).
func rustPriming(title string) bool { return strings.HasPrefix(title, "Indexing") }

func init() {
	register(lsp.LoadSigns{Diagnostic: clangDiagnostic, Indexing: clangIndexing, IndexInBackground: true, AnchorPublishes: true}, "c", "cpp", "objective-c", "objective-cpp")
	register(lsp.LoadSigns{Log: rustLog, Indexing: rustIndexing, Background: rustPriming, BackgroundAfterLoad: true}, "rust")
}
