package stacks

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
	"github.com/hanzoai/lsp/proxy/internal/auth"
	"github.com/hanzoai/lsp/proxy/internal/daemonclient"
	"github.com/hanzoai/lsp/proxy/internal/devcerts"
	"github.com/hanzoai/lsp/proxy/internal/devforge"
	"github.com/hanzoai/lsp/proxy/internal/devstack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

const tenantSecret = "dev-tenant-key-secret" // devstack's LSP_TENANT_KEY_SECRET

// freeAddr is a loopback TCP address nobody listens on right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// shardKey is one workspace and the shard it belongs to.
type shardKey struct {
	repo, commit string
	home         int // index of its shard when both are live
}

// TestTwoShards runs two lsp-daemon processes on TCP with mutual TLS behind
// one proxy: keys spread over both, a warm key stays on its shard, killing
// a shard moves its keys to the other (a 0¢ re-prepare within the grace),
// they come back when it recovers, the request id reaches the daemon that
// served, and the customer pays once per revision through it all.
func TestTwoShards(t *testing.T) {
	dir, err := os.MkdirTemp(tmp, "shards-")
	if err != nil {
		t.Fatal(err)
	}
	certs, err := devcerts.Generate(dir, "shards", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	serverTLS := map[string]string{
		"LSP_DAEMON_TLS_CERT": certs.ServerCert, "LSP_DAEMON_TLS_KEY": certs.ServerKey,
		"LSP_DAEMON_TLS_CLIENT_CA": certs.CA, "LSP_LOG_LEVEL": "debug",
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var daemons []*devstack.Daemon
	var addrs []string
	for i := 0; i < 2; i++ {
		addr := freeAddr(t)
		d, err := devstack.StartDaemon(ctx, devstack.DaemonOptions{
			Bin: daemonBin, Dir: filepath.Join(dir, fmt.Sprintf("d%d", i)), Listen: addr,
			Servers: devstack.Options{Gopls: gopls}, Env: serverTLS,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(d.Stop)
		daemons, addrs = append(daemons, d), append(addrs, addr)
	}
	s := startStack(t, devstack.Options{
		Daemons: addrs,
		ProxyEnv: map[string]string{
			"LSP_DAEMON_TLS_CERT": certs.ClientCert, "LSP_DAEMON_TLS_KEY": certs.ClientKey, "LSP_DAEMON_TLS_CA": certs.CA,
			"LSP_DAEMON_HEALTH_INTERVAL": "100ms",
		},
	})

	// The daemons serve only a proxy with the right client certificate.
	proveMutualTLS(t, addrs[0], certs)

	// Where each key belongs while both shards live: the same rendezvous
	// choice the proxy makes.
	clientTLS, err := daemonclient.LoadTLS(certs.ClientCert, certs.ClientKey, certs.CA)
	if err != nil {
		t.Fatal(err)
	}
	ring, err := daemonclient.New(addrs, daemonclient.Options{TLS: clientTLS, HealthInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer ring.Close()
	org := "sharded"
	tenantKey := auth.TenantKey([]byte(tenantSecret), org)
	var keys []shardKey
	perShard := map[int]int{}
	for i := 0; len(keys) < 4 && i < 64; i++ {
		repo := fmt.Sprintf("repo%d", i)
		// Each repository gets its own commit, so keys differ in both.
		files := map[string]string{}
		for k, v := range devstack.SampleRepo {
			files[k] = v
		}
		files["README.md"] = "# " + repo + "\n"
		commit, err := devforge.CreateRepo(s.ForgeRoot, org, repo, files, "sample")
		if err != nil {
			t.Fatal(err)
		}
		home := 0
		if ring.Pick(daemonclient.Key{TenantKey: tenantKey, Repo: repo, Commit: commit}).Addr == addrs[1] {
			home = 1
		}
		if perShard[home] < 2 {
			perShard[home]++
			keys = append(keys, shardKey{repo: repo, commit: commit, home: home})
		}
	}
	if perShard[0] != 2 || perShard[1] != 2 {
		t.Fatalf("could not find two keys per shard: %v", perShard)
	}
	jwt, err := s.Token("alice@"+org, org, nil, []string{"billing:" + org})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Ledger.Credit(context.Background(), org, 100, "e2e"); err != nil {
		t.Fatal(err)
	}
	s.Forge.Grant("forge-"+org, org+"/*")
	hover := func(k shardKey, rid string) answer {
		t.Helper()
		a := do(t, s, "POST", "/hover", hoverBody(k.repo), "Authorization", "Bearer "+jwt, "X-Forge-Token", "forge-"+org, "X-Request-Id", rid)
		if a.status != 200 || a.body["commit"] != k.commit {
			t.Fatalf("hover %s: %d %s", k.repo, a.status, a.raw)
		}
		return a
	}
	tree := func(shard int, k shardKey) bool {
		_, err := os.Stat(filepath.Join(daemons[shard].Root, "trees", tenantKey, k.repo, k.commit))
		return err == nil
	}

	// Keys spread over both shards; each is prepared on its own.
	for i, k := range keys {
		if a := hover(k, fmt.Sprintf("rq-first-%d", i)); a.body["prepared"] != true {
			t.Fatalf("first hover of %s was not a prepare: %s", k.repo, a.raw)
		}
		if !tree(k.home, k) || tree(1-k.home, k) {
			t.Fatalf("%s: tree on shard %d: %v, on shard %d: %v; want only on its own", k.repo, k.home, tree(k.home, k), 1-k.home, tree(1-k.home, k))
		}
	}
	// A warm key stays on its shard, and the request id reaches the daemon
	// that answered, and only that one.
	for i, k := range keys {
		rid := fmt.Sprintf("rq-warm-%d", i)
		if a := hover(k, rid); a.body["prepared"] != false {
			t.Fatalf("warm hover of %s prepared again: %s", k.repo, a.raw)
		}
		if !strings.Contains(daemons[k.home].Log(), rid) || strings.Contains(daemons[1-k.home].Log(), rid) {
			t.Fatalf("request id %s is not (only) in shard %d's log", rid, k.home)
		}
	}
	if b := balance(t, s, org); b.BalanceCents != 100-2*int64(len(keys)) {
		t.Fatalf("balance after %d prepares = %+v", len(keys), b)
	}

	// Shard 0 dies. The proxy marks it down and its keys move to shard 1.
	daemons[0].Kill()
	up := func(i int) func() bool {
		return func() bool {
			v, ok := metric(t, s, `lsp_proxy_daemon_up{shard="`+addrs[i]+`"}`)
			return ok && v == 1
		}
	}
	eventually(t, "the proxy marks the killed shard down", func() bool { return !up(0)() })
	for i, k := range keys {
		a := hover(k, fmt.Sprintf("rq-failover-%d", i))
		if k.home == 1 {
			if a.body["prepared"] != false {
				t.Fatalf("a key of the live shard prepared again: %s", a.raw)
			}
			continue
		}
		if !tree(1, k) {
			t.Fatalf("%s did not move to the live shard", k.repo)
		}
	}
	// The re-prepares on the other shard cost nothing: within the grace.
	for _, k := range keys {
		var ps []int64
		var reasons []string
		for _, r := range filter(rows(t, s, org), "prepare") {
			if r.Repo == k.repo {
				ps, reasons = append(ps, r.AmountCents), append(reasons, r.Reason)
			}
		}
		want := 1
		if k.home == 0 {
			want = 2
		}
		if len(ps) != want || ps[0] != -2 || (want == 2 && (ps[1] != 0 || reasons[1] != "reprepare")) {
			t.Fatalf("%s: prepare rows %v %q; want one −2¢ and, after failover, one 0¢ reprepare", k.repo, ps, reasons)
		}
	}
	if b := balance(t, s, org); b.BalanceCents != 100-2*int64(len(keys)) || b.HeldCents != 0 {
		t.Fatalf("balance after failover = %+v; want each revision charged once", b)
	}

	// Shard 0 comes back on the same address and root: its keys return.
	if err := daemons[0].Start(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the proxy marks the restarted shard up", up(0))
	for i, k := range keys {
		rid := fmt.Sprintf("rq-back-%d", i)
		hover(k, rid)
		if !strings.Contains(daemons[k.home].Log(), rid) {
			t.Fatalf("after recovery %s was not served by its own shard %d", k.repo, k.home)
		}
	}
	if b := balance(t, s, org); b.BalanceCents != 100-2*int64(len(keys)) {
		t.Fatalf("balance after recovery = %+v; want each revision charged once", b)
	}
}

// proveMutualTLS: a real daemon on TCP refuses plain text, a client without
// a certificate and one with a certificate of another CA, and serves the
// proxy's own.
func proveMutualTLS(t *testing.T, addr string, certs *devcerts.Files) {
	t.Helper()
	hello := func(creds credentials.TransportCredentials) error {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = daemonv1.NewDaemonClient(conn).Hello(ctx, &daemonv1.HelloRequest{ProtocolVersion: uint32(daemonv1.ProtocolVersion_PROTOCOL_VERSION_CURRENT)})
		return err
	}
	pem, err := os.ReadFile(certs.CA)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	other, err := devcerts.Generate(filepath.Dir(certs.CA), "intruder", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	intruder, err := tls.LoadX509KeyPair(other.ClientCert, other.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	for name, creds := range map[string]credentials.TransportCredentials{
		"plain text":             insecure.NewCredentials(),
		"no client certificate":  credentials.NewTLS(&tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13}),
		"certificate of another": credentials.NewTLS(&tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{intruder}}),
	} {
		if err := hello(creds); err == nil {
			t.Errorf("the daemon served a client with %s", name)
		}
	}
	own, err := daemonclient.LoadTLS(certs.ClientCert, certs.ClientKey, certs.CA)
	if err != nil {
		t.Fatal(err)
	}
	own.ServerName = "127.0.0.1"
	if err := hello(credentials.NewTLS(own)); err != nil {
		t.Fatalf("the daemon refused the proxy's own certificate: %v", err)
	}
}
