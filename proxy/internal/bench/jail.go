package bench

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"

	"github.com/hanzoai/lsp/proxy/internal/daemonclient"
	"github.com/hanzoai/lsp/proxy/internal/devstack"
	"github.com/hanzoai/lsp/proxy/internal/lspdirect"
)

// jailVariant is one daemon of the jail-price figure: the production jail,
// the same with one piece switched off (LSP_BENCH_JAIL_OFF, read only by a
// daemon built with -tags lspbench), or no jail at all.
type jailVariant struct {
	name     string
	off      string // LSP_BENCH_JAIL_OFF
	unjailed bool
	direct   bool // gopls spoken to by the bench itself, as the latency baseline is
	// goplsEnv goes into gopls's reviewed entry (a memory knob to try).
	goplsEnv []string
	// daemonEnv goes to the daemon process (a runtime knob to try).
	daemonEnv map[string]string
	// baseline runs Options.BaselineDaemonBin instead (an earlier build of
	// the daemon, to see what a change to its hot path bought).
	baseline bool
}

var jailVariants = []jailVariant{
	{name: "jailed (production)"},
	{name: "no seccomp filter", off: "seccomp"},
	{name: "no in-jail init (nor its rlimits)", off: "init"},
	{name: "no pids cgroup", off: "pids"},
	{name: "no memory cgroup", off: "memory"},
	{name: "memory: the pool's cgroup, none per jail", off: "jail-memory"},
	{name: "no cgroups at all", off: "pids,memory"},
	{name: "jailed + GOMEMLIMIT=512MiB", goplsEnv: []string{"GOMEMLIMIT=512MiB"}},
	{name: "jailed + GOMEMLIMIT=256MiB", goplsEnv: []string{"GOMEMLIMIT=256MiB"}},
	{name: "jailed, daemon GOMAXPROCS=1", daemonEnv: map[string]string{"GOMAXPROCS": "1"}},
	{name: "jailed, the baseline daemon (--baseline-daemon-bin)", baseline: true},
	{name: "unjailed (LSP_UNJAILED=1)", unjailed: true},
	{name: "gopls directly (no daemon: lspdirect)", direct: true},
}

// jailRun is what one variant measured.
type jailRun struct {
	v         jailVariant
	lat       []time.Duration
	serverCPU time.Duration // CPU of the daemon's process tree less the daemon: bwrap, init, gopls
	daemonCPU time.Duration
	// Per batch, CPU per request: the table gives their medians, which a
	// batch that met a server's background work (a GC, a file scan) does
	// not move the way it moves the sum.
	serverBatches, daemonBatches []time.Duration
	requests                     int
	rss                          int64  // the server tree's RSS at the end
	answer                       string // the definition, as path and range: the same on every variant?
	daemonLog                    string
	selfTestOK                   bool
}

// live is one variant while it runs.
type live struct {
	run   *jailRun
	d     *devstack.Daemon
	close func() // the daemon client
	shard *daemonclient.Shard
	q     *daemonv1.QueryRequest
	// direct: the baseline gopls, no daemon
	direct *lspdirect.Server
}

