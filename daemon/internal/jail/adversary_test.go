//go:build linux

package jail

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
)

func testExecutable(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// The adversary's jail is small, so that its bombs go off quickly.
const (
	adversaryMemory = 1 << 30
	adversaryPids   = 64
)

// TestAdversary runs a hostile language server for one tenant beside a
// real gopls for another. Every attack must be refused or contained, and
// gopls must keep answering throughout. TestUnprivileged runs it again as
// a user without privileges.
func TestAdversary(t *testing.T) {
	t.Parallel()
	gopls := goplsPath(t)
	l := newLayout(t)
	victim := l.workspace(t, "victim", goModule)
	attacker := l.workspace(t, "attacker", map[string]string{"a.txt": "attack\n"})

	secret := "s3cret-" + randomHex(8)
	// The daemon's environment holds the secret, like a credential would.
	if err := os.Setenv("LSP_JAIL_TEST_SECRET", secret); err != nil {
		t.Fatal(err)
	}
	defer os.Unsetenv("LSP_JAIL_TEST_SECRET")

	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int32
	go acceptCount(ln, &accepted)
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	connect := []string{net.JoinHostPort("127.0.0.1", port)}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() && !ipn.IP.IsLinkLocalUnicast() {
				connect = append(connect, net.JoinHostPort(ipn.IP.String(), port))
			}
		}
	}

	goSpawner := newSpawner(t, Options{})
	advSpawner := newSpawner(t, Options{Memory: adversaryMemory, Pids: adversaryPids})
	goRec, advRec := &recorder{Spawner: goSpawner}, &recorder{Spawner: advSpawner}
	ctx := context.Background()

	srv := start(t, goRec, runtime.Spec{ID: "gopls", Language: "go", Executable: gopls, Args: []string{"serve"}}, victim)
	goplsAnswers := func(when string) {
		t.Helper()
		h, err := hoverAt(ctx, srv, victim, "app/app.go", "shapes.Describe(3)", len("shapes."))
		if err != nil || h == nil || !strings.Contains(h.Markdown, "func shapes.Describe") {
			t.Fatalf("gopls %s: %+v, %v", when, h, err)
		}
	}
	goplsAnswers("before the attacks")

	cfg, _ := json.Marshal(adversaryConfig{
		Connect: connect,
		OtherTenant: []string{
			filepath.Join(victim.Root, "go.mod"), victim.Root, victim.Home,
			filepath.Join(l.root, "trees", "victim"), filepath.Join(l.root, "homes", "victim"),
		},
		Secret:    secret,
		DaemonPID: os.Getpid(),
		ForkLimit: 4 * adversaryPids,
		Allocate:  2 * adversaryMemory,
	})
	adv := start(t, advRec, runtime.Spec{
		ID: "adversary", Language: "plaintext", Executable: testExecutable(t),
		Args: []string{string(cfg)}, Env: []string{serverEnv + "=adversary"},
	}, attacker)

	attack := func(t *testing.T, line int) attackReport {
		t.Helper()
		h, err := hoverLine(ctx, adv, "a.txt", line)
		if err != nil {
			t.Fatal(err)
		}
		var r attackReport
		b, err := hex.DecodeString(strings.TrimSpace(h.Markdown))
		if err == nil {
			err = json.Unmarshal(b, &r)
		}
		if err != nil {
			t.Fatalf("report %q: %v", h.Markdown, err)
		}
		return r
	}
	refused := func(t *testing.T, r attackReport) {
		t.Helper()
		if len(r.Errors) == 0 {
			t.Fatal("no attempt was reported")
		}
		for what, e := range r.Errors {
			if e == "" {
				t.Errorf("%s: succeeded", what)
			} else {
				t.Logf("%s: %s", what, e)
			}
		}
	}

	t.Run("network", func(t *testing.T) {
		refused(t, attack(t, attackNetwork))
		if n := accepted.Load(); n > 0 {
			t.Errorf("the listener outside accepted %d connections", n)
		}
	})
	t.Run("another tenant's workspace", func(t *testing.T) {
		refused(t, attack(t, attackOtherTenant))
	})
	t.Run("environments", func(t *testing.T) {
		if r := attack(t, attackEnviron); len(r.Leaks) > 0 {
			t.Errorf("the daemon's environment leaked: %q", r.Leaks)
		}
	})
	t.Run("write the workspace", func(t *testing.T) {
		refused(t, attack(t, attackWriteTree))
		b, err := os.ReadFile(filepath.Join(attacker.Root, "a.txt"))
		if err != nil || string(b) != "attack\n" {
			t.Errorf("a.txt = %q, %v", b, err)
		}
		if _, err := os.Stat(filepath.Join(attacker.Root, "planted.go")); err == nil {
			t.Error("planted.go was written")
		}
	})
	t.Run("memory", func(t *testing.T) {
		r := attack(t, attackAllocate)
		t.Logf("allocating child: %s", r.ExitedBy)
		if r.Errors["allocate"] == "" {
			t.Errorf("the child allocated %d bytes in a jail bound to %d", 2*adversaryMemory, adversaryMemory)
		}
		goplsAnswers("after the allocation")
	})

	t.Run("fork bomb", func(t *testing.T) {
		r := attack(t, attackForkBomb)
		t.Logf("fork bomb: %d started, then %q; %d tasks in the jail", r.Forked, r.ForkErr, r.Tasks)
		if r.ForkErr == "" {
			t.Errorf("%d children started and none was refused", r.Forked)
		}
		if r.Tasks > adversaryPids {
			t.Errorf("%d tasks in a jail bound to %d", r.Tasks, adversaryPids)
		}
		// The bomb's children are alive now: the other tenant is served.
		goplsAnswers("during the fork bomb")
	})
	if err := adv.Close(ctx); err != nil {
		t.Fatal(err)
	}
	goplsAnswers("after the adversary is gone")
	if err := srv.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range append(goRec.all(), advRec.all()...) {
		assertGone(t, p.Pid())
	}
	assertNoJailCgroups(t, goSpawner)
	assertNoJailCgroups(t, advSpawner)
}

