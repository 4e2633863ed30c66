package jail

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// Options configure the jail. The zero value of a field takes its default.
type Options struct {
	// Bwrap is the bubblewrap executable (LSP_JAIL_BWRAP).
	Bwrap string
	// Memory bounds one jail's memory in bytes (LSP_JAIL_MEMORY): a memory
	// cgroup where the daemon can make one, else RLIMIT_DATA.
	Memory int64
	// Pids bounds one jail's tasks, threads included (LSP_JAIL_PIDS): a pids
	// cgroup where the daemon can make one, else RLIMIT_NPROC counted in the
	// jail's own user namespace.
	Pids int
	// Files is RLIMIT_NOFILE (LSP_JAIL_NOFILE).
	Files uint64
	// FileSize is RLIMIT_FSIZE in bytes (LSP_JAIL_FSIZE).
	FileSize int64
	// ReadOnly are the toolchain directories every jail sees read-only at
	// their own path (LSP_JAIL_RO_PATHS, colon-separated); the system
	// library directories and each server's own directory come on top.
	ReadOnly []string
	// CC is the C compiler driver the jail shows, with the binutils beside
	// it and the system headers, so that the go command loads cgo files
	// (LSP_JAIL_CC): empty means DefaultCC when it exists, "off" none
	// (CGO_ENABLED=0). See ctoolchain.go.
	CC string
	// Launcher is the daemon's own executable, which runs the jail's hidden
	// modes (see Main); os.Executable() when empty.
	Launcher string
	// UIDBase starts the range of host uids a root daemon gives its jails
	// (LSP_JAIL_UID_BASE): one uid per server home, never reused, out of
	// UIDCount (LSP_JAIL_UID_COUNT). Nothing but these daemons may use
	// the uids from UIDBase up. The range is leased host-wide under
	// UIDLockDir (LSP_JAIL_UID_LOCK_DIR): with UIDBaseFixed (set when
	// LSP_JAIL_UID_BASE is) a daemon whose range is taken refuses to
	// start; otherwise it takes the next free range of UIDCount uids.
	UIDBase      uint32
	UIDCount     uint32
	UIDBaseFixed bool
	UIDLockDir   string
	// StateDir keeps the uid allocator's counter; required as root.
	StateDir string
	// PoolMemory, when not 0, bounds the memory of every jail together
	// (the pool's LSP_POOL_MAX_RSS): the limit of the memory cgroup that
	// holds all the jails, so that the kernel enforces the pool's budget
	// where the pool's own eviction, which samples, is late. Without a
	// memory cgroup it has no effect.
	PoolMemory int64
}

// Defaults.
const (
	DefaultBwrap    = "/usr/bin/bwrap"
	DefaultMemory   = 4 << 30
	DefaultPids     = 1024
	DefaultFiles    = 8192
	DefaultFileSize = 1 << 30
	DefaultUIDBase  = 1_800_000_000
	DefaultUIDCount = 10_000_000
	// DefaultUIDLockDir is where the host's uid leases live.
	DefaultUIDLockDir = "/run/lsp-jail"
)

// goMemLimit is GOMEMLIMIT for a jail of memory bytes: three quarters of
// it, so that a Go server (gopls, and the go command it runs in the same
// jail) collects garbage before the kernel's limit kills it. Without it
// the Go runtime lets the heap grow to twice what is live (GOGC=100)
// whatever the limit, and gopls on github.com/aws/aws-sdk-go (a module of
// over 2,000 files) was OOM-killed by the jail's 4 GiB memory cgroup at
// 4.2 GB resident, again after every restart, while references type-check
// the whole module. Programs not written in Go ignore the variable.
func goMemLimit(memory int64) string {
	return "GOMEMLIMIT=" + strconv.FormatInt(memory/4*3, 10)
}

// DefaultReadOnly is the Go toolchain, which gopls runs.
var DefaultReadOnly = []string{"/usr/local/go"}

func (o Options) withDefaults() Options {
	if o.Bwrap == "" {
		o.Bwrap = DefaultBwrap
	}
	if o.Memory == 0 {
		o.Memory = DefaultMemory
	}
	if o.Pids == 0 {
		o.Pids = DefaultPids
	}
	if o.Files == 0 {
		o.Files = DefaultFiles
	}
	if o.FileSize == 0 {
		o.FileSize = DefaultFileSize
	}
	if o.ReadOnly == nil {
		o.ReadOnly = DefaultReadOnly
	}
	if o.UIDBase == 0 {
		o.UIDBase = DefaultUIDBase
	}
	if o.UIDCount == 0 {
		o.UIDCount = DefaultUIDCount
	}
	if o.UIDLockDir == "" {
		o.UIDLockDir = DefaultUIDLockDir
	}
	return o
}

// Minimums keep a mistyped variable from making every server fail in ways
// that look like server bugs.
const (
	minMemory   = 64 << 20
	minPids     = 16
	minFiles    = 64
	minFileSize = 1 << 20
	minUIDCount = 1000
)

