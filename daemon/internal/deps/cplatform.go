package deps

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
)

// The platform clangd's jail compiles for: the image's C library and
// headers (/usr, read-only to every jailed process and never a tenant's),
// against which configure's link and header checks are answered here
// without running them. A check that a function links is whether the
// library's dynamic symbol table has it, as the link configure tries
// succeeds exactly then; a header check is whether the header is in the
// system include directories.

// cPlatform answers configure's checks for one library and include root;
// the nil platform has no library and no header.
type cPlatform struct {
	libDirs, includeDirs []string
	bigEndian            bool

	mu   sync.Mutex
	libs map[string]map[string]bool // library name ("c", "m") → its dynamic symbols
}

// maxPlatformLibBytes bounds one shared library read for its symbols
// (glibc's libc.so.6 is 2 MB); maxPlatformLibs bounds the libraries a
// tree's checks can make the daemon read.
const (
	maxPlatformLibBytes = 32 << 20
	maxPlatformLibs     = 32
)

var (
	libNameRE    = regexp.MustCompile(`^[A-Za-z0-9_+-][A-Za-z0-9_+.-]{0,63}$`)
	headerNameRE = regexp.MustCompile(`^[A-Za-z0-9_+-][A-Za-z0-9_+./-]{0,127}$`)
	cIdentRE     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
)

// systemPlatform is the platform of the machine the daemon runs on, which
// is the one its jail binds (Debian's multiarch layout).
var systemPlatform = sync.OnceValue(func() *cPlatform {
	arch := map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu",
		"386": "i386-linux-gnu", "ppc64le": "powerpc64le-linux-gnu", "s390x": "s390x-linux-gnu",
		"riscv64": "riscv64-linux-gnu"}[runtime.GOARCH]
	p := &cPlatform{bigEndian: binary.NativeEndian.Uint16([]byte{0, 1}) == 1}
	if arch != "" {
		p.libDirs = []string{"/usr/lib/" + arch, "/lib/" + arch}
		p.includeDirs = []string{"/usr/include/" + arch}
	}
	p.libDirs = append(p.libDirs, "/usr/lib", "/lib")
	p.includeDirs = append(p.includeDirs, "/usr/include")
	return p
})

// links reports whether a program calling fn links against -llib (lib ""
// for none): the C library is always linked.
func (p *cPlatform) links(fn, lib string) bool {
	if p == nil || !cIdentRE.MatchString(fn) {
		return false
	}
	if p.symbols("c")[fn] {
		return true
	}
	return lib != "" && lib != "c" && p.symbols(lib)[fn]
}

// hasLib reports whether -llib is a library the platform has.
func (p *cPlatform) hasLib(lib string) bool {
	return p != nil && (lib == "c" || p.symbols(lib) != nil)
}

// header reports whether #include <name> finds a system header.
func (p *cPlatform) header(name string) bool {
	if p == nil || !headerNameRE.MatchString(name) || path.Clean(name) != name || !filepath.IsLocal(name) {
		return false
	}
	for _, d := range p.includeDirs {
		if fi, err := os.Stat(filepath.Join(d, filepath.FromSlash(name))); err == nil && fi.Mode().IsRegular() {
			return true
		}
	}
	return false
}

