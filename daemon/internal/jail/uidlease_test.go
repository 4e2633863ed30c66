//go:build linux

package jail

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// uidLeaseMain is a daemon in miniature: it leases a uid range (args: lock
// directory, base, count, fixed), says which, and holds it until stdin
// closes.
func uidLeaseMain(args []string) int {
	if len(args) != 4 {
		fmt.Println("usage: dir base count fixed")
		return 2
	}
	base, _ := strconv.ParseUint(args[1], 10, 32)
	count, _ := strconv.ParseUint(args[2], 10, 32)
	l, err := leaseUIDs(args[0], uint32(base), uint32(count), args[3] == "true")
	if err != nil {
		fmt.Println("refused:", err)
		return 0
	}
	fmt.Println("leased", l.base)
	_, _ = io.Copy(io.Discard, os.Stdin)
	l.release()
	return 0
}

type leaser struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	said  string
}

// lease starts a daemon-in-miniature and waits for its answer.
func lease(t *testing.T, dir string, base, count uint32, fixed bool) *leaser {
	t.Helper()
	cmd := exec.Command(testExecutable(t), dir, strconv.FormatUint(uint64(base), 10), strconv.FormatUint(uint64(count), 10), strconv.FormatBool(fixed))
	cmd.Env = []string{serverEnv + "=uidlease"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	l := &leaser{cmd: cmd, stdin: stdin}
	t.Cleanup(func() { l.stop() })
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	l.said = strings.TrimSpace(line)
	return l
}

func (l *leaser) stop() {
	if l.cmd.ProcessState == nil {
		_ = l.stdin.Close()
		_ = l.cmd.Wait()
	}
}

// TestUIDLeaseAcrossDaemons: daemons on one host never share a uid range.
// A second daemon with the default (unfixed) base takes the next free
// range; one whose fixed range is taken, or overlaps a taken one, refuses
// with an error naming the holder; a range whose daemon died (SIGKILL, no
// clean-up) is free again at once.
func TestUIDLeaseAcrossDaemons(t *testing.T) {
	dir := t.TempDir()
	const base, count = 2_000_000_000, 1000

	a := lease(t, dir, base, count, false)
	if a.said != "leased 2000000000" {
		t.Fatalf("first daemon: %q", a.said)
	}
	b := lease(t, dir, base, count, false)
	if b.said != "leased 2000001000" {
		t.Fatalf("second daemon: %q, want the next range", b.said)
	}
	fixed := lease(t, dir, base, count, true)
	if !strings.HasPrefix(fixed.said, "refused:") || !strings.Contains(fixed.said, "in use by another daemon") || !strings.Contains(fixed.said, "pid "+strconv.Itoa(a.cmd.Process.Pid)) {
		t.Fatalf("a daemon given the taken range: %q, want a refusal naming pid %d", fixed.said, a.cmd.Process.Pid)
	}
	overlap := lease(t, dir, base+500, count, true)
	if !strings.HasPrefix(overlap.said, "refused:") || !strings.Contains(overlap.said, "overlapping range") {
		t.Fatalf("a daemon given a range overlapping two taken ones: %q, want a refusal", overlap.said)
	}

	// In this process too: a range overlapping a held one is refused even
	// under another name, and the top of the uid space runs out cleanly.
	if _, err := leaseUIDs(dir, base+1500, 2*count, true); err == nil || !strings.Contains(err.Error(), "overlapping") {
		t.Fatalf("overlapping lease in-process: %v", err)
	}
	top := uint32(1<<31 - 2*count)
	c := lease(t, dir, top, count, false)
	if c.said != fmt.Sprintf("leased %d", top) {
		t.Fatalf("lease at the top: %q", c.said)
	}
	last, err := leaseUIDs(dir, top, count, false)
	if err != nil || last.base != top+count {
		t.Fatalf("the last range: %+v, %v", last, err)
	}
	if _, err := leaseUIDs(dir, top+count, count, true); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("a second lease of the last range in this process: %v", err)
	}
	if full := lease(t, dir, top, count, false); !strings.Contains(full.said, "no free jail uid range") {
		t.Fatalf("a daemon finding every range up to 2^31 taken: %q", full.said)
	}
	last.release()

	// A daemon killed outright leaves no stale lease.
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = a.cmd.Wait()
	again := lease(t, dir, base, count, true)
	if again.said != "leased 2000000000" {
		t.Fatalf("after the holder died: %q", again.said)
	}

	// A root daemon refuses to start on a taken fixed range.
	if os.Geteuid() == 0 {
		_, err := New(Options{UIDLockDir: dir, UIDBase: base, UIDCount: count, UIDBaseFixed: true, StateDir: t.TempDir()}, testLogger(t))
		if err == nil || !strings.Contains(err.Error(), "in use by another daemon") {
			t.Fatalf("New on a taken range: %v", err)
		}
		s := newSpawner(t, Options{UIDLockDir: dir, UIDBase: base, UIDCount: count})
		if s.uids.base != base+2*count {
			t.Fatalf("New with the default policy took [%d, +%d), want the first free range from %d", s.uids.base, count, base+2*count)
		}
	}
	for _, l := range []*leaser{b, c, again} {
		l.stop()
	}
}

// TestUIDLeaseShared: Spawners of one process asking for one range share
// its lease, which is released with the last of them.
func TestUIDLeaseShared(t *testing.T) {
	dir := t.TempDir()
	const base, count = 2_000_000_000, 1000
	l1, err := leaseUIDs(dir, base, count, true)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := leaseUIDs(dir, base, count, true)
	if err != nil || l2 != l1 {
		t.Fatalf("second lease of the same range: %v, %v", l2, err)
	}
	l1.release()
	if !isLeased(leaseFile(dir, base, count)) {
		t.Fatal("released with a holder left")
	}
	l2.release()
	if isLeased(leaseFile(dir, base, count)) {
		t.Fatal("still held after the last release")
	}
}
