package pool

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
	"github.com/hanzoai/lsp/daemon/internal/workspace"
	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
)

// Budget bounds what the pool holds; a zero field is no bound.
//
// Eviction is least-recently-used, with per-tenant fairness: the victim is
// always taken from the tenant holding the most of the resource under
// pressure (counting what the requester is about to add to its own
// tenant), and within that tenant it is the workspace used longest ago. So
// a lone tenant may use the whole budget, and a tenant that asks for more
// evicts its own workspaces first: it can push another tenant out only
// while that tenant holds at least as much as it does, and every tenant
// converges to an equal share under contention, with no per-tenant quota to
// configure. A workspace busy with a request (Acquire not yet released) is
// never evicted, nor is the one a server is being started for.
//
// Servers are evicted alone for MaxServers and MaxRSS: the tree stays and
// the next query restarts them. MaxDisk evicts whole workspaces (servers
// and tree); the next query answers "needs tree" and the proxy prepares it
// again. Homes (warm caches) count on disk too: one without any tree left
// goes first, and a repository's home goes with its last tree. With
// MaxDisk or without, the disk pass keeps the filesystem holding the
// store a reserve of free blocks and inodes (fsShort): a daemon started
// without a disk budget does not fill its disk.
//
// This eviction samples, so it is soft. Where servers are jailed with a
// memory cgroup, MaxRSS is also the kernel's limit on the cgroup holding
// every jail (jail.Options.PoolMemory): the hard bound, reached only when
// growth outruns the sampling.
type Budget struct {
	MaxServers int   // live language servers
	MaxRSS     int64 // bytes of resident memory over every server's process tree (TreeRSS)
	MaxDisk    int64 // allocated bytes of published trees plus homes; 0: the filesystem's reserve alone
}

// ErrBudget is returned when a server cannot start within the budget
// because every other workspace is busy.
var ErrBudget = errors.New("the daemon is at its budget and every other workspace is busy")

// ErrTreeOverBudget is a pushed tree larger than the whole disk budget:
// no eviction could make room for it, so it is refused before a byte is
// written (the proxy answers 413 tree_too_large).
var ErrTreeOverBudget = errors.New("the tree is larger than the daemon's disk budget")

// SetBudget sets the pool's budgets; call it before serving.
func (p *Pool) SetBudget(b Budget) {
	p.mu.Lock()
	p.budget = b
	p.mu.Unlock()
}

// Usage is what the pool holds, measured now.
type Usage struct {
	Workspaces int   // live workspaces
	Servers    int   // server reservations: starting or running
	RSS        int64 // TreeRSS summed over running servers
}

// Usage measures the pool.
func (p *Pool) Usage() Usage {
	m := p.measureRSS()
	p.mu.Lock()
	defer p.mu.Unlock()
	return Usage{Workspaces: len(p.live), Servers: p.nservers, RSS: m.total}
}

func (p *Pool) releaseServer() {
	p.mu.Lock()
	p.nservers--
	p.mu.Unlock()
}

// rssWatermarkPercent is where eviction starts, below the budget itself:
// servers keep growing between two measurements, and the budget is a
// ceiling the total must never cross, not a level to hover at.
const rssWatermarkPercent = 85

// killNow, as a stop's context, skips the servers' shutdown grace.
var killNow = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// rssHeadroomPercent is added to a spec's peak when reserving room for one
// more of its servers.
const rssHeadroomPercent = 20

