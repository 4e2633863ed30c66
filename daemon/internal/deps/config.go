package deps

import (
	"errors"
	"fmt"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Config is the operator's configuration of the phase.
type Config struct {
	// GoProxies are the Go module mirrors, tried in order while one answers
	// 404 or 410 (GOPROXY's comma semantics). Empty: Go dependencies are
	// not fetched and no warning is given.
	GoProxies []*url.URL
	// GoSumDB is the checksum database ("name+hash+key", as GOSUMDB) that
	// verifies go.sum lines a repository lacks, reached through GoProxies
	// (<proxy>/sumdb/<name>/…). Empty: DefaultGoSumDB; "off": missing lines
	// stay warnings.
	GoSumDB string
	// NPMRegistry is the only registry a package-lock.json or yarn.lock may resolve
	// to. Nil: lockfiles are not examined.
	NPMRegistry *url.URL
	// GoVersion is the local Go toolchain's version ("go1.26.8"); go and
	// toolchain lines newer than it are refused. Empty: the daemon's own.
	GoVersion string
	// MaxModules bounds the module versions fetched per prepare (zips and
	// go.mod files alike).
	MaxModules int
	// MaxBytes bounds the bytes downloaded per prepare.
	MaxBytes int64
	// MaxZip bounds one module zip.
	MaxZip int64
	// Timeout bounds the whole phase of one prepare.
	Timeout time.Duration
	// Parallel is how many downloads run at once.
	Parallel int
	// MaxPhases bounds the phases the daemon runs at once, across all
	// prepares (a late phase runs after its prepare answered, outside the
	// proxies' own bound on prepares); a phase beyond it waits.
	MaxPhases int
}

// Defaults for the LSP_DEPS_* bounds.
const (
	DefaultMaxModules = 1000
	DefaultMaxBytes   = 2 << 30
	DefaultMaxZip     = 500 << 20 // the go command's own limit
	DefaultTimeout    = 5 * time.Minute
	DefaultMaxPhases  = 4
	defaultParallel   = 8
)

// FromEnv reads LSP_DEPS_GO_PROXY, LSP_DEPS_GO_SUMDB, LSP_DEPS_NPM_REGISTRY, LSP_DEPS_MAX_MODULES,
// LSP_DEPS_MAX_BYTES, LSP_DEPS_MAX_ZIP_BYTES, LSP_DEPS_TIMEOUT and LSP_DEPS_MAX_PHASES.
func FromEnv(getenv func(string) string) (Config, error) {
	c := Config{MaxModules: DefaultMaxModules, MaxBytes: DefaultMaxBytes, MaxZip: DefaultMaxZip, Timeout: DefaultTimeout, MaxPhases: DefaultMaxPhases}
	if v := strings.TrimSpace(getenv("LSP_DEPS_GO_PROXY")); v != "" {
		for _, s := range strings.Split(v, ",") {
			u, err := parseMirror(strings.TrimSpace(s))
			if err != nil {
				return Config{}, fmt.Errorf("LSP_DEPS_GO_PROXY: %w", err)
			}
			c.GoProxies = append(c.GoProxies, u)
		}
	}
	if v := strings.TrimSpace(getenv("LSP_DEPS_GO_SUMDB")); v != "" {
		if _, err := newChecksumDB(v); err != nil {
			return Config{}, fmt.Errorf("LSP_DEPS_GO_SUMDB: %w", err)
		}
		c.GoSumDB = v
	}
	if v := strings.TrimSpace(getenv("LSP_DEPS_NPM_REGISTRY")); v != "" {
		u, err := parseMirror(v)
		if err != nil {
			return Config{}, fmt.Errorf("LSP_DEPS_NPM_REGISTRY: %w", err)
		}
		c.NPMRegistry = u
	}
	for _, n := range []struct {
		name string
		dst  *int64
	}{{"LSP_DEPS_MAX_BYTES", &c.MaxBytes}, {"LSP_DEPS_MAX_ZIP_BYTES", &c.MaxZip}} {
		if v := getenv(n.name); v != "" {
			x, err := strconv.ParseInt(v, 10, 64)
			if err != nil || x <= 0 {
				return Config{}, fmt.Errorf("%s: %q is not a positive number of bytes", n.name, v)
			}
			*n.dst = x
		}
	}
	for _, n := range []struct {
		name string
		max  int
		dst  *int
	}{{"LSP_DEPS_MAX_MODULES", 100000, &c.MaxModules}, {"LSP_DEPS_MAX_PHASES", 64, &c.MaxPhases}} {
		if v := getenv(n.name); v != "" {
			x, err := strconv.Atoi(v)
			if err != nil || x <= 0 || x > n.max {
				return Config{}, fmt.Errorf("%s: %q is not in 1..%d", n.name, v, n.max)
			}
			*n.dst = x
		}
	}
	if v := getenv("LSP_DEPS_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return Config{}, fmt.Errorf("LSP_DEPS_TIMEOUT: %q is not a positive duration", v)
		}
		c.Timeout = d
	}
	return c, nil
}

// parseMirror accepts an absolute http, https or file URL with no
// credentials, query or fragment. "direct" and "off" are not mirrors: the
// phase never reaches a repository's own host.
func parseMirror(s string) (*url.URL, error) {
	if s == "direct" || s == "off" || s == "" {
		return nil, fmt.Errorf("%q is not a mirror URL (direct and off are refused)", s)
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, errors.New("not a URL")
	}
	switch u.Scheme {
	case "http", "https":
		if u.Host == "" {
			return nil, errors.New("the URL has no host")
		}
	case "file":
		if u.Host != "" || !strings.HasPrefix(u.Path, "/") {
			return nil, errors.New("a file URL must be file:///absolute/path")
		}
	default:
		return nil, fmt.Errorf("scheme %q is not http, https or file", u.Scheme)
	}
	if u.User != nil {
		// No credential ever travels with a dependency request.
		return nil, errors.New("the URL carries credentials")
	}
	if u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return nil, errors.New("the URL has a query or fragment")
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawPath = ""
	return u, nil
}

func (c *Config) goVersion() string {
	if c.GoVersion != "" {
		return c.GoVersion
	}
	return runtime.Version()
}
