package deps

import (
	"bytes"
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
)

// Rust (rust-analyzer). Serving is offline: rust-analyzer's cargo
// metadata runs with CARGO_NET_OFFLINE and CARGO_HOME in the home, so the
// project and the standard library (the sysroot patched at install to
// resolve from its own vendored crates) load, and a crate from a registry
// or git is found only where a crates mirror put it (HIP: a mirror and
// cargo fetch --locked into the home's CARGO_HOME). Until then the phase
// names, from the repository's Cargo.lock, each crate that is not there;
// a Cargo.toml that declares dependencies without a Cargo.lock is said
// too. rust-analyzer itself reports its failed metadata (readiness), which
// makes its answers partial.

const (
	maxCargoLock  = 8 << 20
	maxCargoToml  = 1 << 20
	maxCargoCrate = 10_000
	// cargoNamed bounds the crates a warning names.
	cargoNamed = 12
)

// cargoCrate is one [[package]] of a Cargo.lock.
type cargoCrate struct {
	Name, Version, Source string
}

var (
	cargoKeyRE  = regexp.MustCompile(`^([A-Za-z0-9_-]+)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:#.*)?$`)
	crateNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
)

// parseCargoLock reads the [[package]] tables of a Cargo.lock (versions 1
// to 4 share them): name, version and source of each, bounded. Only
// top-level string keys are read; anything else (dependencies arrays,
// [metadata]) is skipped. Crates with a bad name are left out.
func parseCargoLock(data []byte) []cargoCrate {
	if len(data) > maxCargoLock {
		data = data[:maxCargoLock]
	}
	var out []cargoCrate
	var cur *cargoCrate
	flush := func() {
		if cur != nil && crateNameRE.MatchString(cur.Name) && len(cur.Version) <= 64 && len(out) < maxCargoCrate {
			out = append(out, *cur)
		}
		cur = nil
	}
	for _, l := range bytes.Split(data, []byte("\n")) {
		line := strings.TrimSpace(string(l))
		if strings.HasPrefix(line, "[") {
			flush()
			if line == "[[package]]" {
				cur = &cargoCrate{}
			}
			continue
		}
		if cur == nil {
			continue
		}
		m := cargoKeyRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		switch m[1] {
		case "name":
			cur.Name = m[2]
		case "version":
			cur.Version = m[2]
		case "source":
			cur.Source = m[2]
		}
	}
	flush()
	return out
}

var cargoDepSection = regexp.MustCompile(`^\[(?:target\.(?:'[^']*'|"[^"]*"|[A-Za-z0-9_.-]+)\.)?(dev-|build-)?dependencies(?:\.([A-Za-z0-9_-]+))?\]$`)

// cargoTomlDeps are the dependency names a Cargo.toml declares
// ([dependencies], [dev-dependencies], [build-dependencies], their target
// forms and [dependencies.NAME] tables), excluding path dependencies
// written inline, sorted and bounded.
func cargoTomlDeps(data []byte) []string {
	if len(data) > maxCargoToml {
		data = data[:maxCargoToml]
	}
	seen := map[string]bool{}
	in := false
	for _, l := range bytes.Split(data, []byte("\n")) {
		line := strings.TrimSpace(string(l))
		if strings.HasPrefix(line, "[") {
			in = false
			m := cargoDepSection.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			if m[2] != "" {
				seen[m[2]] = true
				continue
			}
			in = true
			continue
		}
		if !in || line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, val, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		name = strings.Trim(strings.TrimSpace(name), `"`)
		if !crateNameRE.MatchString(name) {
			continue
		}
		if strings.Contains(val, "path") && !strings.Contains(val, "version") && !strings.Contains(val, "git") {
			continue // a crate of the repository itself
		}
		if len(seen) < maxCargoCrate {
			seen[name] = true
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// crateOffline reports whether c's sources are in the home's CARGO_HOME
// (a registry crate unpacked under registry/src/*/NAME-VERSION, as cargo
// fetch leaves it).
func crateOffline(ws runtime.Workspace, c cargoCrate) bool {
	if !strings.HasPrefix(c.Source, "registry+") && !strings.HasPrefix(c.Source, "sparse+") {
		return false
	}
	matches, _ := filepath.Glob(filepath.Join(runtime.CargoHome(ws), "registry", "src", "*", c.Name+"-"+c.Version, "Cargo.toml"))
	return len(matches) > 0
}

// checkCargo warns about the crates of the root Cargo.lock that are not
// available offline, or, without a Cargo.lock, the dependencies the root
// Cargo.toml declares.
func (f *Fetcher) checkCargo(ws runtime.Workspace, w *warnings) {
	toml, err := readRegular(filepath.Join(ws.Root, "Cargo.toml"), maxCargoToml)
	if err != nil {
		return
	}
	lock, err := readRegular(filepath.Join(ws.Root, "Cargo.lock"), maxCargoLock)
	if err != nil {
		if deps := cargoTomlDeps(toml); len(deps) > 0 {
			w.add("Cargo.toml declares %d crate(s) and there is no Cargo.lock, so none is resolved: %s", len(deps), strings.Join(clipList(deps, cargoNamed), ", "))
		}
		return
	}
	var missing []string
	for _, c := range parseCargoLock(lock) {
		if c.Source == "" || crateOffline(ws, c) {
			continue // a crate of the workspace, or one a mirror put in place
		}
		missing = append(missing, c.Name+" "+c.Version)
	}
	if len(missing) > 0 {
		w.add("%s", fmt.Sprintf("Cargo.lock pins %d crate(s) not available offline (no crates mirror), unresolved: %s", len(missing), strings.Join(clipList(missing, cargoNamed), ", ")))
	}
}