// reserveServer makes room for one more server of spec s in w, under the
// RSS budget (by s's largest measured size so far) and the server budget,
// and takes one reservation.
func (p *Pool) reserveServer(ctx context.Context, w *Workspace, s *Spec) error {
	p.mu.Lock()
	// Reserve the spec's largest size seen so far plus headroom: two
	// servers of one kind on two repositories do not peak alike, and the
	// budget is a ceiling, not a target.
	est := max(p.rssPeak[s.ID], s.RSSEstimate) * (100 + rssHeadroomPercent) / 100
	p.mu.Unlock()
	if est > 0 && !p.enforceRSS(ctx, w, est) {
		return fmt.Errorf("start %s: memory: %w", s.ID, ErrBudget)
	}
	for {
		p.mu.Lock()
		if p.budget.MaxServers <= 0 || p.nservers < p.budget.MaxServers {
			p.nservers++
			p.mu.Unlock()
			return nil
		}
		held := map[string]int64{w.Key.TenantKey: 1}
		for _, x := range p.live {
			held[x.Key.TenantKey] += int64(x.serverCount())
		}
		victim := p.pickLocked(w, held, func(x *Workspace) bool { return x.serverCount() > 0 })
		var slots map[string]*slot
		if victim != nil {
			slots = victim.detachLocked()
		}
		stopping := p.stopping
		p.mu.Unlock()
		if victim == nil {
			if stopping > 0 {
				// Servers being stopped elsewhere free their room soon.
				select {
				case <-time.After(20 * time.Millisecond):
					continue
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return fmt.Errorf("start %s: %d servers: %w", s.ID, p.budget.MaxServers, ErrBudget)
		}
		p.log.Info("evicted language servers", "reason", "servers", "workspace", victim.Key.String(), "for", w.Key.String())
		victim.stopDetached(ctx, slots)
	}
}

// serverCount is how many server slots w holds.
func (w *Workspace) serverCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.servers)
}

// detachLocked takes w's servers out of service (p.mu held, w not busy:
// Acquire, which marks it busy, takes p.mu too, so no request can reach
// them afterwards).
func (w *Workspace) detachLocked() map[string]*slot {
	w.mu.Lock()
	slots := w.servers
	w.servers = map[string]*slot{}
	w.mu.Unlock()
	w.pool.stopping++
	return slots
}

func (w *Workspace) stopDetached(ctx context.Context, slots map[string]*slot) {
	w.stopSlots(ctx, slots)
	w.pool.mu.Lock()
	w.pool.stopping--
	w.pool.mu.Unlock()
}

// pickLocked chooses a victim other than req and not busy, for which has
// is true: from the tenant holding the most, then least recently used.
func (p *Pool) pickLocked(req *Workspace, held map[string]int64, has func(*Workspace) bool) *Workspace {
	var best *Workspace
	var bestHeld int64
	for _, x := range p.live {
		if x == req || x.busy.Load() > 0 || !has(x) {
			continue
		}
		h := held[x.Key.TenantKey]
		if best == nil || h > bestHeld || (h == bestHeld && x.lastUsed.Load() < best.lastUsed.Load()) {
			best, bestHeld = x, h
		}
	}
	return best
}

type rssMeasure struct {
	total int64
	by    map[*Workspace]int64
}

// measureRSS measures every running server's tree and remembers each
// spec's largest.
func (p *Pool) measureRSS() rssMeasure {
	rs := p.runningServers()
	pids := serverPids(rs)
	rss := TreeRSS(pids)
	m := rssMeasure{by: map[*Workspace]int64{}}
	p.mu.Lock()
	for i, r := range rs {
		n := rss[pids[i]]
		m.total += n
		m.by[r.w] += n
		if n > p.rssPeak[r.spec] {
			p.rssPeak[r.spec] = n
		}
	}
	p.mu.Unlock()
	return m
}

// runningServer is one server that has started, with its workspace.
type runningServer struct {
	w    *Workspace
	spec string
	srv  *runtime.Server
}

// runningServers lists every server that has started.
func (p *Pool) runningServers() []runningServer {
	var rs []runningServer
	p.mu.Lock()
	for _, w := range p.live {
		w.mu.Lock()
		for id, sl := range w.servers {
			if isDone(sl.ready) && sl.srv != nil {
				rs = append(rs, runningServer{w, id, sl.srv})
			}
		}
		w.mu.Unlock()
	}
	p.mu.Unlock()
	return rs
}

// serverPids are the pids of rs, in their order.
func serverPids(rs []runningServer) []int {
	pids := make([]int, len(rs))
	for i, r := range rs {
		pids[i] = r.srv.Pid()
	}
	return pids
}

// unlinkedByWorkspace is what each workspace's running servers hold on
// the workspaces' filesystem in unlinked open files (TreeUnlinked).
func (p *Pool) unlinkedByWorkspace() map[workspace.Key]int64 {
	var root unix.Stat_t
	if err := unix.Stat(p.store.Root(), &root); err != nil {
		return nil
	}
	rs := p.runningServers()
	pids := serverPids(rs)
	by := TreeUnlinked(pids, uint64(root.Dev))
	out := map[workspace.Key]int64{}
	for i, r := range rs {
		if n := by[pids[i]]; n > 0 {
			out[r.w.Key] += n
		}
	}
	return out
}

