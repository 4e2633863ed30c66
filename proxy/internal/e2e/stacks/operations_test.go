package stacks

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/hanzoai/lsp/proxy/internal/auth"
	"github.com/hanzoai/lsp/proxy/internal/devstack"
)

// gate holds the forge's content downloads (upload-pack POSTs that are not
// ls-refs) of one repository until it is opened; listing refs passes.
type gate struct {
	repo    string
	once    sync.Once
	entered chan struct{} // closed when a download is first held
	open    chan struct{}
}

func newGate(repo string) *gate {
	return &gate{repo: repo, entered: make(chan struct{}), open: make(chan struct{})}
}

func (g *gate) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/"+g.repo+".git/git-upload-pack") {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			if !bytes.Contains(body, []byte("ls-refs")) {
				g.once.Do(func() { close(g.entered) })
				<-g.open
			}
		}
		h.ServeHTTP(w, r)
	})
}

// TestRateLimit: after the burst an org gets 429 rate_limited with
// Retry-After, before the forge is asked; 400 and 403 come first and take
// no token; other orgs are not affected.
func TestRateLimit(t *testing.T) {
	fl := &forgeLog{}
	// One token per 1000 s: nothing refills during the test.
	s := startStack(t, devstack.Options{ForgeWrap: fl.wrap, ProxyEnv: map[string]string{"LSP_RATE_LIMIT": "0.001", "LSP_RATE_BURST": "2"}})
	tn := newTenant(t, s, "busy", "hello", 10)
	other := newTenant(t, s, "calm", "hello", 10)
	probe := func(tn *tenant, query string, hdr ...string) answer {
		return do(t, s, http.MethodGet, "/capabilities?"+query, nil,
			append([]string{"Authorization", "Bearer " + tn.jwt, "X-Forge-Token", tn.forgeToken}, hdr...)...)
	}
	// Refused before the limit: they take no token.
	if a := probe(tn, "repo=hello&bogus=1"); a.status != 400 {
		t.Fatalf("bad query: %d %s", a.status, a.raw)
	}
	if a := probe(tn, "repo=hello", "X-Org-Id", "calm"); a.status != 403 {
		t.Fatalf("foreign org: %d %s", a.status, a.raw)
	}
	for i := 0; i < 2; i++ {
		if a := probe(tn, "repo=hello"); a.status != 200 {
			t.Fatalf("request %d within the burst: %d %s", i+1, a.status, a.raw)
		}
	}
	forge := fl.count()
	limited := probe(tn, "repo=hello")
	if limited.status != http.StatusTooManyRequests || limited.errorCode() != "rate_limited" {
		t.Fatalf("over the burst: %d %s", limited.status, limited.raw)
	}
	if secs, err := strconv.Atoi(limited.header.Get("Retry-After")); err != nil || secs < 1 {
		t.Fatalf("Retry-After = %q", limited.header.Get("Retry-After"))
	}
	hover := do(t, s, http.MethodPost, "/hover", hoverBody("hello"), "Authorization", "Bearer "+tn.jwt, "X-Forge-Token", tn.forgeToken)
	if hover.status != http.StatusTooManyRequests {
		t.Fatalf("an operation over the limit: %d %s", hover.status, hover.raw)
	}
	if fl.count() != forge {
		t.Fatal("a rate-limited request reached the forge")
	}
	// Still 400 before 429.
	if a := probe(tn, "repo=hello&bogus=1"); a.status != 400 {
		t.Fatalf("bad query over the limit: %d %s; want 400 first", a.status, a.raw)
	}
	if a := probe(other, "repo=hello"); a.status != 200 {
		t.Fatalf("another org: %d %s", a.status, a.raw)
	}
	if rs := rows(t, s, "busy"); len(rs) != 1 {
		t.Fatalf("limited requests wrote rows: %+v", rs)
	}
	if v, ok := metric(t, s, `lsp_proxy_requests_total{code="429",route="/v1/lsp/hover"}`); !ok || v != 1 {
		t.Fatalf("requests_total for the 429 = %v, %v", v, ok)
	}
}

// TestPrepareCapacity: with LSP_MAX_PREPARES=1 a second cold request while
// one prepare runs is 503 capacity_exhausted with Retry-After, before any
// hold; it succeeds once the first is done.
func TestPrepareCapacity(t *testing.T) {
	g := newGate("slow")
	s := startStack(t, devstack.Options{ForgeWrap: g.wrap, ProxyEnv: map[string]string{"LSP_MAX_PREPARES": "1"}})
	first := newTenant(t, s, "capa", "slow", 10)
	second := newTenant(t, s, "capb", "hello", 10)

	done := make(chan answer, 1)
	go func() { done <- first.hover(t) }()
	<-g.entered // the first prepare holds the only slot, in its fetch

	a := second.hover(t)
	if a.status != http.StatusServiceUnavailable || a.errorCode() != "capacity_exhausted" {
		t.Fatalf("a second prepare: %d %s", a.status, a.raw)
	}
	if secs, err := strconv.Atoi(a.header.Get("Retry-After")); err != nil || secs < 1 {
		t.Fatalf("Retry-After = %q", a.header.Get("Retry-After"))
	}
	if b := balance(t, s, "capb"); b.BalanceCents != 10 || b.HeldCents != 0 {
		t.Fatalf("balance after a refusal for capacity = %+v; want nothing held", b)
	}
	if n := s.Forge.PackDownloads("capb", "hello"); n != 0 {
		t.Fatalf("the refused request downloaded content %d times", n)
	}
	if len(filter(rows(t, s, "capb"), "prepare")) != 0 {
		t.Fatal("a refused request has a prepare row")
	}
	close(g.open)
	if r := <-done; r.status != http.StatusOK || r.body["prepared"] != true {
		t.Fatalf("the first prepare: %d %s", r.status, r.raw)
	}
	if r := second.hover(t); r.status != http.StatusOK || r.body["prepared"] != true {
		t.Fatalf("the retry: %d %s", r.status, r.raw)
	}
	if v, ok := metric(t, s, `lsp_proxy_prepare_outcomes_total{outcome="capacity_exhausted"}`); !ok || v != 1 {
		t.Fatalf("capacity_exhausted outcomes = %v, %v", v, ok)
	}
	if v, ok := metric(t, s, `lsp_proxy_hold_outcomes_total{outcome="captured"}`); !ok || v != 2 {
		t.Fatalf("captured holds = %v, %v", v, ok)
	}
}