// unprivilegedUID runs TestUnprivileged's child; nothing else on these
// machines uses it.
const unprivilegedUID = 4242

// TestUnprivileged re-runs the jail's tests as an unprivileged user: the
// self-test, the lifecycle on both spawners and the adversary, with the
// limits an unprivileged daemon has (no cgroup of its own: RLIMIT_NPROC in
// each jail's user namespace, RLIMIT_DATA).
func TestUnprivileged(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("already unprivileged: the tests above ran that way")
	}
	gopls := goplsPath(t)
	for _, p := range mustList(t) {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.PID)); strings.Contains(string(b), "\nUid:\t"+strconv.Itoa(unprivilegedUID)+"\t") {
			t.Skipf("uid %d is in use by process %d", unprivilegedUID, p.PID)
		}
	}
	// Not t.TempDir: its parent is private to root.
	dir, err := os.MkdirTemp("", "jail-unprivileged-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = removeTree(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "jail.test")
	goplsCopy := filepath.Join(dir, "gopls")
	for src, dst := range map[string]string{testExecutable(t): bin, gopls: goplsCopy} {
		if err := copyFile(src, dst, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(tmp, unprivilegedUID, unprivilegedUID); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run", "^(TestSelfTestPasses|TestSelfTestCatchesHoles|TestLifecycle|TestJailKillsEscapees|TestAdversary)$", "-test.v", "-test.count=1")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + tmp, "TMPDIR=" + tmp, "LSP_TEST_GOPLS=" + goplsCopy}
	cmd.Dir = tmp
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: unprivilegedUID, Gid: unprivilegedUID, Groups: []uint32{}},
		Setpgid:    true,
		Pdeathsig:  syscall.SIGKILL,
	}
	out, err := cmd.CombinedOutput()
	t.Logf("as uid %d:\n%s", unprivilegedUID, out)
	if err != nil {
		t.Fatalf("the unprivileged run failed: %v", err)
	}
	for _, name := range []string{"TestSelfTestPasses", "TestLifecycle", "TestJailKillsEscapees", "TestAdversary"} {
		if !strings.Contains(string(out), "--- PASS: "+name+" ") {
			t.Errorf("%s did not pass as uid %d", name, unprivilegedUID)
		}
	}
	assertGone(t, cmd.Process.Pid)
}

func mustList(t *testing.T) []runtime.ProcStat {
	t.Helper()
	procs, err := runtime.ListProcs()
	if err != nil {
		t.Fatal(err)
	}
	return procs
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
