package soak

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/daemonclient"
	"github.com/hanzoai/lsp/proxy/internal/devstack"
	"google.golang.org/grpc/status"
)

// diskFault is what the "disk budget reached" fault found. Its budget is
// shard d1's LSP_POOL_MAX_DISK lowered to half of what d1 held, so the
// daemon must evict under load; the ledger checks then look at the evicted
// workspaces' later prepares.
type diskFault struct {
	Began       time.Time // the fault began (d1 stopped for its restart)
	Start       time.Time // d1 listens again, under the lowered budget
	Configured  int64     // the run's LSP_POOL_MAX_DISK
	Budget      int64     // the lowered one
	UsageBefore int64     // d1's trees and homes when the fault began
	UsagePeak   int64     // the most seen while the lowered budget held
	UsageUnder  int64     // the first reading at or under the budget
	UnderIn     time.Duration
	Under       bool
	UsageEnd    int64 // after every warm workspace answered again
	Evicted     map[treeKey]bool

	// A tree larger than the whole (lowered) budget, pushed to d1 directly:
	// within the proxy's tree bounds no contract code exists for it (the
	// proxy's LSP_TREE_MAX_BYTES is the only tree-size refusal, 413).
	OversizeBytes    int64
	OversizeAnswer   string // what the daemon answered
	OversizeUsage    int64  // d1's use right after it answered
	OversizeEvicted  int    // workspaces evicted to make room for it
	OversizeReleased bool   // the workspace was deleted again
	OversizeAfter    int64  // d1's use once it was deleted

	// Every evicted workspace asked again through the proxy (a prepare
	// at its commit, by its org): how many, and how many answered 200.
	Reasked, Answered int
	Unanswered        []string

	// Filled by the ledger checks.
	Reprepared        int // evicted workspaces prepared again through the proxy
	RepreparedCharged int // of those, charged a second time (must be 0)
	// RepreparedFirstCharge counts evicted workspaces whose re-prepare was
	// their first charge: the tree had been written but not charged (its
	// hold released when the ledger was down at capture). A second charge
	// of any revision fails the run (one charge per revision).
	RepreparedFirstCharge int
}

// treeKey is one published workspace on a daemon's disk.
type treeKey struct{ tenant, repo, commit string }

// treeKeys lists the published trees below a daemon root
// (root/trees/<tenant>/<repo>/<commit>).
func treeKeys(root string) map[treeKey]bool {
	out := map[treeKey]bool{}
	tenants, _ := os.ReadDir(filepath.Join(root, "trees"))
	for _, t := range tenants {
		repos, _ := os.ReadDir(filepath.Join(root, "trees", t.Name()))
		for _, rp := range repos {
			commits, _ := os.ReadDir(filepath.Join(root, "trees", t.Name(), rp.Name()))
			for _, c := range commits {
				out[treeKey{t.Name(), rp.Name(), c.Name()}] = true
			}
		}
	}
	return out
}

// diskUsage is what LSP_POOL_MAX_DISK bounds: allocated bytes (st_blocks)
// of the published trees and the homes below a daemon root.
func diskUsage(root string) int64 {
	var n int64
	for _, sub := range []string{"trees", "homes"} {
		_ = filepath.WalkDir(filepath.Join(root, sub), func(_ string, e fs.DirEntry, err error) error {
			if err != nil {
				return nil // removed while walking: an eviction
			}
			if fi, err := e.Info(); err == nil {
				if st, ok := fi.Sys().(*syscall.Stat_t); ok {
					n += st.Blocks * 512
				}
			}
			return nil
		})
	}
	return n
}

// restartShard restarts daemon i gracefully with LSP_POOL_MAX_DISK
// maxDisk; its trees stay on disk, its servers do not.
func (r *run) restartShard(ctx context.Context, i int, maxDisk int64) error {
	old := r.daemonList()[i]
	old.Stop()
	dir := filepath.Join(r.cfg.Dir, fmt.Sprintf("d%d", i))
	d, err := devstack.StartDaemon(ctx, devstack.DaemonOptions{
		Bin: r.cfg.DaemonBin, Dir: dir, Listen: "unix://" + filepath.Join(dir, "daemon.sock"), Env: r.daemonEnv(maxDisk),
		Servers: devstack.Options{Gopls: r.cfg.Gopls, TypeScript: r.cfg.TypeScript, Unjailed: r.cfg.Unjailed},
	})
	if d != nil {
		r.daemonsMu.Lock()
		r.daemons[i] = d
		r.daemonsMu.Unlock()
	}
	return err
}

