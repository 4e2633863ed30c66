package corpus

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/hanzoai/lsp/proxy/internal/devstack"
)

// Lang is what the corpus knows of one language beyond its reviewed entry.
// The entry (the server file both sides read) says which extensions the
// language has, the languageId each opens with, and how its server starts:
// executable, arguments, environment, initialization options and the
// settings that answer workspace/configuration. The ground truth starts
// exactly that, directly on a normal checkout. Adding a language is a row
// here and an entry in deploy/images/servers.json.in.
type Lang struct {
	Name   string // Repo.Language: the first LSP languageId of the entry
	Short  string // the table's column
	Server string // the reviewed entry's id
	// Env, when set, adds to the direct run's environment what the
	// daemon's own environment gives the server (Go's module cache and
	// mirror). home is the direct run's home, cacheDir the corpus cache.
	Env func(home, cacheDir string) ([]string, error)
	// AwaitIdle: the ground truth waits, after its first useful answer,
	// until the server's work-done progress is over (it loads the project
	// or indexes it in the background and answers partly meanwhile), as
	// the service's prepare does (AwaitLoad) and as a developer waits for
	// the indexing bar.
	AwaitIdle bool
	// FileTools: the language's server answers hover and definition only
	// from a schema (YAML, JSON without one), so no position is asked; the
	// first useful answer is a file's non-empty document symbols, and
	// symbols and diagnostics are compared per file.
	FileTools bool
	// Settle: after its first useful answer the direct server is left
	// until it has been quiet for 2.5s (at most 20s), as the daemon's
	// prepare waits for a server's first load (pool.LoadQuiet):
	// bash-language-server scans the workspace's scripts in the
	// background, and references found before the scan ends miss the
	// other files'.
	Settle bool
	// Diagnose, when set, is the server's own command that computes and
	// publishes the documents' diagnostics before it answers (gopls's
	// diagnose_files, which the daemon asks too): the ground truth asks
	// it for the chosen files before it waits for them to be quiet, so
	// that neither side takes diagnostics before gopls's analyzers are
	// done (the truth's 5 s quiet wait is a timer, as the daemon's window
	// was).
	Diagnose string
	// Published, when set, is the server's own word on how many
	// diagnostics a document's publication carries once its pass is over:
	// the ground truth's diagnostics wait for it as well as for the quiet
	// window. typescript-language-server publishes a document's union
	// after each of tsserver's kinds (syntax, semantic, suggestion), runs
	// the kinds only between other requests, and reopening one file
	// checks that file alone; under load zustand's files were taken with
	// the syntax kind alone (none) after five quiet seconds.
	Published func(call func(method string, params any) (json.RawMessage, error), uri string) (int, error)
	// Reruns: a disagreement left after the comparison draws each side
	// again, at most this many times (redraw), with the server's index
	// removed first so that it builds it anew: IndexDirs relative to the
	// ground truth's checkout, HomeIndexDirs (globs) relative to the
	// daemon's home of the repository. For a server whose index is not
	// the same from one run to the next.
	Reruns        int
	IndexDirs     []string
	HomeIndexDirs []string
}

// clangdIndex is where the direct clangd keeps its background index, in
// the checkout (jq's and fmt's both, though fmt's database is in build/);
// clangdHomeIndex where the daemon's does, beside the database it writes
// into the home (clangd/<database hash>/).
var clangdIndex, clangdHomeIndex = []string{".cache/clangd"}, []string{"clangd/*/.cache/clangd"}

// Langs are the corpus's languages.
var Langs = []Lang{
	{Name: "go", Short: "go", Server: "gopls", Env: goEnv, Diagnose: "gopls.diagnose_files"},
	{Name: "typescript", Short: "ts", Server: "typescript", Published: tsPublished},
	{Name: "python", Short: "py", Server: "basedpyright"},
	{Name: "shellscript", Short: "sh", Server: "bash", Settle: true},
	{Name: "yaml", Short: "yaml", Server: "yaml", FileTools: true},
	{Name: "json", Short: "json", Server: "json", FileTools: true},
	{Name: "c", Short: "c", Server: "clangd", AwaitIdle: true, Reruns: 4, IndexDirs: clangdIndex, HomeIndexDirs: clangdHomeIndex},
	{Name: "cpp", Short: "cpp", Server: "clangd", AwaitIdle: true, Reruns: 4, IndexDirs: clangdIndex, HomeIndexDirs: clangdHomeIndex},
	{Name: "rust", Short: "rs", Server: "rust-analyzer", Env: rustEnv, AwaitIdle: true},
}

