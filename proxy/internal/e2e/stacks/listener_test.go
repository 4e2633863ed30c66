package stacks

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/devstack"
)

// TestMetricsListener: with LSP_METRICS_LISTEN, /metrics is served there
// and no longer on the public listener.
func TestMetricsListener(t *testing.T) {
	addr := freeAddr(t)
	s := startStack(t, devstack.Options{ProxyEnv: map[string]string{"LSP_METRICS_LISTEN": addr}})
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("metrics listener: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "go_goroutines") {
		t.Fatalf("metrics listener answered %d: %.200q", resp.StatusCode, body)
	}
	resp, err = http.Get(s.ProxyURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("the public listener still serves /metrics: %d", resp.StatusCode)
	}
}

// TestSlowBodiesOnTheProxy: the proxy itself cuts connections that
// announce a body and never send it, within LSP_BODY_READ_TIMEOUT, and
// refuses those over LSP_MAX_CONNS_PER_ADDR at once; an SSE prepare that
// lasts longer than LSP_WRITE_TIMEOUT still completes.
func TestSlowBodiesOnTheProxy(t *testing.T) {
	g := newGate("slow")
	s := startStack(t, devstack.Options{ForgeWrap: g.wrap, ProxyEnv: map[string]string{
		"LSP_BODY_READ_TIMEOUT":  "1s",
		"LSP_WRITE_TIMEOUT":      "1s",
		"LSP_MAX_CONNS_PER_ADDR": "60",
	}})
	tn := newTenant(t, s, "slow", "slow", 10)
	u, _ := url.Parse(s.ProxyURL)
	base := runtime.NumGoroutine()
	start := time.Now()
	type result struct{ after time.Duration }
	done := make(chan result, 100)
	for range 100 {
		conn, err := net.Dial("tcp", u.Host)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "POST /v1/lsp/hover HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{", tn.jwt)
		go func() {
			defer conn.Close()
			_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
			_, _ = io.Copy(io.Discard, conn)
			done <- result{time.Since(start)}
		}()
	}
	var last time.Duration
	for range 100 {
		r := <-done
		last = max(last, r.after)
	}
	t.Logf("100 slow-body connections to the proxy all closed after %v", last.Round(time.Millisecond))
	if last > 5*time.Second {
		t.Fatalf("slow-body connections held for %v", last)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base+5 {
		if time.Now().After(deadline) {
			t.Fatalf("goroutines %d, baseline %d", runtime.NumGoroutine(), base)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// The prepare's fetch waits at the gate for 3 write timeouts: the
	// stream is quiet meanwhile, then goes on to its answer.
	go func() {
		<-g.entered
		time.Sleep(3 * time.Second)
		close(g.open)
	}()
	req, _ := http.NewRequest(http.MethodPost, s.ProxyURL+"/v1/lsp/prepare", strings.NewReader(`{"repo":"slow"}`))
	req.Header.Set("Authorization", "Bearer "+tn.jwt)
	req.Header.Set("X-Forge-Token", tn.forgeToken)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var events []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if ev, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			events = append(events, ev)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("stream cut after events %v: %v", events, err)
	}
	if len(events) == 0 || events[len(events)-1] != "answer" {
		t.Fatalf("events %v; want the stream to end with its answer", events)
	}
}
