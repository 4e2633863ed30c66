package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/hanzoai/lsp/daemon/internal/safefs"
)

// Spec is one reviewed language server. Nothing in it comes from a
// repository or a request: the operator's reviewed configuration fills it.
type Spec struct {
	ID         string
	Language   string // LSP languageId, also used for didOpen
	Extensions []string
	// Executable is an absolute path; Args follow it.
	Executable string
	Args       []string
	// Env is added to the minimal environment (and overrides it).
	Env []string
	// ReadOnly are more system paths the jail binds read-only at their
	// own path for this server (the reviewed entry's read_only).
	ReadOnly              []string
	InitializationOptions json.RawMessage
	// Settings answers workspace/configuration (see lsp.Options.Settings).
	Settings json.RawMessage
	// RequestTimeout bounds every request on top of the caller's context;
	// DefaultRequestTimeout when zero. Requests that run it out in a row
	// in silence get the server killed and restarted (hangWatch).
	RequestTimeout time.Duration
	// Folders, when set, names the workspace folders a server gets for a
	// workspace besides its root, each with settings of its own: a
	// language's unit (deps.Folders) supplies it from what its dependency
	// phase prepared, such as the Go modules of a tree and their flags. It
	// is called at every (re)start and must be cheap and bounded.
	Folders func(ws Workspace) []Folder
	// Init, when set, returns initialization options for a workspace,
	// merged over InitializationOptions (objects key by key), from what
	// its language's dependency phase prepared: clangd's compilation
	// database in the home. Called at every (re)start; cheap and bounded.
	Init func(ws Workspace) json.RawMessage
	// Problems, when set, returns what the language unit knows makes the
	// server's answers on a workspace partial before it runs (flags it
	// synthesized rather than read from the build); they are load problems
	// of every instance. Read once per workspace.
	Problems func(ws Workspace) []string
	// NextGeneration, when set, gives each new instance its generation
	// (Info.Generation): the pool numbers a workspace's instances of one
	// server across the Servers it starts there, so that a generation is
	// never seen twice for a workspace (a cursor is bound to it). Nil
	// counts from 1 per Server.
	NextGeneration func() uint64
}

// Folder is a workspace folder (ws.Root or a directory below it) and the
// settings it answers workspace/configuration with: Settings is merged over
// Spec.Settings, objects key by key, anything else replaced.
type Folder struct {
	Dir      string
	Settings json.RawMessage
}

// mergeSettings returns patch merged over base (both JSON; either may be
// empty).
func mergeSettings(base, patch json.RawMessage) (json.RawMessage, error) {
	if len(patch) == 0 {
		return base, nil
	}
	var b, p any
	if len(base) > 0 {
		if err := json.Unmarshal(base, &b); err != nil {
			return nil, err
		}
	}
	if err := json.Unmarshal(patch, &p); err != nil {
		return nil, err
	}
	return json.Marshal(mergeJSON(b, p))
}

func mergeJSON(base, patch any) any {
	bm, ok1 := base.(map[string]any)
	pm, ok2 := patch.(map[string]any)
	if !ok1 || !ok2 {
		return patch
	}
	out := make(map[string]any, len(bm)+len(pm))
	for k, v := range bm {
		out[k] = v
	}
	for k, v := range pm {
		out[k] = mergeJSON(bm[k], v)
	}
	return out
}

// DefaultRequestTimeout applies when Spec.RequestTimeout is zero.
const DefaultRequestTimeout = 15 * time.Second

// Workspace is where a server runs.
type Workspace struct {
	// Root is the tree the server analyses; servers must treat it as
	// read-only.
	Root string
	// Home is the server's private writable directory: HOME, caches, TMPDIR
	// and the Go module cache live under it.
	Home string
	// Cache is the daemon's own directory for the repository, never
	// bound into a jail: what the dependency phase keeps for the next
	// revision (the npm packages it unpacked). Empty: nothing is kept.
	Cache string
}

