package soak

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/devforge"
)

// FaultResult is one injected fault.
type FaultResult struct {
	Name      string
	At        time.Duration // since the load started
	Detail    string
	Recovered bool
	// RecoverIn is from the fault's end (the process back, the signal
	// lifted) to every warm workspace answering 200 again.
	RecoverIn time.Duration
	Skipped   string // why the fault could not be injected
}

// forgeFaults wraps the dev forge: slow, failing, or watched for fetches.
type forgeFaults struct {
	delay atomic.Int64 // nanoseconds before each request is served
	fail  atomic.Bool  // answer 503 to everything

	mu      sync.Mutex
	fetched map[string]chan struct{} // "owner/repo" → closed once a fetch of it was served
}

func newForgeFaults() *forgeFaults {
	return &forgeFaults{fetched: map[string]chan struct{}{}}
}

func (f *forgeFaults) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d := time.Duration(f.delay.Load()); d > 0 {
			select {
			case <-time.After(d):
			case <-r.Context().Done():
				return
			}
		}
		if f.fail.Load() {
			http.Error(w, "the forge is down (soak fault)", http.StatusServiceUnavailable)
			return
		}
		fetch := false
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-upload-pack") {
			body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
			r.Body = io.NopCloser(bytes.NewReader(body))
			fetch = bytes.Contains(body, []byte("want ")) || r.Header.Get("Content-Encoding") != ""
		}
		h.ServeHTTP(w, r)
		if fetch {
			repo := strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/"), "/git-upload-pack"), ".git")
			f.mu.Lock()
			if ch, ok := f.fetched[repo]; ok {
				close(ch)
				delete(f.fetched, repo)
			}
			f.mu.Unlock()
		}
	})
}

// watchFetch returns a channel closed after the next fetch of owner/repo.
func (f *forgeFaults) watchFetch(ownerRepo string) <-chan struct{} {
	ch := make(chan struct{})
	f.mu.Lock()
	f.fetched[ownerRepo] = ch
	f.mu.Unlock()
	return ch
}

// runFaults injects the faults in sequence, spread over the run.
func (r *run) runFaults(ctx context.Context, start, deadline time.Time) []FaultResult {
	span := deadline.Sub(start)
	at := func(frac float64) {
		t := start.Add(time.Duration(frac * float64(span)))
		select {
		case <-time.After(time.Until(t)):
		case <-ctx.Done():
		}
	}
	var out []FaultResult
	add := func(f FaultResult) {
		f.At = time.Since(start).Round(time.Millisecond)
		out = append(out, f)
		r.cfg.Log.Info("soak fault", "name", f.Name, "recovered", f.Recovered, "in", f.RecoverIn, "skipped", f.Skipped)
	}
	steps := []struct {
		frac float64
		fn   func(context.Context) FaultResult
	}{
		{0.10, r.killServer},
		{0.20, r.hangServer},
		{0.32, r.killDaemon},
		{0.45, r.restartPostgres},
		{0.58, r.slowThenFailingForge},
		{0.72, r.clientLeaves},
		{0.80, r.diskBudget},
	}
	for _, s := range steps {
		at(s.frac)
		if ctx.Err() != nil {
			break
		}
		add(s.fn(ctx))
	}
	return out
}

