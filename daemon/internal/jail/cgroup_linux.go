//go:build linux

package jail

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// The controllers a jail needs. pids is what bounds the process count of
// root's jails (RLIMIT_NPROC does not bind root); memory bounds their RSS.
const (
	ctrlPids   = "pids"
	ctrlMemory = "memory"
)

// hierarchy is where one controller is mounted and where this process sits
// in it.
type hierarchy struct {
	v2    bool
	dir   string // the daemon's own cgroup directory in that hierarchy
	mount string // where the hierarchy is mounted: dir is under it
}

// findHierarchies reads mountinfo and /proc/self/cgroup and returns, for
// each wanted controller that is mounted, the daemon's own cgroup directory
// in its hierarchy. A controller mounted as v1 wins (a controller lives in
// one hierarchy only); otherwise it must be listed in the v2 root's
// cgroup.controllers.
func findHierarchies(mountinfo, selfCgroup []byte, v2Controllers func(mount string) []string, want ...string) map[string]hierarchy {
	type mount struct{ point, root string }
	v1 := map[string]mount{}
	var v2 *mount
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source superoptions
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 3 {
			continue
		}
		m := mount{point: unescapeMount(f[4]), root: unescapeMount(f[3])}
		if !filepath.IsAbs(m.point) || !filepath.IsAbs(m.root) {
			continue
		}
		switch g[0] {
		case "cgroup":
			for _, o := range strings.Split(g[2], ",") {
				if _, seen := v1[o]; !seen {
					v1[o] = m
				}
			}
		case "cgroup2":
			if v2 == nil {
				v2 = &m
			}
		}
	}
	v1Path := map[string]string{}
	v2Path, hasV2Path := "", false
	sc = bufio.NewScanner(bytes.NewReader(selfCgroup))
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 || !strings.HasPrefix(parts[2], "/") {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2Path, hasV2Path = parts[2], true
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			v1Path[c] = parts[2]
		}
	}
	out := map[string]hierarchy{}
	for _, c := range want {
		if m, ok := v1[c]; ok {
			if p, ok := v1Path[c]; ok {
				out[c] = hierarchy{dir: joinCgroup(m.point, m.root, p), mount: m.point}
			}
			continue
		}
		if v2 != nil && hasV2Path {
			for _, have := range v2Controllers(v2.point) {
				if have == c {
					out[c] = hierarchy{v2: true, dir: joinCgroup(v2.point, v2.root, v2Path), mount: v2.point}
				}
			}
		}
	}
	return out
}

// joinCgroup maps a path from /proc/self/cgroup onto the mount: the path is
// relative to the hierarchy's root, of which the mount shows the subtree at
// root.
func joinCgroup(point, root, path string) string {
	rel := path
	if root != "/" {
		if r, ok := strings.CutPrefix(path, root); ok && (r == "" || r[0] == '/') {
			rel = r
		}
	}
	return filepath.Join(point, filepath.FromSlash(rel))
}

// unescapeMount undoes mountinfo's octal escapes of space, tab, newline and
// backslash.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func readV2Controllers(mount string) []string {
	b, err := os.ReadFile(filepath.Join(mount, "cgroup.controllers"))
	if err != nil {
		return nil
	}
	return strings.Fields(string(b))
}

// cgroupFS is the seam every cgroup file operation goes through: the
// kernel's cgroup file systems in production; in the tests also a plain
// directory laid out like a cgroup2 mount, so that the v2 logic runs on
// machines that mount v1 (see cgroupfs_test.go).
type cgroupFS interface {
	// Mkdir creates a cgroup (the kernel populates its control files).
	Mkdir(dir string) error
	// Rmdir removes an empty cgroup.
	Rmdir(dir string) error
	// Write writes one value to an existing control file.
	Write(dir, file, val string) error
	// Read reads a control file.
	Read(dir, file string) ([]byte, error)
	// Has reports whether a control file exists.
	Has(dir, file string) bool
	// Subdirs lists the child cgroups of dir.
	Subdirs(dir string) ([]string, error)
}

