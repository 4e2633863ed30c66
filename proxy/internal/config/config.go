// Package config loads the proxy's configuration from LSP_* environment
// variables into one typed struct, with defaults, and validates it at start.
// README.md documents every variable; keep the two in step.
package config

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Config is everything the proxy reads from its environment.
type Config struct {
	Listen        string        // LSP_LISTEN
	MetricsListen string        // LSP_METRICS_LISTEN: empty serves /metrics on Listen, else only there
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
	// ForgeNegativeCacheTTL keeps a "not found" resolve (LSP_FORGE_NEGATIVE_CACHE_TTL).
	ForgeNegativeCacheTTL time.Duration
	// ForgeMaxDownloads bounds concurrent forge downloads per proxy
	// (LSP_FORGE_MAX_DOWNLOADS), ForgeMaxDownloadsPerOrg per org
	// (LSP_FORGE_MAX_DOWNLOADS_PER_ORG).
	ForgeMaxDownloads, ForgeMaxDownloadsPerOrg int
	// ForgeHistoryProofsPerMinute (LSP_FORGE_HISTORY_PROOFS_PER_MINUTE)
	// bounds how often an org may make the proxy download a repository's
	// history to prove an older commit reachable (0: no bound).
	ForgeHistoryProofsPerMinute int

	PrepareCents   int64         // LSP_PREPARE_CENTS
	PrepareGrace   time.Duration // LSP_PREPARE_GRACE
	UsageRetention time.Duration // LSP_USAGE_RETENTION: usage rows kept (whole days; rollups forever)
	LedgerSettle   time.Duration // LSP_LEDGER_SETTLE: GET /ledger lists rows whose ids are this old (DefaultLedgerSettle)
	// IdempotencyMaxBytes (LSP_IDEMPOTENCY_MAX_BYTES) bounds the bytes
	// one org's Idempotency-Keys hold: each answered key's row, its stored
	// answer among them (0: no bound).
	IdempotencyMaxBytes int64
	// HoldSettleInterval (LSP_HOLD_SETTLE_INTERVAL) is how often holds a
	// prepare left unsettled are decided by asking their daemon again.
	HoldSettleInterval time.Duration
	RequestTimeout     time.Duration // LSP_REQUEST_TIMEOUT
	PrepareTimeout     time.Duration // LSP_PREPARE_TIMEOUT

	TreeMaxFiles     int   // LSP_TREE_MAX_FILES
	TreeMaxBytes     int64 // LSP_TREE_MAX_BYTES
	TreeMaxFileBytes int64 // LSP_TREE_MAX_FILE_BYTES
	TreeMaxDepth     int   // LSP_TREE_MAX_DEPTH
	TreeMaxDirs      int   // LSP_TREE_MAX_DIRS

	// Shards: mutual TLS to host:port daemons and their health checks.
	DaemonTLSCert        string        // LSP_DAEMON_TLS_CERT: the proxy's client certificate
	DaemonTLSKey         string        // LSP_DAEMON_TLS_KEY
	DaemonTLSCA          string        // LSP_DAEMON_TLS_CA: the CA of the daemons' certificates
	DaemonHealthInterval time.Duration // LSP_DAEMON_HEALTH_INTERVAL

	// Forge credential modes sudo and jwt (CONTRACT §3).
	ForgeSudoTokenFile string // LSP_FORGE_SUDO_TOKEN_FILE: the admin token, for LSP_FORGE_AUTH=sudo
	ForgeSudoClaim     string // LSP_FORGE_SUDO_CLAIM: the verified JWT claim holding the forge login
	ForgeJWTAudience   string // LSP_FORGE_JWT_AUDIENCE: the aud a JWT must name to be forwarded

	// Operations.
	RateLimit   float64 // LSP_RATE_LIMIT: requests per second per org (0: no limit)
	RateBurst   int     // LSP_RATE_BURST
	MaxPrepares int     // LSP_MAX_PREPARES: concurrent prepares per proxy
	// MaxPreparesPerOrg (LSP_MAX_PREPARES_PER_ORG) is one org's share of
	// them: a quarter by default, at least one.
	MaxPreparesPerOrg int
	// MaxInFlightPerOrg (LSP_MAX_INFLIGHT_PER_ORG) bounds one org's
	// operation requests in flight per proxy (0: no bound).
	MaxInFlightPerOrg int

	// Connections (package listener): what a client may hold before it
	// has proven anything.
	MaxConnsPerAddr   int           // LSP_MAX_CONNS_PER_ADDR: open connections per client IP (0: no bound)
	MaxConns          int           // LSP_MAX_CONNS: open connections in total (0: no bound)
	HeaderReadTimeout time.Duration // LSP_HEADER_READ_TIMEOUT: request line and headers
	BodyReadTimeout   time.Duration // LSP_BODY_READ_TIMEOUT: the whole request body
	WriteTimeout      time.Duration // LSP_WRITE_TIMEOUT: each write of an answer (streams: each event)
	IdleTimeout       time.Duration // LSP_IDLE_TIMEOUT: a kept-alive connection between requests

	// MCP sessions (httpapi/mcpsessions.go).
	MCPSessionsPerPrincipal int           // LSP_MCP_SESSIONS_PER_PRINCIPAL
	MCPSessionsPerOrg       int           // LSP_MCP_SESSIONS_PER_ORG
	MCPSessions             int           // LSP_MCP_SESSIONS: per proxy
	MCPSessionRate          float64       // LSP_MCP_SESSION_RATE: new sessions per second per principal
	MCPSessionBurst         int           // LSP_MCP_SESSION_BURST
	MCPSessionIdle          time.Duration // LSP_MCP_SESSION_IDLE

	// MCPAllowedOrigins are the browser origins that may use /v1/lsp/mcp
	// (LSP_MCP_ALLOWED_ORIGINS); a request with another Origin is 403.
	MCPAllowedOrigins []string
	// PublicURL is the scheme and host clients reach the proxy at
	// (LSP_PUBLIC_URL), used in the MCP protected-resource metadata and
	// WWW-Authenticate. Empty: the request's own Host (fine for one host;
	// behind a shared cache, set it, so no client's Host is ever echoed).
	PublicURL string
}

