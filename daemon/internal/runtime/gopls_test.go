package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hanzoai/lsp/daemon/internal/lsp"
)

// goplsPath is the gopls the real-server tests run: make test's pinned one
// (LSP_TEST_GOPLS), else a go-installed one.
var goplsPath = func() string {
	if p := os.Getenv("LSP_TEST_GOPLS"); p != "" {
		return p
	}
	return "/root/go/bin/gopls"
}()

// goplsEnv is a real gopls serving a copy of testdata/gomod.
type goplsEnv struct {
	srv  *Server
	root string
}

func startGopls(t *testing.T, initOpts json.RawMessage) *goplsEnv {
	t.Helper()
	if _, err := os.Stat(goplsPath); err != nil {
		t.Skipf("gopls is not installed at %s (%v): the real-server tests need it", goplsPath, err)
	}
	root := t.TempDir()
	if err := copyTree("testdata/gomod", root); err != nil {
		t.Fatal(err)
	}
	spec := Spec{
		ID: "gopls", Language: "go", Extensions: []string{".go"},
		Executable: goplsPath, Args: []string{"serve"},
		InitializationOptions: initOpts,
		// Generous: the first request waits for gopls's initial load, which
		// a loaded 2-core CI machine may make slow.
		RequestTimeout: 2 * time.Minute,
	}
	srv, err := Start(context.Background(), Unjailed(testLogger(t)), spec, Workspace{Root: root, Home: sharedHome}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close(context.Background()) })
	return &goplsEnv{srv: srv, root: root}
}

func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
}

func (e *goplsEnv) client(t *testing.T) *lsp.Client {
	t.Helper()
	c, _, err := e.srv.Client(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// open opens a fixture file in the server and returns its URI.
func (e *goplsEnv) open(t *testing.T, rel string) lsp.DocumentURI {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.root, rel))
	if err != nil {
		t.Fatal(err)
	}
	u := e.srv.URI(rel)
	if err := e.client(t).DidOpen(context.Background(), u, "go", string(b)); err != nil {
		t.Fatal(err)
	}
	return u
}

// at returns the URI of rel and the position of needle's byte offset in it
// (the fixtures are ASCII, so bytes and UTF-16 units agree).
func (e *goplsEnv) at(t *testing.T, rel, needle string, offset int) (lsp.DocumentURI, lsp.Position) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.root, rel))
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(b), needle)
	if i < 0 {
		t.Fatalf("%q not in %s", needle, rel)
	}
	i += offset
	line := strings.Count(string(b[:i]), "\n")
	col := i - (strings.LastIndex(string(b[:i]), "\n") + 1)
	return e.open(t, rel), lsp.Position{Line: uint32(line), Character: uint32(col)}
}

func hasLocation(locs []lsp.Location, uri lsp.DocumentURI, line uint32) bool {
	return slices.ContainsFunc(locs, func(l lsp.Location) bool { return l.URI == uri && l.Range.Start.Line == line })
}

