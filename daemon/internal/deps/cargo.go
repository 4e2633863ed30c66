package deps

import (
	"bytes"
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
	"github.com/hanzoai/lsp/daemon/internal/safefs"
	"golang.org/x/sys/unix"
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
	// maxCargoRegistries bounds the registry/src entries looked in (one
	// per registry cargo fetched from: crates.io, a mirror).
	maxCargoRegistries = 16
)

// cargoCrate is one [[package]] of a Cargo.lock.
type cargoCrate struct {
	Name, Version, Source string
}

var (
	cargoKeyRE  = regexp.MustCompile(`^([A-Za-z0-9_-]+)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:#.*)?$`)
	crateNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	// crateVersionRE is a semver version, as a Cargo.lock pins it: no
	// path separator, no "..", no wildcard.
	crateVersionRE = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)
)

// validCrate: name is a crate name and version a semver version, so that
// name-version is one plain file name (it names a directory in the home).
func validCrate(name, version string) bool {
	return crateNameRE.MatchString(name) && len(version) <= 64 && crateVersionRE.MatchString(version) && !strings.Contains(version, "..")
}

// parseCargoLock reads the [[package]] tables of a Cargo.lock (versions 1
// to 4 share them): name, version and source of each, bounded. Only
// top-level string keys are read; anything else (dependencies arrays,
// [metadata]) is skipped. Crates with a bad name or version are left out.
func parseCargoLock(data []byte) []cargoCrate {
	if len(data) > maxCargoLock {
		data = data[:maxCargoLock]
	}
	var out []cargoCrate
	var cur *cargoCrate
	flush := func() {
		if cur != nil && validCrate(cur.Name, cur.Version) && len(out) < maxCargoCrate {
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
				if len(seen) < maxCargoCrate {
					seen[m[2]] = true
				}
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

// cargoRegistries is the home's CARGO_HOME/registry/src, opened by
// descriptor (the home is jail-writable: nothing in it is followed), and
// its first entries, one per registry.
type cargoRegistries struct {
	src     *safefs.Dir
	entries []string
}

func openCargoRegistries(ws runtime.Workspace) *cargoRegistries {
	h, err := safefs.Open(ws.Home)
	if err != nil {
		return &cargoRegistries{}
	}
	defer h.Close()
	rel, err := filepath.Rel(ws.Home, runtime.CargoHome(ws))
	if err != nil {
		return &cargoRegistries{}
	}
	src, err := h.OpenDir(filepath.ToSlash(filepath.Join(rel, "registry", "src")))
	if err != nil {
		return &cargoRegistries{}
	}
	names, err := src.ReadNames(maxCargoRegistries)
	if err != nil {
		src.Close()
		return &cargoRegistries{}
	}
	sort.Strings(names)
	return &cargoRegistries{src: src, entries: names}
}

func (r *cargoRegistries) Close() {
	if r.src != nil {
		r.src.Close()
	}
}

// offline reports whether c's sources are in the home's CARGO_HOME (a
// registry crate unpacked under registry/src/*/NAME-VERSION, as cargo
// fetch leaves it): a regular Cargo.toml there, reached without following
// a link.
func (r *cargoRegistries) offline(c cargoCrate) bool {
	if r.src == nil || !validCrate(c.Name, c.Version) {
		return false
	}
	if !strings.HasPrefix(c.Source, "registry+") && !strings.HasPrefix(c.Source, "sparse+") {
		return false
	}
	for _, e := range r.entries {
		st, err := r.src.Lstat(e + "/" + c.Name + "-" + c.Version + "/Cargo.toml")
		if err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
			return true
		}
	}
	return false
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
	reg := openCargoRegistries(ws)
	defer reg.Close()
	var missing []string
	for _, c := range parseCargoLock(lock) {
		if c.Source == "" || reg.offline(c) {
			continue // a crate of the workspace, or one a mirror put in place
		}
		missing = append(missing, c.Name+" "+c.Version)
	}
	if len(missing) > 0 {
		w.add("%s", fmt.Sprintf("Cargo.lock pins %d crate(s) not available offline (no crates mirror), unresolved: %s", len(missing), strings.Join(clipList(missing, cargoNamed), ", ")))
	}
}
