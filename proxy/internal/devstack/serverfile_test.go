package devstack

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The template renders with a development install's paths and the real
// SHA-256 of each file there; a server not installed fails, or is left
// out with SkipMissing.
func TestRenderServers(t *testing.T) {
	bin := t.TempDir()
	node := filepath.Join(bin, "node")
	for _, f := range []string{node, filepath.Join(bin, "gopls"), filepath.Join(bin, "py", "node_modules", "p", "cli.js")} {
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte("#!"+f), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	tmpl := []byte(`{"protocol_version": "code-intel-config.v1", "servers": [
 {"id": "gopls", "languages": [{"id": "go", "extensions": [".go"]}], "executable": "/opt/lsp/bin/gopls",
  "arguments": ["serve"], "executable_sha256": "@SHA256:/opt/lsp/bin/gopls@", "reviewed_by": "@REVIEWED_BY@", "reviewed_at": "@REVIEWED_AT@"},
 {"id": "py", "languages": [{"id": "python", "extensions": [".py"]}], "executable": "/usr/local/bin/node",
  "arguments": ["/opt/lsp/py/node_modules/p/cli.js", "--stdio"], "executable_sha256": "@SHA256:/usr/local/bin/node@",
  "settings": {"python": {"pythonPath": "/opt/lsp/py/no-interpreter"}}},
 {"id": "absent", "languages": [{"id": "yaml", "extensions": [".yaml"]}], "executable": "/usr/local/bin/node",
  "arguments": ["/opt/lsp/yaml/node_modules/y/cli.js"], "executable_sha256": "@SHA256:/usr/local/bin/node@"}]}`)
	if _, err := RenderServers(tmpl, Render{Bin: bin, Node: node}); err == nil || !strings.Contains(err.Error(), "absent") {
		t.Fatalf("a missing server rendered: %v", err)
	}
	b, err := RenderServers(tmpl, Render{Bin: bin, Node: node, SkipMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "servers.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := LoadServerFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Servers) != 2 {
		t.Fatalf("servers %+v, want gopls and py", f.Servers)
	}
	sum := func(p string) string { s := sha256.Sum256([]byte("#!" + p)); return hex.EncodeToString(s[:]) }
	if !strings.Contains(string(b), sum(filepath.Join(bin, "gopls"))) || !strings.Contains(string(b), sum(node)) {
		t.Errorf("hashes missing:\n%s", b)
	}
	if strings.Contains(string(b), "/opt/lsp") || strings.Contains(string(b), "/usr/local/bin/node") || strings.Contains(string(b), "@") {
		t.Errorf("production paths or placeholders left:\n%s", b)
	}
	py, ok := f.ForExtension(".py")
	if !ok || py.Executable != node || py.Arguments[0] != filepath.Join(bin, "py", "node_modules", "p", "cli.js") || py.LanguageID(".py") != "python" {
		t.Errorf("py entry %+v", py)
	}
	if !strings.Contains(string(py.Settings), filepath.Join(bin, "py", "no-interpreter")) {
		t.Errorf("settings not rewritten: %s", py.Settings)
	}
}