// ModCache is the Go module cache of a workspace, under its Home. The
// dependency phase fills it; servers only read it (GOPROXY=off).
func ModCache(ws Workspace) string { return filepath.Join(ws.Home, "go", "pkg", "mod") }

// NodeModules is where the dependency phase installs a workspace's npm
// packages: node_modules at the top of its tree, as on a checkout where
// `npm ci` ran, so a tsconfig's "./node_modules/@types" typeRoots, an
// "extends" or "paths" entry naming ./node_modules, and module resolution
// all find them where the repository expects. The tree stays immutable
// otherwise: the daemon moves the finished install in by one rename
// (deps), read-only like the rest; servers only read it.
func NodeModules(ws Workspace) string {
	return filepath.Join(ws.Root, "node_modules")
}

// NPMIndex is where the dependency phase records the packages it
// installed into NodeModules: beside the tree, where no server sees it and
// no repository file can pose as it. Its presence says the tree's
// node_modules is the phase's, not one the repository commits.
func NPMIndex(ws Workspace) string {
	return filepath.Join(filepath.Dir(ws.Root), ".lsp-packages.json")
}

// CargoHome is the CARGO_HOME of a workspace's servers, under its Home: a
// crates mirror's cargo fetch fills it (HIP); servers only read it
// (CARGO_NET_OFFLINE).
func CargoHome(ws Workspace) string { return filepath.Join(ws.Home, "cargo") }

// Spawner starts server processes. ctx bounds only the start itself: the
// process must outlive it.
type Spawner interface {
	Spawn(ctx context.Context, spec Spec, ws Workspace) (Process, error)
}

// CgoSpawner is a Spawner that may give the go command a C compiler
// (CGO_ENABLED=1). A Spawner that is not one runs Go servers with
// Environment's CGO_ENABLED=0: the go command leaves every file that
// imports "C" out of its packages.
type CgoSpawner interface {
	Spawner
	// Cgo reports whether the servers it runs build cgo files.
	Cgo() bool
}

// CgoFor reports whether spec's server, run by sp, builds cgo files: sp
// gives it a compiler, and spec's own Env (which has the last word) does
// not turn cgo off; or spec's Env turns it on.
func CgoFor(sp Spawner, spec Spec) bool {
	on := false
	if c, ok := sp.(CgoSpawner); ok {
		on = c.Cgo()
	}
	for _, kv := range spec.Env {
		if v, ok := strings.CutPrefix(kv, "CGO_ENABLED="); ok {
			on = v == "1"
		}
	}
	return on
}

// Process is a running server. The caller owns Stdin and Stdout and closes
// them. Kill kills the whole process tree and may be called at any time,
// also after the process exited. Wait blocks until the process has exited,
// then reaps it and every other member of its process tree; it may be called
// more than once and returns the same result.
type Process interface {
	Stdin() io.WriteCloser
	Stdout() io.ReadCloser
	Kill() error
	Wait() error
	Pid() int
}

// stderrTailer is implemented by processes that keep the end of the
// server's stderr, for the log line that reports a crash.
type stderrTailer interface {
	StderrTail() string
}

// ToolchainDirs are the directories put on a server's PATH besides its own
// executable's directory, when they exist: the Go toolchain, which gopls
// runs.
var ToolchainDirs = []string{"/usr/local/go/bin"}

