package devstack

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// TypeScriptInstall is the reviewed TypeScript server as `make deps`
// installs it: typescript-language-server 6.0.0 and typescript 5.9.3 under
// Dir/node_modules, run by Node.
type TypeScriptInstall struct {
	Dir      string // the install directory (.bin/ts)
	Node     string // the node binary, canonical
	CLI      string // typescript-language-server's lib/cli.mjs
	TSServer string // typescript's lib/tsserver.js, the pinned one
}

// FindTypeScript resolves an install directory into its canonical paths.
// node is the Node.js binary ("" looks it up on PATH).
func FindTypeScript(dir, node string) (TypeScriptInstall, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return TypeScriptInstall{}, err
	}
	if abs, err = filepath.EvalSymlinks(abs); err != nil {
		return TypeScriptInstall{}, fmt.Errorf("typescript install: %w", err)
	}
	if node == "" {
		if node, err = exec.LookPath("node"); err != nil {
			return TypeScriptInstall{}, fmt.Errorf("typescript install: node: %w", err)
		}
	}
	if node, err = filepath.Abs(node); err != nil {
		return TypeScriptInstall{}, err
	}
	if node, err = filepath.EvalSymlinks(node); err != nil {
		return TypeScriptInstall{}, fmt.Errorf("typescript install: node: %w", err)
	}
	ts := TypeScriptInstall{
		Dir:      abs,
		Node:     node,
		CLI:      filepath.Join(abs, "node_modules", "typescript-language-server", "lib", "cli.mjs"),
		TSServer: filepath.Join(abs, "node_modules", "typescript", "lib", "tsserver.js"),
	}
	for _, p := range []string{ts.CLI, ts.TSServer} {
		if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
			return TypeScriptInstall{}, fmt.Errorf("typescript install: %s is missing: run make deps", p)
		}
	}
	return ts, nil
}

// WriteServerConfig writes the code-intel-config.v1 file of a dev stack:
// o.ServerFile when set (every reviewed server); otherwise the pinned
// gopls, and the reviewed TypeScript server when o.TypeScript names its
// install (tests that find just those two).
func WriteServerConfig(path string, o Options) error {
	if o.ServerFile != "" {
		f, err := LoadServerFile(o.ServerFile)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(f.Path)
		if err != nil {
			return err
		}
		return os.WriteFile(path, b, 0o644)
	}
	gopls, err := goplsEntry(o.Gopls)
	if err != nil {
		return err
	}
	if len(o.GoplsEnv) > 0 {
		gopls["env"] = o.GoplsEnv
	}
	servers := []map[string]any{gopls}
	if o.TypeScript != "" {
		ts, err := FindTypeScript(o.TypeScript, o.Node)
		if err != nil {
			return err
		}
		entry, err := typeScriptEntry(ts)
		if err != nil {
			return err
		}
		servers = append(servers, entry)
	}
	b, err := json.MarshalIndent(map[string]any{"protocol_version": "code-intel-config.v1", "servers": servers}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

func goplsEntry(gopls string) (map[string]any, error) {
	if gopls == "" {
		return nil, errors.New("gopls: no binary given")
	}
	abs, err := filepath.Abs(gopls)
	if err != nil {
		return nil, err
	}
	if abs, err = filepath.EvalSymlinks(abs); err != nil {
		return nil, fmt.Errorf("gopls: %w", err)
	}
	sum, err := fileSHA256(abs)
	if err != nil {
		return nil, fmt.Errorf("gopls: %w", err)
	}
	return map[string]any{
		"protocol_version":   "code-intel-lsp.v1",
		"id":                 "gopls",
		"name":               "gopls",
		"languages":          []map[string]any{{"id": "go", "extensions": []string{".go"}}},
		"executable":         abs,
		"arguments":          []string{"serve"},
		"executable_sha256":  sum,
		"request_timeout_ms": 55000,
		"reviewed_by":        "make run (development)",
		"reviewed_at":        time.Now().UTC().Format(time.RFC3339),
	}, nil
}

// typeScriptEntry is the reviewed TypeScript server: Node pinned by its
// SHA-256, the CLI and tsserver.js by absolute path (they enter the
// descriptor fingerprint). tsserver.path keeps a repository's own
// node_modules/typescript from ever running; type acquisition (which runs
// npm) is off and no global plugin is named, so tsserver loads only the
// pinned package's code. One semantic tsserver (useSyntaxServer never)
// answers every request, so no answer comes from the syntax-only server
// that knows nothing of the project while it loads.
func typeScriptEntry(ts TypeScriptInstall) (map[string]any, error) {
	sum, err := fileSHA256(ts.Node)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	return map[string]any{
		"protocol_version": "code-intel-lsp.v1",
		"id":               "typescript",
		"name":             "TypeScript Language Server",
		"languages": []map[string]any{
			{"id": "typescript", "extensions": []string{".ts"}},
			{"id": "typescriptreact", "extensions": []string{".tsx"}},
			{"id": "javascript", "extensions": []string{".js"}},
			{"id": "javascriptreact", "extensions": []string{".jsx"}},
		},
		"executable":        ts.Node,
		"arguments":         []string{ts.CLI, "--stdio"},
		"executable_sha256": sum,
		"initialization_options": map[string]any{
			"tsserver":                          map[string]any{"path": ts.TSServer, "useSyntaxServer": "never"},
			"disableAutomaticTypingAcquisition": true,
		},
		"request_timeout_ms": 30000,
		"reviewed_by":        "make run (development)",
		"reviewed_at":        time.Now().UTC().Format(time.RFC3339),
	}, nil
}
