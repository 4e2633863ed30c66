package qualify

import (
	"os"
	"path/filepath"
	"slices"
)

// canary is a built-in workspace: a few files, the document asked about,
// and a symbol the server must find in it ("" when none is known).
type canary struct {
	name  string
	files map[string]string
	doc   string
	want  string
}

// tsFamily are the languages typescript-language-server serves.
var tsFamily = []string{"typescript", "typescriptreact", "javascript", "javascriptreact"}

// canaryFor picks the canary for a server's extensions: a Go module for a
// Go server, a TypeScript project for the TypeScript family, else one file
// of the first extension.
func canaryFor(exts []string, ids map[string]string) canary {
	for _, x := range exts {
		if ids[x] == "go" {
			return canary{
				name: "go",
				files: map[string]string{
					"go.mod": "module canary.invalid/canary\n\ngo 1.22\n",
					"canary" + x: "package main\n\n// Canary is what qualification asks about.\n" +
						"func Canary() int { return 42 }\n\nfunc main() { _ = Canary() }\n",
				},
				doc:  "canary" + x,
				want: "Canary",
			}
		}
	}
	for _, x := range exts {
		if slices.Contains(tsFamily, ids[x]) {
			return canary{
				name: "typescript",
				files: map[string]string{
					"tsconfig.json": `{"compilerOptions": {"strict": true, "allowJs": true, "jsx": "preserve", "noEmit": true}}` + "\n",
					// Valid TypeScript, TSX, JavaScript and JSX alike.
					"canary" + x: "export function canary() {\n  return 42;\n}\n",
				},
				doc:  "canary" + x,
				want: "canary",
			}
		}
	}
	doc := "canary.txt"
	if len(exts) > 0 {
		doc = "canary" + exts[0]
	}
	return canary{name: "file", files: map[string]string{doc: ""}, doc: doc}
}

// write lays the canary out under root.
func (c canary) write(root string) error {
	for rel, content := range c.files {
		p := filepath.Join(root, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}
