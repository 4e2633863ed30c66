package readiness

import (
	"testing"

	"github.com/hanzoai/lsp/daemon/internal/lsp"
)

// What clangd 19.1.7 and rust-analyzer 1.96.0 said on the corpus's jq and
// anyhow, and what each sign makes of it.
func TestNativeSigns(t *testing.T) {
	for _, lang := range []string{"c", "cpp"} {
		s := For(lang)
		got, ok := s.Diagnostic(lsp.Diagnostic{Code: "pp_file_not_found", Source: "clang", Message: "'src/version.h' file not found"})
		if !ok || got != "'src/version.h' file not found" {
			t.Errorf("%s: missing header: %q, %v", lang, got, ok)
		}
		if _, ok := s.Diagnostic(lsp.Diagnostic{Code: "undeclared_var_use", Source: "clang", Message: "use of undeclared identifier 'x'"}); ok {
			t.Errorf("%s: a type error counted as a load problem", lang)
		}
	}
	r := For("rust")
	msg := "Failed to read Cargo metadata with dependencies for `/w/tree/Cargo.toml`: `cargo metadata` exited with an error: error: no matching package named `futures` found\nlocation searched: crates.io index\nrequired by package `anyhow v1.0.104 (/w/tree)`\nnote: offline mode (via `--offline`) can sometimes cause surprising resolution failures"
	got, ok := r.Log(2, msg)
	if want := "Failed to read Cargo metadata with dependencies for `/w/tree/Cargo.toml`: error: no matching package named `futures` found"; !ok || got != want {
		t.Errorf("metadata failure: %q, %v; want %q", got, ok, want)
	}
	if _, ok := r.Log(3, msg); ok {
		t.Error("an info message counted")
	}
	if _, ok := r.Log(2, "rust-analyzer is indexing"); ok {
		t.Error("a benign warning counted")
	}
}

func TestNativeIndexing(t *testing.T) {
	if !For("cpp").Indexing("indexing") || For("c").Indexing("Loading") {
		t.Error("clangd: only its background index is indexing")
	}
	r := For("rust")
	for title, want := range map[string]bool{"Fetching": true, "Roots Scanned": true, "Building CrateGraph": true, "Loading proc-macros": true, "Indexing": false} {
		if r.Indexing(title) != want {
			t.Errorf("rust-analyzer %q: indexing %v, want %v", title, !want, want)
		}
		if r.Background(title) == want {
			t.Errorf("rust-analyzer %q: background %v", title, !want)
		}
	}
	if For("cpp").Background != nil {
		t.Error("clangd's index is no background work: references wait for it")
	}
}