// kernelFS is the real cgroup file system.
type kernelFS struct{}

func (kernelFS) Mkdir(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("cgroup %s: %w", dir, err)
	}
	return nil
}

func (kernelFS) Rmdir(dir string) error { return syscall.Rmdir(dir) }

func (kernelFS) Write(dir, file, val string) error { return writeCgroup(dir, file, val) }

func (kernelFS) Read(dir, file string) ([]byte, error) {
	return os.ReadFile(filepath.Join(dir, file))
}

func (kernelFS) Has(dir, file string) bool {
	_, err := os.Stat(filepath.Join(dir, file))
	return err == nil
}

func (kernelFS) Subdirs(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// cgroups is one Spawner's parent of its jail cgroups: one directory per
// hierarchy (v1 mounts pids and memory separately; v2 has one), named
// lsp-jail-<daemon pid>-<n> so that daemons sharing a cgroup (tests, a
// restart) never touch each other's jails. With a pool memory budget, the
// memory parent carries it as its own limit: the kernel then holds the sum
// of every jail's memory under the budget (hierarchical accounting), and a
// jail that would push the pool past it is reclaimed from, then OOM-killed,
// inside the pool.
type cgroups struct {
	fsys       cgroupFS
	parents    []cgroupParent
	poolMemory int64 // 0: no pool-wide limit
}

type cgroupParent struct {
	v2    bool
	dir   string
	ctrls []string // controllers limited in this hierarchy
}

// jailCgroup is one jail's set of directories, one per hierarchy.
type jailCgroup struct {
	fsys cgroupFS
	dirs []string
	// shared are parent cgroups the jail joins without one of its own
	// (the jail-price bench only: holes.jailInShare).
	shared []string
}

const cgroupPrefix = "lsp-jail-"

// parentSeq numbers the Spawners of this process.
var parentSeq atomic.Uint64

// setupCgroups finds the pids and memory controllers and creates the
// daemon's parent cgroups under its own, with poolMemory (when not 0) as
// the memory parent's limit. It returns nil cgroups and no error when a
// controller is missing or not writable (an unprivileged daemon without a
// delegated subtree); the caller decides whether that is acceptable.
func setupCgroups(poolMemory int64) (*cgroups, []string, error) {
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, nil, err
	}
	sc, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, nil, err
	}
	hs := findHierarchies(mi, sc, readV2Controllers, ctrlPids, ctrlMemory)
	return newCgroups(kernelFS{}, hs, poolMemory, os.Getpid())
}

// MemoryLimit is the memory the daemon and all it runs can have: the
// tightest limit on its own memory cgroup and its ancestors, as far as its
// view of the hierarchy reaches (a container's limit, a systemd unit's
// MemoryMax), when that is below the machine's memory, else the machine's.
// from says which ("cgroup", "machine"); limit is 0 when neither is known.
func MemoryLimit() (limit int64, from string) {
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) == nil {
		limit, from = int64(si.Totalram)*int64(si.Unit), "machine"
	}
	mi, err1 := os.ReadFile("/proc/self/mountinfo")
	sc, err2 := os.ReadFile("/proc/self/cgroup")
	if err1 != nil || err2 != nil {
		return limit, from
	}
	if h, ok := findHierarchies(mi, sc, readV2Controllers, ctrlMemory)[ctrlMemory]; ok {
		if n, ok := memoryLimit(kernelFS{}, h); ok && (limit == 0 || n < limit) {
			limit, from = n, "cgroup"
		}
	}
	return limit, from
}