func TestGopls(t *testing.T) {
	t.Parallel()
	e := startGopls(t, nil)
	ctx := context.Background()
	c := e.client(t)
	pid := current(e.srv).proc.Pid()

	shapesURI, describeDecl := e.at(t, "shapes/shapes.go", "func Describe", len("func "))
	_, squareDecl := e.at(t, "shapes/shapes.go", "type Square", len("type "))
	_, shapeDecl := e.at(t, "shapes/shapes.go", "type Shape", len("type "))
	appURI, describeCall := e.at(t, "app/app.go", "shapes.Describe(sq)", len("shapes."))

	t.Run("negotiation", func(t *testing.T) {
		tools := e.srv.Tools()
		for _, want := range []string{"hover", "definition", "references", "implementation", "type_definition",
			"document_symbols", "workspace_symbols", "diagnostics", "signature_help", "call_hierarchy",
			"type_hierarchy", "completion"} {
			if !slices.Contains(tools, want) {
				t.Errorf("gopls tools %v lack %s", tools, want)
			}
		}
		if slices.Contains(tools, "declaration") {
			t.Errorf("gopls has no declarationProvider, yet tools %v hold declaration", tools)
		}
		if _, err := c.Declaration(ctx, appURI, describeCall); !errors.Is(err, lsp.ErrCapabilityUnavailable) {
			t.Errorf("declaration: %v, want ErrCapabilityUnavailable", err)
		}
		info := e.srv.Info()
		if info.ID != "gopls" || info.Name != "gopls" || !strings.HasPrefix(info.Version, "v0.") || info.Generation != 1 {
			t.Errorf("info = %+v, want gopls with a parsed version", info)
		}
		if fp := e.srv.CapabilityFingerprint(); len(fp) != 64 {
			t.Errorf("fingerprint %q", fp)
		}
	})

	t.Run("hover", func(t *testing.T) {
		h, err := c.Hover(ctx, appURI, describeCall)
		if err != nil {
			t.Fatal(err)
		}
		// Seen from package app, gopls qualifies the names.
		if h == nil || !strings.Contains(h.Markdown, "func shapes.Describe(s shapes.Shape) string") || !strings.Contains(h.Markdown, "one-line description") {
			t.Fatalf("hover = %+v, want the signature and the doc comment", h)
		}
		h, err = c.Hover(ctx, shapesURI, describeDecl)
		if err != nil {
			t.Fatal(err)
		}
		if h == nil || !strings.Contains(h.Markdown, "func Describe(s Shape) string") || h.Range == nil || h.Range.Start.Line != describeDecl.Line {
			t.Fatalf("hover at the declaration = %+v", h)
		}
	})

	t.Run("definition across packages", func(t *testing.T) {
		l, err := c.Definition(ctx, appURI, describeCall)
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Items) != 1 || !hasLocation(l.Items, shapesURI, describeDecl.Line) {
			t.Fatalf("definition = %+v, want shapes.go line %d", l, describeDecl.Line)
		}
	})

	t.Run("references", func(t *testing.T) {
		for _, incl := range []bool{true, false} {
			l, err := c.References(ctx, shapesURI, describeDecl, incl)
			if err != nil {
				t.Fatal(err)
			}
			if !hasLocation(l.Items, appURI, describeCall.Line) {
				t.Errorf("references(includeDeclaration=%v) = %+v lack the call in app.go", incl, l.Items)
			}
			if hasLocation(l.Items, shapesURI, describeDecl.Line) != incl {
				t.Errorf("references(includeDeclaration=%v) = %+v", incl, l.Items)
			}
		}
	})

	t.Run("implementation", func(t *testing.T) {
		l, err := c.Implementation(ctx, shapesURI, shapeDecl)
		if err != nil {
			t.Fatal(err)
		}
		if !hasLocation(l.Items, shapesURI, squareDecl.Line) {
			t.Fatalf("implementations of Shape = %+v, want Square", l.Items)
		}
	})

	t.Run("type definition", func(t *testing.T) {
		_, sq := e.at(t, "app/app.go", "return shapes.Describe(sq)", len("return shapes.Describe("))
		l, err := c.TypeDefinition(ctx, appURI, sq)
		if err != nil {
			t.Fatal(err)
		}
		if !hasLocation(l.Items, shapesURI, squareDecl.Line) {
			t.Fatalf("type definition of sq = %+v, want Square", l.Items)
		}
	})

	t.Run("document symbols", func(t *testing.T) {
		l, err := c.DocumentSymbols(ctx, shapesURI)
		if err != nil {
			t.Fatal(err)
		}
		byName := map[string]lsp.Symbol{}
		for _, s := range l.Items {
			byName[s.Name] = s
		}
		for name, kind := range map[string]string{"Shape": "interface", "Square": "struct", "Describe": "function"} {
			if s, ok := byName[name]; !ok || s.Kind.String() != kind || s.URI != shapesURI {
				t.Errorf("symbol %s = %+v (ok=%v), want kind %s", name, s, ok, kind)
			}
		}
		if side := byName["Side"]; side.Container != "Square" {
			t.Errorf("field Side = %+v, want container Square", side)
		}
	})

	t.Run("workspace symbols", func(t *testing.T) {
		l, err := c.WorkspaceSymbols(ctx, "Describe")
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(l.Items, func(s lsp.Symbol) bool {
			return strings.HasSuffix(s.Name, "Describe") && s.URI == shapesURI && s.Range.Start.Line == describeDecl.Line
		}) {
			t.Fatalf("workspace symbols = %+v, want shapes.Describe", l.Items)
		}
	})

	t.Run("diagnostics", func(t *testing.T) {
		broken := e.open(t, "broken/broken.go")
		d, err := c.Diagnostics(ctx, broken)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Settled || !slices.ContainsFunc(d.Items, func(x lsp.Diagnostic) bool {
			return x.Severity.String() == "error" && strings.Contains(x.Message, "cannot use")
		}) {
			t.Fatalf("broken.go diagnostics = %+v, want the type error", d)
		}
		// A clean file answers with an empty, settled list (not a timeout).
		clean, err := c.Diagnostics(ctx, appURI)
		if err != nil {
			t.Fatal(err)
		}
		if !clean.Settled || len(clean.Items) != 0 || clean.Mode != lsp.DiagnosticsPublish {
			t.Fatalf("app.go diagnostics = %+v, want settled and empty", clean)
		}
	})

	t.Run("completion", func(t *testing.T) {
		_, p := e.at(t, "app/app.go", "shapes.Describe(sq)", len("shapes.Des"))
		cp, err := c.Completion(ctx, appURI, p)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(cp.Items, func(it lsp.CompletionItem) bool { return it.Label == "Describe" }) {
			t.Fatalf("completions = %+v, want Describe", cp.Items)
		}
	})

	t.Run("signature help", func(t *testing.T) {
		_, p := e.at(t, "app/app.go", "shapes.Describe(sq)", len("shapes.Describe("))
		h, err := c.SignatureHelp(ctx, appURI, p)
		if err != nil {
			t.Fatal(err)
		}
		if h == nil || len(h.Signatures) == 0 || !strings.Contains(h.Signatures[0].Label, "Describe(s shapes.Shape) string") {
			t.Fatalf("signature help = %+v", h)
		}
		if ps := h.Signatures[0].Parameters; len(ps) != 1 || ps[0].Label != "s shapes.Shape" {
			t.Fatalf("parameters = %+v, want [s shapes.Shape]", ps)
		}
		if !strings.Contains(h.Signatures[0].Documentation, "one-line description") {
			t.Fatalf("signature documentation = %q", h.Signatures[0].Documentation)
		}
	})

	t.Run("call hierarchy", func(t *testing.T) {
		_, step1 := e.at(t, "app/app.go", "func step1", len("func "))
		_, step2 := e.at(t, "app/app.go", "func step2", len("func "))
		names := func(l lsp.List[lsp.CallHierarchyCall]) []string {
			var out []string
			for _, c := range l.Items {
				out = append(out, c.Item.Name)
			}
			return out
		}
		in, err := c.IncomingCalls(ctx, appURI, step2)
		if err != nil {
			t.Fatal(err)
		}
		if got := names(in); !slices.Contains(got, "step1") || len(in.Items[0].FromRanges) == 0 {
			t.Errorf("callers of step2 = %v, want step1 with call sites", got)
		}
		out, err := c.OutgoingCalls(ctx, appURI, step1)
		if err != nil {
			t.Fatal(err)
		}
		if got := names(out); !slices.Contains(got, "step2") {
			t.Errorf("callees of step1 = %v, want step2", got)
		}
		out, err = c.OutgoingCalls(ctx, appURI, step2)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(out.Items, func(x lsp.CallHierarchyCall) bool { return x.Item.Name == "Describe" && x.Item.URI == shapesURI }) {
			t.Errorf("callees of step2 = %v, want shapes.Describe", names(out))
		}
	})

	t.Run("type hierarchy", func(t *testing.T) {
		sup, err := c.Supertypes(ctx, shapesURI, squareDecl)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(sup.Items, func(x lsp.TypeHierarchyItem) bool { return x.Name == "Shape" }) {
			t.Errorf("supertypes of Square = %+v, want Shape", sup.Items)
		}
		sub, err := c.Subtypes(ctx, shapesURI, shapeDecl)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(sub.Items, func(x lsp.TypeHierarchyItem) bool { return x.Name == "Square" }) {
			t.Errorf("subtypes of Shape = %+v, want Square", sub.Items)
		}
	})

	t.Run("close leaves no process", func(t *testing.T) {
		if err := e.srv.Close(ctx); err != nil {
			t.Fatal(err)
		}
		assertGroupGone(t, pid)
	})
}

