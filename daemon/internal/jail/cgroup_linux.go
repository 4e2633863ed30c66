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
	v2  bool
	dir string // the daemon's own cgroup directory in that hierarchy
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
				out[c] = hierarchy{dir: joinCgroup(m.point, m.root, p)}
			}
			continue
		}
		if v2 != nil && hasV2Path {
			for _, have := range v2Controllers(v2.point) {
				if have == c {
					out[c] = hierarchy{v2: true, dir: joinCgroup(v2.point, v2.root, v2Path)}
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

// cgroups is one Spawner's parent of its jail cgroups: one directory per
// hierarchy (v1 mounts pids and memory separately; v2 has one), named
// lsp-jail-<daemon pid>-<n> so that daemons sharing a cgroup (tests, a
// restart) never touch each other's jails.
type cgroups struct {
	parents []cgroupParent
}

type cgroupParent struct {
	v2    bool
	dir   string
	ctrls []string // controllers limited in this hierarchy
}

// jailCgroup is one jail's set of directories, one per hierarchy.
type jailCgroup struct {
	dirs []string
}

const cgroupPrefix = "lsp-jail-"

// parentSeq numbers the Spawners of this process.
var parentSeq atomic.Uint64

// setupCgroups finds the pids and memory controllers and creates the
// daemon's parent cgroups under its own. It returns nil cgroups and no
// error when a controller is missing or not writable (an unprivileged
// daemon without a delegated subtree); the caller decides whether that is
// acceptable.
func setupCgroups() (*cgroups, []string, error) {
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, nil, err
	}
	sc, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, nil, err
	}
	hs := findHierarchies(mi, sc, readV2Controllers, ctrlPids, ctrlMemory)
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
	cg := &cgroups{}
	name := fmt.Sprintf("%s%d-%d", cgroupPrefix, os.Getpid(), parentSeq.Add(1))
	for _, own := range order {
		p := byDir[own]
		err := func() error {
			removeStaleParents(own)
			if p.v2 {
				if err := enableV2(own, p.ctrls); err != nil {
					return err
				}
			}
			dir := filepath.Join(own, name)
			if err := os.Mkdir(dir, 0o755); err != nil {
				return fmt.Errorf("cgroup %s: %w", dir, err)
			}
			cg.parents = append(cg.parents, cgroupParent{v2: p.v2, dir: dir, ctrls: p.ctrls})
			if p.v2 {
				return writeCgroup(dir, "cgroup.subtree_control", "+"+strings.Join(p.ctrls, " +"))
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

// enableV2 turns the controllers on for the children of the daemon's own v2
// cgroup. v2 forbids a cgroup with processes from handing controllers to
// children, so when the daemon's cgroup holds processes the daemon first
// moves itself into a leaf beside the jails; if others remain there the
// operator must delegate a subtree (systemd Delegate=yes) instead.
func enableV2(own string, ctrls []string) error {
	val := "+" + strings.Join(ctrls, " +")
	err := writeCgroup(own, "cgroup.subtree_control", val)
	if err == nil || !errors.Is(err, syscall.EBUSY) {
		return err
	}
	leaf := filepath.Join(own, "lsp-daemon")
	if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("cgroup %s: %w", leaf, err)
	}
	if err := writeCgroup(leaf, "cgroup.procs", strconv.Itoa(os.Getpid())); err != nil {
		return err
	}
	if err := writeCgroup(own, "cgroup.subtree_control", val); err != nil {
		return fmt.Errorf("%w (other processes share the daemon's cgroup %s: delegate a cgroup subtree to the daemon)", err, own)
	}
	return nil
}

// removeStaleParents removes the jail cgroups of daemons that are gone.
func removeStaleParents(own string) {
	entries, err := os.ReadDir(own)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), cgroupPrefix)
		if !ok || !e.IsDir() {
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
		dir := filepath.Join(own, e.Name())
		if kids, err := os.ReadDir(dir); err == nil {
			for _, k := range kids {
				if k.IsDir() {
					_ = syscall.Rmdir(filepath.Join(dir, k.Name()))
				}
			}
		}
		_ = syscall.Rmdir(dir)
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

// create makes a jail's cgroups and sets their limits.
func (cg *cgroups) create(name string, pids int, memory int64) (*jailCgroup, error) {
	j := &jailCgroup{}
	for _, p := range cg.parents {
		dir := filepath.Join(p.dir, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			j.remove()
			return nil, fmt.Errorf("cgroup %s: %w", dir, err)
		}
		j.dirs = append(j.dirs, dir)
		for _, c := range p.ctrls {
			var err error
			switch {
			case c == ctrlPids:
				err = writeCgroup(dir, "pids.max", strconv.Itoa(pids))
			case c == ctrlMemory && p.v2:
				err = writeCgroup(dir, "memory.max", strconv.FormatInt(memory, 10))
				if err == nil {
					err = writeOptional(dir, "memory.swap.max", "0")
				}
			case c == ctrlMemory:
				err = writeCgroup(dir, "memory.limit_in_bytes", strconv.FormatInt(memory, 10))
				if err == nil {
					// With swap accounting, memory+swap gets the same bound
					// so that the jail cannot spill into swap.
					err = writeOptional(dir, "memory.memsw.limit_in_bytes", strconv.FormatInt(memory, 10))
				}
			}
			if err != nil {
				j.remove()
				return nil, err
			}
		}
	}
	return j, nil
}

func writeOptional(dir, file, val string) error {
	if _, err := os.Stat(filepath.Join(dir, file)); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return writeCgroup(dir, file, val)
}

// procsFiles are what the launcher writes its pid into.
func (j *jailCgroup) procsFiles() []string {
	var out []string
	for _, d := range j.dirs {
		out = append(out, filepath.Join(d, "cgroup.procs"))
	}
	return out
}

// members lists the pids still in the jail's cgroups.
func (j *jailCgroup) members() []int {
	var out []int
	for _, d := range j.dirs {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
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
			err := syscall.Rmdir(d)
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
		if err := syscall.Rmdir(p.dir); err != nil && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", p.dir, err))
		}
	}
	return errors.Join(errs...)
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
	return strings.Join(parts, "; ")
}
