package pool

import (
	"slices"
	"testing"
	"time"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
)

// A server's tools are listed under each languageId it serves, keyed as
// the LSP names them; Configured lists every configured one.
func TestSpecLanguages(t *testing.T) {
	ts := Spec{Spec: runtime.Spec{ID: "typescript", Language: "typescript"},
		Extensions:  []string{".ts", ".tsx", ".js", ".jsx", ".mjs"},
		LanguageIDs: map[string]string{".ts": "typescript", ".tsx": "typescriptreact", ".js": "javascript", ".jsx": "javascriptreact", ".mjs": "javascript"}}
	py := Spec{Spec: runtime.Spec{ID: "basedpyright", Language: "python"}, Extensions: []string{".py", ".pyi"}}
	if got, want := ts.Languages(), []string{"typescript", "typescriptreact", "javascript", "javascriptreact"}; !slices.Equal(got, want) {
		t.Errorf("typescript languages %v, want %v", got, want)
	}
	if got := py.Languages(); !slices.Equal(got, []string{"python"}) {
		t.Errorf("python languages %v", got)
	}
	p := &Pool{specs: []Spec{ts, py}}
	var ids []string
	for _, l := range p.Configured() {
		ids = append(ids, l.Language+"="+l.Server.ID)
	}
	want := []string{"typescript=typescript", "typescriptreact=typescript", "javascript=typescript", "javascriptreact=typescript", "python=basedpyright"}
	if !slices.Equal(ids, want) {
		t.Errorf("configured %v, want %v", ids, want)
	}
	for _, c := range []struct{ path, spec, id string }{
		{"src/a.tsx", "typescript", "typescriptreact"}, {"lib/x.py", "basedpyright", "python"}, {"stubs/x.pyi", "basedpyright", "python"},
	} {
		s, ok := p.SpecFor(c.path)
		if !ok || s.ID != c.spec || s.LanguageID(c.path) != c.id {
			t.Errorf("%s: routed to %v (%q)", c.path, ok && s != nil, c.id)
		}
	}
	if _, ok := p.SpecFor("README.md"); ok {
		t.Error("README.md routed to a server")
	}
}

// A workspace lists the languageIds its tree has (installed and hidden
// files aside), all of a server's when it was adopted from disk.
func TestWorkspaceLanguagesOf(t *testing.T) {
	ts := Spec{Spec: runtime.Spec{ID: "typescript", Language: "typescript"},
		Extensions:  []string{".ts", ".tsx", ".js"},
		LanguageIDs: map[string]string{".ts": "typescript", ".tsx": "typescriptreact", ".js": "javascript"}}
	w := &Workspace{}
	if got := w.languagesOf(&ts); !slices.Equal(got, []string{"typescript", "typescriptreact", "javascript"}) {
		t.Errorf("adopted: %v", got)
	}
	w.present = map[string]bool{}
	for _, f := range []string{"src/a.tsx", "node_modules/x/index.js", ".github/x.js", "src/b.ts"} {
		if !installedOrHidden(f) {
			w.present[ts.LanguageID(f)] = true
		}
	}
	if got := w.languagesOf(&ts); !slices.Equal(got, []string{"typescript", "typescriptreact"}) {
		t.Errorf("present: %v", got)
	}
	w.present = map[string]bool{}
	if got := w.languagesOf(&ts); !slices.Equal(got, []string{"typescript"}) {
		t.Errorf("only installed files: %v", got)
	}
}

// A workspace's servers are those of the languages its prepare pushed
// and those started for it, in the configuration's order: one the budget
// stopped still counts (a workspace-wide query asks it again).
func TestWorkspaceSpecs(t *testing.T) {
	p := &Pool{specs: []Spec{
		{Spec: runtime.Spec{ID: "gopls", Language: "go"}, Extensions: []string{".go"}},
		{Spec: runtime.Spec{ID: "basedpyright", Language: "python"}, Extensions: []string{".py"}},
		{Spec: runtime.Spec{ID: "bash", Language: "shellscript"}, Extensions: []string{".sh"}},
	}}
	ids := func(w *Workspace) []string {
		var out []string
		for _, s := range w.Specs() {
			out = append(out, s.ID)
		}
		return out
	}
	w := &Workspace{pool: p, servers: map[string]*slot{}}
	if got := ids(w); len(got) != 0 {
		t.Errorf("adopted, nothing started: %v", got)
	}
	w.servers["bash"] = &slot{}
	if got := ids(w); !slices.Equal(got, []string{"bash"}) {
		t.Errorf("adopted, bash started: %v", got)
	}
	w.present = map[string]bool{"python": true, "go": true}
	if got := ids(w); !slices.Equal(got, []string{"gopls", "basedpyright", "bash"}) {
		t.Errorf("present go and python, bash started: %v", got)
	}
	w.servers = map[string]*slot{} // the budget stopped them all
	if got := ids(w); !slices.Equal(got, []string{"gopls", "basedpyright"}) {
		t.Errorf("after eviction: %v", got)
	}
	if !w.Needs(&p.specs[1]) || w.Needs(&p.specs[2]) {
		t.Error("Needs disagrees with Specs")
	}
	if w.present = nil; !w.Needs(&p.specs[2]) {
		t.Error("an adopted tree refuses a server it may need")
	}
}

// The quiet AwaitLoad waits for: the reviewed entry's, the pool's default
// when it has none, nothing when it says none.
func TestSpecLoadQuiet(t *testing.T) {
	for _, tc := range []struct {
		spec, want time.Duration
	}{{0, LoadQuiet}, {-1, 0}, {700 * time.Millisecond, 700 * time.Millisecond}} {
		s := Spec{LoadQuiet: tc.spec}
		if got := s.loadQuiet(); got != tc.want {
			t.Errorf("LoadQuiet %v: waits %v, want %v", tc.spec, got, tc.want)
		}
	}
}
