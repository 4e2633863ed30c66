package config

import (
	"fmt"
	"path/filepath"
	"strings"
)

// CheckDaemonRoot refuses an entry that names, in an argument, its
// read_only, its external_roots or its tsserver.path, a path inside the daemon's root (LSP_DAEMON_ROOT) or a
// directory above it (/, the root's parent): the jail binds every
// absolute path among a server's arguments (the node_modules tree around
// one whole) and the pinned TypeScript's package into every jail of that
// server, so such an entry would show each jail every tenant's trees and
// homes. An external root is read by the daemon itself, outside any jail
// (OP_READ of a location answers name there), so it must also lie under a
// path the entry's jail binds read-only: what the server indexed is then
// what the daemon reads. The error names the server and the field. Both
// the paths as written and as resolved through links are compared.
func (f *File) CheckDaemonRoot(root string) error {
	if !filepath.IsAbs(root) {
		return fmt.Errorf("config: LSP_DAEMON_ROOT %q is not absolute", root)
	}
	roots := resolvedForms(root)
	for i, s := range f.Servers {
		field := func(name string) string { return fmt.Sprintf("config: servers[%d] (%q).%s", i, s.ID, name) }
		for j, a := range s.Arguments {
			for _, p := range argPaths(a) {
				if overlapsAny(p, roots) {
					return fmt.Errorf("%s: %q names a path inside LSP_DAEMON_ROOT (%s) or above it; the jail would bind it into every jail of the server", field(fmt.Sprintf("arguments[%d]", j)), a, root)
				}
			}
		}
		for j, p := range s.ReadOnly {
			if overlapsAny(p, roots) {
				return fmt.Errorf("%s: %q lies inside LSP_DAEMON_ROOT (%s) or above it; the jail would bind it into every jail of the server", field(fmt.Sprintf("read_only[%d]", j)), p, root)
			}
		}
		for j, x := range s.ExternalRoots {
			name := field(fmt.Sprintf("external_roots[%d].dir", j))
			if overlapsAny(x.Dir, roots) {
				return fmt.Errorf("%s: %q lies inside LSP_DAEMON_ROOT (%s) or above it; the daemon reads files under it outside the jail, so it would show tenants each other's trees", name, x.Dir, root)
			}
			if !underBound(x.Dir, s) {
				return fmt.Errorf("%s: %q lies under nothing the server's jail binds read-only (its read_only, the system libraries %s, or the node_modules of a script argument); the server could not see what answers would name", name, x.Dir, strings.Join(SystemLibDirs, ", "))
			}
		}
		if p := s.TSServerPath(); p != "" && filepath.IsAbs(p) {
			pkg := filepath.Dir(filepath.Dir(p)) // what the jail binds
			if overlapsAny(p, roots) || overlapsAny(pkg, roots) {
				return fmt.Errorf("%s: %q lies inside LSP_DAEMON_ROOT (%s) or above it; the jail would bind it into every jail of the server", field("initialization_options.tsserver.path"), p, root)
			}
		}
	}
	return nil
}

// SystemLibDirs are the system library directories every jail binds
// read-only at their own path (the jail's systemLibs: /usr/lib* and /lib*,
// the latter as links on merged-/usr hosts).
var SystemLibDirs = []string{"/usr/lib", "/usr/lib64", "/usr/lib32", "/usr/libx32", "/lib", "/lib64", "/lib32", "/libx32"}

// underBound reports whether dir, as written and as resolved through
// links, lies under a path the entry's jail binds read-only: its
// read_only, the system libraries, or the node_modules tree around a
// script argument. Its executable is bound as the file alone, so the
// directory around it does not count.
func underBound(dir string, s Server) bool {
	var bound []string
	bound = append(bound, s.ReadOnly...)
	bound = append(bound, SystemLibDirs...)
	for _, a := range s.Arguments {
		for _, p := range argPaths(a) {
			if strings.HasSuffix(p, "/node_modules") {
				bound = append(bound, p)
			}
		}
	}
	forms := resolvedForms(dir)
	for _, f := range forms {
		ok := false
		for _, b := range bound {
			for _, br := range resolvedForms(b) {
				if within(f, br) {
					ok = true
				}
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// argPaths are the absolute paths an argument may name: itself, what
// follows an = (--flag=/path), and the node_modules directory the jail
// binds in place of a script inside one.
func argPaths(a string) []string {
	var out []string
	for _, c := range []string{a, a[strings.Index(a, "=")+1:]} {
		if !strings.HasPrefix(c, "/") {
			continue
		}
		c = filepath.Clean(c)
		out = append(out, c)
		if i := strings.Index(c, "/node_modules/"); i >= 0 {
			out = append(out, c[:i+len("/node_modules")])
		}
	}
	return out
}

// resolvedForms are p as written and, when it exists, with its links
// resolved.
func resolvedForms(p string) []string {
	p = filepath.Clean(p)
	out := []string{p}
	if r, err := filepath.EvalSymlinks(p); err == nil && r != p {
		out = append(out, r)
	}
	return out
}

func overlapsAny(p string, roots []string) bool {
	for _, q := range resolvedForms(p) {
		for _, r := range roots {
			if within(q, r) || within(r, q) {
				return true
			}
		}
	}
	return false
}

// within reports whether p is dir or below it.
func within(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}