// TestShutdownFinishesInFlightRequests: a request whose prepare is running
// when the proxy is told to stop gets its answer, and is charged, before
// the proxy exits.
func TestShutdownFinishesInFlightRequests(t *testing.T) {
	g := newGate("hello")
	s := startStack(t, devstack.Options{ForgeWrap: g.wrap})
	tn := newTenant(t, s, "inflight", "hello", 10)
	done := make(chan answer, 1)
	go func() { done <- tn.hover(t) }()
	<-g.entered

	stopped := make(chan error, 1)
	go func() { stopped <- s.StopProxy() }()
	// New connections are refused once the shutdown has begun.
	eventually(t, "the proxy stops listening", func() bool {
		c, err := net.Dial("tcp", strings.TrimPrefix(s.ProxyURL, "http://"))
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	close(g.open)
	if a := <-done; a.status != http.StatusOK || a.body["prepared"] != true {
		t.Fatalf("the in-flight request: %d %s", a.status, a.raw)
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	ps := filter(rows(t, s, "inflight"), "prepare")
	if len(ps) != 1 || ps[0].AmountCents != -2 || ps[0].HTTPStatus != 200 {
		t.Fatalf("prepare rows = %+v; want one −2¢ with status 200", ps)
	}
}

// relay forwards a unix socket to another byte for byte, and can hold back
// what flows from the daemon to the proxy.
type relay struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	held   bool
	resume chan struct{}
}

func newRelay(t *testing.T, path, target string) *relay {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{ln: ln, target: target, resume: make(chan struct{})}
	t.Cleanup(func() { ln.Close() })
	go r.serve()
	return r
}

func (r *relay) serve() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		go func() {
			d, err := net.Dial("unix", r.target)
			if err != nil {
				c.Close()
				return
			}
			go func() { _, _ = io.Copy(d, c); d.Close() }()
			buf := make([]byte, 32<<10)
			for {
				n, err := d.Read(buf)
				r.mu.Lock()
				held, resume := r.held, r.resume
				r.mu.Unlock()
				if held {
					<-resume
				}
				if n > 0 {
					if _, werr := c.Write(buf[:n]); werr != nil {
						break
					}
				}
				if err != nil {
					break
				}
			}
			c.Close()
		}()
	}
}

func (r *relay) hold() {
	r.mu.Lock()
	r.held = true
	r.mu.Unlock()
}

func (r *relay) release() {
	r.mu.Lock()
	r.held = false
	close(r.resume)
	r.mu.Unlock()
}

// TestShutdownCapturesDetachedPrepare: a push whose client went away still
// runs; a graceful shutdown waits for it and captures its hold before the
// proxy exits.
func TestShutdownCapturesDetachedPrepare(t *testing.T) {
	dir := stackDir(t)
	g := newGate("hello")
	relaySock := filepath.Join(dir, "relay.sock")
	r := newRelay(t, relaySock, filepath.Join(dir, "daemon", "daemon.sock"))
	s := startStack(t, devstack.Options{Dir: dir, ForgeWrap: g.wrap, ProxyEnv: map[string]string{
		"LSP_DAEMONS":                "unix://" + relaySock,
		"LSP_DAEMON_HEALTH_INTERVAL": "1h",
		"LSP_SHUTDOWN_GRACE":         "2m",
	}})
	tn := newTenant(t, s, "detached", "hello", 10)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.ProxyURL+"/v1/lsp/hover", strings.NewReader(`{"repo":"hello","path":"main.go","line":10,"character":20}`))
		req.Header.Set("Authorization", "Bearer "+tn.jwt)
		req.Header.Set("X-Forge-Token", tn.forgeToken)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			err = errors.New("the request was answered: " + resp.Status)
		}
		errc <- err
	}()
	<-g.entered // the hold is taken, the fetch is held

	// The daemon's replies are held from now on; the fetch completes and the
	// push reaches the daemon, which writes the tree.
	r.hold()
	close(g.open)
	tree := filepath.Join(s.DaemonRoot, "trees", auth.TenantKey([]byte(tenantSecret), "detached"), "hello", tn.commit)
	eventually(t, "the pushed tree is on the daemon", func() bool { _, err := os.Stat(tree); return err == nil })

	// The client leaves while the push waits for its reply, then the proxy
	// is told to stop.
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("client: %v", err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- s.StopProxy() }()
	eventually(t, "the proxy stops listening", func() bool {
		c, err := net.Dial("tcp", strings.TrimPrefix(s.ProxyURL, "http://"))
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	select {
	case err := <-stopped:
		t.Fatalf("the proxy exited with a push in flight: %v", err)
	default:
	}
	r.release()
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	ps := filter(rows(t, s, "detached"), "prepare")
	if len(ps) != 1 || ps[0].AmountCents != -2 {
		t.Fatalf("prepare rows after shutdown = %+v; want the detached push captured once", ps)
	}
	if b := balance(t, s, "detached"); b.BalanceCents != 8 || b.HeldCents != 0 {
		t.Fatalf("balance after shutdown = %+v; want 8, nothing held", b)
	}
}
