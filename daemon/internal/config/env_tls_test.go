package config

import (
	"strings"
	"testing"
)

func TestLoadEnvTLS(t *testing.T) {
	base := map[string]string{"LSP_DAEMON_CONFIG": "/etc/servers.json"}
	tls := map[string]string{"LSP_DAEMON_TLS_CERT": "/c.pem", "LSP_DAEMON_TLS_KEY": "/c.key", "LSP_DAEMON_TLS_CLIENT_CA": "/ca.pem"}
	for _, tc := range []struct {
		name   string
		listen string
		tls    map[string]string
		err    string
	}{
		{"unix socket", "unix:///run/d.sock", nil, ""},
		{"tcp with mutual TLS", "10.0.0.5:7443", tls, ""},
		{"tcp in the clear", "10.0.0.5:7443", nil, "needs LSP_DAEMON_TLS_CERT"},
		{"tcp without client CA", "10.0.0.5:7443", map[string]string{"LSP_DAEMON_TLS_CERT": "/c.pem", "LSP_DAEMON_TLS_KEY": "/c.key"}, "needs LSP_DAEMON_TLS_CERT"},
		{"TLS on a unix socket", "unix:///run/d.sock", tls, "apply to a host:port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"LSP_DAEMON_LISTEN": tc.listen}
			for k, v := range base {
				env[k] = v
			}
			for k, v := range tc.tls {
				env[k] = v
			}
			e, err := LoadEnv(func(k string) string { return env[k] })
			switch {
			case tc.err == "" && err != nil:
				t.Fatal(err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("err = %v; want one saying %q", err, tc.err)
			case tc.err == "" && tc.tls != nil && (e.TLSCert != "/c.pem" || e.TLSKey != "/c.key" || e.TLSClientCA != "/ca.pem"):
				t.Fatalf("TLS files = %q %q %q", e.TLSCert, e.TLSKey, e.TLSClientCA)
			}
		})
	}
}