// TestGoplsPullDiagnostics turns on gopls's pull diagnostics through the
// spec's initialization options, so the pull path runs against the real
// server too.
func TestGoplsPullDiagnostics(t *testing.T) {
	t.Parallel()
	e := startGopls(t, json.RawMessage(`{"pullDiagnostics": true}`))
	ctx := context.Background()
	c := e.client(t)
	if !c.Capabilities().DiagnosticProvider.Enabled {
		t.Fatal("gopls did not declare diagnosticProvider with pullDiagnostics on")
	}
	tests := []struct {
		file      string
		wantError bool
	}{
		{file: "broken/broken.go", wantError: true},
		{file: "app/app.go"},
		{file: "shapes/shapes.go"},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			d, err := c.Diagnostics(ctx, e.open(t, tt.file))
			if err != nil {
				t.Fatal(err)
			}
			if d.Mode != lsp.DiagnosticsPull || !d.Settled {
				t.Fatalf("diagnostics = %+v, want a settled pull answer", d)
			}
			hasError := slices.ContainsFunc(d.Items, func(x lsp.Diagnostic) bool { return x.Severity.String() == "error" })
			if hasError != tt.wantError {
				t.Fatalf("diagnostics of %s = %+v", tt.file, d.Items)
			}
		})
	}
}
