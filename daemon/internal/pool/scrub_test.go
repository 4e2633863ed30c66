package pool

import (
	"path/filepath"
	"testing"

	"github.com/hanzoai/lsp/daemon/internal/uri"
	"github.com/hanzoai/lsp/daemon/internal/workspace"
)

// TestScrubberNPMPackagesReadAsOnACheckout: in a server's text, a file of
// an installed npm package reads as on a checkout (node_modules/…), though
// the package is an external root named name@version for locations; other
// external roots (GOROOT's std) are still named by module; no host path
// is left.
func TestScrubberNPMPackagesReadAsOnACheckout(t *testing.T) {
	store, err := workspace.NewStore(t.TempDir(), workspace.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	w := &Workspace{Dir: filepath.Join(base, "c", "tree"), Home: filepath.Join(base, "home"), pool: &Pool{store: store}}
	nm := filepath.Join(w.Dir, "node_modules")
	pkg := filepath.Join(nm, ".pnpm", "@testing-library+dom@10.4.0", "node_modules", "@testing-library", "dom")
	extra := []uri.External{
		{Dir: pkg, Module: "@testing-library/dom@10.4.0"},
		{Dir: "/usr/local/go/src", Module: "std@go1.25"},
	}
	scrub := w.Scrubber(extra)
	for in, want := range map[string]string{
		`typeof import("` + pkg + `/types/queries")`: `typeof import("node_modules/.pnpm/@testing-library+dom@10.4.0/node_modules/@testing-library/dom/types/queries")`,
		"/usr/local/go/src/fmt/print.go":             "std@go1.25/fmt/print.go",
		w.Dir + "/tests/basic.test.tsx":              "tests/basic.test.tsx",
	} {
		if got := scrub.Replace(in); got != want {
			t.Errorf("%s\n got %s\nwant %s", in, got, want)
		}
	}
	if len(extra) != 2 || extra[0].Dir != pkg {
		t.Errorf("the caller's externals changed: %v", extra)
	}
}
