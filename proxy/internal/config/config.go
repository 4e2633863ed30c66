// Package config loads the proxy's configuration from LSP_* environment
// variables into one typed struct, with defaults, and validates it at start.
// README.md documents every variable; keep the two in step.
package config

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Config is everything the proxy reads from its environment.
type Config struct {
	Listen        string        // LSP_LISTEN
	MetricsListen string        // LSP_METRICS_LISTEN: empty serves /metrics on Listen
	DatabaseURL   string        // LSP_DATABASE_URL
	Daemons       []string      // LSP_DAEMONS
	DevMode       bool          // LSP_DEV
	LogLevel      string        // LSP_LOG_LEVEL
	ShutdownGrace time.Duration // LSP_SHUTDOWN_GRACE

	JWTKeys         string        // LSP_JWT_KEYS
	JWKSURL         string        // LSP_JWKS_URL
	JWTHMACFile     string        // LSP_JWT_HMAC_SECRET_FILE
	JWTIssuer       string        // LSP_JWT_ISSUER
	JWTAudience     string        // LSP_JWT_AUDIENCE
	JWTAlgs         []string      // LSP_JWT_ALGS
	JWTMaxTTL       time.Duration // LSP_JWT_MAX_TTL
	TenantKeySecret string        // LSP_TENANT_KEY_SECRET

	ForgeURL      string            // LSP_FORGE_URL
	ForgeKind     string            // LSP_FORGE_KIND
	ForgeAuth     string            // LSP_FORGE_AUTH
	ForgeOwners   map[string]string // LSP_FORGE_OWNERS
	ForgeCacheTTL time.Duration     // LSP_FORGE_CACHE_TTL

	PrepareCents   int64         // LSP_PREPARE_CENTS
	PrepareGrace   time.Duration // LSP_PREPARE_GRACE
	RequestTimeout time.Duration // LSP_REQUEST_TIMEOUT
	PrepareTimeout time.Duration // LSP_PREPARE_TIMEOUT

	TreeMaxFiles     int   // LSP_TREE_MAX_FILES
	TreeMaxBytes     int64 // LSP_TREE_MAX_BYTES
	TreeMaxFileBytes int64 // LSP_TREE_MAX_FILE_BYTES
	TreeMaxDepth     int   // LSP_TREE_MAX_DEPTH
}

var orgRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

// Load reads the environment through getenv (os.Getenv in production).
func Load(getenv func(string) string) (*Config, error) {
	p := parser{getenv: getenv}
	c := &Config{
		Listen:        p.str("LSP_LISTEN", "127.0.0.1:8080"),
		MetricsListen: p.str("LSP_METRICS_LISTEN", ""),
		DatabaseURL:   p.str("LSP_DATABASE_URL", ""),
		Daemons:       p.list("LSP_DAEMONS", nil),
		DevMode:       p.boolean("LSP_DEV", false),
		LogLevel:      p.str("LSP_LOG_LEVEL", "info"),
		ShutdownGrace: p.duration("LSP_SHUTDOWN_GRACE", 30*time.Second),

		JWTKeys:         p.str("LSP_JWT_KEYS", ""),
		JWKSURL:         p.str("LSP_JWKS_URL", ""),
		JWTHMACFile:     p.str("LSP_JWT_HMAC_SECRET_FILE", ""),
		JWTIssuer:       p.str("LSP_JWT_ISSUER", ""),
		JWTAudience:     p.str("LSP_JWT_AUDIENCE", ""),
		JWTAlgs:         p.list("LSP_JWT_ALGS", []string{"RS256", "ES256", "EdDSA"}),
		JWTMaxTTL:       p.duration("LSP_JWT_MAX_TTL", 0),
		TenantKeySecret: p.str("LSP_TENANT_KEY_SECRET", ""),

		ForgeURL:      strings.TrimRight(p.str("LSP_FORGE_URL", ""), "/"),
		ForgeKind:     p.str("LSP_FORGE_KIND", "git"),
		ForgeAuth:     p.str("LSP_FORGE_AUTH", "bearer"),
		ForgeOwners:   p.owners("LSP_FORGE_OWNERS"),
		ForgeCacheTTL: p.duration("LSP_FORGE_CACHE_TTL", 30*time.Second),

		PrepareCents:   p.int("LSP_PREPARE_CENTS", 2),
		PrepareGrace:   p.duration("LSP_PREPARE_GRACE", 24*time.Hour),
		RequestTimeout: p.duration("LSP_REQUEST_TIMEOUT", 60*time.Second),
		PrepareTimeout: p.duration("LSP_PREPARE_TIMEOUT", 10*time.Minute),

		TreeMaxFiles:     int(p.int("LSP_TREE_MAX_FILES", 50_000)),
		TreeMaxBytes:     p.int("LSP_TREE_MAX_BYTES", 512<<20),
		TreeMaxFileBytes: p.int("LSP_TREE_MAX_FILE_BYTES", 16<<20),
		TreeMaxDepth:     int(p.int("LSP_TREE_MAX_DEPTH", 64)),
	}
	if err := errors.Join(p.errs...); err != nil {
		return nil, err
	}
	return c, c.validate()
}