// DefaultJWTMaxTTL caps a token's lifetime unless the operator says
// otherwise: a leaked token is good for a day at most.
const DefaultJWTMaxTTL = 24 * time.Hour

// DefaultRateLimit is the per-org request rate (per second, per proxy)
// unless LSP_RATE_LIMIT says otherwise (0 turns it off): far above what an
// agent or an editor sends, low enough that one org cannot make the proxy
// a load generator for the forge.
const DefaultRateLimit = 20

// DefaultLedgerSettle is LSP_LEDGER_SETTLE unless set: a minute (every
// writer's statement is bounded well below it), and at least the request
// timeout plus 30 s, so that a prepare row is listed only once the request
// that prepared has written the row its HTTP status comes from.
func DefaultLedgerSettle(requestTimeout time.Duration) time.Duration {
	return max(time.Minute, requestTimeout+30*time.Second)
}

// DefaultMaxInFlightPerOrg is one org's operation requests in flight per
// proxy unless LSP_MAX_INFLIGHT_PER_ORG says otherwise (0 turns it off):
// far above what an agent's or an editor's concurrency needs, a fraction
// of the proxy's connections (LSP_MAX_CONNS).
const DefaultMaxInFlightPerOrg = 64

var orgRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

// claimRE is a JWT claim name an operator may name for the forge login.
var claimRE = regexp.MustCompile(`^[A-Za-z0-9_.:/-]{1,128}$`)

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
		JWTMaxTTL:       p.duration("LSP_JWT_MAX_TTL", DefaultJWTMaxTTL),
		TenantKeySecret: p.str("LSP_TENANT_KEY_SECRET", ""),

		ForgeURL:      strings.TrimRight(p.str("LSP_FORGE_URL", ""), "/"),
		ForgeKind:     p.str("LSP_FORGE_KIND", "git"),
		ForgeAuth:     p.str("LSP_FORGE_AUTH", "bearer"),
		ForgeOwners:   p.owners("LSP_FORGE_OWNERS"),
		ForgeCacheTTL: p.duration("LSP_FORGE_CACHE_TTL", 30*time.Second),

		ForgeNegativeCacheTTL:   p.duration("LSP_FORGE_NEGATIVE_CACHE_TTL", 5*time.Second),
		ForgeMaxDownloads:       int(p.int("LSP_FORGE_MAX_DOWNLOADS", 16)),
		ForgeMaxDownloadsPerOrg: int(p.int("LSP_FORGE_MAX_DOWNLOADS_PER_ORG", 4)),

		ForgeHistoryProofsPerMinute: int(p.int("LSP_FORGE_HISTORY_PROOFS_PER_MINUTE", 6)),

		PrepareCents:        p.int("LSP_PREPARE_CENTS", 2),
		PrepareGrace:        p.duration("LSP_PREPARE_GRACE", 24*time.Hour),
		UsageRetention:      p.duration("LSP_USAGE_RETENTION", 90*24*time.Hour),
		LedgerSettle:        p.duration("LSP_LEDGER_SETTLE", 0), // unset: see below
		HoldSettleInterval:  p.duration("LSP_HOLD_SETTLE_INTERVAL", time.Minute),
		IdempotencyMaxBytes: p.int("LSP_IDEMPOTENCY_MAX_BYTES", 1<<30),
		RequestTimeout:      p.duration("LSP_REQUEST_TIMEOUT", 60*time.Second),
		PrepareTimeout:      p.duration("LSP_PREPARE_TIMEOUT", 10*time.Minute),

		TreeMaxFiles:     int(p.int("LSP_TREE_MAX_FILES", 50_000)),
		TreeMaxBytes:     p.int("LSP_TREE_MAX_BYTES", 512<<20),
		TreeMaxFileBytes: p.int("LSP_TREE_MAX_FILE_BYTES", 16<<20),
		TreeMaxDepth:     int(p.int("LSP_TREE_MAX_DEPTH", 64)),
		TreeMaxDirs:      int(p.int("LSP_TREE_MAX_DIRS", 50_000)),

		DaemonTLSCert:        p.str("LSP_DAEMON_TLS_CERT", ""),
		DaemonTLSKey:         p.str("LSP_DAEMON_TLS_KEY", ""),
		DaemonTLSCA:          p.str("LSP_DAEMON_TLS_CA", ""),
		DaemonHealthInterval: p.duration("LSP_DAEMON_HEALTH_INTERVAL", 2*time.Second),

		ForgeSudoTokenFile: p.str("LSP_FORGE_SUDO_TOKEN_FILE", ""),
		ForgeSudoClaim:     p.str("LSP_FORGE_SUDO_CLAIM", ""),
		ForgeJWTAudience:   p.str("LSP_FORGE_JWT_AUDIENCE", ""),

		RateLimit:         p.float("LSP_RATE_LIMIT", DefaultRateLimit),
		RateBurst:         int(p.int("LSP_RATE_BURST", 0)),
		MaxPrepares:       int(p.int("LSP_MAX_PREPARES", 8)),
		MaxPreparesPerOrg: int(p.int("LSP_MAX_PREPARES_PER_ORG", 0)),
		MaxInFlightPerOrg: int(p.int("LSP_MAX_INFLIGHT_PER_ORG", DefaultMaxInFlightPerOrg)),

		MaxConnsPerAddr:   int(p.int("LSP_MAX_CONNS_PER_ADDR", 128)),
		MaxConns:          int(p.int("LSP_MAX_CONNS", 4096)),
		HeaderReadTimeout: p.duration("LSP_HEADER_READ_TIMEOUT", 10*time.Second),
		BodyReadTimeout:   p.duration("LSP_BODY_READ_TIMEOUT", 10*time.Second),
		WriteTimeout:      p.duration("LSP_WRITE_TIMEOUT", 30*time.Second),
		IdleTimeout:       p.duration("LSP_IDLE_TIMEOUT", 2*time.Minute),

		MCPSessionsPerPrincipal: int(p.int("LSP_MCP_SESSIONS_PER_PRINCIPAL", 32)),
		MCPSessionsPerOrg:       int(p.int("LSP_MCP_SESSIONS_PER_ORG", 512)),
		MCPSessions:             int(p.int("LSP_MCP_SESSIONS", 4096)),
		MCPSessionRate:          p.float("LSP_MCP_SESSION_RATE", 2),
		MCPSessionBurst:         int(p.int("LSP_MCP_SESSION_BURST", 20)),
		MCPSessionIdle:          p.duration("LSP_MCP_SESSION_IDLE", 30*time.Minute),

		MCPAllowedOrigins: p.list("LSP_MCP_ALLOWED_ORIGINS", nil),
		PublicURL:         strings.TrimSuffix(p.str("LSP_PUBLIC_URL", ""), "/"),
	}
	if p.getenv("LSP_LEDGER_SETTLE") == "" {
		// A prepare row shows the HTTP status of the request that prepared,
		// from that request's usage row, written when it answers: up to a
		// request's time (and its row's 10 s) after the capture. A page
		// that listed the prepare row sooner would show it without its
		// status, and with it later.
		c.LedgerSettle = DefaultLedgerSettle(c.RequestTimeout)
	}
	// A "not found" is never kept longer than an answer.
	c.ForgeNegativeCacheTTL = min(c.ForgeNegativeCacheTTL, c.ForgeCacheTTL)
	if c.RateBurst == 0 && c.RateLimit > 0 {
		// Two seconds' worth by default: room for a client's short burst.
		c.RateBurst = max(1, int(math.Ceil(2*c.RateLimit)))
	}
	if c.MaxPreparesPerOrg == 0 {
		// A quarter of the proxy's prepares by default.
		c.MaxPreparesPerOrg = max(1, c.MaxPrepares/4)
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
	} else if u, err := url.Parse(c.ForgeURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		bad("LSP_FORGE_URL=%q: want an http(s) URL", c.ForgeURL)
	} else if u.Scheme == "http" && !c.DevMode && !isLoopback(u.Hostname()) {
		// Plain http would carry every caller's forge credential in the
		// clear. A forge on this host (loopback) never crosses a network.
		bad("LSP_FORGE_URL=%q: http is allowed only for a loopback forge or with LSP_DEV=1; use https", c.ForgeURL)
	}
	if c.TenantKeySecret == "" && !c.DevMode {
		// Without it a tenant key is the plain SHA-256 of the org: anyone
		// who sees a key (daemon logs, workspace paths) learns the org.
		bad("LSP_TENANT_KEY_SECRET is required (unless LSP_DEV=1): the HMAC secret for tenant keys, the same on every replica")
	} else if c.TenantKeySecret != "" && len(c.TenantKeySecret) < 16 {
		bad("LSP_TENANT_KEY_SECRET must be at least 16 bytes")
	}
	if c.MetricsListen != "" && c.MetricsListen == c.Listen {
		bad("LSP_METRICS_LISTEN must differ from LSP_LISTEN (leave it empty to serve /metrics on LSP_LISTEN)")
	}
	if c.MaxConnsPerAddr < 0 || c.MaxConns < 0 {
		bad("LSP_MAX_CONNS_PER_ADDR and LSP_MAX_CONNS must not be negative (0: no bound)")
	}
	if c.HeaderReadTimeout <= 0 || c.BodyReadTimeout <= 0 || c.WriteTimeout <= 0 || c.IdleTimeout <= 0 {
		bad("LSP_HEADER_READ_TIMEOUT, LSP_BODY_READ_TIMEOUT, LSP_WRITE_TIMEOUT and LSP_IDLE_TIMEOUT must be positive")
	}
	if c.MCPSessionsPerPrincipal < 1 || c.MCPSessionsPerOrg < 1 || c.MCPSessions < 1 || c.MCPSessionRate <= 0 || c.MCPSessionBurst < 1 || c.MCPSessionIdle <= 0 {
		bad("LSP_MCP_SESSIONS_PER_PRINCIPAL, LSP_MCP_SESSIONS_PER_ORG, LSP_MCP_SESSIONS, LSP_MCP_SESSION_RATE, LSP_MCP_SESSION_BURST and LSP_MCP_SESSION_IDLE must be positive")
	}
	if c.TreeMaxFiles < 1 || c.TreeMaxBytes < 1 || c.TreeMaxFileBytes < 1 || c.TreeMaxDepth < 1 || c.TreeMaxDirs < 1 {
		// Zero would not mean "no bound": the forge package takes its own
		// default for it, silently.
		bad("LSP_TREE_MAX_FILES, LSP_TREE_MAX_BYTES, LSP_TREE_MAX_FILE_BYTES, LSP_TREE_MAX_DEPTH and LSP_TREE_MAX_DIRS must be positive")
	}
	if c.ForgeNegativeCacheTTL <= 0 || c.ForgeCacheTTL <= 0 {
		bad("LSP_FORGE_CACHE_TTL and LSP_FORGE_NEGATIVE_CACHE_TTL must be positive")
	}
	if c.ForgeMaxDownloads < 1 || c.ForgeMaxDownloadsPerOrg < 1 {
		bad("LSP_FORGE_MAX_DOWNLOADS and LSP_FORGE_MAX_DOWNLOADS_PER_ORG must be at least 1")
	}
	if c.JWTMaxTTL < 0 {
		bad("LSP_JWT_MAX_TTL must not be negative (0: no limit)")
	}
	if c.PublicURL != "" {
		if u, err := url.Parse(c.PublicURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.Path != "" || u.RawQuery != "" || u.User != nil {
			bad("LSP_PUBLIC_URL=%q: want scheme://host[:port] with no path", c.PublicURL)
		}
	}
	switch c.ForgeKind {
	case "git", "gitea":
	default:
		bad("LSP_FORGE_KIND=%q: supported kinds are git, gitea", c.ForgeKind)
	}
	switch c.ForgeAuth {
	case "bearer", "basic":
	case "sudo":
		// Sudo is a Gitea/Forgejo API header; over git smart HTTP the admin
		// token would act as the admin itself.
		if c.ForgeKind != "gitea" {
			bad("LSP_FORGE_AUTH=sudo needs LSP_FORGE_KIND=gitea")
		}
		if c.ForgeSudoTokenFile == "" {
			bad("LSP_FORGE_AUTH=sudo needs LSP_FORGE_SUDO_TOKEN_FILE (the admin token)")
		}
		if !claimRE.MatchString(c.ForgeSudoClaim) {
			bad("LSP_FORGE_AUTH=sudo needs LSP_FORGE_SUDO_CLAIM: the name of a verified, immutable JWT claim holding the forge login")
		}
	case "jwt":
		// Forwarding the service's own token is an explicit opt-in, and
		// only tokens that name the forge in their audience are forwarded.
		if c.ForgeJWTAudience == "" {
			bad("LSP_FORGE_AUTH=jwt needs LSP_FORGE_JWT_AUDIENCE: only tokens whose aud names the forge are forwarded")
		}
	default:
		bad("LSP_FORGE_AUTH=%q: supported modes are bearer, basic, sudo, jwt", c.ForgeAuth)
	}
	if c.ForgeAuth != "sudo" && (c.ForgeSudoTokenFile != "" || c.ForgeSudoClaim != "") {
		bad("LSP_FORGE_SUDO_TOKEN_FILE and LSP_FORGE_SUDO_CLAIM apply only with LSP_FORGE_AUTH=sudo")
	}
	if c.ForgeAuth != "jwt" && c.ForgeJWTAudience != "" {
		bad("LSP_FORGE_JWT_AUDIENCE applies only with LSP_FORGE_AUTH=jwt")
	}
	tlsSet := c.DaemonTLSCert != "" || c.DaemonTLSKey != "" || c.DaemonTLSCA != ""
	tlsAll := c.DaemonTLSCert != "" && c.DaemonTLSKey != "" && c.DaemonTLSCA != ""
	if tlsSet && !tlsAll {
		bad("LSP_DAEMON_TLS_CERT, LSP_DAEMON_TLS_KEY and LSP_DAEMON_TLS_CA go together")
	}
	for _, d := range c.Daemons {
		if !strings.HasPrefix(d, "unix://") && !tlsAll {
			bad("LSP_DAEMONS: %q is host:port, which needs mutual TLS (LSP_DAEMON_TLS_CERT, LSP_DAEMON_TLS_KEY, LSP_DAEMON_TLS_CA)", d)
		}
	}
	if c.DaemonHealthInterval <= 0 {
		bad("LSP_DAEMON_HEALTH_INTERVAL must be positive")
	}
	if c.RateLimit < 0 || c.RateBurst < 0 {
		bad("LSP_RATE_LIMIT and LSP_RATE_BURST must not be negative")
	}
	if c.MaxPrepares < 1 {
		bad("LSP_MAX_PREPARES must be at least 1")
	}
	if c.LedgerSettle < 0 {
		bad("LSP_LEDGER_SETTLE must not be negative")
	}
	if c.MaxInFlightPerOrg < 0 {
		bad("LSP_MAX_INFLIGHT_PER_ORG must not be negative")
	}
	if c.MaxPreparesPerOrg < 1 || c.MaxPreparesPerOrg > c.MaxPrepares {
		bad("LSP_MAX_PREPARES_PER_ORG must be between 1 and LSP_MAX_PREPARES (unset: a quarter of it)")
	}
	if c.PrepareCents < 0 {
		bad("LSP_PREPARE_CENTS must not be negative")
	}
	if c.IdempotencyMaxBytes < 0 {
		bad("LSP_IDEMPOTENCY_MAX_BYTES must not be negative (0: no bound)")
	}
	if c.HoldSettleInterval <= 0 {
		bad("LSP_HOLD_SETTLE_INTERVAL must be positive")
	}
	if c.RequestTimeout <= 0 || c.PrepareTimeout <= 0 {
		bad("LSP_REQUEST_TIMEOUT and LSP_PREPARE_TIMEOUT must be positive")
	}
	return errors.Join(errs...)
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
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

func (p *parser) float(name string, def float64) float64 {
	v := p.str(name, "")
	if v == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		p.errs = append(p.errs, fmt.Errorf("%s=%q: not a number", name, v))
	}
	return f
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
