package soak

import (
	"fmt"
	"runtime"
	"sort"
	"strings"
	"time"
)

// Report is what one run found.
type Report struct {
	Config  Config
	Elapsed time.Duration
	// LoadStart and LoadEnd are /proc/loadavg (1, 5, 15 minutes) when the
	// load began and when it ended: the machine is shared.
	LoadStart, LoadEnd string

	Outcomes []outcome
	Faults   []FaultResult
	Hostile  []HostileResult
	Leavers  []string // request ids of the clients that left mid-prepare
	// LeaversCharged says, per leaver, whether its prepare was charged
	// (it had started its push when the client left).
	LeaversCharged []bool

	Rows            map[rowRule]*RowCount
	RowsWritten     int
	PrepareRows     int
	RecoveredRows   int // prepare rows a later answer captured for a proxy that lost the reply
	QueryAndPrepare int // failed requests with a query row and, later, their prepare row
	LiveHoldsAtEnd  int
	UnsettledAtEnd  int // live or expired holds when the settler's wait ended
	HoldsExpired    int
	Balances        []string
	ChargedTwice    int // revisions charged more than once (must be 0)
	RepreparesFree  int // 0¢ prepare rows (reason reprepare): evictions, restarts, failover
	Reconcile       string
	ReconcileOK     bool

	// RetryAfterDue counts the 429 and 503 answers, RetryAfterSent those
	// that carried a valid Retry-After.
	RetryAfterDue, RetryAfterSent int

	Healthy         bool
	Before, After   Resources
	Strays          []int
	DaemonRSSMaxKiB int64
	TreeRSSMaxKiB   int64
	DaemonRSSEndKiB int64
	TreeRSSEndKiB   int64
	LanguageServers int
	ServerRSSMaxKiB []int64 // per daemon, its language servers' peak (against Config.MaxRSS)
	// PoolChargedMaxKiB is, per daemon, the kernel's high-water mark of the
	// memory cgroup that holds every jail (what LSP_POOL_MAX_RSS bounds
	// hard); nil when the daemons have no such cgroup (unjailed).
	PoolChargedMaxKiB []int64

	Disk *diskFault // the disk budget fault, nil when not injected
	// OutsideRequests counts requests that reached the npm registry or the
	// host the hostile lockfiles point at: always 0.
	OutsideRequests int64

	Failures []string
}

// OK reports whether every invariant held.
func (rep *Report) OK() bool { return len(rep.Failures) == 0 }

