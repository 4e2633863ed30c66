package stacks

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/devstack"
)

// TestDaemonMemoryBudget: a jailed lsp-daemon started without
// LSP_POOL_MAX_RSS bounds the cgroup holding all its jails by what its own
// cgroup or, without a limit there, the machine allows, less 1 GiB; one
// given LSP_POOL_MAX_RSS, by that. Either way the kernel limit is the
// budget less its reserve (at most 4 MiB).
func TestDaemonMemoryBudget(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the jail's cgroups need root here")
	}
	dir, err := os.MkdirTemp(tmp, "budget-")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	total := memTotal(t)
	for _, tc := range []struct {
		name string
		env  map[string]string
		want func(own string) int64
	}{
		{"unset", nil, func(own string) int64 {
			limit := total
			if n, ok := v1Limit(own); ok && n < limit {
				limit = n
			}
			if limit < 2<<30 {
				return limit / 2
			}
			return limit - 1<<30
		}},
		{"set", map[string]string{"LSP_POOL_MAX_RSS": "3GiB"}, func(string) int64 { return 3 << 30 }},
	} {
		d, err := devstack.StartDaemon(ctx, devstack.DaemonOptions{
			Bin: daemonBin, Dir: filepath.Join(dir, tc.name), Listen: "unix://" + filepath.Join(dir, tc.name+".sock"),
			Servers: devstack.Options{Gopls: gopls}, Env: tc.env,
		})
		if err != nil {
			t.Fatal(err)
		}
		own, ok := memoryCgroup(t, d.Pid())
		if !ok {
			d.Stop()
			t.Skip("no cgroup v1 memory hierarchy at /sys/fs/cgroup/memory")
		}
		parents, _ := filepath.Glob(filepath.Join(own, "lsp-jail-"+strconv.Itoa(d.Pid())+"-*"))
		if len(parents) != 1 {
			d.Stop()
			t.Fatalf("%s: the daemon's jail parents under %s: %q", tc.name, own, parents)
		}
		b, err := os.ReadFile(filepath.Join(parents[0], "memory.limit_in_bytes"))
		d.Stop()
		if err != nil {
			t.Fatal(err)
		}
		got, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		budget := tc.want(own)
		if got > budget || got < budget-4<<20 {
			t.Fatalf("%s: the jails' memory limit is %d, want the budget %d less at most 4 MiB", tc.name, got, budget)
		}
		t.Logf("%s: budget %d, the jails' limit %d", tc.name, budget, got)
	}
}

// memTotal is the machine's memory (/proc/meminfo).
func memTotal(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "MemTotal:" && f[2] == "kB" {
			n, err := strconv.ParseInt(f[1], 10, 64)
			if err == nil {
				return n << 10
			}
		}
	}
	t.Fatal("no MemTotal in /proc/meminfo")
	return 0
}

// memoryCgroup is pid's cgroup directory in the v1 memory hierarchy.
func memoryCgroup(t *testing.T, pid int) (string, bool) {
	t.Helper()
	const mount = "/sys/fs/cgroup/memory"
	if _, err := os.Stat(filepath.Join(mount, "memory.limit_in_bytes")); err != nil {
		return "", false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if parts := strings.SplitN(l, ":", 3); len(parts) == 3 && strings.Contains(","+parts[1]+",", ",memory,") {
			return filepath.Join(mount, parts[2]), true
		}
	}
	return "", false
}

// v1Limit is the tightest memory.limit_in_bytes from dir up to the
// hierarchy's root; v1's "unlimited" is none.
func v1Limit(dir string) (int64, bool) {
	var limit int64
	found := false
	for ; ; dir = filepath.Dir(dir) {
		b, err := os.ReadFile(filepath.Join(dir, "memory.limit_in_bytes"))
		if err != nil {
			return limit, found
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && n < 1<<62 && (!found || n < limit) {
			limit, found = n, true
		}
	}
}