// recover times how long until every warm workspace answers 200 again.
func (r *run) recover(ctx context.Context, f *FaultResult) {
	start := time.Now()
	deadline := start.Add(2 * time.Minute)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		if r.probeAll(ctx) {
			f.Recovered, f.RecoverIn = true, time.Since(start).Round(time.Millisecond)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	f.RecoverIn = time.Since(start).Round(time.Millisecond)
}

// languageServers lists the daemons' language-server processes: the
// daemon's descendants run from its content-addressed copies under root/bin.
func (r *run) languageServers() []int {
	var out []int
	for _, pid := range r.daemonPIDs() {
		for _, k := range descendants(pid) {
			for _, d := range r.daemonList() {
				if strings.HasPrefix(exeOf(k), filepath.Join(d.Root, "bin")+string(os.PathSeparator)) {
					out = append(out, k)
				}
			}
		}
	}
	return out
}

// busiestServer is the language server with the largest resident set: the
// one most requests are likely to be using.
func (r *run) busiestServer() int {
	best, bestRSS := 0, int64(-1)
	for _, pid := range r.languageServers() {
		if rss := rssKiB(pid); rss > bestRSS {
			best, bestRSS = pid, rss
		}
	}
	return best
}

func (r *run) killServer(ctx context.Context) FaultResult {
	f := FaultResult{Name: "language server killed (-9)"}
	pid := r.busiestServer()
	if pid == 0 {
		f.Skipped = "no language server was running"
		return f
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		f.Skipped = err.Error()
		return f
	}
	f.Detail = fmt.Sprintf("gopls pid %d of %d", pid, len(r.languageServers())+1)
	r.recover(ctx, &f)
	return f
}

func (r *run) hangServer(ctx context.Context) FaultResult {
	f := FaultResult{Name: "language server hung (SIGSTOP 6s)"}
	pid := r.busiestServer()
	if pid == 0 {
		f.Skipped = "no language server was running"
		return f
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		f.Skipped = err.Error()
		return f
	}
	select {
	case <-time.After(6 * time.Second):
	case <-ctx.Done():
	}
	_ = syscall.Kill(pid, syscall.SIGCONT)
	f.Detail = fmt.Sprintf("gopls pid %d stopped, then continued", pid)
	r.recover(ctx, &f)
	return f
}

func (r *run) killDaemon(ctx context.Context) FaultResult {
	f := FaultResult{Name: "daemon shard killed (-9), restarted 3s later"}
	d := r.daemonList()[0]
	d.Kill()
	select {
	case <-time.After(3 * time.Second):
	case <-ctx.Done():
	}
	if err := d.Start(context.WithoutCancel(ctx)); err != nil {
		f.Detail = "restart failed: " + err.Error()
		return f
	}
	f.Detail = "shard d0 of 2; its keys failed over to d1 (0¢ re-prepares) and came back"
	r.recover(ctx, &f)
	return f
}

func (r *run) restartPostgres(ctx context.Context) FaultResult {
	f := FaultResult{Name: "Postgres restarted (immediate, synchronous_commit=on)"}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	if err := r.stack.PG.Restart(rctx, true); err != nil {
		f.Detail = "restart failed: " + err.Error()
		return f
	}
	f.Detail = "SIGQUIT: no checkpoint, crash recovery on the way up"
	r.recover(ctx, &f)
	return f
}

func (r *run) slowThenFailingForge(ctx context.Context) FaultResult {
	f := FaultResult{Name: "forge slow (1.5s/request, 6s) then failing (503, 5s)"}
	r.forge.delay.Store(int64(1500 * time.Millisecond))
	sleepCtx(ctx, 6*time.Second)
	r.forge.delay.Store(0)
	r.forge.fail.Store(true)
	sleepCtx(ctx, 5*time.Second)
	r.forge.fail.Store(false)
	f.Detail = "resolves and fetches through the wrapped forge handler"
	r.recover(ctx, &f)
	return f
}

// clientLeaves starts cold requests on fresh repositories and cancels each
// after its fetch was served, at growing delays, so that some leave before
// the push and some while it runs (then the prepare must still be charged).
func (r *run) clientLeaves(ctx context.Context) FaultResult {
	f := FaultResult{Name: "client disconnects mid-prepare (3 clients)"}
	t := r.tenants[0] // a rich org
	var notes []string
	for i, after := range []time.Duration{0, 40 * time.Millisecond, 150 * time.Millisecond} {
		repo := fmt.Sprintf("leaver%d", i)
		if _, err := devforge.CreateRepo(r.stack.ForgeRoot, t.org, repo, goRepo(t.org+"/"+repo, 0), "leaver"); err != nil {
			notes = append(notes, err.Error())
			continue
		}
		fetched := r.forge.watchFetch(t.org + "/" + repo)
		b, _ := json.Marshal(map[string]any{"repo": repo, "path": "main.go", "line": 10, "character": 20})
		rq := req{route: "/v1/lsp/hover", body: b, jwt: t.jwt, forge: t.forge, org: t.org, op: "hover"}
		id := r.client.nextID()
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan answer, 1)
		go func() {
			a, _, _ := r.client.send(cctx, id, rq)
			done <- a
		}()
		select {
		case <-fetched:
			time.Sleep(after)
		case <-time.After(30 * time.Second):
		}
		cancel()
		a := <-done
		r.client.record(outcome{id: id, org: t.org, op: "hover", status: a.status, code: a.code, rule: rowsAtMost1})
		r.leavers = append(r.leavers, id)
		notes = append(notes, fmt.Sprintf("left %v after the fetch", after))
	}
	f.Detail = strings.Join(notes, "; ")
	r.recover(ctx, &f)
	return f
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}