// Markdown renders the report as the table RELIABILITY.md records.
func (rep *Report) Markdown() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	n := len(rep.Outcomes)
	secs := rep.Elapsed.Seconds()
	if secs == 0 {
		secs = 1
	}
	p("| figure | value |\n|---|---|\n")
	commits := "no new revisions"
	if rep.Config.CommitEvery > 0 {
		commits = fmt.Sprintf("a new revision every %v", rep.Config.CommitEvery)
	}
	p("| run | %v, %d workers, %d orgs × %d repos (+ the hostile org), %s, under -race |\n",
		rep.Elapsed.Round(time.Second), rep.Config.Workers, rep.Config.Orgs, rep.Config.Repos, commits)
	jail := "jailed (bubblewrap)"
	if rep.Config.Unjailed {
		jail = "unjailed (LSP_UNJAILED=1)"
	}
	langs := "Go (pinned gopls)"
	if rep.Config.TypeScript != "" {
		langs += " and TypeScript (pinned typescript-language-server)"
	}
	p("| daemons | 2, language servers %s; %s; budgets per daemon: LSP_POOL_MAX_SERVERS=%s, LSP_POOL_MAX_RSS=%s, LSP_POOL_MAX_DISK=%s |\n",
		jail, langs, bound(int64(rep.Config.MaxServers), func(v int64) string { return fmt.Sprint(v) }), bound(rep.Config.MaxRSS, mibs), bound(rep.Config.MaxDisk, mibs))
	p("| machine load average (1/5/15 min) | %s at the start, %s at the end (%d cores) |\n", rep.LoadStart, rep.LoadEnd, runtime.NumCPU())
	p("| requests answered | %d (%.1f/s) |\n", n, float64(n)/secs)

	ok, cold := 0, 0
	codes := map[string]int{}
	for _, o := range rep.Outcomes {
		switch {
		case o.status == 200:
			ok++
			if o.cold {
				cold++
			}
		case o.status == 0:
			codes["(no answer: the client left)"]++
		default:
			codes[fmt.Sprintf("%d %s", o.status, o.code)]++
		}
	}
	p("| 200 | %d (%d prepared: cold) |\n", ok, cold)
	keys := make([]string, 0, len(codes))
	for k := range codes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var errs []string
	for _, k := range keys {
		errs = append(errs, fmt.Sprintf("%s ×%d", k, codes[k]))
	}
	p("| errors by code | %s |\n", strings.Join(errs, ", "))
	p("| 429 and 503 carrying Retry-After | %d of %d |\n", rep.RetryAfterSent, rep.RetryAfterDue)
	p("\n| op | n | p50 | p99 | cold n | cold p50 |\n|---|---|---|---|---|---|\n")
	for _, op := range []string{"hover", "locate", "symbols", "diagnostics", "complete"} {
		var warm, cl []time.Duration
		for _, o := range rep.Outcomes {
			if o.op != op || o.status != 200 || o.org == hostileOrg {
				continue
			}
			if o.cold {
				cl = append(cl, o.elapsed)
			} else {
				warm = append(warm, o.elapsed)
			}
		}
		p("| %s | %d | %v | %v | %d | %v |\n", op, len(warm), ms(percentile(warm, .5)), ms(percentile(warm, .99)), len(cl), ms(percentile(cl, .5)))
	}

	p("\n| fault | at | recovered in | detail |\n|---|---|---|---|\n")
	for _, f := range rep.Faults {
		switch {
		case f.Skipped != "":
			p("| %s | — | skipped | %s |\n", f.Name, f.Skipped)
		case f.Recovered:
			p("| %s | %v | %v | %s |\n", f.Name, f.At, f.RecoverIn, f.Detail)
		default:
			p("| %s | %v | **not recovered** (%v) | %s |\n", f.Name, f.At, f.RecoverIn, f.Detail)
		}
	}
	if len(rep.LeaversCharged) > 0 {
		var s []string
		for i, c := range rep.LeaversCharged {
			s = append(s, fmt.Sprintf("client %d: %s", i, map[bool]string{true: "charged (push had started)", false: "not charged (left before the push)"}[c]))
		}
		p("\nClients that left mid-prepare: %s.\n", strings.Join(s, "; "))
	}

	if df := rep.Disk; df != nil {
		p("\n| disk budget (shard d1) | value |\n|---|---|\n")
		p("| held when the fault began | %s (run budget %s) |\n", mibs(df.UsageBefore), mibs(df.Configured))
		p("| lowered budget | %s |\n", mibs(df.Budget))
		p("| workspaces evicted | %d |\n", len(df.Evicted))
		p("| back under budget | %v after the restart (%s; peak %s) |\n", df.UnderIn, mibs(df.UsageUnder), mibs(df.UsagePeak))
		p("| when every warm workspace answered again | %s |\n", mibs(df.UsageEnd))
		p("| evicted workspaces asked again through the proxy (a prepare at their commit) | %d, answered 200: %d |\n", df.Reasked, df.Answered)
		p("| evicted workspaces with a prepare row since the fault began (ledger) | %d, charged a second time: %d; charged for the first time (written, never charged before): %d |\n", df.Reprepared, df.RepreparedCharged, df.RepreparedFirstCharge)
		p("| a tree larger than the whole budget (%s, pushed to d1 directly) | %s; d1 then held %s (%d workspaces evicted meanwhile by the lowered budget); deleted afterwards: %v (%s) |\n",
			mibs(df.OversizeBytes), df.OversizeAnswer, mibs(df.OversizeUsage), df.OversizeEvicted, df.OversizeReleased, mibs(df.OversizeAfter))
		p("| the same through the proxy | 413 tree_too_large (the proxy maps the refusal so; here LSP_TREE_MAX_BYTES, %s, answers first, see \"many bytes\" below) |\n", mibs(treeMaxBytes))
	}

	refused := 0
	for _, h := range rep.Hostile {
		if h.OK {
			refused++
		}
	}
	p("\n| hostile input | want | got | tries |\n|---|---|---|---|\n")
	for _, h := range rep.Hostile {
		mark := ""
		if !h.OK {
			mark = " **✗** " + h.Note
		}
		p("| %s | %d %s | %d %s%s | %d |\n", h.Name, h.WantStatus, h.WantCode, h.Status, h.Code, mark, h.Attempts)
	}
	p("\n%d of %d hostile inputs got their contract answer. Requests that reached the npm registry or the host the hostile lockfiles name: %d.\n", refused, len(rep.Hostile), rep.OutsideRequests)

	p("\n| ledger | expected | written | broken |\n|---|---|---|---|\n")
	for _, rule := range []rowRule{rowsOne, rowsNone, rowsAtMost1} {
		c := rep.Rows[rule]
		if c == nil {
			continue
		}
		name := map[rowRule]string{rowsOne: "answers that reached the daemon", rowsNone: "refused before the daemon", rowsAtMost1: "fault windows and leavers"}[rule]
		exp := c.Expected
		if rule == rowsOne {
			exp = fmt.Sprint(c.Requests)
		}
		p("| %s (%d requests) | %s | %d | %d |\n", name, c.Requests, exp, c.Written, c.Bad)
	}
	p("| rows in all | | %d (%d prepare, %d recovered) | |\n", rep.RowsWritten, rep.PrepareRows, rep.RecoveredRows)
	p("| failed requests with a query row and, recovered later, their prepare row | | %d | |\n", rep.QueryAndPrepare)
	p("| holds a prepare left unsettled, still undecided after the settler's wait | | %d | |\n", rep.UnsettledAtEnd)
	p("| live holds after the proxy stopped | | %d (expired by waiting: %d) | |\n", rep.LiveHoldsAtEnd, rep.HoldsExpired)
	p("| revisions charged more than once (grace window, CONTRACT §5) | 0 | %d | %d |\n", rep.ChargedTwice, rep.ChargedTwice)
	p("| 0¢ re-prepares (evictions, restarts, failover) | | %d | |\n", rep.RepreparesFree)
	p("| balances | %s | | |\n", strings.Join(rep.Balances, ", "))
	p("| `lspctl ledger reconcile --margin 0s` | clean | %s | |\n", oneLine(rep.Reconcile))

	p("\n| resource | before | after |\n|---|---|---|\n")
	p("| goroutines | %d | %d |\n", rep.Before.Goroutines, rep.After.Goroutines)
	p("| open files | %d | %d |\n", rep.Before.OpenFiles, rep.After.OpenFiles)
	p("| child processes | %d | %d (strays: %d) |\n", rep.Before.Children, rep.After.Children, len(rep.Strays))
	p("| daemon RSS (2 daemons) | max %s | end %s |\n", mib(rep.DaemonRSSMaxKiB), mib(rep.DaemonRSSEndKiB))
	p("| daemons + language servers RSS | max %s | end %s (%d processes below the daemons) |\n", mib(rep.TreeRSSMaxKiB), mib(rep.TreeRSSEndKiB), rep.LanguageServers)
	if len(rep.ServerRSSMaxKiB) > 0 {
		var per []string
		for i, k := range rep.ServerRSSMaxKiB {
			per = append(per, fmt.Sprintf("d%d %s", i, mib(k)))
		}
		p("| language servers RSS per daemon, against LSP_POOL_MAX_RSS | max %s | budget %s (eviction from 85%%; a sum of VmRSS, which counts pages the servers share once per process) |\n", strings.Join(per, ", "), bound(rep.Config.MaxRSS, mibs))
	}
	if len(rep.PoolChargedMaxKiB) > 0 {
		var per []string
		for i, k := range rep.PoolChargedMaxKiB {
			per = append(per, fmt.Sprintf("d%d %s", i, mib(k)))
		}
		p("| memory the kernel charged to each daemon's jails (pool cgroup high-water mark) | max %s | budget %s (the kernel's limit) |\n", strings.Join(per, ", "), bound(rep.Config.MaxRSS, mibs))
	}

	if rep.OK() {
		p("\n**Verdict: every invariant held.**\n")
	} else {
		p("\n**Verdict: %d failure(s):**\n\n", len(rep.Failures))
		for _, f := range rep.Failures {
			p("- %s\n", f)
		}
	}
	return b.String()
}

func ms(d time.Duration) string {
	if d == 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000)
}

func mib(kib int64) string { return fmt.Sprintf("%.0f MiB", float64(kib)/1024) }

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", "; ")
	return strings.ReplaceAll(s, "|", "\\|")
}

// bound renders a budget, or "none" when unset.
func bound(v int64, f func(int64) string) string {
	if v <= 0 {
		return "none"
	}
	return f(v)
}
