package config

import (
	"fmt"
	"path/filepath"
	"strings"
)

// CheckDaemonRoot refuses an entry that names, in an argument or its
// tsserver.path, a path inside the daemon's root (LSP_DAEMON_ROOT) or a
// directory above it (/, the root's parent): the jail binds every
// absolute path among a server's arguments (the node_modules tree around
// one whole) and the pinned TypeScript's package into every jail of that
// server, so such an entry would show each jail every tenant's trees and
// homes. The error names the server and the argument. Both the paths as
// written and as resolved through links are compared.
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
		if p := s.TSServerPath(); p != "" && filepath.IsAbs(p) {
			pkg := filepath.Dir(filepath.Dir(p)) // what the jail binds
			if overlapsAny(p, roots) || overlapsAny(pkg, roots) {
				return fmt.Errorf("%s: %q lies inside LSP_DAEMON_ROOT (%s) or above it; the jail would bind it into every jail of the server", field("initialization_options.tsserver.path"), p, root)
			}
		}
	}
	return nil
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
