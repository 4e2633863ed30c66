package listener

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve runs h behind Server and Limit on 127.0.0.1 until the test ends.
func serve(t *testing.T, h http.Handler, c Config) (addr string, ln net.Listener) {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln = Limit(raw, c)
	srv := Server(h, c)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close(); <-done })
	return raw.Addr().String(), ln
}

// unauthenticated answers 401 without reading the body, as the API's
// token check does.
var unauthenticated = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	http.Error(w, "no", http.StatusUnauthorized)
})

// TestSlowBodiesAreCut: 200 connections announce a body and never send it.
// Connections over the per-address bound are refused at once; the others
// are cut within the body read timeout; goroutines return to their
// baseline. Before this package, all 200 stayed open until the client gave
// up (the request deadline, a minute later).
func TestSlowBodiesAreCut(t *testing.T) {
	const n, perAddr = 200, 50
	c := Config{MaxConnsPerAddr: perAddr, MaxConns: 1000, BodyRead: time.Second, Write: 5 * time.Second}
	addr, ln := serve(t, unauthenticated, c)
	base := runtime.NumGoroutine()

	start := time.Now()
	closed := make(chan time.Duration, n)
	var wg sync.WaitGroup
	for range n {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "POST /v1/lsp/hover HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer conn.Close()
			_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
			_, _ = io.Copy(io.Discard, conn) // until the server closes it
			closed <- time.Since(start)
		}()
	}
	wg.Wait()
	close(closed)
	var last time.Duration
	early := 0
	for d := range closed {
		last = max(last, d)
		if d < c.BodyRead/2 {
			early++
		}
	}
	t.Logf("%d slow-body connections: %d refused at once, all closed after %v", n, early, last.Round(time.Millisecond))
	if last > c.BodyRead+3*time.Second {
		t.Fatalf("the last slow-body connection was closed after %v; the bound is %v", last, c.BodyRead)
	}
	if early < n-perAddr {
		t.Fatalf("%d connections closed at once; want at least the %d over the per-address bound", early, n-perAddr)
	}
	// The server's side of a connection the client saw closed is counted
	// out a moment later: wait for it, within the same bound.
	open, refused := Stats(ln)
	for deadline := time.Now().Add(3 * time.Second); open != 0 && time.Now().Before(deadline); open, refused = Stats(ln) {
		time.Sleep(10 * time.Millisecond)
	}
	if open != 0 || refused < n-perAddr {
		t.Fatalf("open %d, refused %d", open, refused)
	}
	waitGoroutines(t, base)
}

func waitGoroutines(t *testing.T, base int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base+2 {
		if time.Now().After(deadline) {
			t.Fatalf("goroutines %d; baseline %d", runtime.NumGoroutine(), base)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestTotalBound: past MaxConns every new connection is closed at once,
// and a freed slot is usable again.
func TestTotalBound(t *testing.T) {
	c := Config{MaxConnsPerAddr: -1, MaxConns: 3, BodyRead: time.Second}
	addr, ln := serve(t, unauthenticated, c)
	var held []net.Conn
	for range 3 {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, conn)
		// A request in flight: the slot is taken (Accept ran).
		fmt.Fprintf(conn, "GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
		if _, err := http.ReadResponse(bufio.NewReader(conn), nil); err != nil {
			t.Fatal(err)
		}
	}
	over, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = over.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := over.Read(make([]byte, 1)); err == nil || strings.Contains(err.Error(), "timeout") {
		t.Fatalf("a connection over the total bound was not closed at once: %v", err)
	}
	over.Close()
	held[0].Close()
	deadline := time.Now().Add(2 * time.Second)
	for {
		if open, _ := Stats(ln); open < 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a closed connection did not free its slot")
		}
		time.Sleep(10 * time.Millisecond)
	}
	resp, err := http.Get("http://" + addr + "/x")
	if err != nil {
		t.Fatalf("after a slot was freed: %v", err)
	}
	resp.Body.Close()
	for _, c := range held[1:] {
		c.Close()
	}
	http.DefaultClient.CloseIdleConnections()
}

// TestStreamOutlivesWriteTimeout: an SSE answer that lasts several write
// timeouts, with quiet stretches longer than one, completes; so does a
// request whose body was read and whose handler then runs past the body
// read timeout (its context is not cancelled).
func TestStreamOutlivesWriteTimeout(t *testing.T) {
	c := Config{BodyRead: 200 * time.Millisecond, Write: 300 * time.Millisecond}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			t.Errorf("read body: %v", err)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		for i := range 6 {
			gap := 150 * time.Millisecond
			if i == 3 {
				gap = 500 * time.Millisecond // quiet for longer than the write timeout
			}
			select {
			case <-r.Context().Done():
				t.Errorf("the request's context ended during the stream: %v", r.Context().Err())
				return
			case <-time.After(gap):
			}
			fmt.Fprintf(w, "event: progress\ndata: %d\n\n", i)
			w.(http.Flusher).Flush()
		}
		fmt.Fprintf(w, "event: answer\ndata: {}\n\n")
	})
	addr, _ := serve(t, h, c)
	start := time.Now()
	resp, err := http.Post("http://"+addr+"/v1/lsp/prepare", "application/json", strings.NewReader(`{"repo":"r"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	all, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("stream cut after %v: %v", time.Since(start), err)
	}
	if !strings.Contains(string(all), "event: answer") || strings.Count(string(all), "event: progress") != 6 {
		t.Fatalf("stream incomplete after %v: %q", time.Since(start), all)
	}
	if d := time.Since(start); d < 3*c.Write {
		t.Fatalf("the stream took %v; it must outlast the write timeout (%v) to test anything", d, c.Write)
	}
	http.DefaultClient.CloseIdleConnections()
}

// TestBodylessRequestOutlivesBodyRead: a GET (an MCP event stream) is
// never under the body read deadline.
func TestBodylessRequestOutlivesBodyRead(t *testing.T) {
	c := Config{BodyRead: 100 * time.Millisecond, Write: time.Second}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
			http.Error(w, "cancelled", http.StatusInternalServerError)
		case <-time.After(400 * time.Millisecond):
			fmt.Fprint(w, "ok")
		}
	})
	addr, _ := serve(t, h, c)
	resp, err := http.Get("http://" + addr + "/v1/lsp/mcp")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "ok" {
		t.Fatalf("answer %d %q", resp.StatusCode, b)
	}
	http.DefaultClient.CloseIdleConnections()
}
