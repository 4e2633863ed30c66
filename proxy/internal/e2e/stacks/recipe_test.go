package stacks

import (
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/hanzoai/lsp/proxy/internal/devstack"
)

// TestOperatorLanguageRecipe: the code path of HIP §4b's recipe for a
// language whose server these machines cannot install (Java, C#, Ruby,
// PHP). An operator adds one reviewed entry — a new languageId and its
// extensions, the server pinned by SHA-256 — and nothing else: the
// prepare starts it jailed beside the others, lists the language with the
// tools it negotiated, and routes the language's files to it. Here
// bash-language-server stands in for ruby-lsp under the id "ruby" (its
// .rb file is also a shell script, so the stand-in has something to say);
// it is no claim that Ruby is served.
func TestOperatorLanguageRecipe(t *testing.T) {
	dir := stackDir(t)
	file := reviewedServers(t, dir, "bash")
	// The operator's entry: the reviewed bash entry's binary and settings
	// under another id, language and extension.
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	servers := doc["servers"].([]any)
	var standIn map[string]any
	for _, s := range servers {
		if e := s.(map[string]any); e["id"] == "bash" {
			b, _ := json.Marshal(e)
			if err := json.Unmarshal(b, &standIn); err != nil {
				t.Fatal(err)
			}
		}
	}
	standIn["id"], standIn["name"] = "ruby-standin", "bash-language-server standing in for a Ruby server"
	standIn["languages"] = []any{map[string]any{"id": "ruby", "extensions": []any{".rb"}}}
	doc["servers"] = append(servers, standIn)
	if raw, err = json.MarshalIndent(doc, "", "  "); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, raw, 0o644); err != nil {
		t.Fatal(err)
	}

	s := startStack(t, devstack.Options{Dir: dir, ServerFile: file})
	files := map[string]string{
		"go.mod":       "module example.com/recipe\n\ngo 1.22\n",
		"main.go":      "package main\n\nfunc main() {}\n",
		"lib/greet.rb": "greet() {\n  echo hello\n}\ngreet\n",
	}
	hdr := newTenantWith(t, s, "recipe", "mixed", files, 10).auth()
	prep, langs := prepared(t, s, "mixed", hdr...)
	if want := []string{"go", "ruby"}; !slices.Equal(langs, want) {
		t.Fatalf("languages %v, want %v", langs, want)
	}
	tools, _ := prep.body["tools"].(map[string]any)["ruby"].([]any)
	if !slices.Contains(tools, any("document_symbols")) {
		t.Fatalf("the operator's language lists tools %v", tools)
	}
	a := do(t, s, http.MethodPost, "/symbols", map[string]any{"repo": "mixed", "path": "lib/greet.rb"}, hdr...)
	ev, _ := a.body["evidence"].(map[string]any)
	srv, _ := ev["server"].(map[string]any)
	if a.status != http.StatusOK || !strings.Contains(a.raw, `"greet"`) || srv["id"] != "ruby-standin" {
		t.Fatalf("symbols of the operator's language: %d %s", a.status, a.raw)
	}
}
