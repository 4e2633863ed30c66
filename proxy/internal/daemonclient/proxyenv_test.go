package daemonclient

import (
	"context"
	"net"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/devcerts"
)

// TestDaemonsNeverThroughAnHTTPProxy: an operator sets HTTPS_PROXY for
// the proxy's egress to the forge, and grpc-go would take it for the
// daemons too — every tree pushed through the egress proxy, or no daemon
// reached at all. The call runs in a child process, since the
// environment's proxy is read once per process.
func TestDaemonsNeverThroughAnHTTPProxy(t *testing.T) {
	if os.Getenv("LSP_TEST_PROXY_CHILD") != "" {
		certs, err := devcerts.Generate(t.TempDir(), "d", "daemon.invalid")
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := LoadTLS(certs.ClientCert, certs.ClientKey, certs.CA)
		if err != nil {
			t.Fatal(err)
		}
		p, err := New([]string{"daemon.invalid:7443"}, Options{TLS: cfg, HealthInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_ = p.Ping(ctx) // no such daemon: what matters is where it was looked for
		return
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var through atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			through.Add(1)
			_ = c.Close()
		}
	}()
	proxy := "http://" + ln.Addr().String()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDaemonsNeverThroughAnHTTPProxy$", "-test.count=1")
	cmd.Env = append(os.Environ(), "LSP_TEST_PROXY_CHILD=1", "HTTPS_PROXY="+proxy, "https_proxy="+proxy, "NO_PROXY=", "no_proxy=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if n := through.Load(); n != 0 {
		t.Errorf("%d connections to the daemon went through HTTPS_PROXY", n)
	}
}
