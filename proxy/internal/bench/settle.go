package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/devstack"
)

// A comparison is fair only if both sides meet the same machine. Work
// left over from setting a side up runs on after its last call returns: a
// gopls that has just opened a package analyses it and its dependencies
// over a fresh cache (seen here taking half a core for several seconds
// after the throughput section's warm-up, all of it inside the direct
// side's window), and a replica just started has its caches to fill. So
// each measured window starts once the machine is quiet.
const (
	quietCores  = 0.15                   // busy below this many cores counts as quiet
	quietWindow = 500 * time.Millisecond // over this long
	maxSettle   = 30 * time.Second       // then measure anyway, and say so
	// busySettle bounds every wait after one that gave up: on a machine
	// busy with other work, thirty seconds before each of the bench's
	// windows would buy nothing.
	busySettle = 3 * time.Second
)

// gaveUp is set once a settle has reached its bound (the bench's phases
// run one after another, never side by side).
var gaveUp bool

// settle waits until the machine's CPUs have been quiet for one window, at
// most maxSettle (busySettle once one has given up). It reports what it
// saw when the machine never got there, so that a figure measured on a
// busy machine says so.
func settle(ctx context.Context, phase string) {
	bound := maxSettle
	if gaveUp {
		bound = busySettle
	}
	deadline := time.Now().Add(bound)
	prev, ok := busyTicks()
	if !ok {
		return
	}
	var cores float64
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(quietWindow):
		}
		cur, ok := busyTicks()
		if !ok {
			return
		}
		cores = float64(cur-prev) / clockTicks / quietWindow.Seconds()
		if cores < quietCores {
			return
		}
		prev = cur
	}
	gaveUp = true
	fmt.Fprintf(os.Stderr, "bench: the machine was not quiet before %s: %.2f cores busy after %s\n", phase, cores, bound)
}

// clockTicks is USER_HZ, the unit of /proc/stat's counters (100 on every
// Linux architecture Go supports).
const clockTicks = 100

// busyTicks is the machine's CPU time so far, all CPUs, from /proc/stat.
func busyTicks() (int64, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, false
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	return busyOf(line)
}

// busyOf sums /proc/stat's first line's user, nice, system, irq, softirq
// and steal (a VM's stolen time is time the bench did not get either);
// idle and iowait are not busy.
func busyOf(line []byte) (int64, bool) {
	f := bytes.Fields(line)
	if len(f) < 9 || string(f[0]) != "cpu" {
		return 0, false
	}
	var busy int64
	for _, i := range []int{1, 2, 3, 6, 7, 8} {
		n, err := strconv.ParseInt(string(f[i]), 10, 64)
		if err != nil {
			return 0, false
		}
		busy += n
	}
	return busy, true
}

// awaitSeed waits until d's standard-library build seed is made, before
// anything is measured on it (devstack.Daemon.AwaitBuildSeed): the seed's
// compilers would compete with the figures, and the first workspaces
// would miss it. A daemon that made none is measured as it is, and the
// output says so.
func awaitSeed(ctx context.Context, o Options, d *devstack.Daemon, what string) {
	if err := d.AwaitBuildSeed(ctx, devstack.BuildSeedWait); err != nil {
		fmt.Fprintf(o.Out, "note (%s): %v\n", what, err)
	}
}
