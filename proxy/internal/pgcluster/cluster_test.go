package pgcluster_test

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/pgcluster"
	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/hanzoai/lsp/proxy/internal/spawnthread"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv("PGCLUSTER_TEST_ORPHAN_DIR"); dir != "" {
		orphanHelper(dir)
		return
	}
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction(spawnthread.Goroutine))
}

// orphanHelper runs in a child copy of the test binary: it starts a cluster, reports the postmaster's
// pid and its children, and waits to be killed without stopping anything.
func orphanHelper(dir string) {
	c, err := pgcluster.Start(context.Background(), dir, nil)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	pid := pgcluster.PostmasterPID(c)
	fmt.Println(append(pgcluster.ChildrenOf(pid), pid))
	select {}
}

// alive reports which of pids still exist (zombies count as gone).
func alive(pids []int) []int {
	var out []int
	for _, pid := range pids {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		if f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]); len(f) > 0 && f[0] != "Z" {
			out = append(out, pid)
		}
	}
	return out
}

func query(t *testing.T, ctx context.Context, url, sql string) string {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var s string
	if err := conn.QueryRow(ctx, sql).Scan(&s); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return s
}

func exec(t *testing.T, ctx context.Context, url, sql string) {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func TestLifecycle(t *testing.T) {
	ctx := context.Background()
	// Not t.TempDir: as root the cluster runs as postgres, which cannot search t.TempDir's parent.
	dir, err := os.MkdirTemp("", "pgcluster-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })

	c, err := pgcluster.Start(ctx, dir, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			c.Stop(context.Background())
		}
	})

	for setting, want := range map[string]string{
		"fsync":              "off",
		"synchronous_commit": "on",
		"listen_addresses":   "",
		"server_version_num": "",
	} {
		got := query(t, ctx, c.URL("postgres"), "SHOW "+setting)
		if want != "" && got != want || setting == "server_version_num" && got < "150000" {
			t.Errorf("%s = %q, want %q", setting, got, want)
		}
	}

	if err := c.CreateDatabase(ctx, "app-db"); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateDatabase(ctx, "app-db"); err == nil {
		t.Error("creating an existing database succeeded")
	}
	url := c.URL("app-db")
	exec(t, ctx, url, "CREATE TABLE t (v int); INSERT INTO t VALUES (42)")

	for _, immediate := range []bool{true, false} {
		before := pgcluster.PostmasterPID(c)
		procs := append(pgcluster.ChildrenOf(before), before)
		if err := c.Restart(ctx, immediate); err != nil {
			t.Fatalf("restart(immediate=%v): %v", immediate, err)
		}
		if got := query(t, ctx, url, "SELECT v::text FROM t"); got != "42" {
			t.Fatalf("after restart(immediate=%v) the committed row reads %q", immediate, got)
		}
		if m := alive(procs); len(m) != 0 {
			t.Errorf("restart(immediate=%v) left processes of the old server: %v", immediate, m)
		}
	}

	pid := pgcluster.PostmasterPID(c)
	procs := append(pgcluster.ChildrenOf(pid), pid)
	if len(procs) < 3 {
		t.Fatalf("expected a postmaster with children, found %v", procs)
	}
	// Keep a session open: fast shutdown must still end it.
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := c.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	stopped = true
	if m := alive(procs); len(m) != 0 {
		t.Fatalf("processes left after Stop: %v", m)
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if err := conn.Ping(ctx); err == nil {
		t.Error("a session survived Stop")
	}
}

// TestNoOrphanAfterOwnerDies kills the owning process outright (no Stop) and expects the server and all
// its children to go away on their own.
func TestNoOrphanAfterOwnerDies(t *testing.T) {
	dir, err := os.MkdirTemp("", "pgcluster-orphan")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := osexec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), "PGCLUSTER_TEST_ORPHAN_DIR="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("helper: %v", err)
	}
	var procs []int
	for _, f := range strings.Fields(strings.Trim(line, "[]\n")) {
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("helper said %q", line)
		}
		procs = append(procs, n)
	}
	if len(procs) < 3 || len(alive(procs[len(procs)-1:])) != 1 {
		t.Fatalf("helper's server is not running: %v", procs)
	}
	cmd.Process.Kill()
	cmd.Wait()
	killed = true
	// Liveness, not timing: the server gets the parent-death signal and shuts down immediately.
	for deadline := time.Now().Add(60 * time.Second); len(alive(procs)) > 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("server processes outlived their owner: %v", alive(procs))
		}
	}
}

func TestStartRefusesUnsearchableDirAsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root switches to the postgres user")
	}
	// t.TempDir's parent is 0700 and root-owned: the postgres user cannot reach it.
	_, err := pgcluster.Start(context.Background(), filepath.Join(t.TempDir(), "pg"), nil)
	if err == nil || !strings.Contains(err.Error(), "not searchable") {
		t.Fatalf("got %v, want an error naming the unsearchable directory", err)
	}
}

// A directory too deep for a unix socket path still works: the socket goes to a short private
// directory, removed by Stop.
func TestLongDirectory(t *testing.T) {
	ctx := context.Background()
	t.Parallel()
	base, err := os.MkdirTemp("", "pgcluster-long")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil { // an ancestor now: postgres must pass through
		t.Fatal(err)
	}
	dir := filepath.Join(base, strings.Repeat("d", 60), strings.Repeat("e", 60))
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := pgcluster.Start(ctx, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop(ctx)
	if strings.HasPrefix(c.SocketDir(), dir) {
		t.Fatalf("socket dir %s is under the long directory", c.SocketDir())
	}
	if got := query(t, ctx, c.URL("postgres"), "SELECT current_user::text"); got != pgcluster.Superuser {
		t.Fatalf("connected as %q", got)
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(c.SocketDir()); !os.IsNotExist(err) {
		t.Fatalf("socket dir left behind: %v", err)
	}
}
