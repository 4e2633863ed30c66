package e2e

import (
	"context"
	"encoding/json"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestEditorNeovim: a real editor — Neovim from Debian, headless, driven
// by testdata/nvim_bridge.lua — starts `lspctl lsp` on a local checkout of
// the sample, and gets from the service: progress during initialize,
// only the negotiated providers, hover with Hello's signature, the
// definition as a local file URI, an external location dropped with a
// log line, pushed diagnostics, and a stale answer once the buffer is
// edited. The rows land on the token's org.
func TestEditorNeovim(t *testing.T) {
	nvim, err := exec.LookPath("nvim")
	if err != nil {
		// Not a skip: make deps installs Debian's neovim, and CI must
		// prove the editor door.
		t.Fatal("nvim not found: run `make deps` (it installs Debian's neovim)")
	}
	tn := newTenant(t, "editor", 10)
	dir := t.TempDir()

	// The bridge under the race detector, as the editor runs it.
	lspctlBin := filepath.Join(dir, "lspctl")
	build := exec.Command("go", "build", "-race", "-o", lspctlBin, "github.com/hanzoai/lsp/proxy/cmd/lspctl")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build lspctl: %v\n%s", err, out)
	}

	// A local checkout, cloned from the forge as a person would
	// (README "Editors").
	checkout := filepath.Join(dir, "hello")
	clone := exec.Command("git", "-c", "http.extraHeader=Authorization: Bearer "+tn.forgeToken,
		"clone", "--quiet", stack.ForgeURL+"/"+tn.org+"/"+tn.repo+".git", checkout)
	if out, err := clone.CombinedOutput(); err != nil {
		t.Fatalf("git clone: %v\n%s", err, out)
	}
	script, err := filepath.Abs("testdata/nvim_bridge.lua")
	if err != nil {
		t.Fatal(err)
	}
	outFile, logFile := filepath.Join(dir, "out.json"), filepath.Join(dir, "bridge.log")
	home := filepath.Join(dir, "home")

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, nvim, "--headless", "-u", "NONE", "-i", "NONE", "-c", "luafile "+script)
	cmd.Dir = checkout
	cmd.Env = append(os.Environ(),
		"HOME="+home, "XDG_STATE_HOME="+home, "XDG_DATA_HOME="+home, "XDG_CACHE_HOME="+home, "XDG_CONFIG_HOME="+home,
		"LSP_URL="+stack.ProxyURL, "LSP_TOKEN="+tn.jwt, "LSP_FORGE_TOKEN="+tn.forgeToken, "LSP_ORG=",
		"LSPCTL="+lspctlBin, "BRIDGE_REPO="+tn.repo, "BRIDGE_ROOT="+checkout,
		"BRIDGE_OUT="+outFile, "BRIDGE_LOG="+logFile,
		"GORACE=exitcode=66",
	)
	nvimOut, runErr := cmd.CombinedOutput()
	bridgeLog, _ := os.ReadFile(logFile)
	t.Logf("bridge log:\n%s", bridgeLog)
	if runErr != nil {
		t.Fatalf("nvim: %v\n%s", runErr, nvimOut)
	}
	if strings.Contains(string(bridgeLog), "DATA RACE") {
		t.Fatalf("the bridge raced:\n%s", bridgeLog)
	}
	raw, err := os.ReadFile(outFile)
	if err != nil {
		t.Fatalf("the script wrote nothing: %v\nnvim said: %s", err, nvimOut)
	}
	t.Logf("what Neovim received: %s", raw)

	var got struct {
		Error        string                 `json:"error"`
		Capabilities map[string]any         `json:"capabilities"`
		Progress     []string               `json:"progress"`
		Logs         []string               `json:"logs"`
		Diagnostics  []struct{ URI string } `json:"diagnostics"`
		Hover        *struct {
			Contents struct{ Kind, Value string } `json:"contents"`
		} `json:"hover"`
		StaleHover *struct {
			Contents struct{ Kind, Value string } `json:"contents"`
		} `json:"stale_hover"`
		Definition []struct {
			URI   string `json:"uri"`
			Range struct {
				Start struct{ Line, Character int } `json:"start"`
			} `json:"range"`
		} `json:"definition"`
		External json.RawMessage `json:"external"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("out.json: %v", err)
	}
	if got.Error != "" {
		t.Fatalf("the Lua script failed: %s", got.Error)
	}

	// Only what gopls negotiated is advertised: no declaration.
	for _, p := range []string{"hoverProvider", "definitionProvider", "referencesProvider", "implementationProvider",
		"typeDefinitionProvider", "documentSymbolProvider", "workspaceSymbolProvider", "signatureHelpProvider",
		"completionProvider", "callHierarchyProvider", "typeHierarchyProvider"} {
		if got.Capabilities[p] == nil {
			t.Errorf("capabilities lack %s: %v", p, got.Capabilities)
		}
	}
	if got.Capabilities["declarationProvider"] != nil {
		t.Errorf("declarationProvider advertised though gopls does not negotiate it")
	}
	if got.Capabilities["positionEncoding"] != "utf-16" {
		t.Errorf("positionEncoding %v, want utf-16", got.Capabilities["positionEncoding"])
	}
	if strings.Join(got.Progress, " ") == "" || got.Progress[0] != "begin" || got.Progress[len(got.Progress)-1] != "end" {
		t.Errorf("prepare progress %v, want begin … end", got.Progress)
	}

	if got.Hover == nil || got.Hover.Contents.Kind != "markdown" ||
		!(strings.Contains(got.Hover.Contents.Value, "func Hello(name string) string") || strings.Contains(got.Hover.Contents.Value, "func greet.Hello(name string) string")) {
		t.Errorf("hover lacks Hello's signature: %+v", got.Hover)
	}
	if got.Hover != nil && strings.Contains(got.Hover.Contents.Value, "stale") {
		t.Errorf("an unedited buffer's hover is marked stale: %q", got.Hover.Contents.Value)
	}
	want := (&url.URL{Scheme: "file", Path: filepath.Join(checkout, "greet", "greet.go")}).String()
	if len(got.Definition) != 1 || got.Definition[0].URI != want || got.Definition[0].Range.Start.Line != 17 {
		t.Errorf("definition %+v, want %s line 17 (0-based)", got.Definition, want)
	}
	if s := strings.TrimSpace(string(got.External)); s != "[]" && s != "{}" {
		// json_encode writes an empty Lua table as [] (or {}).
		t.Errorf("the external definition of fmt.Println should be dropped, got %s", s)
	}
	if !anyContains(got.Logs, "dropped external location fmt/print.go (std@go") {
		t.Errorf("no log line names the dropped external location: %q", got.Logs)
	}
	if len(got.Diagnostics) == 0 || !strings.HasSuffix(got.Diagnostics[0].URI, "/main.go") {
		t.Errorf("diagnostics were not published for main.go: %+v", got.Diagnostics)
	}

	// After the edit: still answered, marked stale, and the editor warned.
	if got.StaleHover == nil || !strings.Contains(got.StaleHover.Contents.Value, "stale") ||
		!strings.Contains(got.StaleHover.Contents.Value, "Hello(name string) string") {
		t.Errorf("the edited buffer's hover is not a stale answer: %+v", got.StaleHover)
	}
	if !anyContains(got.Logs, "main.go differs from hello@") {
		t.Errorf("no stale warning: %q", got.Logs)
	}

	// Every call is a ledger row of the token's org: one prepare, then
	// queries.
	var prepares, queries int
	for _, r := range rows(t, tn.org) {
		if r.Kind != "lsp" {
			continue
		}
		if r.PayerOrg != tn.org {
			t.Errorf("row %d paid by %q", r.ID, r.PayerOrg)
		}
		switch r.Model {
		case "prepare":
			prepares++
		case "query":
			queries++
		}
	}
	if prepares != 1 || queries < 4 {
		t.Errorf("rows: %d prepares and %d queries; want 1 and at least 4 (hover, definition ×2, diagnostics, hover)", prepares, queries)
	}
}

func anyContains(ss []string, sub string) bool {
	for _, s := range ss {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