// enforceRSS evicts servers until the measured total plus extra (what req
// is about to start) fits MaxRSS. It reports false when it cannot because
// every other server is busy (a lone server may always run).
func (p *Pool) enforceRSS(ctx context.Context, req *Workspace, extra int64) bool {
	p.mu.Lock()
	max := p.budget.MaxRSS * rssWatermarkPercent / 100
	p.mu.Unlock()
	if max <= 0 {
		return true
	}
	p.enforcingRSS.Lock()
	defer p.enforcingRSS.Unlock()
	for {
		m := p.measureRSS()
		if m.total+extra <= max {
			return true
		}
		held := map[string]int64{}
		if req != nil {
			held[req.Key.TenantKey] += extra
		}
		for w, n := range m.by {
			held[w.Key.TenantKey] += n
		}
		p.mu.Lock()
		victim := p.pickLocked(req, held, func(x *Workspace) bool { return m.by[x] > 0 })
		var slots map[string]*slot
		if victim != nil {
			slots = victim.detachLocked()
		}
		p.mu.Unlock()
		if victim == nil {
			return m.total == 0
		}
		p.log.Info("evicted language servers", "reason", "rss", "workspace", victim.Key.String(), "rss", m.by[victim], "total", m.total, "budget", max)
		// Killed, not shut down: the memory is wanted now, and a server
		// given its shutdown grace (2 s) still counts all that time while
		// the servers it makes room for grow.
		victim.stopDetached(killNow, slots)
	}
}

// diskBlock is the allocation unit treeDiskEstimate assumes: ext4's and
// xfs's default block, tmpfs's page.
const diskBlock = 4096

// treeDiskEstimate is the disk a tree will take once written, for a
// manifest workspace.CheckManifest accepted: each file's size rounded up
// to a whole block, and a block for each distinct directory, the tree's
// own included. The disk budget measures published trees by what they
// allocate (workspace.Usage: st_blocks), so a tree being written must be
// reserved (Pool.incoming) and checked against MaxDisk the same way:
// by its declared bytes, 100,000 one-byte files were 100 KB against
// the budget and took 400 MiB, and a tree of empty files in deep
// directories took gigabytes for nothing. An empty file counts nothing
// (it allocates no block; its inode counts with the filesystem's
// reserve, fsShort).
func treeDiskEstimate(files []*daemonv1.FileEntry) int64 {
	var n int64
	dirs := map[string]struct{}{}
	for _, f := range files {
		n += (int64(f.GetSize()) + diskBlock - 1) / diskBlock * diskBlock
		p := f.GetPath()
		for i := strings.LastIndexByte(p, '/'); i > 0; i = strings.LastIndexByte(p, '/') {
			p = p[:i]
			if _, ok := dirs[p]; ok {
				break // and its parents with it
			}
			dirs[p] = struct{}{}
		}
	}
	return n + int64(len(dirs)+1)*diskBlock
}