// Environment is the whole environment of a server: a PATH of the
// executable's directory and ToolchainDirs, private HOME/cache/tmp
// directories under ws.Home, Go pinned to offline local operation, then
// spec.Env. Nothing comes from the daemon's own environment.
func Environment(spec Spec, ws Workspace) []string {
	var path []string
	seen := map[string]bool{}
	for _, d := range append([]string{filepath.Dir(spec.Executable)}, ToolchainDirs...) {
		if d == "" || seen[d] {
			continue
		}
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			continue
		}
		seen[d] = true
		path = append(path, d)
	}
	pathVar := "PATH="
	for i, d := range path {
		if i > 0 {
			pathVar += ":"
		}
		pathVar += d
	}
	env := []string{
		pathVar,
		"HOME=" + ws.Home,
		"XDG_CACHE_HOME=" + filepath.Join(ws.Home, ".cache"),
		"XDG_CONFIG_HOME=" + filepath.Join(ws.Home, ".config"),
		"XDG_DATA_HOME=" + filepath.Join(ws.Home, ".local", "share"),
		"TMPDIR=" + filepath.Join(ws.Home, "tmp"),
		"GOCACHE=" + filepath.Join(ws.Home, ".cache", "go-build"),
		"GOPATH=" + filepath.Join(ws.Home, "go"),
		"GOMODCACHE=" + ModCache(ws),
		"GOTOOLCHAIN=local",
		// Nothing writes the published tree: by default the go command
		// vendors where vendor/ is, and is otherwise read-only; a Go
		// module's own flags (an overlay go.mod through -modfile, or
		// -mod=vendor) come as settings of its workspace folder
		// (Spec.Folders). No go env file (GOENV=off) sets what the
		// environment leaves empty.
		"GOFLAGS=",
		"GOENV=off",
		"GOPROXY=off",
		"CGO_ENABLED=0",
		"GOTELEMETRY=off",
		// A go.work above the workspace (a daemon root under a checkout)
		// must not change what the repository means.
		"GOWORK=off",
		// Cargo (rust-analyzer's cargo metadata): its home and target
		// directory in the home, never the network. Cargo.lock is never
		// written into the tree: rust-analyzer copies it into the target
		// directory (-Zlockfile-path), and the tree is read-only anyway.
		"CARGO_HOME=" + CargoHome(ws),
		"CARGO_TARGET_DIR=" + filepath.Join(ws.Home, "cargo-target"),
		"CARGO_NET_OFFLINE=true",
		"CARGO_TERM_COLOR=never",
		"LANG=C.UTF-8",
	}
	return append(env, spec.Env...)
}

// homeDirs are created under Workspace.Home before a server starts.
var homeDirs = []string{".cache/go-build", ".config", ".local/share", "tmp", "go/pkg/mod", "cargo", "cargo-target"}

// TelemetryModeFile is where golang.org/x/telemetry (linked into gopls
// and the go command) reads its mode, under HOME. It ignores GOTELEMETRY,
// and in its default mode it starts a child with setsid, which escapes
// the server's process group and writes on after its parent has exited;
// "off" (TelemetryOff) keeps that child from ever starting.
const (
	TelemetryModeFile = ".config/go/telemetry/mode"
	TelemetryOff      = "off\n"
)

// PrepareHome makes the layout Environment points into and writes the
// telemetry mode, giving every directory on the way and the file to owner
// (safefs.Keep: the daemon's own). The home is writable by the server that
// ran there last, which may have planted links: nothing here follows one
// (safefs), and a link or file where a directory belongs is replaced.
func PrepareHome(ws Workspace, owner safefs.Owner) error {
	home, err := safefs.Open(ws.Home)
	if err != nil {
		return err
	}
	defer home.Close()
	opts := safefs.MkdirOpts{Owner: owner, ReplaceNonDirs: true}
	for _, d := range homeDirs {
		sub, err := home.MkdirAll(d, 0o700, opts)
		if err != nil {
			return err
		}
		sub.Close()
	}
	dir, err := home.MkdirAll(path.Dir(TelemetryModeFile), 0o700, opts)
	if err != nil {
		return err
	}
	defer dir.Close()
	return dir.WriteFile(path.Base(TelemetryModeFile), []byte(TelemetryOff), 0o600, owner)
}

// Errors of a Server.
var (
	// ErrClosed: the Server was closed.
	ErrClosed = errors.New("runtime: server closed")
	// ErrUnavailable: the server is down and could not be (re)started in
	// time; the wrapped error says why.
	ErrUnavailable = errors.New("runtime: language server unavailable")
	// ErrExited: the server process died while serving the request.
	ErrExited = errors.New("runtime: language server exited")
)