// runJail prices the jail: one daemon per variant, all with the same
// sample workspace, asked the same queries in turn (the order rotates
// every round, so load on the machine hits every variant alike), with the
// CPU each server's process tree used per request read from the kernel's
// per-thread run time (/proc/PID/task/TID/schedstat, nanoseconds) — a
// measure that load on the machine disturbs far less than wall time.
func runJail(ctx context.Context, o Options) ([]*jailRun, error) {
	if o.BenchDaemonBin == "" {
		return nil, fmt.Errorf("the jail figure needs a daemon built with -tags lspbench (--bench-daemon-bin)")
	}
	var ls []*live
	defer func() {
		for _, l := range ls {
			if l.close != nil {
				l.close()
			}
			if l.d != nil {
				l.d.Stop()
			}
			if l.direct != nil {
				l.direct.Close()
			}
		}
	}()
	for i, v := range jailVariants {
		if v.baseline && o.BaselineDaemonBin == "" {
			continue
		}
		if v.direct {
			srv, err := startDirect(ctx, filepath.Join(o.Dir, "jail", strconv.Itoa(i)), o.Gopls)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", v.name, err)
			}
			ls = append(ls, &live{run: &jailRun{v: v}, direct: srv})
			continue
		}
		dir := filepath.Join(o.Dir, "jail", strconv.Itoa(i))
		env := map[string]string{"LSP_LOG_LEVEL": "warn"}
		if v.off != "" {
			env["LSP_BENCH_JAIL_OFF"] = v.off
		}
		for k, val := range v.daemonEnv {
			env[k] = val
		}
		if i == 0 {
			// The production daemon gets the caller's variables (lsp-bench
			// --profile: its debug endpoint).
			for k, val := range o.DaemonEnv {
				env[k] = val
			}
		}
		bin := o.BenchDaemonBin
		if v.baseline {
			bin = o.BaselineDaemonBin
		}
		d, err := devstack.StartDaemon(ctx, devstack.DaemonOptions{
			Bin: bin, Dir: dir, Listen: "unix://" + filepath.Join(dir, "daemon.sock"),
			Servers: devstack.Options{Gopls: o.Gopls, Unjailed: v.unjailed, GoplsEnv: v.goplsEnv}, Env: env,
		})
		if err != nil {
			var tail string
			if d != nil {
				tail = d.Log()
				d.Stop()
			}
			return nil, fmt.Errorf("%s: %w\n%s", v.name, err, tail)
		}
		l := &live{run: &jailRun{v: v}, d: d}
		ls = append(ls, l)
		if l.shard, l.q, l.close, err = sampleDefinition(ctx, filepath.Join(dir, "daemon.sock")); err != nil {
			return nil, fmt.Errorf("%s: push: %w", v.name, err)
		}
	}
	ask := func(l *live) (time.Duration, error) {
		qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		t := time.Now()
		if l.direct != nil {
			loc, err := l.direct.Definition(qctx, "main.go", lspdirect.Position{Line: 10, Character: 20})
			if err == nil && len(loc) < 3 {
				err = fmt.Errorf("no definition")
			}
			return time.Since(t), err
		}
		ans, err := l.shard.Query(qctx, l.q)
		took := time.Since(t)
		if err == nil && l.run.answer == "" {
			for _, it := range ans.GetLocations().GetItems() {
				r := it.GetRange()
				l.run.answer += fmt.Sprintf("%s:%d.%d-%d.%d ", it.GetPath(), r.GetStart().GetLine(), r.GetStart().GetCharacter(), r.GetEnd().GetLine(), r.GetEnd().GetCharacter())
			}
		}
		if err == nil && ans.GetStatus() != daemonv1.Status_STATUS_OK {
			err = fmt.Errorf("status %s: %s", ans.GetStatus(), ans.GetMessage())
		}
		if err == nil && len(ans.GetLocations().GetItems()) == 0 {
			err = fmt.Errorf("no definition")
		}
		return took, err
	}
	for _, l := range ls {
		if l.d != nil {
			awaitSeed(ctx, o, l.d, l.run.v.name)
		}
	}
	// Warm every server (the first definition waits for gopls's load).
	for _, l := range ls {
		for i := 0; i < 50; i++ {
			if _, err := ask(l); err != nil {
				return nil, fmt.Errorf("%s: warm-up: %w", l.run.v.name, err)
			}
		}
	}
	const batch = 25
	rounds := max(4, o.N/batch)
	stop := o.measured("jail", time.Duration(rounds*batch*len(ls))*time.Millisecond)
	defer stop()
	for r := 0; r < rounds; r++ {
		for i := range ls {
			l := ls[(i+r)%len(ls)]
			pid := l.pid()
			t0 := treeRunTime(pid)
			for j := 0; j < batch; j++ {
				took, err := ask(l)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", l.run.v.name, err)
				}
				l.run.lat = append(l.run.lat, took)
			}
			t1 := treeRunTime(pid)
			srv, dmn := since(t0.tree, t1.tree), since(t0.self, t1.self)
			if l.direct != nil {
				srv, dmn = dmn, 0 // the pid is gopls's own
			}
			l.run.serverCPU += srv
			l.run.daemonCPU += dmn
			l.run.serverBatches = append(l.run.serverBatches, srv/batch)
			l.run.daemonBatches = append(l.run.daemonBatches, dmn/batch)
			l.run.requests += batch
		}
	}
	var out []*jailRun
	for _, l := range ls {
		if l.direct != nil {
			l.run.rss = devstack.TreeRSS(l.direct.Pid())
			out = append(out, l.run)
			continue
		}
		pid := l.d.Pid()
		l.run.rss = devstack.TreeRSS(pid) - devstack.ProcRSS(pid)
		l.run.daemonLog = l.d.Log()
		l.run.selfTestOK = !strings.Contains(l.run.daemonLog, "self-test not run")
		out = append(out, l.run)
	}
	return out, nil
}