// rustEnv is what the daemon's environment gives rust-analyzer's cargo:
// a CARGO_HOME of its own, offline.
func rustEnv(home, _ string) ([]string, error) {
	return []string{"CARGO_HOME=" + filepath.Join(home, "cargo"), "CARGO_NET_OFFLINE=true", "CARGO_TERM_COLOR=never"}, nil
}

// langOf is the row of a Repo.Language.
func langOf(name string) (Lang, bool) {
	for _, l := range Langs {
		if l.Name == name {
			return l, true
		}
	}
	return Lang{}, false
}

// servers are the reviewed entries both sides run.
type servers struct {
	file *devstack.ServerFile
}

// entry is the reviewed entry serving language.
func (sv servers) entry(language string) (devstack.ServerEntry, error) {
	l, ok := langOf(language)
	if !ok {
		return devstack.ServerEntry{}, fmt.Errorf("language %q is not in corpus.Langs", language)
	}
	if sv.file == nil {
		return devstack.ServerEntry{}, fmt.Errorf("no server file")
	}
	e, ok := sv.file.Server(l.Server)
	if !ok {
		return devstack.ServerEntry{}, fmt.Errorf("the server file has no %s entry (%s): run make deps", l.Server, language)
	}
	return e, nil
}

// has reports whether the file serves language.
func (sv servers) has(language string) bool {
	_, err := sv.entry(language)
	return err == nil
}

// extensions are the file extensions of language ("" entry: none).
func (sv servers) extensions(language string) []string {
	e, err := sv.entry(language)
	if err != nil {
		return nil
	}
	return e.Extensions()
}

// languageID is the languageId path opens with: the daemon routes by
// extension, to the first entry serving it.
func (sv servers) languageID(path string) string {
	if sv.file != nil {
		if e, ok := sv.file.ForExtension(filepath.Ext(path)); ok {
			return e.LanguageID(filepath.Ext(path))
		}
	}
	return "plaintext"
}

// goEnv is what the daemon's environment gives gopls, pointed at the
// corpus's module cache and mirror.
func goEnv(home, cacheDir string) ([]string, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(home, ".config", "go", "telemetry"), 0o755); err != nil {
		return nil, err
	}
	// No telemetry child outliving gopls, as the daemon does for its own.
	if err := os.WriteFile(filepath.Join(home, ".config", "go", "telemetry", "mode"), []byte("off\n"), 0o644); err != nil {
		return nil, err
	}
	return []string{"PATH=" + filepath.Dir(goBin) + ":/usr/bin:/bin",
		"GOCACHE=" + filepath.Join(home, ".cache", "go-build"), "GOPATH=" + filepath.Join(home, "go"),
		"GOMODCACHE=" + modCache(cacheDir), "GOPROXY=" + goMirror(cacheDir), "GOSUMDB=off",
		"GOTOOLCHAIN=local", "GOTELEMETRY=off"}, nil
}

// tsPublished asks tsserver, through the server's forwarding command,
// for a document's diagnostics of each kind the server publishes.
func tsPublished(call func(string, any) (json.RawMessage, error), uri string) (int, error) {
	n := 0
	for _, kind := range []string{"syntacticDiagnosticsSync", "semanticDiagnosticsSync", "suggestionDiagnosticsSync"} {
		raw, err := call("workspace/executeCommand", map[string]any{"command": "typescript.tsserverRequest", "arguments": []any{kind, map[string]any{"file": uri}}})
		if err != nil {
			return 0, err
		}
		var r struct {
			Success bool              `json:"success"`
			Body    []json.RawMessage `json:"body"`
		}
		if err := json.Unmarshal(raw, &r); err != nil || !r.Success {
			return 0, fmt.Errorf("%s: %s", kind, raw)
		}
		n += len(r.Body)
	}
	return n, nil
}