// enforceDisk evicts homes without a tree, then whole workspaces, until the
// trees and homes on disk plus the trees being written (what they will
// take, treeDiskEstimate: each prepare checks before its first byte, and
// two at once must not both count on the same room) fit MaxDisk and leave
// the filesystem its reserve (fsShort). A home something may be writing is
// measured again when its last measure is older than maxAge (0: always;
// homeSizes).
// Without MaxDisk only the reserve holds, and nothing is measured while
// the filesystem has room even if the pool took it all.
func (p *Pool) enforceDisk(ctx context.Context, maxAge time.Duration) {
	p.mu.Lock()
	max := p.budget.MaxDisk
	var incoming int64
	for _, n := range p.incoming {
		incoming += n
	}
	p.mu.Unlock()
	if max <= 0 {
		max = math.MaxInt64
		// Not under enforcingDisk, so without the graves of a pass in
		// progress: they would only make the filesystem look roomier.
		pending := diskPending{float64(p.removingBytes.Load()), float64(p.removing.Load())}
		if bytes, inodes := p.fsShort(math.MaxInt64, math.Inf(1), incoming, pending); !bytes && !inodes {
			return
		}
	}
	p.enforcingDisk.Lock()
	p.enforceDiskLocked(ctx, max, maxAge)
	graves, bytes, inodes := p.graves, p.gravesBytes, int64(p.gravesInodes)
	p.graves, p.gravesBytes, p.gravesInodes = nil, 0, 0
	p.enforcingDisk.Unlock()
	if len(graves) == 0 {
		return
	}
	// What the pass evicted is out of the store and of its measure; its
	// removal can take long (a home may hold a million entries), and every
	// cold prepare waits for the pass's lock and the periodic pass holds up
	// the RSS budget's, so it is removed after, in the background. A pass
	// meanwhile counts its bytes and inodes free: they are on their way
	// out.
	remove := func() {
		if err := workspace.RemoveGraves(graves); err != nil {
			p.log.Warn("disk budget: remove evicted files", "err", err)
		}
		p.removing.Add(-inodes)
		p.removingBytes.Add(-bytes)
	}
	p.removing.Add(inodes)
	p.removingBytes.Add(bytes)
	// Added under p.mu, before Close (which sets closed under it) waits.
	p.mu.Lock()
	closed := p.closed
	if !closed {
		p.removals.Add(1)
	}
	p.mu.Unlock()
	if closed {
		remove()
		return
	}
	go func() {
		defer p.removals.Done()
		remove()
	}()
}

// bury keeps what a pass moved out of the store for removal once the pass
// has let go (enforcingDisk held).
func (p *Pool) bury(graves []string, bytes int64, inodes float64) {
	p.graves = append(p.graves, graves...)
	p.gravesBytes += bytes
	p.gravesInodes += inodes
}

// enforceDiskLocked is enforceDisk's pass, under enforcingDisk.
func (p *Pool) enforceDiskLocked(ctx context.Context, max int64, maxAge time.Duration) {
	undeletable := map[workspace.Home]bool{}
	// Homes too large to measure that could not be deleted this pass:
	// their workspaces were busy.
	stuck := map[workspace.Home]bool{}
	for {
		keys, err := p.store.List()
		if err != nil {
			p.log.Warn("disk budget: list trees", "err", err)
			return
		}
		homes, _ := p.store.Homes()
		var total, incoming int64
		held := map[string]int64{}
		p.mu.Lock()
		for k, n := range p.incoming {
			incoming += n
			held[k.TenantKey] += n
		}
		p.mu.Unlock()
		total = incoming
		// inodes: what the trees and homes take of the filesystem's inodes,
		// in all and by tenant (a jail's millions of empty files are nearly
		// free in bytes).
		var inodes float64
		heldInodes := map[string]int64{}
		hasTree := map[workspace.Home]bool{}
		for _, k := range keys {
			m := p.treeSize(k)
			total += m.bytes
			held[k.TenantKey] += m.bytes
			inodes += m.inodes
			heldInodes[k.TenantKey] += int64(m.inodes)
			hasTree[k.Home()] = true
		}
		sizes := p.homeSizes(homes, maxAge)
		var tooLarge []workspace.Home
		for i, h := range homes {
			total += sizes[i].bytes
			held[h.TenantKey] += sizes[i].bytes
			inodes += sizes[i].inodes
			heldInodes[h.TenantKey] += int64(sizes[i].inodes)
			if sizes[i].over && !undeletable[h] && !stuck[h] {
				tooLarge = append(tooLarge, h)
			}
		}
		// Files a server deleted while holding them open are on the disk
		// too: charged to its tenant, and its workspace is that tenant's
		// first victim (evicting it stops its servers, which frees them).
		unlinked := p.unlinkedByWorkspace()
		for k, n := range unlinked {
			total += n
			held[k.TenantKey] += n
		}
		bytesShort, inodesShort := p.fsShort(total, inodes, incoming, p.pendingLocked())
		if total <= max && !bytesShort && !inodesShort && len(tooLarge) == 0 {
			return
		}
		if p.onDiskMeasured != nil {
			p.onDiskMeasured()
		}
		// A home too large to measure goes whatever the total, with its
		// repository's workspaces, and costs nothing else: what it holds is
		// unknown, so it must not evict another tenant's.
		if len(tooLarge) > 0 {
			h := tooLarge[0]
			var gone bool
			if hasTree[h] {
				gone = p.evictHomeTrees(ctx, keys, h)
			} else if !p.preparingRepo(h) {
				gone = p.deleteOrphan(h, undeletable, "reason", "entries")
			}
			if !gone {
				stuck[h] = true
			}
			continue
		}
		// Over, in bytes or inodes: a home without a tree goes first, the one
		// changed longest ago.
		var orphans []workspace.Home
		modTime := map[workspace.Home]time.Time{}
		for _, h := range homes {
			if hasTree[h] || p.preparingRepo(h) || undeletable[h] {
				continue
			}
			orphans = append(orphans, h)
			modTime[h] = p.store.HomeModTime(h)
		}
		slices.SortFunc(orphans, func(a, b workspace.Home) int { return modTime[a].Compare(modTime[b]) })
		deleted := false
		for _, h := range orphans {
			if deleted = p.deleteOrphan(h, undeletable, "reason", "disk", "total", total, "budget", budgetArg(max)); deleted {
				break
			}
		}
		if deleted {
			continue
		}
		// By what is short: bytes (over the budget, or the filesystem's
		// blocks), else inodes.
		by := held
		if total <= max && !bytesShort {
			by = heldInodes
		}
		victim, ok := p.pickTree(keys, by, unlinked)
		if !ok {
			p.log.Warn("disk budget exceeded and every workspace is busy", "total", total, "budget", budgetArg(max), "bytes_short", bytesShort, "inodes_short", inodesShort)
			return
		}
		if !p.evictTree(ctx, victim) {
			continue
		}
		p.log.Info("evicted a workspace", "reason", "disk", "workspace", victim.String(), "total", total, "budget", budgetArg(max), "bytes_short", bytesShort, "inodes_short", inodesShort)
	}
}