// diskBudget lowers shard d1's disk budget to half of what it holds (a
// graceful restart: the operator's lever, and the only way to change the
// setting), so the daemon must evict least recently used workspaces while
// the load runs. Recovered is when d1 is back under its budget and every
// warm workspace answers 200 again (the evicted ones after a re-prepare,
// which the ledger checks hold to 0¢). Then a tree larger than the whole
// budget is pushed to d1 directly, and the run's budget is restored.
func (r *run) diskBudget(ctx context.Context) FaultResult {
	f := FaultResult{Name: "disk budget reached (shard d1's LSP_POOL_MAX_DISK halved under load)"}
	if r.cfg.MaxDisk <= 0 {
		f.Skipped = "the run sets no LSP_POOL_MAX_DISK"
		return f
	}
	const shard = 1
	root := r.daemonList()[shard].Root
	df := &diskFault{Configured: r.cfg.MaxDisk, UsageBefore: diskUsage(root), Evicted: map[treeKey]bool{}}
	r.disk = df
	before := treeKeys(root)
	df.Budget = max(df.UsageBefore/2, 12<<20)
	if df.Budget >= df.UsageBefore {
		df.Budget = df.UsageBefore / 2
	}
	rctx := context.WithoutCancel(ctx)
	df.Began = time.Now()
	if err := r.restartShard(rctx, shard, df.Budget); err != nil {
		f.Detail = "restart with the lowered budget failed: " + err.Error()
		return f
	}
	// Timed from the moment the lowered budget holds (the daemon listens).
	df.Start = time.Now()
	// The daemon evicts before each tree it writes and every 30 s.
	deadline := df.Start.Add(2 * time.Minute)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		u := diskUsage(root)
		df.UsagePeak = max(df.UsagePeak, u)
		now := treeKeys(root)
		for k := range before {
			if !now[k] {
				df.Evicted[k] = true
			}
		}
		if u <= df.Budget {
			df.Under, df.UnderIn, df.UsageUnder = true, time.Since(df.Start).Round(time.Millisecond), u
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if df.Under {
		r.recover(ctx, &f)
		f.RecoverIn = time.Since(df.Start).Round(time.Millisecond)
	} else {
		f.RecoverIn = time.Since(df.Start).Round(time.Millisecond)
	}
	df.UsageEnd = diskUsage(root)
	for k := range before {
		if !treeKeys(root)[k] {
			df.Evicted[k] = true
		}
	}

	r.oversize(ctx, df, shard)
	now := treeKeys(root)
	for k := range before {
		if !now[k] {
			df.Evicted[k] = true
		}
	}

	var restored string
	if err := r.restartShard(rctx, shard, r.cfg.MaxDisk); err != nil {
		restored = "; restoring the budget failed: " + err.Error()
		f.Recovered = false
	} else {
		g := FaultResult{}
		r.recover(ctx, &g)
		restored = fmt.Sprintf("; budget restored (graceful restart), every warm workspace answered again in %v", g.RecoverIn)
		if !g.Recovered {
			f.Recovered = false
			restored += " (**not recovered**)"
		}
	}
	if !df.Under {
		f.Recovered = false
	}
	r.reask(ctx, df)
	if df.Reasked != df.Answered {
		f.Recovered = false
	}
	f.Detail = fmt.Sprintf("d1 held %s, budget lowered to %s (graceful restart): %d workspaces evicted under load, under budget after %v, then every warm workspace answered; %s%s",
		mibs(df.UsageBefore), mibs(df.Budget), len(df.Evicted), df.UnderIn, df.oversizeNote(), restored)
	return f
}

// oversize pushes, straight to the shard, one tree larger than its whole
// disk budget, records what the daemon did, and deletes it again. It goes
// around the proxy (whose LSP_TREE_MAX_BYTES, below the budget, would
// answer 413 first), so it writes no ledger row.
func (r *run) oversize(ctx context.Context, df *diskFault, shard int) {
	d := r.daemonList()[shard]
	pool, err := daemonclient.New([]string{"unix://" + filepath.Join(filepath.Dir(d.Root), "daemon.sock")}, daemonclient.Options{})
	if err != nil {
		df.OversizeAnswer = "dial: " + err.Error()
		return
	}
	defer pool.Close()
	s := pool.Shards()[0]
	const fileBytes = 4 << 20
	n := int(df.Budget/fileBytes) + 2
	// Data only: no language, so no server starts on it.
	files := make([]daemonclient.File, 0, n)
	for i := 0; i < n; i++ {
		b := make([]byte, fileBytes)
		_, _ = rand.Read(b)
		files = append(files, daemonclient.File{Path: fmt.Sprintf("blob/b%03d.bin", i), Data: b})
	}
	for i := range files {
		sum := sha256.Sum256(files[i].Data)
		files[i].SHA256 = hex.EncodeToString(sum[:])
		df.OversizeBytes += int64(len(files[i].Data))
	}
	tk := sha256.Sum256([]byte("soak-oversize-tenant"))
	cm := sha256.Sum256([]byte(time.Now().String()))
	k := daemonclient.Key{TenantKey: hex.EncodeToString(tk[:]), Repo: "oversize", Commit: hex.EncodeToString(cm[:20])}
	before := len(treeKeys(d.Root))
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	resp, err := s.Push(pctx, k, uuid4(), files)
	files = nil
	df.OversizeUsage = diskUsage(d.Root)
	after := len(treeKeys(d.Root))
	if err != nil {
		df.OversizeAnswer = fmt.Sprintf("refused (%s): %v", status.Code(err), err)
		df.OversizeEvicted = max(0, before-after)
	} else {
		df.OversizeAnswer = fmt.Sprintf("accepted (prepared=%v)", resp.GetPrepared())
		df.OversizeEvicted = max(0, before-(after-1))
	}
	_, err = s.Delete(pctx, k)
	df.OversizeReleased = err == nil
	df.OversizeAfter = diskUsage(d.Root)
}

func (df *diskFault) oversizeNote() string {
	if df.OversizeBytes == 0 {
		return "no oversize tree pushed"
	}
	return fmt.Sprintf("a %s tree pushed to d1 directly (over its whole %s budget): %s, d1 then held %s (%d workspaces evicted meanwhile), %s once it was deleted",
		mibs(df.OversizeBytes), mibs(df.Budget), df.OversizeAnswer, mibs(df.OversizeUsage), df.OversizeEvicted, mibs(df.OversizeAfter))
}

func mibs(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// uuid4 is a random RFC 4122 version 4 UUID (the daemon's prepare id form).
func uuid4() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return strings.Join([]string{h[:8], h[8:12], h[12:16], h[16:20], h[20:]}, "-")
}

// reask sends, for every evicted workspace, a prepare of its commit by its
// org through the proxy: each must answer 200 again (a re-prepare, which
// the ledger checks hold to 0¢). The org, repository and commit come from
// the workspace's rows, found by its tenant key.
func (r *run) reask(ctx context.Context, df *diskFault) {
	pool := r.stack.Ledger.Pool()
	for _, k := range sortedTreeKeys(df.Evicted) {
		var org string
		err := pool.QueryRow(ctx, `SELECT payer_org FROM v_ledger_rows WHERE tenant_key = $1 AND repo = $2 AND commit = $3 LIMIT 1`,
			k.tenant, k.repo, k.commit).Scan(&org)
		if err != nil {
			continue // never prepared through the proxy (the oversize tree), or the ledger is down
		}
		t := r.tenantOf(org)
		if t == nil {
			continue
		}
		df.Reasked++
		b, _ := json.Marshal(map[string]any{"repo": k.repo, "rev": k.commit})
		rq := req{route: "/v1/lsp/prepare", body: b, jwt: t.jwt, forge: t.forge, org: t.org, op: "prepare"}
		var a answer
		for try := 0; try < 10 && ctx.Err() == nil; try++ {
			pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			_, a, _ = r.client.do(pctx, rq)
			cancel()
			if a.status != 502 && a.status != 503 && a.status != 504 {
				break
			}
			sleepCtx(ctx, time.Second)
		}
		if a.status == 200 {
			df.Answered++
		} else {
			df.Unanswered = append(df.Unanswered, fmt.Sprintf("%s %s@%.12s: %d %s", org, k.repo, k.commit, a.status, a.code))
		}
	}
}

func sortedTreeKeys(m map[treeKey]bool) []treeKey {
	out := make([]treeKey, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		return a.tenant+a.repo+a.commit < b.tenant+b.repo+b.commit
	})
	return out
}
