package daemonclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
	"github.com/hanzoai/lsp/proxy/internal/devcerts"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// These tests run the client against real gRPC servers on real sockets
// that speak the daemon protocol's transport-level parts (Hello, and Query
// recording what arrived): enough to prove health checks, shard choice,
// mutual TLS, the protocol check and request ids. The real daemon is run
// with two shards in proxy/internal/e2e/shards.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type testDaemon struct {
	daemonv1.UnimplementedDaemonServer
	version uint32 // what Hello answers; 0 means the current version
	refuse  bool   // refuse the proxy's version as the real daemon does

	mu  sync.Mutex
	ids []string
}

func (d *testDaemon) Hello(_ context.Context, req *daemonv1.HelloRequest) (*daemonv1.HelloResponse, error) {
	if d.refuse {
		return nil, status.Errorf(codes.FailedPrecondition, "protocol version %d is not supported: this daemon speaks 7", req.GetProtocolVersion())
	}
	v := d.version
	if v == 0 {
		v = uint32(daemonv1.ProtocolVersion_PROTOCOL_VERSION_CURRENT)
	}
	return &daemonv1.HelloResponse{ProtocolVersion: v}, nil
}

func (d *testDaemon) Query(ctx context.Context, _ *daemonv1.QueryRequest) (*daemonv1.QueryResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	d.mu.Lock()
	d.ids = append(d.ids, strings.Join(md.Get(RequestIDHeader), ","))
	d.mu.Unlock()
	return &daemonv1.QueryResponse{Status: daemonv1.Status_STATUS_OK}, nil
}

// serve runs d on addr ("unix://…" or "127.0.0.1:0") and returns the
// address to dial and a stop function.
func serve(t *testing.T, d daemonv1.DaemonServer, addr string, tlsCfg *tls.Config) (string, func()) {
	t.Helper()
	var ln net.Listener
	var err error
	if p, ok := strings.CutPrefix(addr, "unix://"); ok {
		_ = os.Remove(p)
		ln, err = net.Listen("unix", p)
	} else {
		ln, err = net.Listen("tcp", addr)
		addr = ln.Addr().String()
	}
	if err != nil {
		t.Fatal(err)
	}
	var opts []grpc.ServerOption
	if tlsCfg != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsCfg)))
	}
	g := grpc.NewServer(opts...)
	daemonv1.RegisterDaemonServer(g, d)
	done := make(chan struct{})
	go func() { _ = g.Serve(ln); close(done) }()
	var once sync.Once
	stop := func() { once.Do(func() { g.Stop(); <-done }) }
	t.Cleanup(stop)
	return addr, stop
}

// eventually polls cond; the tests assert states, never durations.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func keys(n int) []Key {
	out := make([]Key, n)
	for i := range out {
		out[i] = Key{TenantKey: strings.Repeat(fmt.Sprintf("%x", i%16), 64), Repo: fmt.Sprintf("repo%d", i), Commit: strings.Repeat("c", 40)}
	}
	return out
}