// reservePercent is the share of the workspaces' filesystem's blocks, and
// of its inodes, that stays free whatever the budget: below it the disk
// pass evicts by the bytes, or the inodes, each tenant holds.
const reservePercent = 5

// fsShort reports whether the filesystem holding the store has fewer than
// reservePercent of its blocks (bytes), or of its inodes (inodes), free
// once the trees being written (incoming bytes, not yet on it) are, while
// the pool's own trees and homes (held bytes, with incoming; inodes) take
// most of what is in use: only then does evicting them give room back (on
// a filesystem shared with others, what others use is not the pool's to
// free). Nor when evicting all the pool holds could not give the reserve
// back (trees being written that can never fit: their write fails, and
// the workspaces stay). Blocks count as an unprivileged writer sees them
// (a jailed server: f_bavail, without the blocks kept for root), in
// fragments (f_frsize). A filesystem that makes inodes as it needs them
// (btrfs: no count) is never short of them. pending is what passes moved
// aside and have not yet removed: free as far as a pass can help.
func (p *Pool) fsShort(held int64, inodes float64, incoming int64, pending diskPending) (bytes, inodesShort bool) {
	var fs unix.Statfs_t
	if unix.Statfs(p.store.Root(), &fs) != nil {
		return false, false
	}
	if fs.Bavail <= fs.Bfree && fs.Bfree <= fs.Blocks {
		unit := float64(fs.Frsize)
		if unit <= 0 {
			unit = float64(fs.Bsize)
		}
		free := float64(fs.Bavail)*unit + pending.bytes - float64(incoming)
		used := float64(fs.Blocks-fs.Bfree)*unit - pending.bytes + float64(incoming)
		reserve := (free + used) * reservePercent / 100
		evictable := float64(held) - float64(incoming)
		bytes = free < reserve && float64(held) > used/2 && free+evictable >= reserve
	}
	if fs.Files > 0 && fs.Ffree <= fs.Files {
		free := float64(fs.Ffree) + pending.inodes
		used := float64(fs.Files-fs.Ffree) - pending.inodes
		inodesShort = free < float64(fs.Files)*reservePercent/100 && inodes > used/2
	}
	return bytes, inodesShort
}

// diskPending is what disk passes moved aside and have not yet removed.
type diskPending struct{ bytes, inodes float64 }

// pendingLocked is diskPending with the graves of the pass in progress;
// enforcingDisk must be held.
func (p *Pool) pendingLocked() diskPending {
	return diskPending{
		bytes:  float64(p.gravesBytes + p.removingBytes.Load()),
		inodes: p.gravesInodes + float64(p.removing.Load()),
	}
}