// memoryLimit reads the limit of h's directory and of each parent up to
// the hierarchy's mount, never above it. A cgroup without the control
// file is passed over: in v2 only those whose parent enables the memory
// controller have one (a container's init moved to a leaf of its own has
// none, its parent the container's limit), and the root never does.
// "max" (v2) and v1's page-counter maximum are no limit.
func memoryLimit(fsys cgroupFS, h hierarchy) (int64, bool) {
	file := "memory.limit_in_bytes"
	if h.v2 {
		file = "memory.max"
	}
	rel, err := filepath.Rel(h.mount, h.dir)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return 0, false
	}
	var limit int64
	found := false
	for dir := h.dir; ; dir = filepath.Dir(dir) {
		if fsys.Has(dir, file) {
			b, err := fsys.Read(dir, file)
			n, perr := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			if err == nil && perr == nil && n > 0 && n < 1<<62 && (!found || n < limit) {
				limit, found = n, true
			}
		}
		if dir == h.mount || dir == filepath.Dir(dir) {
			return limit, found
		}
	}
}

// newCgroups creates the parents in the hierarchies hs (controller →
// the daemon's own cgroup), through fsys; pid is the daemon's, which v2 may
// have to move out of its own cgroup (see enableV2).
func newCgroups(fsys cgroupFS, hs map[string]hierarchy, poolMemory int64, pid int) (*cgroups, []string, error) {
	var missing []string
	for _, c := range []string{ctrlPids, ctrlMemory} {
		if _, ok := hs[c]; !ok {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return nil, missing, nil
	}
	byDir := map[string]*cgroupParent{}
	var order []string
	for _, c := range []string{ctrlPids, ctrlMemory} {
		h := hs[c]
		p, ok := byDir[h.dir]
		if !ok {
			p = &cgroupParent{v2: h.v2, dir: h.dir}
			byDir[h.dir] = p
			order = append(order, h.dir)
		}
		p.ctrls = append(p.ctrls, c)
	}
	cg := &cgroups{fsys: fsys, poolMemory: poolMemory}
	name := fmt.Sprintf("%s%d-%d", cgroupPrefix, pid, parentSeq.Add(1))
	for _, own := range order {
		p := byDir[own]
		err := func() error {
			removeStaleParents(fsys, own)
			if p.v2 {
				if err := enableV2(fsys, own, p.ctrls, pid); err != nil {
					return err
				}
			}
			dir := filepath.Join(own, name)
			if err := fsys.Mkdir(dir); err != nil {
				return err
			}
			cg.parents = append(cg.parents, cgroupParent{v2: p.v2, dir: dir, ctrls: p.ctrls})
			if p.v2 {
				if err := fsys.Write(dir, "cgroup.subtree_control", "+"+strings.Join(p.ctrls, " +")); err != nil {
					return err
				}
			}
			if poolMemory > 0 && slices.Contains(p.ctrls, ctrlMemory) {
				return limitPoolMemory(fsys, dir, p.v2, poolCgroupLimit(poolMemory))
			}
			return nil
		}()
		if err != nil {
			_ = cg.close()
			// Not ours to use (an unprivileged daemon without a delegated
			// subtree): the caller falls back or refuses.
			if errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS) {
				return nil, p.ctrls, nil
			}
			return nil, nil, err
		}
	}
	return cg, nil, nil
}

// poolCgroupLimit is the memory limit that keeps the jails under budget.
// The kernel charges a few pages past a cgroup's limit for allocations
// that must not fail (the OOM kill itself, some kernel objects): the test
// saw 2 to 7 pages over. A reserve of 1/64 of the budget, at most 4 MiB,
// keeps that slack inside the budget.
func poolCgroupLimit(budget int64) int64 {
	return budget - min(budget/64, 4<<20)
}