func (l *live) pid() int {
	if l.direct != nil {
		return l.direct.Pid()
	}
	return l.d.Pid()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func newPrepareID() string {
	return randomHex(4) + "-" + randomHex(2) + "-4" + randomHex(2)[1:] + "-8" + randomHex(2)[1:] + "-" + randomHex(6)
}

// threadTimes maps each thread (tid) of pid's descendants, and of pid
// itself, to its CPU time so far (ns on the CPU, schedstat).
type threadTimes struct{ tree, self map[int]time.Duration }

// treeRunTime reads the CPU time of every thread of pid's descendants and
// of pid itself.
func treeRunTime(pid int) threadTimes {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		end := strings.LastIndexByte(s, ')')
		if end < 0 {
			continue
		}
		f := strings.Fields(s[end+1:])
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		children[ppid] = append(children[ppid], p)
	}
	t := threadTimes{tree: map[int]time.Duration{}, self: map[int]time.Duration{}}
	procRunTime(pid, t.self)
	stack := append([]int(nil), children[pid]...)
	for len(stack) > 0 {
		p := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		procRunTime(p, t.tree)
		stack = append(stack, children[p]...)
	}
	return t
}

// since is the CPU the threads used from before to t: a thread born in
// between counts whole; one that ended in between is lost for that span
// only (the sum over live threads would go backwards otherwise).
func since(before, after map[int]time.Duration) time.Duration {
	var d time.Duration
	for tid, a := range after {
		d += a - before[tid]
	}
	return d
}

// procRunTime adds the CPU time of every thread of pid (the first field of
// its schedstat) to out.
func procRunTime(pid int, out map[int]time.Duration) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, _ := os.ReadDir(dir)
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, t.Name(), "schedstat"))
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) > 0 {
			n, _ := strconv.ParseInt(f[0], 10, 64)
			out[tid] = time.Duration(n)
		}
	}
}

func printJail(w io.Writer, runs []*jailRun) {
	fmt.Fprintf(w, "\nThe jail's price: definitions straight to the daemon over gRPC, one daemon per variant, same workspace, interleaved in batches of 25 (n=%d each)\n", runs[0].requests)
	fmt.Fprintln(w, "CPU per request of the server's process tree (bwrap, init, gopls) from the kernel's per-thread run time, median over the batches (mean beside it); the daemon's own likewise")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "variant\tserver CPU µs/req\tvs production\tmean\tdaemon CPU µs/req\tmean\tp50 ms\tp99 ms\tserver RSS MiB\tself-test\tanswer\t")
	base := float64(pct(runs[0].serverBatches, .5))
	for _, r := range runs {
		per := float64(pct(r.serverBatches, .5))
		st := "passed"
		if !r.selfTestOK {
			st = "not run"
		}
		if r.v.unjailed || r.v.direct {
			st = "—"
		}
		same := "same"
		switch {
		case r.v.direct:
			same = "—"
		case r.answer != runs[0].answer:
			same = "DIFFERS: " + r.answer
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%+.0f %%\t%.1f\t%.1f\t%.1f\t%s\t%s\t%d\t%s\t%s\t\n", r.v.name, per/1e3, 100*(per-base)/base,
			float64(r.serverCPU)/float64(r.requests)/1e3, float64(pct(r.daemonBatches, .5))/1e3,
			float64(r.daemonCPU)/float64(r.requests)/1e3, ms(pct(r.lat, .5)), ms(pct(r.lat, .99)), r.rss>>20, st, same)
	}
	tw.Flush()
}

// sampleFiles is devstack.SampleRepo as a push's files, in path order.
func sampleFiles() []daemonclient.File {
	var files []daemonclient.File
	for p, content := range devstack.SampleRepo {
		sum := sha256.Sum256([]byte(content))
		files = append(files, daemonclient.File{Path: p, Data: []byte(content), SHA256: hex.EncodeToString(sum[:])})
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	return files
}

// sampleDefinition pushes the sample repository to the daemon at sock
// under a workspace of its own and returns a definition query on it, as
// the proxy would send it (the jail section's question).
func sampleDefinition(ctx context.Context, sock string) (*daemonclient.Shard, *daemonv1.QueryRequest, func(), error) {
	pool, err := daemonclient.Dial([]string{"unix://" + sock}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return nil, nil, nil, err
	}
	k := daemonclient.Key{TenantKey: randomHex(32), Repo: "hello", Commit: randomHex(20)}
	shard := pool.Pick(k)
	if _, err := shard.Push(ctx, k, newPrepareID(), sampleFiles()); err != nil {
		pool.Close()
		return nil, nil, nil, err
	}
	q := &daemonv1.QueryRequest{
		Workspace: &daemonv1.WorkspaceKey{TenantKey: k.TenantKey, Repo: k.Repo, Commit: k.Commit},
		Op:        daemonv1.Op_OP_DEFINITION, Path: "main.go", Position: &daemonv1.Position{Line: 10, Character: 20},
	}
	return shard, q, func() { pool.Close() }, nil
}