// budgetArg is max for a log line: none when only the reserve bounds.
func budgetArg(max int64) any {
	if max == math.MaxInt64 {
		return "none"
	}
	return max
}

// deleteOrphan moves home h out of the store (p.graves: called under
// enforcingDisk), h listed without a tree, unless something of
// its repository has come since: the trees were listed before the homes
// were measured, which takes seconds, so a prepare of the repository may
// have published meanwhile. Whether h is still an orphan is decided again,
// under the pool's lock, as it is taken for deletion. It reports whether h
// was taken; one that would not go is added to undeletable, passed over
// from then on rather than tried again and again (one home that will not
// go must not stop the budget). The log line says why, with logArgs.
func (p *Pool) deleteOrphan(h workspace.Home, undeletable map[workspace.Home]bool, logArgs ...any) bool {
	p.mu.Lock()
	deleting, ok := p.claimHomeLocked(h, workspace.Key{})
	p.mu.Unlock()
	if !ok {
		return false
	}
	p.log.Info("evicted a home", logArgs...)
	m := p.homes.last(h)
	graves, err := p.store.BuryHome(h)
	p.bury(graves, m.bytes, m.inodes)
	p.homes.forget(h)
	p.releaseHome(h, deleting)
	if err != nil {
		p.log.Warn("disk budget: delete home", "err", err)
		undeletable[h] = true
	}
	return true
}

// evictHomeTrees evicts every workspace of home h's repository that is not
// busy (the last one takes the home with it); it reports whether any went.
func (p *Pool) evictHomeTrees(ctx context.Context, keys []workspace.Key, h workspace.Home) bool {
	var any bool
	for _, k := range keys {
		if k.Home() == h && p.evictTree(ctx, k) {
			p.log.Info("evicted a workspace", "reason", "entries", "workspace", k.String())
			any = true
		}
	}
	return any
}

// activeHomeMaxAge is how old the measure of a home something may be
// writing can be for the check made before a tree is written: the periodic
// pass measures every such home afresh each diskEvery ticks, so a burst of
// cold prepares does not walk them again meanwhile (they grow by what their
// servers cache, slowly beside a tree; the tree's own bytes are exact).
const activeHomeMaxAge = 30 * time.Second

// homeCache keeps each home's last measure: Store.HomeUsage walks every file
// under a home (a Go workspace's build and module caches hold thousands),
// and a daemon keeps the homes of every repository it served. A home
// changes only while something of its repository writes it: a server of
// one of its workspaces, from its slot's creation until its process has
// exited; a prepare or a deletion of one (the home's creation, the
// dependency phase); a late dependency phase. touch stamps a home when
// such a writer begins and when a server has exited, so a measure begun
// while no writer was active, with no stamp since, is still exact.
type homeCache struct {
	mu       sync.Mutex // taken last: held while taking no other lock
	seq      uint64
	touched  map[workspace.Home]uint64 // the home's last stamp
	measured map[workspace.Home]homeMeasure
}

type homeMeasure struct {
	bytes  int64
	inodes float64
	over   bool      // too many entries to measure (Store.HomeUsage)
	at     time.Time // when the measure began
	stamp  uint64    // the home's stamp then
	idle   bool      // no writer was active then
}

// touch stamps k's home. A writer registers under the lock homeSizes
// looks for it under (the pool's for a prepare, the workspace's for a
// server slot), touching first.
func (c *homeCache) touch(k workspace.Key) {
	c.mu.Lock()
	c.seq++
	c.touched[k.Home()] = c.seq
	c.mu.Unlock()
}

func (c *homeCache) forget(h workspace.Home) {
	c.mu.Lock()
	delete(c.touched, h)
	delete(c.measured, h)
	c.mu.Unlock()
}

// last is h's last measure (zero: never measured).
func (c *homeCache) last(h workspace.Home) homeMeasure {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.measured[h]
}