// symbols returns lib's dynamic symbols (defined ones), nil when the
// platform has no such shared library; read once per library.
func (p *cPlatform) symbols(lib string) map[string]bool {
	if !libNameRE.MatchString(lib) {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if syms, ok := p.libs[lib]; ok {
		return syms
	}
	if p.libs == nil {
		p.libs = map[string]map[string]bool{}
	}
	if len(p.libs) >= maxPlatformLibs {
		return nil
	}
	syms := p.readLib(lib)
	p.libs[lib] = syms
	return syms
}

// readLib reads the symbols -llib gives a link, as the linker finds it:
// lib<lib>.so, else lib<lib>.a, in the first directory with either. A
// .so is a shared object or a linker script (glibc's libc.so and libm.so
// are: GROUP(libc.so.6 libc_nonshared.a …), and atexit is in the
// archive), whose files are read in turn; nil when no directory has it.
func (p *cPlatform) readLib(lib string) map[string]bool {
	for _, d := range p.libDirs {
		for _, name := range []string{"lib" + lib + ".so", "lib" + lib + ".a"} {
			if syms := linkSymbols(filepath.Join(d, name), 0); syms != nil {
				return syms
			}
		}
	}
	return nil
}

// maxLinkScript bounds a linker script read, maxLinkScriptDepth the
// scripts naming scripts.
const (
	maxLinkScript      = 64 << 10
	maxLinkScriptDepth = 4
)

// linkSymbols returns the symbols the file at name gives a link: a shared
// object's dynamic ones, an archive's index, or those of the files a
// linker script groups (absolute paths in the library directories only).
func linkSymbols(name string, depth int) map[string]bool {
	data, err := readRegularFollow(name, maxPlatformLibBytes)
	if err != nil {
		return nil
	}
	switch {
	case bytes.HasPrefix(data, []byte("\x7fELF")):
		return elfSymbols(data)
	case bytes.HasPrefix(data, []byte("!<arch>\n")):
		return arSymbols(data)
	case len(data) > maxLinkScript || depth >= maxLinkScriptDepth:
		return nil
	}
	syms := map[string]bool{}
	for _, f := range linkScriptFiles(string(data)) {
		for s := range linkSymbols(f, depth+1) {
			syms[s] = true
		}
	}
	return syms
}

// linkScriptFiles are the files a linker script's GROUP and INPUT name
// (AS_NEEDED ones too): absolute paths under /lib or /usr/lib.
func linkScriptFiles(script string) []string {
	for {
		i := strings.Index(script, "/*")
		if i < 0 {
			break
		}
		j := strings.Index(script[i+2:], "*/")
		if j < 0 {
			script = script[:i]
			break
		}
		script = script[:i] + " " + script[i+2+j+2:]
	}
	var files []string
	for _, w := range strings.FieldsFunc(script, func(r rune) bool { return r == ' ' || r == '\t' || r == '\n' || r == '(' || r == ')' || r == ',' }) {
		if c := path.Clean(w); c == w && (strings.HasPrefix(w, "/lib/") || strings.HasPrefix(w, "/usr/lib/")) && len(files) < 16 {
			files = append(files, w)
		}
	}
	return files
}

// arSymbols returns the symbols of an ar archive's index (the GNU "/"
// member, or "/SYM64/"), empty when it has none.
func arSymbols(data []byte) map[string]bool {
	syms := map[string]bool{}
	const hdr = 60
	rest := data[8:]
	if len(rest) < hdr {
		return syms
	}
	name := strings.TrimRight(string(rest[:16]), " ")
	size, err := strconv.Atoi(strings.TrimSpace(string(rest[48:58])))
	if err != nil || size < 0 || size > len(rest)-hdr || (name != "/" && name != "/SYM64/") {
		return syms
	}
	idx := rest[hdr : hdr+size]
	width := map[bool]int{true: 8, false: 4}[name == "/SYM64/"]
	if len(idx) < width {
		return syms
	}
	var n uint64
	if width == 8 {
		n = binary.BigEndian.Uint64(idx)
	} else {
		n = uint64(binary.BigEndian.Uint32(idx))
	}
	if n > uint64(len(idx)/width) {
		return syms
	}
	names := idx[width+int(n)*width:]
	for k := uint64(0); k < n && len(names) > 0; k++ {
		e := bytes.IndexByte(names, 0)
		if e < 0 {
			e = len(names)
		}
		syms[string(names[:e])] = true
		names = names[min(e+1, len(names)):]
	}
	return syms
}

// elfSymbols returns the defined dynamic symbols of an ELF shared
// object, nil if it is not one.
func elfSymbols(data []byte) map[string]bool {
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return nil
	}
	defer f.Close()
	dyn, err := f.DynamicSymbols()
	if err != nil {
		return nil
	}
	syms := make(map[string]bool, len(dyn))
	for _, s := range dyn {
		if s.Section != elf.SHN_UNDEF && (elf.ST_TYPE(s.Info) == elf.STT_FUNC || elf.ST_TYPE(s.Info) == elf.STT_GNU_IFUNC || elf.ST_TYPE(s.Info) == elf.STT_OBJECT) {
			syms[s.Name] = true
		}
	}
	return syms
}

// readRegularFollow reads a platform file, following its links: the
// image's /usr is the daemon's own, never a tree's or a jailed process's.
func readRegularFollow(name string, max int64) ([]byte, error) {
	real, err := filepath.EvalSymlinks(name)
	if err != nil {
		return nil, err
	}
	return readRegular(real, max)
}

// acTrCPP is autoconf's AS_TR_CPP: the name of a check's definition
// (HAVE_ + the function or header, upper-cased, every other byte '_').
func acTrCPP(s string) string {
	b := []byte(strings.ToUpper(s))
	for i, c := range b {
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b)
}
