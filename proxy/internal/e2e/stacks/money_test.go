package stacks

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/devforge"
	"github.com/hanzoai/lsp/proxy/internal/devstack"
)

// cutter forwards a unix socket to another byte for byte, and can cut every
// connection open at that moment (later ones are forwarded again): a stream
// between proxy and daemon that breaks while both stay up.
type cutter struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
}

func newCutter(t *testing.T, path, target string) *cutter {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	c := &cutter{ln: ln, target: target}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("unix", target)
			if err != nil {
				in.Close()
				continue
			}
			c.mu.Lock()
			c.conns = append(c.conns, in, out)
			c.mu.Unlock()
			go func() { _, _ = io.Copy(out, in); out.Close() }()
			go func() { _, _ = io.Copy(in, out); in.Close() }()
		}
	}()
	return c
}

func (c *cutter) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, x := range c.conns {
		x.Close()
	}
	c.conns = nil
}

// TestStreamCutInTheDependencyPhaseChargesOnce: the daemon has the whole
// tree and is fetching its dependencies (a phase that runs on when the
// push's stream dies) when the proxy–daemon stream breaks. The proxy asks
// the daemon, which says the key is in flight, so the hold is kept; when the
// tree is published under its prepare id the proxy captures it. Exactly one
// charge, from the request that prepared (not a later recovery), and the
// workspace answers.
func TestStreamCutInTheDependencyPhaseChargesOnce(t *testing.T) {
	entered := make(chan struct{})
	open := make(chan struct{})
	var once sync.Once
	mirror := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() { close(entered) })
		select {
		case <-open:
		case <-r.Context().Done():
		}
		http.NotFound(w, r)
	}))
	defer mirror.Close()
	defer func() {
		select {
		case <-open:
		default:
			close(open)
		}
	}()

	dir := stackDir(t)
	sock := filepath.Join(dir, "cutter.sock")
	cut := newCutter(t, sock, filepath.Join(dir, "daemon", "daemon.sock"))
	s := startStack(t, devstack.Options{Dir: dir,
		DaemonEnv: map[string]string{"LSP_DEPS_GO_PROXY": mirror.URL, "LSP_DEPS_TIMEOUT": "2m"},
		ProxyEnv:  map[string]string{"LSP_DAEMONS": "unix://" + sock, "LSP_DAEMON_HEALTH_INTERVAL": "1h"},
	})
	files := map[string]string{}
	for k, v := range devstack.SampleRepo {
		files[k] = v
	}
	files["go.mod"] = "module example.com/hello\n\ngo 1.22\n\nrequire example.com/slow v1.0.0\n"
	files["go.sum"] = "example.com/slow v1.0.0 h1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n" +
		"example.com/slow v1.0.0/go.mod h1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n"
	tn := newTenant(t, s, "cutdeps", "hello", 10)
	commit, err := devforge.CreateRepo(s.ForgeRoot, "cutdeps", "slowdeps", files, "slow deps")
	if err != nil {
		t.Fatal(err)
	}

	got := make(chan answer, 1)
	go func() {
		got <- do(t, s, http.MethodPost, "/hover", map[string]any{"repo": "slowdeps", "path": "main.go", "line": 10, "character": 20},
			"Authorization", "Bearer "+tn.jwt, "X-Forge-Token", tn.forgeToken)
	}()
	select {
	case <-entered:
	case <-time.After(2 * time.Minute):
		t.Fatal("the dependency phase never reached the mirror")
	}
	// The daemon has the whole tree and is in its dependency phase: break
	// the stream under the push, give the proxy time to ask (it must see the
	// key in flight and keep the hold), then let the phase end.
	cut.cut()
	time.Sleep(2 * time.Second)
	if b := balance(t, s, "cutdeps"); b.HeldCents != 2 {
		t.Fatalf("balance while the phase runs = %+v; want the hold kept", b)
	}
	close(open)
	a := <-got
	ps := filter(rows(t, s, "cutdeps"), "prepare")
	if len(ps) != 1 || ps[0].AmountCents != -2 || ps[0].Commit != commit {
		t.Fatalf("prepare rows = %+v; want exactly one charge of the published tree (answer %d %s)", ps, a.status, a.raw)
	}
	if ps[0].Reason != "" {
		t.Errorf("the prepare was charged by %q, not by the request that prepared", ps[0].Reason)
	}
	if b := balance(t, s, "cutdeps"); b.BalanceCents != 8 || b.HeldCents != 0 {
		t.Fatalf("balance = %+v; want 8, nothing held", b)
	}
	// Later answers name the id: still exactly one charge.
	tn2 := do(t, s, http.MethodPost, "/hover", map[string]any{"repo": "slowdeps", "path": "main.go", "line": 10, "character": 20},
		"Authorization", "Bearer "+tn.jwt, "X-Forge-Token", tn.forgeToken)
	if tn2.status != http.StatusOK {
		t.Fatalf("warm hover = %d %s", tn2.status, tn2.raw)
	}
	if ps := filter(rows(t, s, "cutdeps"), "prepare"); len(ps) != 1 {
		t.Fatalf("prepare rows after a warm hover = %+v", ps)
	}
}