// homeSizes is the disk each of hs takes (Store.HomeUsage), walked again
// only where it may have changed: a home measured while nothing wrote it
// and untouched since is not; one something may be writing is when its
// measure is older than maxAge.
func (p *Pool) homeSizes(hs []workspace.Home, maxAge time.Duration) []homeMeasure {
	now := time.Now()
	sizes := make([]homeMeasure, len(hs))
	next := make([]homeMeasure, len(hs))
	var walk []int
	p.mu.Lock()
	// The stamps are read before the writers are looked for: a writer that
	// touched before its stamp was read is registered by the time its lock
	// is taken below, and one that touches later leaves a newer stamp.
	p.homes.mu.Lock()
	for i, h := range hs {
		next[i] = homeMeasure{at: now, stamp: p.homes.touched[h]}
	}
	p.homes.mu.Unlock()
	writing := p.writersLocked()
	p.homes.mu.Lock()
	for i, h := range hs {
		next[i].idle = !writing[h]
		m, ok := p.homes.measured[h]
		switch {
		case ok && m.idle && next[i].idle && m.stamp == next[i].stamp,
			ok && now.Sub(m.at) < maxAge:
			sizes[i] = m
		default:
			walk = append(walk, i)
		}
	}
	p.homes.mu.Unlock()
	p.mu.Unlock()
	for _, i := range walk {
		var complete bool
		next[i].bytes, next[i].inodes, complete = p.store.HomeUsage(hs[i])
		next[i].over = !complete
		sizes[i] = next[i]
		p.homes.mu.Lock()
		p.homes.measured[hs[i]] = next[i]
		p.homes.mu.Unlock()
	}
	return sizes
}

// writersLocked is the set of homes something may be writing now (p.mu
// held): those of keys being prepared or deleted, and of live workspaces
// with a server slot or a dependency phase running.
func (p *Pool) writersLocked() map[workspace.Home]bool {
	out := map[workspace.Home]bool{}
	for k := range p.preparing {
		out[k.Home()] = true
	}
	for k, w := range p.live {
		if !w.DepsDone() || w.serverCount() > 0 {
			out[k.Home()] = true
		}
	}
	return out
}

// treeMeasure is one measurement of a published tree's disk.
type treeMeasure struct {
	bytes  int64
	inodes float64
	// deps: the workspace's node_modules was there when measured. A tree
	// measured before its dependency phase installed them is measured
	// again, so the budget counts the packages too.
	deps bool
}

func (p *Pool) treeSize(k workspace.Key) treeMeasure {
	nm := runtime.NodeModules(runtime.Workspace{Root: p.store.TreeDir(k)})
	p.mu.Lock()
	m, ok := p.treeBytes[k]
	p.mu.Unlock()
	if ok && (m.deps || !exists(nm)) {
		return m
	}
	// Looked at before measuring: packages that appear during the walk
	// are counted at the next pass.
	m.deps = exists(nm)
	m.bytes, m.inodes = p.store.TreeUsage(k)
	p.mu.Lock()
	p.treeBytes[k] = m
	p.mu.Unlock()
	return m
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// claimHomeLocked takes h for deletion (p.mu held) when nothing of its
// repository is live or being written or evicted (but except, the key whose
// eviction deletes it) and no deletion of h is under way, and returns what
// releaseHome closes once it is gone. Meanwhile a prepare of the repository
// waits (Prepare): a home deleted under a tree just published would leave
// its servers without their caches and unable to start.
func (p *Pool) claimHomeLocked(h workspace.Home, except workspace.Key) (chan struct{}, bool) {
	if _, ok := p.deletingHomes[h]; ok {
		return nil, false
	}
	for k := range p.live {
		if k.Home() == h {
			return nil, false
		}
	}
	for k := range p.preparing {
		if k != except && k.Home() == h {
			return nil, false
		}
	}
	done := make(chan struct{})
	p.deletingHomes[h] = done
	return done, true
}

// releaseHome ends a deletion claimHomeLocked began.
func (p *Pool) releaseHome(h workspace.Home, done chan struct{}) {
	p.mu.Lock()
	delete(p.deletingHomes, h)
	p.mu.Unlock()
	close(done)
}

func (p *Pool) preparingRepo(h workspace.Home) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k := range p.preparing {
		if k.TenantKey == h.TenantKey && k.Repo == h.Repo {
			return true
		}
	}
	return false
}