func (o Options) validate() error {
	var errs []error
	if !filepath.IsAbs(o.Bwrap) {
		errs = append(errs, fmt.Errorf("LSP_JAIL_BWRAP=%q: not an absolute path", o.Bwrap))
	}
	if o.Memory < minMemory {
		errs = append(errs, fmt.Errorf("LSP_JAIL_MEMORY=%d: below %d bytes", o.Memory, minMemory))
	}
	if o.Pids < minPids {
		errs = append(errs, fmt.Errorf("LSP_JAIL_PIDS=%d: below %d", o.Pids, minPids))
	}
	if o.Files < minFiles {
		errs = append(errs, fmt.Errorf("LSP_JAIL_NOFILE=%d: below %d", o.Files, minFiles))
	}
	if o.FileSize < minFileSize {
		errs = append(errs, fmt.Errorf("LSP_JAIL_FSIZE=%d: below %d bytes", o.FileSize, minFileSize))
	}
	for _, p := range o.ReadOnly {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p || p == "/" {
			errs = append(errs, fmt.Errorf("LSP_JAIL_RO_PATHS: %q is not a clean absolute path below /", p))
		}
	}
	if o.UIDBase < 65536 || uint64(o.UIDBase)+uint64(o.UIDCount) > 1<<31 {
		errs = append(errs, fmt.Errorf("LSP_JAIL_UID_BASE=%d: the range [base, base+%d) must lie within [65536, 2^31)", o.UIDBase, o.UIDCount))
	}
	if o.UIDCount < minUIDCount {
		errs = append(errs, fmt.Errorf("LSP_JAIL_UID_COUNT=%d: below %d", o.UIDCount, minUIDCount))
	}
	if !filepath.IsAbs(o.UIDLockDir) {
		errs = append(errs, fmt.Errorf("LSP_JAIL_UID_LOCK_DIR=%q: not an absolute path", o.UIDLockDir))
	}
	if o.PoolMemory < 0 || o.PoolMemory > 0 && o.PoolMemory < minMemory {
		errs = append(errs, fmt.Errorf("LSP_POOL_MAX_RSS=%d (the limit of the cgroup holding every jail): below %d bytes", o.PoolMemory, minMemory))
	}
	if o.StateDir != "" && !filepath.IsAbs(o.StateDir) {
		errs = append(errs, fmt.Errorf("jail state directory %q: not an absolute path", o.StateDir))
	}
	if o.Launcher != "" && !filepath.IsAbs(o.Launcher) {
		errs = append(errs, fmt.Errorf("launcher %q: not an absolute path", o.Launcher))
	}
	return errors.Join(errs...)
}

// OptionsFromEnv reads the LSP_JAIL_* variables. Sizes are bytes, with an
// optional K, M or G suffix (powers of 1024).
func OptionsFromEnv(getenv func(string) string) (Options, error) {
	var o Options
	var errs []error
	o.Bwrap = getenv("LSP_JAIL_BWRAP")
	size := func(name string, dst *int64) {
		if v := getenv(name); v != "" {
			n, err := parseSize(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", name, v, err))
			}
			*dst = n
		}
	}
	size("LSP_JAIL_MEMORY", &o.Memory)
	size("LSP_JAIL_FSIZE", &o.FileSize)
	if v := getenv("LSP_JAIL_PIDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			errs = append(errs, fmt.Errorf("LSP_JAIL_PIDS=%q: not a positive integer", v))
		}
		o.Pids = n
	}
	if v := getenv("LSP_JAIL_UID_BASE"); v != "" {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil || n == 0 {
			errs = append(errs, fmt.Errorf("LSP_JAIL_UID_BASE=%q: not a positive integer", v))
		}
		o.UIDBase = uint32(n)
		o.UIDBaseFixed = true
	}
	if v := getenv("LSP_JAIL_UID_COUNT"); v != "" {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil || n == 0 {
			errs = append(errs, fmt.Errorf("LSP_JAIL_UID_COUNT=%q: not a positive integer", v))
		}
		o.UIDCount = uint32(n)
	}
	o.UIDLockDir = getenv("LSP_JAIL_UID_LOCK_DIR")
	o.CC = getenv("LSP_JAIL_CC")
	if v := getenv("LSP_JAIL_NOFILE"); v != "" {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil || n == 0 {
			errs = append(errs, fmt.Errorf("LSP_JAIL_NOFILE=%q: not a positive integer", v))
		}
		o.Files = n
	}
	if v, ok := lookup(getenv, "LSP_JAIL_RO_PATHS"); ok {
		o.ReadOnly = []string{}
		for _, p := range strings.Split(v, ":") {
			if p != "" {
				o.ReadOnly = append(o.ReadOnly, p)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Options{}, err
	}
	o = o.withDefaults()
	if err := o.validate(); err != nil {
		return Options{}, err
	}
	return o, nil
}

// lookup treats a variable set to the empty string as unset, like the rest
// of the daemon's configuration; LSP_JAIL_RO_PATHS=":" asks for no extra
// paths.
func lookup(getenv func(string) string, name string) (string, bool) {
	v := getenv(name)
	return v, v != ""
}

func parseSize(s string) (int64, error) {
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "K"):
		mult, s = 1<<10, strings.TrimSuffix(s, "K")
	case strings.HasSuffix(s, "M"):
		mult, s = 1<<20, strings.TrimSuffix(s, "M")
	case strings.HasSuffix(s, "G"):
		mult, s = 1<<30, strings.TrimSuffix(s, "G")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/mult {
		return 0, errors.New("not a positive size (bytes, or a number with K, M or G)")
	}
	return n * mult, nil
}