// limitPoolMemory puts the pool's budget on the jails' memory parent,
// before any jail exists under it. v1 charges a child to its ancestors
// only with memory.use_hierarchy=1 (always on since Linux 5.16, a switch
// before); v2 always does. Swap gets the same bound (v1 memsw) or none
// (v2), so that the pool cannot spill past its budget into swap.
func limitPoolMemory(fsys cgroupFS, dir string, v2 bool, limit int64) error {
	val := strconv.FormatInt(limit, 10)
	if v2 {
		if err := fsys.Write(dir, "memory.max", val); err != nil {
			return fmt.Errorf("pool memory limit: %w", err)
		}
		if fsys.Has(dir, "memory.swap.max") {
			return fsys.Write(dir, "memory.swap.max", "0")
		}
		return nil
	}
	if b, err := fsys.Read(dir, "memory.use_hierarchy"); err == nil && strings.TrimSpace(string(b)) != "1" {
		if err := fsys.Write(dir, "memory.use_hierarchy", "1"); err != nil {
			return fmt.Errorf("pool memory limit needs memory.use_hierarchy=1: %w", err)
		}
	}
	if err := fsys.Write(dir, "memory.limit_in_bytes", val); err != nil {
		return fmt.Errorf("pool memory limit: %w", err)
	}
	if fsys.Has(dir, "memory.memsw.limit_in_bytes") {
		return fsys.Write(dir, "memory.memsw.limit_in_bytes", val)
	}
	return nil
}

// enableV2 turns the controllers on for the children of the daemon's own v2
// cgroup. v2 forbids a cgroup with processes from handing controllers to
// children, so when the daemon's cgroup holds processes the daemon first
// moves itself into a leaf beside the jails; if others remain there the
// operator must delegate a subtree (systemd Delegate=yes) instead.
func enableV2(fsys cgroupFS, own string, ctrls []string, pid int) error {
	val := "+" + strings.Join(ctrls, " +")
	err := fsys.Write(own, "cgroup.subtree_control", val)
	if err == nil || !errors.Is(err, syscall.EBUSY) {
		return err
	}
	leaf := filepath.Join(own, "lsp-daemon")
	if err := fsys.Mkdir(leaf); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if err := fsys.Write(leaf, "cgroup.procs", strconv.Itoa(pid)); err != nil {
		return err
	}
	if err := fsys.Write(own, "cgroup.subtree_control", val); err != nil {
		return fmt.Errorf("%w (other processes share the daemon's cgroup %s: delegate a cgroup subtree to the daemon)", err, own)
	}
	return nil
}

// removeStaleParents removes the jail cgroups of daemons that are gone.
func removeStaleParents(fsys cgroupFS, own string) {
	names, err := fsys.Subdirs(own)
	if err != nil {
		return
	}
	for _, n := range names {
		rest, ok := strings.CutPrefix(n, cgroupPrefix)
		if !ok {
			continue
		}
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid == os.Getpid() {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			continue
		}
		dir := filepath.Join(own, n)
		if kids, err := fsys.Subdirs(dir); err == nil {
			for _, k := range kids {
				_ = fsys.Rmdir(filepath.Join(dir, k))
			}
		}
		_ = fsys.Rmdir(dir)
	}
}

func writeCgroup(dir, file, val string) error {
	// cgroup files take one write; O_TRUNC is meaningless for them but
	// harmless, and os.WriteFile would create a missing file.
	f, err := os.OpenFile(filepath.Join(dir, file), os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("cgroup %s: %w", filepath.Join(dir, file), err)
	}
	_, err = f.WriteString(val)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("cgroup write %q to %s: %w", val, filepath.Join(dir, file), err)
	}
	return nil
}

