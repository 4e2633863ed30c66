package jail

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// A C toolchain in the jail lets the go command load cgo files as an
// ordinary checkout does: with CGO_ENABLED=0 (the go command's default when
// it finds no C compiler) every file that imports "C" is excluded by the
// implicit cgo build constraint, so gopls has no package for it, and every
// file of the module that uses what those files declare is full of
// "undefined" errors. With a compiler, `go list -compiled` (what gopls's
// go/packages runs) preprocesses and compiles each cgo preamble with it
// (cc1 and as; collect2 and ld once, for the go command's probe of the
// compiler's flags), inside the jail: no network, the read-only tree, the
// private home as the only writable place, and the go command's own #cgo
// flag allow-list (CGO_CFLAGS_ALLOW and the like are never set, so
// -fplugin and its kind are refused before the compiler runs). The
// compiler, the binutils beside it and the system headers are bound
// read-only at their own paths; nothing else of the host's bin directory is.

// DefaultCC is the C compiler driver used when LSP_JAIL_CC is unset and it
// exists: Debian's gcc (the build-essential a normal Go checkout compiles
// its cgo files with).
const DefaultCC = "/usr/bin/gcc"

// ccOff is the LSP_JAIL_CC value that leaves the compiler out
// (CGO_ENABLED=0: cgo files are not loaded).
const ccOff = "off"

// ccStartWarning is what the daemon logs at start when LSP_JAIL_CC is
// unset and the default compiler is missing: Go servers then run with
// CGO_ENABLED=0, which an operator should choose (LSP_JAIL_CC=off), not
// get by a missing package. "" when there is nothing to say.
func ccStartWarning(opt string, c cToolchain) string {
	if opt != "" || c.cc != "" {
		return ""
	}
	return "jail: LSP_JAIL_CC is unset and the default C compiler is missing: Go servers run with CGO_ENABLED=0, so files that import \"C\" are not loaded; install it (the daemon image has gcc-12 and sets LSP_JAIL_CC), name one in LSP_JAIL_CC, or set LSP_JAIL_CC=off"
}

// ccSiblings are the programs the driver runs by name, looked up in
// COMPILER_PATH (its own directory in the jail): the assembler, and the
// linker that collect2 runs. cc1 and collect2 live in the compiler's
// library directory, which the system libraries' mounts already show.
var ccSiblings = []string{"as", "ld"}

// ccHeaders are the system headers a cgo preamble includes.
var ccHeaders = []string{"/usr/include"}

// cToolchain is the C compiler a jail shows and the environment that makes
// the go command use it; the zero value is no compiler.
type cToolchain struct {
	cc     string // the driver's path in the jail (and on the host)
	mounts []mount
	env    []string
}

func (c cToolchain) describe() string {
	if c.cc == "" {
		return "no C compiler (CGO_ENABLED=0: cgo files are not loaded)"
	}
	return "C compiler " + c.cc + " (CGO_ENABLED=1)"
}

// resolveCToolchain turns LSP_JAIL_CC into the jail's compiler: cc "" means
// DefaultCC when present, "off" none. A named compiler must be an
// executable regular file (after links), and so must its siblings where
// they exist; each is bound from its real file at the name the driver
// looks for, so no host link is followed inside the jail.
func resolveCToolchain(cc string) (cToolchain, error) {
	switch cc {
	case ccOff:
		return cToolchain{}, nil
	case "":
		if _, err := os.Stat(DefaultCC); err != nil {
			return cToolchain{}, nil
		}
		cc = DefaultCC
	}
	if !filepath.IsAbs(cc) || filepath.Clean(cc) != cc {
		return cToolchain{}, fmt.Errorf("LSP_JAIL_CC=%q: not a clean absolute path (or %q)", cc, ccOff)
	}
	bind := func(p string) (mount, error) {
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return mount{}, err
		}
		if err := checkExecutable(real); err != nil {
			return mount{}, err
		}
		return mount{op: "--ro-bind", src: real, dst: p, system: true}, nil
	}
	m, err := bind(cc)
	if err != nil {
		return cToolchain{}, fmt.Errorf("LSP_JAIL_CC=%q: %w", cc, err)
	}
	t := cToolchain{cc: cc, mounts: []mount{m}}
	dir := filepath.Dir(cc)
	for _, name := range ccSiblings {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err != nil {
			continue
		}
		m, err := bind(p)
		if err != nil {
			return cToolchain{}, fmt.Errorf("LSP_JAIL_CC=%q: %s: %w", cc, name, err)
		}
		t.mounts = append(t.mounts, m)
	}
	for _, h := range ccHeaders {
		if realDir(h) {
			t.mounts = append(t.mounts, mount{op: "--ro-bind", src: h, dst: h, system: true})
		}
	}
	t.env = []string{
		"CGO_ENABLED=1",
		"CC=" + cc,
		// gcc looks for as (and collect2 for ld) in COMPILER_PATH before
		// PATH, which holds only the server's and Go's directories.
		"COMPILER_PATH=" + dir,
	}
	return t, nil
}

// withCC puts the compiler's variables over env (bwrap's --setenv: a later
// value wins, but the list stays readable with each name once).
func (c cToolchain) withCC(env []string) []string {
	if c.cc == "" {
		return env
	}
	out := make([]string, 0, len(env)+len(c.env))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if k == "CGO_ENABLED" || k == "CC" || k == "COMPILER_PATH" {
			continue
		}
		out = append(out, kv)
	}
	return append(out, c.env...)
}