func (c *Config) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.DatabaseURL == "" {
		bad("LSP_DATABASE_URL is required")
	}
	if len(c.Daemons) == 0 {
		bad("LSP_DAEMONS is required")
	}
	if c.JWTKeys == "" && c.JWKSURL == "" && c.JWTHMACFile == "" {
		bad("no JWT key configured: set LSP_JWT_KEYS, LSP_JWKS_URL or LSP_JWT_HMAC_SECRET_FILE")
	}
	if c.ForgeURL == "" {
		bad("LSP_FORGE_URL is required")
	}
	switch c.ForgeKind {
	case "git":
	default:
		bad("LSP_FORGE_KIND=%q: supported kinds are git", c.ForgeKind)
	}
	switch c.ForgeAuth {
	case "bearer", "basic":
	default:
		bad("LSP_FORGE_AUTH=%q: supported modes are bearer, basic", c.ForgeAuth)
	}
	if c.PrepareCents < 0 {
		bad("LSP_PREPARE_CENTS must not be negative")
	}
	if c.RequestTimeout <= 0 || c.PrepareTimeout <= 0 {
		bad("LSP_REQUEST_TIMEOUT and LSP_PREPARE_TIMEOUT must be positive")
	}
	return errors.Join(errs...)
}

type parser struct {
	getenv func(string) string
	errs   []error
}

func (p *parser) str(name, def string) string {
	if v := strings.TrimSpace(p.getenv(name)); v != "" {
		return v
	}
	return def
}

func (p *parser) list(name string, def []string) []string {
	v := p.str(name, "")
	if v == "" {
		return def
	}
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func (p *parser) boolean(name string, def bool) bool {
	v := p.str(name, "")
	if v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		p.errs = append(p.errs, fmt.Errorf("%s=%q: not a boolean", name, v))
	}
	return b
}

func (p *parser) int(name string, def int64) int64 {
	v := p.str(name, "")
	if v == "" {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		p.errs = append(p.errs, fmt.Errorf("%s=%q: not an integer", name, v))
	}
	return n
}

func (p *parser) duration(name string, def time.Duration) time.Duration {
	v := p.str(name, "")
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		p.errs = append(p.errs, fmt.Errorf("%s=%q: not a duration", name, v))
	}
	return d
}

// owners parses "org owner" pairs separated by newlines or commas.
func (p *parser) owners(name string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.FieldsFunc(p.getenv(name), func(r rune) bool { return r == '\n' || r == ',' }) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 2 || !orgRE.MatchString(f[0]) || !orgRE.MatchString(f[1]) {
			p.errs = append(p.errs, fmt.Errorf("%s: %q is not an 'org owner' pair", name, line))
			continue
		}
		m[f[0]] = f[1]
	}
	return m
}

// Getenv is os.Getenv, named for callers of Load.
var Getenv = os.Getenv