// create makes a jail's cgroups and sets their limits. skip and inParent
// are the jail-price bench's holes (nil and false in production): no
// cgroup at all for a controller, or the memory parent's own cgroup
// instead of one per jail.
func (cg *cgroups) create(name string, pids int, memory int64, skip map[string]bool, inParent bool) (*jailCgroup, error) {
	fsys := cg.fsys
	j := &jailCgroup{fsys: fsys}
	for _, p := range cg.parents {
		if slices.ContainsFunc(p.ctrls, func(c string) bool { return skip[c] }) {
			continue
		}
		if inParent && !p.v2 && slices.Contains(p.ctrls, ctrlMemory) {
			j.shared = append(j.shared, p.dir)
			continue
		}
		dir := filepath.Join(p.dir, name)
		if err := fsys.Mkdir(dir); err != nil {
			_ = j.remove()
			return nil, err
		}
		j.dirs = append(j.dirs, dir)
		for _, c := range p.ctrls {
			var err error
			switch {
			case c == ctrlPids:
				err = fsys.Write(dir, "pids.max", strconv.Itoa(pids))
			case c == ctrlMemory && p.v2:
				err = fsys.Write(dir, "memory.max", strconv.FormatInt(memory, 10))
				if err == nil && fsys.Has(dir, "memory.swap.max") {
					err = fsys.Write(dir, "memory.swap.max", "0")
				}
			case c == ctrlMemory:
				err = fsys.Write(dir, "memory.limit_in_bytes", strconv.FormatInt(memory, 10))
				if err == nil && fsys.Has(dir, "memory.memsw.limit_in_bytes") {
					// With swap accounting, memory+swap gets the same bound
					// so that the jail cannot spill into swap.
					err = fsys.Write(dir, "memory.memsw.limit_in_bytes", strconv.FormatInt(memory, 10))
				}
			}
			if err != nil {
				_ = j.remove()
				return nil, err
			}
		}
	}
	return j, nil
}

// procsFiles are what the launcher writes its pid into.
func (j *jailCgroup) procsFiles() []string {
	var out []string
	for _, d := range append(j.dirs, j.shared...) {
		out = append(out, filepath.Join(d, "cgroup.procs"))
	}
	return out
}

// members lists the pids still in the jail's cgroups.
func (j *jailCgroup) members() []int {
	var out []int
	for _, d := range j.dirs {
		b, err := j.fsys.Read(d, "cgroup.procs")
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				out = append(out, pid)
			}
		}
	}
	return out
}

// remove deletes the jail's cgroups. It is called once the process tree is
// gone; a cgroup whose last task is still being torn down by the kernel
// answers EBUSY for a moment, hence the short retry.
func (j *jailCgroup) remove() error {
	var errs []error
	for i := len(j.dirs) - 1; i >= 0; i-- {
		d := j.dirs[i]
		deadline := time.Now().Add(2 * time.Second)
		for {
			err := j.fsys.Rmdir(d)
			if err == nil || errors.Is(err, syscall.ENOENT) {
				break
			}
			if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	j.dirs = nil
	return errors.Join(errs...)
}

// close removes the daemon's parent cgroups; jails still running keep
// theirs (and the parent) alive.
func (cg *cgroups) close() error {
	if cg == nil {
		return nil
	}
	var errs []error
	for _, p := range cg.parents {
		if err := cg.fsys.Rmdir(p.dir); err != nil && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", p.dir, err))
		}
	}
	return errors.Join(errs...)
}

// memoryParent is the parent that holds the memory controller.
func (cg *cgroups) memoryParent() (cgroupParent, bool) {
	if cg != nil {
		for _, p := range cg.parents {
			if slices.Contains(p.ctrls, ctrlMemory) {
				return p, true
			}
		}
	}
	return cgroupParent{}, false
}

// describe says which hierarchy holds what, for the start-up log.
func (cg *cgroups) describe() string {
	if cg == nil {
		return "none"
	}
	var parts []string
	for _, p := range cg.parents {
		v := "v1"
		if p.v2 {
			v = "v2"
		}
		parts = append(parts, fmt.Sprintf("%s %s at %s", v, strings.Join(p.ctrls, "+"), p.dir))
	}
	if cg.poolMemory > 0 {
		parts = append(parts, fmt.Sprintf("pool memory budget %d (kernel-enforced at %d)", cg.poolMemory, poolCgroupLimit(cg.poolMemory)))
	}
	return strings.Join(parts, "; ")
}
