// Package qualify turns the reviewed-server file into what the daemon runs
// and answers the operator's two questions about it (code-intel-lsp.v1,
// CONTRACT §7):
//
//   - `lsp-daemon status --config F`: what does this file say? Metadata
//     only; nothing is hashed or started, and no executable path, argument,
//     environment variable or option value is printed.
//   - `lsp-daemon qualify --config F [--start=false] [--json]`: may these
//     servers run? Review fields and executable pins are checked; with
//     start (the default) each server is also initialized for real against
//     a built-in canary workspace (a tiny Go module, a tiny TypeScript
//     project, or one file of the server's first extension), and what it
//     negotiated is printed: capabilities, tools, generation and capability
//     fingerprint.
//
// The daemon itself uses Specs and TypeScriptExternals, so qualification
// checks exactly what serving will run.
package qualify

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hanzoai/lsp/daemon/internal/config"
	"github.com/hanzoai/lsp/daemon/internal/pool"
	"github.com/hanzoai/lsp/daemon/internal/runtime"
	"github.com/hanzoai/lsp/daemon/internal/uri"
)

// Spec turns one reviewed entry into the pool's spec, running exe (the
// qualified, content-addressed copy of the entry's executable). Every
// extension carries its own languageId, so a .tsx file opens as
// typescriptreact and a .js file as javascript.
func Spec(s config.Server, exe string) pool.Spec {
	var exts []string
	ids := map[string]string{}
	for _, l := range s.Languages {
		for _, x := range l.Extensions {
			exts = append(exts, x)
			ids[x] = l.ID
		}
	}
	var quiet time.Duration // the pool's default
	if q := s.LoadQuietMS; q != nil {
		quiet = time.Duration(*q) * time.Millisecond
		if quiet == 0 {
			quiet = -1 // none
		}
	}
	return pool.Spec{
		Spec: runtime.Spec{
			ID: s.ID, Language: s.Languages[0].ID, Extensions: exts,
			Executable: exe, Args: s.Arguments, Env: s.Env, ReadOnly: s.ReadOnly,
			InitializationOptions: s.InitializationOptions, Settings: s.Settings,
			RequestTimeout: time.Duration(s.RequestTimeoutMS) * time.Millisecond,
		},
		Extensions:     exts,
		LanguageIDs:    ids,
		RSSEstimate:    int64(s.RSSEstimateMB) << 20,
		LoadQuiet:      quiet,
		NoDependencies: s.ReadsDependencies != nil && !*s.ReadsDependencies,
	}
}

// Specs qualifies every entry — its executable hashed while it is copied
// into binDir/<sha256>, a pinned tsserver.js checked — and returns the
// pool's specs. One failure refuses the whole file: nothing starts.
func Specs(cf *config.File, binDir string) ([]pool.Spec, error) {
	specs := make([]pool.Spec, 0, len(cf.Servers))
	for _, s := range cf.Servers {
		exe, err := config.Qualify(s, binDir)
		if err != nil {
			return nil, err
		}
		specs = append(specs, Spec(s, exe))
	}
	return specs, nil
}

// TypeScriptExternals are the external roots of the pinned TypeScript
// packages: a location in one (lib.es5.d.ts) comes back external with the
// module "typescript@5.9.3" and a path inside the package
// ("lib/lib.es5.d.ts").
func TypeScriptExternals(cf *config.File) ([]uri.External, error) {
	var ex []uri.External
	seen := map[string]bool{}
	for _, s := range cf.Servers {
		dir, module, ok, err := config.TypeScriptLib(s)
		if err != nil {
			return nil, fmt.Errorf("typescript externals: %w", err)
		}
		if ok && !seen[dir] {
			seen[dir] = true
			ex = append(ex, uri.External{Dir: dir, Module: module})
		}
	}
	return ex, nil
}

// ServerPackageExternals are the npm packages the reviewed entries run a
// script of (an argument inside <dir>/node_modules/<package>/): a location
// in one (basedpyright's bundled typeshed stubs) comes back external with
// the module "<package>@<version>" from its package.json and a path inside
// it ("dist/typeshed-fallback/stdlib/os/__init__.pyi"), never dropped as
// outside the workspace. A package whose package.json cannot be read is
// left out: its locations are then dropped, as before.
func ServerPackageExternals(cf *config.File) []uri.External {
	var ex []uri.External
	seen := map[string]bool{}
	for _, s := range cf.Servers {
		for _, a := range s.Arguments {
			dir, ok := npmPackageDir(a)
			if !ok || seen[dir] {
				continue
			}
			seen[dir] = true
			if module, ok := npmPackageModule(dir); ok {
				ex = append(ex, uri.External{Dir: dir, Module: module})
			}
		}
	}
	return ex
}

// npmPackageDir is the package directory holding an absolute script path
// inside node_modules (a scoped package keeps its scope).
func npmPackageDir(p string) (string, bool) {
	if !filepath.IsAbs(p) {
		return "", false
	}
	i := strings.LastIndex(p, "/node_modules/")
	if i < 0 {
		return "", false
	}
	rest := strings.Split(p[i+len("/node_modules/"):], "/")
	n := 1
	if strings.HasPrefix(rest[0], "@") {
		n = 2
	}
	if len(rest) <= n {
		return "", false
	}
	return p[:i+len("/node_modules/")] + strings.Join(rest[:n], "/"), true
}

func npmPackageModule(dir string) (string, bool) {
	f, err := os.Open(filepath.Join(dir, "package.json"))
	if err != nil {
		return "", false
	}
	defer f.Close()
	var pkg struct {
		Name    string `json:"name"`
		Version string `json:"version"`
	}
	if json.NewDecoder(io.LimitReader(f, 1<<20)).Decode(&pkg) != nil || pkg.Name == "" || pkg.Version == "" ||
		len(pkg.Name) > 214 || len(pkg.Version) > 64 || strings.ContainsAny(pkg.Name+pkg.Version, " \x00") {
		return "", false
	}
	return pkg.Name + "@" + pkg.Version, true
}