// pickTree chooses the published tree to evict: not busy, not being
// written or evicted, from the tenant holding the most disk, then the one
// whose servers hold the most in unlinked open files, then the least
// recently used (a tree no request touched since the daemon started counts
// from its publication).
func (p *Pool) pickTree(keys []workspace.Key, held map[string]int64, unlinked map[workspace.Key]int64) (workspace.Key, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var best workspace.Key
	var bestHeld, bestUnlinked, bestUsed int64
	found := false
	for _, k := range keys {
		if _, busy := p.preparing[k]; busy {
			continue
		}
		used := int64(0)
		if w, ok := p.live[k]; ok {
			if w.busy.Load() > 0 {
				continue
			}
			used = w.lastUsed.Load()
		} else {
			used = p.store.ModTime(k).UnixNano()
		}
		h, u := held[k.TenantKey], unlinked[k]
		if !found || h > bestHeld || h == bestHeld && (u > bestUnlinked || u == bestUnlinked && used < bestUsed) {
			best, bestHeld, bestUnlinked, bestUsed, found = k, h, u, used, true
		}
	}
	return best, found
}

// evictTree stops k's servers and moves its tree out of the store, and its
// repository's home when no other tree of it remains (p.graves: called
// under enforcingDisk). While it runs, k answers "needs tree" and a prepare
// of k waits. It reports false when k became busy.
func (p *Pool) evictTree(ctx context.Context, k workspace.Key) bool {
	p.mu.Lock()
	w, live := p.live[k]
	if live && w.busy.Load() > 0 {
		p.mu.Unlock()
		return false
	}
	if _, busy := p.preparing[k]; busy {
		p.mu.Unlock()
		return false
	}
	done := make(chan struct{})
	p.homes.touch(k)
	p.preparing[k] = done
	delete(p.live, k)
	tree := p.treeBytes[k]
	delete(p.treeBytes, k)
	p.mu.Unlock()
	if live {
		w.close(ctx)
	}
	graves, err := p.store.Bury(k)
	p.bury(graves, tree.bytes, tree.inodes)
	if err != nil {
		p.log.Warn("disk budget: delete tree", "workspace", k.String(), "err", err)
	}
	h := k.Home()
	if keys, err := p.store.List(); err == nil {
		last := !slices.ContainsFunc(keys, func(o workspace.Key) bool { return o.Home() == h })
		var deleting chan struct{}
		if last {
			p.mu.Lock()
			deleting, last = p.claimHomeLocked(h, k)
			p.mu.Unlock()
		}
		if last {
			m := p.homes.last(h)
			graves, err := p.store.BuryHome(h)
			p.bury(graves, m.bytes, m.inodes)
			if err != nil {
				p.log.Warn("disk budget: delete home", "err", err)
			}
			p.homes.forget(h)
			p.releaseHome(h, deleting)
		}
	}
	p.mu.Lock()
	delete(p.preparing, k)
	close(done)
	p.mu.Unlock()
	return true
}

// Enforce holds the pool to its RSS and disk budgets now (memory grows
// while servers run; homes grow with caches).
func (p *Pool) Enforce(ctx context.Context) {
	p.enforceRSS(ctx, nil, 0)
	p.enforceDisk(ctx, 0)
}

// diskEvery is how many Watch ticks pass between disk passes: measuring
// homes walks their files, far costlier than reading /proc, and disk use
// grows slowly between the checks made before every tree is written.
const diskEvery = 30

// Watch enforces the RSS budget every interval, and the disk budget every
// diskEvery intervals, until ctx ends.
func (p *Pool) Watch(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.enforceRSS(ctx, nil, 0)
			if n%diskEvery == 0 {
				p.enforceDisk(ctx, 0)
			}
		}
	}
}

// settleFor and settleEvery shape the sampling of a new server: a language
// server reaches its peak while it loads the workspace for its first
// requests, after initialize, so the spec's peak — what admission reserves
// for the next start — is learned from that curve, and an overshoot is
// evicted within settleEvery rather than at the next periodic pass.
const (
	settleFor   = 15 * time.Second
	settleEvery = 100 * time.Millisecond
)

func (p *Pool) settle(w *Workspace) {
	p.mu.Lock()
	bounded := p.budget.MaxRSS > 0
	p.mu.Unlock()
	if !bounded {
		return
	}
	t := time.NewTicker(settleEvery)
	defer t.Stop()
	end := time.After(settleFor)
	for {
		select {
		case <-p.life.Done():
			return
		case <-end:
			return
		case <-t.C:
			p.enforceRSS(p.life, w, 0)
		}
	}
}
