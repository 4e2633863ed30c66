package config

import (
	"strings"
	"testing"
	"time"
)

func load(over map[string]string) (*Config, error) {
	env := map[string]string{
		"LSP_DATABASE_URL":      "postgres://x/y",
		"LSP_DAEMONS":           "unix:///run/d.sock",
		"LSP_JWT_KEYS":          "/keys.pem",
		"LSP_FORGE_URL":         "https://forge.example/",
		"LSP_TENANT_KEY_SECRET": "a-secret-of-enough-bytes",
	}
	for k, v := range over {
		env[k] = v
	}
	return Load(func(k string) string { return env[k] })
}

func TestDefaults(t *testing.T) {
	c, err := load(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.ForgeKind != "git" || c.ForgeAuth != "bearer" || c.ForgeURL != "https://forge.example" {
		t.Errorf("forge = %q %q %q", c.ForgeKind, c.ForgeAuth, c.ForgeURL)
	}
	if c.JWTMaxTTL != 24*time.Hour {
		t.Errorf("JWTMaxTTL = %v; want a 24h default", c.JWTMaxTTL)
	}
	if c.RateLimit != DefaultRateLimit || c.RateBurst != 2*DefaultRateLimit || c.MaxPrepares != 8 || c.DaemonHealthInterval != 2*time.Second || c.MaxInFlightPerOrg != DefaultMaxInFlightPerOrg {
		t.Errorf("operations = %v %v %v %v", c.RateLimit, c.RateBurst, c.MaxPrepares, c.DaemonHealthInterval)
	}
	if c.ForgeNegativeCacheTTL != 5*time.Second {
		t.Errorf("ForgeNegativeCacheTTL = %v; want 5s", c.ForgeNegativeCacheTTL)
	}
	// The ledger's settle covers a request's time after a capture (its prepare row's status comes
	// from the request's own row), a minute at least; an explicit value, 0 among them, is kept.
	for _, tc := range []struct {
		env  map[string]string
		want time.Duration
	}{
		{map[string]string{}, 90 * time.Second},
		{map[string]string{"LSP_REQUEST_TIMEOUT": "10s"}, time.Minute},
		{map[string]string{"LSP_REQUEST_TIMEOUT": "5m"}, 5*time.Minute + 30*time.Second},
		{map[string]string{"LSP_LEDGER_SETTLE": "0"}, 0},
		{map[string]string{"LSP_LEDGER_SETTLE": "2m"}, 2 * time.Minute},
	} {
		if c, err := load(tc.env); err != nil || c.LedgerSettle != tc.want {
			t.Errorf("%v: LedgerSettle %v, %v; want %v", tc.env, c.LedgerSettle, err, tc.want)
		}
	}
	if _, err := load(map[string]string{"LSP_LEDGER_SETTLE": "-1m"}); err == nil {
		t.Error("a negative LSP_LEDGER_SETTLE was accepted")
	}
	if c.MaxPreparesPerOrg != 2 || c.ForgeHistoryProofsPerMinute != 6 {
		t.Errorf("MaxPreparesPerOrg = %d, ForgeHistoryProofsPerMinute = %d; want a quarter of 8, and 6", c.MaxPreparesPerOrg, c.ForgeHistoryProofsPerMinute)
	}
	if c, err = load(map[string]string{"LSP_FORGE_CACHE_TTL": "2s"}); err != nil || c.ForgeNegativeCacheTTL != 2*time.Second {
		t.Errorf("a cache TTL below the negative one: %v, negative %v; want it clamped to 2s", err, c.ForgeNegativeCacheTTL)
	}
	if c, err = load(map[string]string{"LSP_RATE_LIMIT": "0"}); err != nil || c.RateLimit != 0 {
		t.Errorf("LSP_RATE_LIMIT=0 (off): %v, %v", err, c.RateLimit)
	}
	c, err = load(map[string]string{"LSP_RATE_LIMIT": "2.5"})
	if err != nil || c.RateLimit != 2.5 || c.RateBurst != 5 {
		t.Errorf("LSP_RATE_LIMIT=2.5: %v, burst %d; want burst 5 by default", err, c.RateBurst)
	}
}

func TestValidation(t *testing.T) {
	tls := map[string]string{"LSP_DAEMON_TLS_CERT": "/c.pem", "LSP_DAEMON_TLS_KEY": "/c.key", "LSP_DAEMON_TLS_CA": "/ca.pem"}
	with := func(base map[string]string, kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		err  string // "" means valid
	}{
		{"gitea kind", with(nil, "LSP_FORGE_KIND", "gitea"), ""},
		{"unknown kind", with(nil, "LSP_FORGE_KIND", "svn"), "supported kinds are git, gitea"},
		{"sudo", with(nil, "LSP_FORGE_KIND", "gitea", "LSP_FORGE_AUTH", "sudo", "LSP_FORGE_SUDO_TOKEN_FILE", "/t", "LSP_FORGE_SUDO_CLAIM", "forge_login"), ""},
		{"sudo over git", with(nil, "LSP_FORGE_AUTH", "sudo", "LSP_FORGE_SUDO_TOKEN_FILE", "/t", "LSP_FORGE_SUDO_CLAIM", "forge_login"), "needs LSP_FORGE_KIND=gitea"},
		{"sudo without token", with(nil, "LSP_FORGE_KIND", "gitea", "LSP_FORGE_AUTH", "sudo", "LSP_FORGE_SUDO_CLAIM", "forge_login"), "LSP_FORGE_SUDO_TOKEN_FILE"},
		{"sudo without claim", with(nil, "LSP_FORGE_KIND", "gitea", "LSP_FORGE_AUTH", "sudo", "LSP_FORGE_SUDO_TOKEN_FILE", "/t"), "LSP_FORGE_SUDO_CLAIM"},
		{"sudo claim elsewhere", with(nil, "LSP_FORGE_SUDO_CLAIM", "forge_login"), "apply only with LSP_FORGE_AUTH=sudo"},
		{"jwt", with(nil, "LSP_FORGE_AUTH", "jwt", "LSP_FORGE_JWT_AUDIENCE", "forge"), ""},
		{"jwt without audience", with(nil, "LSP_FORGE_AUTH", "jwt"), "LSP_FORGE_JWT_AUDIENCE"},
		{"jwt audience elsewhere", with(nil, "LSP_FORGE_JWT_AUDIENCE", "forge"), "applies only with LSP_FORGE_AUTH=jwt"},
		{"unknown auth", with(nil, "LSP_FORGE_AUTH", "cookie"), "bearer, basic, sudo, jwt"},
		{"tcp daemons with TLS", with(tls, "LSP_DAEMONS", "10.0.0.1:7443,10.0.0.2:7443"), ""},
		{"tcp daemon in the clear", with(nil, "LSP_DAEMONS", "unix:///a.sock,10.0.0.2:7443"), "needs mutual TLS"},
		{"half the TLS files", with(nil, "LSP_DAEMON_TLS_CERT", "/c.pem"), "go together"},
		{"max prepares zero", with(nil, "LSP_MAX_PREPARES", "0"), "LSP_MAX_PREPARES"},
		{"tree directories zero", with(nil, "LSP_TREE_MAX_DIRS", "0"), "LSP_TREE_MAX_DIRS"},
		{"tree files negative", with(nil, "LSP_TREE_MAX_FILES", "-1"), "LSP_TREE_MAX_FILES"},
		{"an org's share over the whole", with(nil, "LSP_MAX_PREPARES", "2", "LSP_MAX_PREPARES_PER_ORG", "3"), "LSP_MAX_PREPARES_PER_ORG"},
		{"negative rate", with(nil, "LSP_RATE_LIMIT", "-1"), "must not be negative"},
		{"rate not a number", with(nil, "LSP_RATE_LIMIT", "fast"), "not a number"},
		{"health interval", with(nil, "LSP_DAEMON_HEALTH_INTERVAL", "0s"), "LSP_DAEMON_HEALTH_INTERVAL"},
		{"public url", with(nil, "LSP_PUBLIC_URL", "https://lsp.example:8443/"), ""},
		{"public url with path", with(nil, "LSP_PUBLIC_URL", "https://lsp.example/v1"), "LSP_PUBLIC_URL"},
		{"public url without scheme", with(nil, "LSP_PUBLIC_URL", "lsp.example"), "LSP_PUBLIC_URL"},
		// Security defaults: a tenant-key secret, an https forge, metrics apart.
		{"no tenant key secret", with(nil, "LSP_TENANT_KEY_SECRET", " "), "LSP_TENANT_KEY_SECRET is required"},
		{"no tenant key secret in dev", with(nil, "LSP_TENANT_KEY_SECRET", " ", "LSP_DEV", "1"), ""},
		{"short tenant key secret", with(nil, "LSP_TENANT_KEY_SECRET", "short"), "at least 16 bytes"},
		{"http forge", with(nil, "LSP_FORGE_URL", "http://forge.example"), "http is allowed only for a loopback forge"},
		{"http forge in dev", with(nil, "LSP_FORGE_URL", "http://forge.example", "LSP_DEV", "1"), ""},
		{"http loopback forge", with(nil, "LSP_FORGE_URL", "http://127.0.0.1:3000"), ""},
		{"http localhost forge", with(nil, "LSP_FORGE_URL", "http://localhost:3000"), ""},
		{"http v6 loopback forge", with(nil, "LSP_FORGE_URL", "http://[::1]:3000"), ""},
		{"forge not a URL", with(nil, "LSP_FORGE_URL", "forge.example"), "want an http(s) URL"},
		{"metrics on the main listener", with(nil, "LSP_METRICS_LISTEN", "127.0.0.1:8080"), "LSP_METRICS_LISTEN must differ"},
		{"negative max ttl", with(nil, "LSP_JWT_MAX_TTL", "-1s"), "LSP_JWT_MAX_TTL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(tc.env)
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("err = %v; want one saying %q", err, tc.err)
			}
		})
	}
}
