//go:build linux

package jail

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// fakeV2 is a plain directory laid out like a cgroup2 mount, with the
// kernel's rules that the jail's v2 code depends on: a new cgroup's
// controllers are those its parent enables in cgroup.subtree_control, a
// controller's files exist only where it is available, a cgroup holding
// processes cannot enable controllers for children (EBUSY, "no internal
// processes"), a process lives in one cgroup at a time, and only an empty
// cgroup without children can be removed. This machine mounts cgroup v1,
// so without it the v2 path would never run here; it is not a kernel, and
// a real cgroup2 host remains the real test.
type fakeV2 struct{ root string }

var _ cgroupFS = fakeV2{}

func newFakeV2(t *testing.T, controllers ...string) fakeV2 {
	t.Helper()
	f := fakeV2{root: t.TempDir()}
	for file, val := range map[string]string{
		"cgroup.controllers":     strings.Join(controllers, " "),
		"cgroup.subtree_control": "",
		"cgroup.procs":           "",
	} {
		if err := os.WriteFile(filepath.Join(f.root, file), []byte(val), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func (f fakeV2) read(dir, file string) string {
	b, _ := os.ReadFile(filepath.Join(dir, file))
	return strings.TrimSpace(string(b))
}

func (f fakeV2) set(dir, file, val string) error {
	return os.WriteFile(filepath.Join(dir, file), []byte(val), 0o644)
}

func (f fakeV2) Mkdir(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("cgroup %s: %w", dir, err)
	}
	ctrls := f.read(filepath.Dir(dir), "cgroup.subtree_control")
	files := map[string]string{"cgroup.controllers": ctrls, "cgroup.subtree_control": "", "cgroup.procs": ""}
	for _, c := range strings.Fields(ctrls) {
		switch c {
		case "memory":
			files["memory.max"], files["memory.swap.max"], files["memory.peak"] = "max", "max", "0"
		case "pids":
			files["pids.max"] = "max"
		}
	}
	for file, val := range files {
		if err := f.set(dir, file, val); err != nil {
			return err
		}
	}
	return nil
}

func (f fakeV2) Rmdir(dir string) error {
	kids, _ := f.Subdirs(dir)
	if len(kids) > 0 || f.read(dir, "cgroup.procs") != "" {
		return &fs.PathError{Op: "rmdir", Path: dir, Err: syscall.EBUSY}
	}
	if _, err := os.Stat(dir); err != nil {
		return syscall.ENOENT
	}
	return os.RemoveAll(dir)
}

func (f fakeV2) Write(dir, file, val string) error {
	p := filepath.Join(dir, file)
	if _, err := os.Stat(p); err != nil {
		return fmt.Errorf("cgroup %s: %w", p, err)
	}
	fail := func(errno syscall.Errno) error {
		return fmt.Errorf("cgroup write %q to %s: %w", val, p, errno)
	}
	switch {
	case file == "cgroup.subtree_control":
		have := strings.Fields(f.read(dir, "cgroup.controllers"))
		on := strings.Fields(f.read(dir, "cgroup.subtree_control"))
		for _, tok := range strings.Fields(val) {
			c := tok[1:]
			if !slices.Contains(have, c) {
				return fail(syscall.EINVAL)
			}
			switch tok[0] {
			case '+':
				if dir != f.root && f.read(dir, "cgroup.procs") != "" {
					return fail(syscall.EBUSY)
				}
				if !slices.Contains(on, c) {
					on = append(on, c)
				}
			case '-':
				on = slices.DeleteFunc(on, func(x string) bool { return x == c })
			default:
				return fail(syscall.EINVAL)
			}
		}
		return f.set(dir, file, strings.Join(on, " "))
	case file == "cgroup.procs":
		if dir != f.root && f.read(dir, "cgroup.subtree_control") != "" {
			return fail(syscall.EBUSY)
		}
		// A process moves: out of every other cgroup, into this one.
		_ = filepath.WalkDir(f.root, func(q string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				pids := slices.DeleteFunc(strings.Fields(f.read(q, "cgroup.procs")), func(x string) bool { return x == val })
				_ = f.set(q, "cgroup.procs", strings.Join(pids, "\n"))
			}
			return nil
		})
		return f.set(dir, file, strings.TrimSpace(f.read(dir, file)+"\n"+val))
	case strings.HasSuffix(file, ".max"):
		if n, err := strconv.ParseInt(val, 10, 64); val != "max" && (err != nil || n < 0) {
			return fail(syscall.EINVAL)
		}
	}
	return f.set(dir, file, val)
}

func (f fakeV2) Read(dir, file string) ([]byte, error) { return os.ReadFile(filepath.Join(dir, file)) }

func (f fakeV2) Has(dir, file string) bool {
	_, err := os.Stat(filepath.Join(dir, file))
	return err == nil
}

func (f fakeV2) Subdirs(dir string) ([]string, error) { return kernelFS{}.Subdirs(dir) }

// TestCgroupV2Layout runs the jail's cgroup v2 logic over fakeV2: the
// daemon, alone in its cgroup, moves into a leaf so that it can enable
// memory and pids for its children; its jails' parent carries the pool's
// memory limit and hands both controllers down; a jail's cgroup gets its
// own memory, swap and task limits; and everything but the daemon's leaf
// is removed again, including a dead daemon's leftovers.
func TestCgroupV2Layout(t *testing.T) {
	const pid, budget = 4242, 512 << 20
	f := newFakeV2(t, "cpu", "io", "memory", "pids")
	own := filepath.Join(f.root, "lsp.service")
	if err := f.Write(f.root, "cgroup.subtree_control", "+memory +pids"); err != nil {
		t.Fatal(err)
	}
	if err := f.Mkdir(own); err != nil {
		t.Fatal(err)
	}
	if err := f.Write(own, "cgroup.procs", strconv.Itoa(pid)); err != nil {
		t.Fatal(err)
	}
	// A dead daemon's parent, with one jail left in it (pid 2^31-1 does
	// not exist).
	stale := filepath.Join(own, cgroupPrefix+"2147483647-1")
	for _, d := range []string{stale, filepath.Join(stale, "7")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		_ = f.set(d, "cgroup.procs", "")
	}

	hs := map[string]hierarchy{ctrlPids: {v2: true, dir: own}, ctrlMemory: {v2: true, dir: own}}
	cg, missing, err := newCgroups(f, hs, budget, pid)
	if err != nil || cg == nil {
		t.Fatalf("newCgroups = %v, missing %v, %v", cg, missing, err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the dead daemon's cgroup %s is still there", stale)
	}
	if len(cg.parents) != 1 {
		t.Fatalf("v2 has one hierarchy; parents = %+v", cg.parents)
	}
	parent := cg.parents[0]
	leaf := filepath.Join(own, "lsp-daemon")
	for _, c := range []struct{ dir, file, want string }{
		{own, "cgroup.procs", ""},
		{leaf, "cgroup.procs", strconv.Itoa(pid)},
		{own, "cgroup.subtree_control", "pids memory"},
		{parent.dir, "cgroup.subtree_control", "pids memory"},
		{parent.dir, "memory.max", strconv.FormatInt(poolCgroupLimit(budget), 10)},
		{parent.dir, "memory.swap.max", "0"},
		{parent.dir, "pids.max", "max"},
	} {
		if got := f.read(c.dir, c.file); got != c.want {
			t.Errorf("%s/%s = %q, want %q", c.dir, c.file, got, c.want)
		}
	}
	if mp, ok := cg.memoryParent(); !ok || mp.dir != parent.dir || !mp.v2 {
		t.Errorf("memoryParent = %+v, %v", mp, ok)
	}

	j, err := cg.create("1", 64, 256<<20, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	jdir := filepath.Join(parent.dir, "1")
	if got := j.procsFiles(); len(got) != 1 || got[0] != filepath.Join(jdir, "cgroup.procs") {
		t.Errorf("procsFiles = %v", got)
	}
	for file, want := range map[string]string{"memory.max": strconv.Itoa(256 << 20), "memory.swap.max": "0", "pids.max": "64"} {
		if got := f.read(jdir, file); got != want {
			t.Errorf("jail %s = %q, want %q", file, got, want)
		}
	}
	// The launcher joins; while it is there the jail cannot go.
	if err := f.Write(jdir, "cgroup.procs", "5000"); err != nil {
		t.Fatal(err)
	}
	if got := j.members(); !slices.Equal(got, []int{5000}) {
		t.Errorf("members = %v", got)
	}
	if err := cg.close(); err == nil {
		t.Error("the parent was removed under a live jail")
	}
	_ = f.set(jdir, "cgroup.procs", "")
	if err := j.remove(); err != nil {
		t.Fatal(err)
	}
	if err := cg.close(); err != nil {
		t.Fatal(err)
	}
	kids, _ := f.Subdirs(own)
	if !slices.Equal(kids, []string{"lsp-daemon"}) {
		t.Errorf("left under the daemon's cgroup: %v, want only its leaf", kids)
	}
}

// TestCgroupV2Shared: when other processes share the daemon's v2 cgroup,
// it cannot enable controllers for children, and says the operator must
// delegate a subtree; nothing is left behind.
func TestCgroupV2Shared(t *testing.T) {
	f := newFakeV2(t, "memory", "pids")
	own := filepath.Join(f.root, "shared.scope")
	if err := f.Write(f.root, "cgroup.subtree_control", "+memory +pids"); err != nil {
		t.Fatal(err)
	}
	if err := f.Mkdir(own); err != nil {
		t.Fatal(err)
	}
	_ = f.set(own, "cgroup.procs", "4242\n4343")
	hs := map[string]hierarchy{ctrlPids: {v2: true, dir: own}, ctrlMemory: {v2: true, dir: own}}
	cg, _, err := newCgroups(f, hs, 0, 4242)
	if err == nil || cg != nil || !strings.Contains(err.Error(), "delegate a cgroup subtree") {
		t.Fatalf("newCgroups in a shared cgroup = %v, %v; want the delegation error", cg, err)
	}
	kids, _ := f.Subdirs(own)
	if slices.ContainsFunc(kids, func(k string) bool { return strings.HasPrefix(k, cgroupPrefix) }) {
		t.Errorf("jail parents left behind: %v", kids)
	}
}

// TestMemoryLimit: the tightest limit from the daemon's cgroup up to the
// hierarchy's mount is the one that binds, past cgroups without the file;
// "max" and v1's "unlimited" are none, and nothing above the mount is
// read.
func TestMemoryLimit(t *testing.T) {
	v1 := t.TempDir()
	own := filepath.Join(v1, "memory", "kubepods", "pod1", "ctr")
	if err := os.MkdirAll(own, 0o755); err != nil {
		t.Fatal(err)
	}
	for dir, val := range map[string]string{
		filepath.Join(v1, "memory"):                     "9223372036854771712",
		filepath.Join(v1, "memory", "kubepods"):         "20000000000",
		filepath.Join(v1, "memory", "kubepods", "pod1"): "8589934592",
		own: "9223372036854771712",
	} {
		if err := os.WriteFile(filepath.Join(dir, "memory.limit_in_bytes"), []byte(val+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mount := filepath.Join(v1, "memory")
	if n, ok := memoryLimit(kernelFS{}, hierarchy{dir: own, mount: mount}); !ok || n != 8<<30 {
		t.Fatalf("v1: %d %v, want the pod's 8 GiB", n, ok)
	}
	if n, ok := memoryLimit(kernelFS{}, hierarchy{dir: mount, mount: mount}); ok {
		t.Fatalf("v1 root, unlimited: %d %v, want none", n, ok)
	}
	// A limit file above the mount is not the hierarchy's.
	if err := os.WriteFile(filepath.Join(v1, "memory.limit_in_bytes"), []byte("1048576\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if n, ok := memoryLimit(kernelFS{}, hierarchy{dir: own, mount: mount}); !ok || n != 8<<30 {
		t.Fatalf("v1 with a file above the mount: %d %v, want the pod's 8 GiB", n, ok)
	}
	f := newFakeV2(t, "memory")
	if err := f.set(f.root, "cgroup.subtree_control", "memory"); err != nil {
		t.Fatal(err)
	}
	unit := filepath.Join(f.root, "system.slice")
	if err := f.Mkdir(unit); err != nil {
		t.Fatal(err)
	}
	if err := f.set(unit, "cgroup.subtree_control", "memory"); err != nil {
		t.Fatal(err)
	}
	svc := filepath.Join(unit, "lsp.service")
	if err := f.Mkdir(svc); err != nil {
		t.Fatal(err)
	}
	if n, ok := memoryLimit(f, hierarchy{v2: true, dir: svc, mount: f.root}); ok {
		t.Fatalf("v2, max everywhere: %d %v, want none", n, ok)
	}
	if err := f.set(unit, "memory.max", "4294967296"); err != nil {
		t.Fatal(err)
	}
	if n, ok := memoryLimit(f, hierarchy{v2: true, dir: svc, mount: f.root}); !ok || n != 4<<30 {
		t.Fatalf("v2: %d %v, want the slice's 4 GiB", n, ok)
	}
	// A leaf its parent does not enable memory for has no memory.max: the
	// parent's limit still binds.
	leaf := filepath.Join(svc, "init")
	if err := f.Mkdir(leaf); err != nil {
		t.Fatal(err)
	}
	if f.Has(leaf, "memory.max") {
		t.Fatal("the fake gave a leaf memory.max its parent does not enable")
	}
	if n, ok := memoryLimit(f, hierarchy{v2: true, dir: leaf, mount: f.root}); !ok || n != 4<<30 {
		t.Fatalf("v2 leaf without memory.max: %d %v, want the slice's 4 GiB", n, ok)
	}
}
