//go:build linux

package jail

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hanzoai/lsp/daemon/internal/lsp"
	"github.com/hanzoai/lsp/daemon/internal/runtime"
)

// cgoModule is a package whose type is declared in a cgo file (a preamble
// with a local header, as github.com/miekg/pkcs11 has) and used by a file
// that does not import "C".
var cgoModule = map[string]string{
	"go.mod":   "module example.com/cgofix\n\ngo 1.22\n",
	"native.h": "static int twice(int n) { return 2 * n; }\n",
	"native.go": "package cgofix\n\n/*\n#include <stdlib.h>\n#include \"native.h\"\n*/\nimport \"C\"\n\n" +
		"// Handle is what the C side hands out.\ntype Handle struct{ n C.int }\n\n" +
		"// Twice doubles n in C.\nfunc Twice(n int) Handle { return Handle{C.twice(C.int(n))} }\n",
	"use.go": "package cgofix\n\n// Use doubles 3.\nfunc Use() Handle { return Twice(3) }\n",
}

// TestJailedCgo: the real gopls in a real jail loads a module's cgo files
// with the host's C compiler, as on an ordinary checkout: a name declared
// in a cgo file hovers from a file without import "C", whose diagnostics
// are empty. With LSP_JAIL_CC=off the same hover finds nothing (the cgo
// file is excluded by CGO_ENABLED=0) and the other file is full of
// "undefined" — what the corpus found on pkcs11.
func TestJailedCgo(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(DefaultCC); err != nil {
		t.Skipf("no C compiler at %s", DefaultCC)
	}
	gopls := goplsPath(t)
	cases := []struct {
		cc     string
		loaded bool
	}{{"", true}, {ccOff, false}}
	// The daemon image names Debian's gcc-12 driver (LSP_JAIL_CC).
	if _, err := os.Stat("/usr/bin/gcc-12"); err == nil {
		cases = append(cases, struct {
			cc     string
			loaded bool
		}{"/usr/bin/gcc-12", true})
	}
	for _, tc := range cases {
		t.Run("cc="+tc.cc, func(t *testing.T) {
			t.Parallel()
			l := newLayout(t)
			ws := l.workspace(t, "tenant", cgoModule)
			sp := newSpawner(t, Options{CC: tc.cc})
			spec := runtime.Spec{ID: "gopls", Language: "go", Extensions: []string{".go"}, Executable: gopls, Args: []string{"serve"}}
			// What the pool asks to qualify answers in cgo packages.
			if runtime.CgoFor(sp, spec) != tc.loaded {
				t.Errorf("CgoFor = %v, want %v", !tc.loaded, tc.loaded)
			}
			srv := start(t, sp, spec, ws)
			ctx := context.Background()
			h, err := hoverAt(ctx, srv, ws, "use.go", "Twice(3)", 0)
			if err != nil {
				t.Fatal(err)
			}
			got := h != nil && strings.Contains(h.Markdown, "Twice doubles n in C")
			if got != tc.loaded {
				t.Errorf("hover on Twice in use.go = %+v; want the cgo file's doc: %v", h, tc.loaded)
			}
			c, _, err := srv.Client(ctx)
			if err != nil {
				t.Fatal(err)
			}
			d, err := c.Diagnostics(ctx, srv.URI("use.go"))
			if err != nil {
				t.Fatal(err)
			}
			undefined := slices.ContainsFunc(d.Items, func(x lsp.Diagnostic) bool { return strings.Contains(x.Message, "undefined") })
			if undefined == tc.loaded {
				t.Errorf("diagnostics of use.go = %+v; want undefined names: %v", d.Items, !tc.loaded)
			}
			// The compiler wrote nothing into the tree.
			if _, err := os.Stat(filepath.Join(ws.Root, "_obj")); err == nil {
				t.Error("the tree has an _obj directory")
			}
		})
	}
}