// TestPickFollowsHealth: a dead shard's keys, and only those, move to their
// next-ranked live shard, spread over the others, and come back when it
// recovers.
func TestPickFollowsHealth(t *testing.T) {
	dir := t.TempDir()
	var addrs []string
	var stops []func()
	for i := 0; i < 3; i++ {
		a, stop := serve(t, &testDaemon{}, "unix://"+filepath.Join(dir, fmt.Sprintf("d%d.sock", i)), nil)
		addrs, stops = append(addrs, a), append(stops, stop)
	}
	reg := prometheus.NewRegistry()
	p, err := New(addrs, Options{HealthInterval: 20 * time.Millisecond, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ks := keys(300)
	before := map[Key]string{}
	count := map[string]int{}
	for _, k := range ks {
		before[k] = p.Pick(k).Addr
		count[before[k]]++
	}
	for _, a := range addrs {
		if count[a] == 0 {
			t.Fatalf("no key on shard %s: %v", a, count)
		}
	}

	dead := p.Shards()[1]
	stops[1]()
	eventually(t, "the stopped shard is marked down", func() bool { return !dead.Up() })
	if up := gaugeValue(t, reg, dead.Addr); up != 0 {
		t.Errorf("lsp_proxy_daemon_up{shard=%s} = %v, want 0", dead.Addr, up)
	}
	moved := map[string]int{}
	for _, k := range ks {
		got := p.Pick(k).Addr
		if before[k] != dead.Addr {
			if got != before[k] {
				t.Fatalf("key %v moved from live shard %s to %s", k, before[k], got)
			}
			continue
		}
		// The next-ranked shard of the key's own ranking.
		var want string
		var w uint64
		for _, a := range addrs {
			if a != dead.Addr && (want == "" || weight(a, k) > w) {
				want, w = a, weight(a, k)
			}
		}
		if got != want {
			t.Fatalf("key %v of the dead shard went to %s, want %s", k, got, want)
		}
		moved[got]++
	}
	if len(moved) != 2 {
		t.Errorf("the dead shard's keys went to %v; want them spread over both live shards", moved)
	}
	if _, err := dead.Query(context.Background(), &daemonv1.QueryRequest{}); err == nil {
		t.Error("a call to the dead shard succeeded")
	}

	serve(t, &testDaemon{}, dead.Addr, nil)
	eventually(t, "the restarted shard is marked up", func() bool { return dead.Up() })
	for _, k := range ks {
		if got := p.Pick(k).Addr; got != before[k] {
			t.Fatalf("after recovery key %v is on %s, want %s again", k, got, before[k])
		}
	}
	if up := gaugeValue(t, reg, dead.Addr); up != 1 {
		t.Errorf("lsp_proxy_daemon_up{shard=%s} = %v, want 1", dead.Addr, up)
	}
}

func gaugeValue(t *testing.T, reg *prometheus.Registry, shard string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "lsp_proxy_daemon_up" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "shard" && l.GetValue() == shard {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no lsp_proxy_daemon_up for %s", shard)
	return -1
}

// TestNoLiveShard: with every shard down, Pick still names one, so the call
// fails with that shard's own error instead of a nil shard.
func TestNoLiveShard(t *testing.T) {
	dir := t.TempDir()
	p, err := New([]string{"unix://" + filepath.Join(dir, "nobody.sock")}, Options{HealthInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	s := p.Shards()[0]
	eventually(t, "the absent shard is marked down", func() bool { return !s.Up() })
	if got := p.Pick(keys(1)[0]); got != s {
		t.Fatalf("Pick = %v", got)
	}
	if err := p.Ping(context.Background()); err == nil {
		t.Error("Ping with no live shard succeeded")
	}
}

func TestProtocolMismatch(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		d    *testDaemon
		want string
	}{
		{"daemon answers another version", &testDaemon{version: 99}, "speaks protocol version 99, this proxy speaks 1"},
		{"daemon refuses ours", &testDaemon{refuse: true}, "refused protocol version 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, _ := serve(t, tc.d, "unix://"+filepath.Join(dir, fmt.Sprintf("v%d.sock", tc.d.version)), nil)
			p, err := New([]string{addr}, Options{HealthInterval: 20 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			err = p.Ping(context.Background())
			if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Ping = %v; want ErrProtocol saying %q", err, tc.want)
			}
			s := p.Shards()[0]
			eventually(t, "the shard is marked down", func() bool { return !s.Up() })
			if _, err := s.Query(context.Background(), &daemonv1.QueryRequest{}); !errors.Is(err, ErrProtocol) {
				t.Fatalf("Query = %v; want ErrProtocol", err)
			}
			if n := len(tc.d.ids); n != 0 {
				t.Fatalf("the daemon of another protocol received %d queries", n)
			}
		})
	}
}

// serverTLS is the daemon side of mutual TLS, as lsp-daemon configures it.
func serverTLS(t *testing.T, f *devcerts.Files) *tls.Config {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(f.ServerCert, f.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(f.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13}
}

func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	good, err := devcerts.Generate(dir, "good", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	other, err := devcerts.Generate(dir, "other", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	d := &testDaemon{}
	addr, _ := serve(t, d, "127.0.0.1:0", serverTLS(t, good))

	ping := func(cfg *tls.Config) error {
		p, err := New([]string{addr}, Options{TLS: cfg, HealthInterval: time.Hour})
		if err != nil {
			return err
		}
		defer p.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return p.Ping(ctx)
	}
	load := func(cert, key, ca string) *tls.Config {
		cfg, err := LoadTLS(cert, key, ca)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	if err := ping(load(good.ClientCert, good.ClientKey, good.CA)); err != nil {
		t.Fatalf("the proxy's own certificate: %v", err)
	}
	for name, cfg := range map[string]*tls.Config{
		"client certificate from another CA": load(other.ClientCert, other.ClientKey, good.CA),
		"daemon not trusted":                 load(good.ClientCert, good.ClientKey, other.CA),
		"server certificate as client":       load(good.ServerCert, good.ServerKey, good.CA),
	} {
		if err := ping(cfg); err == nil {
			t.Errorf("%s: Ping succeeded", name)
		}
	}
	if err := ping(nil); err == nil || !strings.Contains(err.Error(), "mutual TLS") {
		t.Errorf("host:port without TLS: %v; want a refusal naming mutual TLS", err)
	}
	// A client with no certificate at all, bypassing the pool's own check,
	// is refused by the daemon's side.
	roots := x509.NewCertPool()
	pem, _ := os.ReadFile(good.CA)
	roots.AppendCertsFromPEM(pem)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := daemonv1.NewDaemonClient(conn).Hello(ctx, &daemonv1.HelloRequest{ProtocolVersion: 1}); err == nil {
		t.Error("a client without a certificate was served")
	}
	if _, err := LoadTLS(good.ClientCert, good.ClientKey, good.ClientKey); err == nil {
		t.Error("LoadTLS accepted a CA file with no certificate")
	}
}

func TestRequestIDReachesTheDaemon(t *testing.T) {
	d := &testDaemon{}
	addr, _ := serve(t, d, "unix://"+filepath.Join(t.TempDir(), "d.sock"), nil)
	p, err := New([]string{addr}, Options{HealthInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	s := p.Shards()[0]
	ctx := WithRequestID(context.Background(), "rq-7f3a")
	if _, err := s.Query(ctx, &daemonv1.QueryRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Query(context.Background(), &daemonv1.QueryRequest{}); err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.ids) != 2 || d.ids[0] != "rq-7f3a" || d.ids[1] != "" {
		t.Fatalf("request ids seen by the daemon = %q", d.ids)
	}
}

func TestConfigurationRefusals(t *testing.T) {
	for _, addrs := range [][]string{nil, {"unix:///a.sock", "unix:///a.sock"}, {"no-port"}} {
		if p, err := New(addrs, Options{}); err == nil {
			p.Close()
			t.Errorf("New(%q) succeeded", addrs)
		}
	}
}
