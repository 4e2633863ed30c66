//go:build linux

package jail

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
	"golang.org/x/sys/unix"
)

const mountinfoV1 = `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`

const cgroupV1 = `8:pids:/
4:memory:/process_api/abc
0::/
`

const mountinfoV2 = `30 23 0:27 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate
`

func TestFindHierarchies(t *testing.T) {
	tests := []struct {
		name              string
		mountinfo, cgroup string
		v2ctrls           []string
		want              map[string]hierarchy
	}{
		{
			name: "v1 controllers win over an empty v2", mountinfo: mountinfoV1, cgroup: cgroupV1,
			want: map[string]hierarchy{
				"pids":   {dir: "/sys/fs/cgroup/pids", mount: "/sys/fs/cgroup/pids"},
				"memory": {dir: "/sys/fs/cgroup/memory/process_api/abc", mount: "/sys/fs/cgroup/memory"},
			},
		},
		{
			name: "pure v2", mountinfo: mountinfoV2, cgroup: "0::/system.slice/lsp-daemon.service\n",
			v2ctrls: []string{"cpu", "memory", "pids"},
			want: map[string]hierarchy{
				"pids":   {v2: true, dir: "/sys/fs/cgroup/system.slice/lsp-daemon.service", mount: "/sys/fs/cgroup"},
				"memory": {v2: true, dir: "/sys/fs/cgroup/system.slice/lsp-daemon.service", mount: "/sys/fs/cgroup"},
			},
		},
		{
			name: "v2 without the pids controller", mountinfo: mountinfoV2, cgroup: "0::/x\n",
			v2ctrls: []string{"memory"},
			want:    map[string]hierarchy{"memory": {v2: true, dir: "/sys/fs/cgroup/x", mount: "/sys/fs/cgroup"}},
		},
		{
			name: "a container's v1 mount shows a subtree", cgroup: "8:pids:/docker/abc\n",
			mountinfo: "39 31 0:36 /docker/abc /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n",
			want:      map[string]hierarchy{"pids": {dir: "/sys/fs/cgroup/pids", mount: "/sys/fs/cgroup/pids"}},
		},
		{name: "no cgroups at all", mountinfo: "1 0 8:1 / / rw - ext4 /dev/root rw\n", cgroup: "", want: map[string]hierarchy{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := findHierarchies([]byte(tt.mountinfo), []byte(tt.cgroup), func(string) []string { return tt.v2ctrls }, ctrlPids, ctrlMemory)
			if len(got) != len(tt.want) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("%s = %+v, want %+v", k, got[k], v)
				}
			}
		})
	}
}

func FuzzFindHierarchies(f *testing.F) {
	f.Add([]byte(mountinfoV1), []byte(cgroupV1))
	f.Add([]byte(mountinfoV2), []byte("0::/a\\040b\n"))
	f.Fuzz(func(t *testing.T, mi, cg []byte) {
		for _, h := range findHierarchies(mi, cg, func(string) []string { return []string{"pids", "memory"} }, ctrlPids, ctrlMemory) {
			if !filepath.IsAbs(h.dir) {
				t.Fatalf("relative cgroup dir %q", h.dir)
			}
		}
	})
}

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{`/a\040b`: "/a b", `/plain`: "/plain", `/x\134y`: `/x\y`, `/bad\04`: `/bad\04`} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestOptionsFromEnv(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		want    func(Options) bool
		wantErr string
	}{
		{name: "defaults", env: nil, want: func(o Options) bool {
			return o.Memory == DefaultMemory && o.Pids == DefaultPids && o.Bwrap == DefaultBwrap && slices.Equal(o.ReadOnly, DefaultReadOnly) && o.UIDBase == DefaultUIDBase && o.UIDCount == DefaultUIDCount && !o.UIDBaseFixed && o.UIDLockDir == DefaultUIDLockDir
		}},
		{name: "uid range set", env: map[string]string{"LSP_JAIL_UID_BASE": "2000000000", "LSP_JAIL_UID_COUNT": "5000", "LSP_JAIL_UID_LOCK_DIR": "/var/run/x"}, want: func(o Options) bool {
			return o.UIDBase == 2_000_000_000 && o.UIDCount == 5000 && o.UIDBaseFixed && o.UIDLockDir == "/var/run/x"
		}},
		{name: "uid count too small", env: map[string]string{"LSP_JAIL_UID_COUNT": "10"}, wantErr: "LSP_JAIL_UID_COUNT"},
		{name: "uid range past 2^31", env: map[string]string{"LSP_JAIL_UID_BASE": "2147000000", "LSP_JAIL_UID_COUNT": "1000000"}, wantErr: "LSP_JAIL_UID_BASE"},
		{name: "relative uid lock dir", env: map[string]string{"LSP_JAIL_UID_LOCK_DIR": "run/x"}, wantErr: "LSP_JAIL_UID_LOCK_DIR"},
		{name: "sizes", env: map[string]string{"LSP_JAIL_MEMORY": "2G", "LSP_JAIL_FSIZE": "512M", "LSP_JAIL_PIDS": "300", "LSP_JAIL_NOFILE": "1024"}, want: func(o Options) bool {
			return o.Memory == 2<<30 && o.FileSize == 512<<20 && o.Pids == 300 && o.Files == 1024
		}},
		{name: "paths", env: map[string]string{"LSP_JAIL_RO_PATHS": "/usr/local/go:/opt/ts"}, want: func(o Options) bool {
			return slices.Equal(o.ReadOnly, []string{"/usr/local/go", "/opt/ts"})
		}},
		{name: "no extra paths", env: map[string]string{"LSP_JAIL_RO_PATHS": ":"}, want: func(o Options) bool { return len(o.ReadOnly) == 0 }},
		{name: "bad size", env: map[string]string{"LSP_JAIL_MEMORY": "lots"}, wantErr: "LSP_JAIL_MEMORY"},
		{name: "too small", env: map[string]string{"LSP_JAIL_MEMORY": "1M"}, wantErr: "below"},
		{name: "relative path", env: map[string]string{"LSP_JAIL_RO_PATHS": "usr/local/go"}, wantErr: "clean absolute"},
		{name: "root path", env: map[string]string{"LSP_JAIL_RO_PATHS": "/"}, wantErr: "clean absolute"},
		{name: "bad pids", env: map[string]string{"LSP_JAIL_PIDS": "-1"}, wantErr: "LSP_JAIL_PIDS"},
		{name: "uid range", env: map[string]string{"LSP_JAIL_UID_BASE": "100"}, wantErr: "LSP_JAIL_UID_BASE"},
		{name: "relative bwrap", env: map[string]string{"LSP_JAIL_BWRAP": "bwrap"}, wantErr: "LSP_JAIL_BWRAP"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := OptionsFromEnv(func(k string) string { return tt.env[k] })
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one naming %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tt.want(o) {
				t.Fatalf("options = %+v", o)
			}
		})
	}
}

// TestBwrapArgs checks the jail's shape: what is bound, in which order,
// and that nothing of the daemon's root but this workspace is.
func TestBwrapArgs(t *testing.T) {
	s := &Spawner{opts: Options{Launcher: "/usr/local/bin/lsp-daemon", ReadOnly: []string{"/usr/local/go", "/nonexistent/toolchain"}}.withDefaults(), libs: systemLibs(), seccomp: []byte{1}}
	ws := runtime.Workspace{Root: "/var/lib/lsp/trees/t/r/c", Home: "/var/lib/lsp/homes/t/r"}
	spec := runtime.Spec{Executable: "/var/lib/lsp/bin/abc", Args: []string{"serve", "/usr/local/go/../go"}}
	js := jailSpec{exe: spec.Executable, args: spec.Args, env: []string{"A=1", "PATH=/x"}, ownBinds: true, initLimits: []string{"-nproc", "9"}}

	for _, staged := range []bool{false, true} {
		args, sources := s.bwrapArgs(spec, ws, js, staged)
		joined := strings.Join(args, " ")
		for _, want := range []string{
			"--unshare-all --unshare-user --disable-userns --uid 65534 --gid 65534 --cap-drop ALL --die-with-parent",
			"--seccomp 3",
			"--proc /proc --dev /dev --remount-ro /dev --symlink /var/lib/lsp/homes/t/r/tmp /tmp --remount-ro / --chdir /var/lib/lsp/trees/t/r/c --clearenv --setenv A 1 --setenv PATH /x -- /.lsp-jail/init __lsp-jail-init -nproc 9 -- /var/lib/lsp/bin/abc serve /usr/local/go/../go",
		} {
			if !strings.Contains(joined, want) {
				t.Errorf("staged=%v: args lack %q:\n%s", staged, want, joined)
			}
		}
		if strings.Contains(joined, "/nonexistent") || strings.Contains(joined, "--share-net") {
			t.Errorf("staged=%v: %s", staged, joined)
		}
		// Every bound destination is a system path, the toolchain, the
		// executable, the init, the tree or the home: nothing else of the
		// daemon's root.
		var dsts []string
		for i := 0; i < len(args); i++ {
			switch args[i] {
			case "--ro-bind", "--bind":
				dsts = append(dsts, args[i+2])
				i += 2
			}
		}
		last := dsts[len(dsts)-3:]
		if !slices.Equal(last, []string{initPath, ws.Root, ws.Home}) {
			t.Errorf("staged=%v: the init, tree and home must come last, got %v", staged, dsts)
		}
		for _, d := range dsts {
			if strings.HasPrefix(d, "/var/lib/lsp") && !slices.Contains([]string{ws.Root, ws.Home, spec.Executable}, d) {
				t.Errorf("staged=%v: %s of the daemon's root is bound", staged, d)
			}
		}
		if i := slices.Index(args, ws.Home); i < 1 || args[i-1] == "--ro-bind" && !staged {
			t.Errorf("staged=%v: the home is not bound writable: %s", staged, joined)
		}
		if staged {
			want := []string{"/usr/local/go", spec.Executable, s.opts.Launcher, ws.Root, ws.Home}
			if !slices.Equal(sources, want) {
				t.Errorf("staged sources = %v, want %v", sources, want)
			}
			if !strings.Contains(joined, "--bind /tmp/4 "+ws.Home) || !strings.Contains(joined, "--ro-bind /tmp/3 "+ws.Root) {
				t.Errorf("staged binds do not name the stage: %s", joined)
			}
		} else if len(sources) != 0 {
			t.Errorf("unstaged sources %v", sources)
		}
	}
}

// TestSeccompProgram checks the filter's frame: the architecture test
// first, ALLOW last, and each denied system call answered with its errno.
func TestSeccompProgram(t *testing.T) {
	prog := seccompProgram()
	if prog == nil {
		t.Skip("no filter on this architecture")
	}
	if len(prog)%8 != 0 {
		t.Fatalf("program of %d bytes", len(prog))
	}
	ins := make([]sockFilter, len(prog)/8)
	if _, err := binary.Decode(prog, binary.NativeEndian, ins); err != nil {
		t.Fatal(err)
	}
	if ins[0].K != offArch || ins[1].K != auditArch || ins[2].K != unix.SECCOMP_RET_KILL_PROCESS {
		t.Fatalf("program starts %+v", ins[:3])
	}
	if last := ins[len(ins)-1]; last.Code != unix.BPF_RET|unix.BPF_K || last.K != unix.SECCOMP_RET_ALLOW {
		t.Fatalf("program ends %+v", last)
	}
	answer := map[uint32]uint32{}
	for i := 0; i+1 < len(ins); i++ {
		if ins[i].Code == unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K && ins[i].Jt == 0 && ins[i].Jf == 1 && ins[i+1].Code == unix.BPF_RET|unix.BPF_K {
			if _, seen := answer[ins[i].K]; !seen {
				answer[ins[i].K] = ins[i+1].K
			}
		}
	}
	for nr, errno := range map[uintptr]unix.Errno{
		unix.SYS_PTRACE: unix.EPERM, unix.SYS_KEYCTL: unix.EPERM, unix.SYS_UNSHARE: unix.EPERM,
		unix.SYS_OPEN_BY_HANDLE_AT: unix.EPERM, unix.SYS_IO_URING_SETUP: unix.ENOSYS,
	} {
		if got := answer[uint32(nr)]; got != unix.SECCOMP_RET_ERRNO|uint32(errno) {
			t.Errorf("system call %d answers %#x, want errno %d", nr, got, errno)
		}
	}
	if n := len(ins); n > 4096 {
		t.Errorf("%d instructions: over the kernel's limit", n)
	}
}

// What a server's jail binds of its entry: the executable and the
// node_modules of an absolute script argument — never a file an
// environment value, initialization option or setting names (a program it
// runs, shellcheck: the entry lists those in read_only, which the
// configuration checks against the daemon's root).
func TestServerPaths(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "srv", "node_modules", "pkg", "cli.js")
	tool := filepath.Join(dir, "bin", "shellcheck")
	envTool := filepath.Join(dir, "bin", "helper")
	for _, f := range []string{script, tool, envTool} {
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte("x"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	spec := runtime.Spec{
		Executable:            "/var/lib/lsp/bin/abc",
		Args:                  []string{script, "--stdio"},
		Env:                   []string{"HELPER=" + envTool, "DIR=" + dir},
		InitializationOptions: json.RawMessage(`{"shellcheckPath": "` + tool + `", "dir": "` + filepath.Join(dir, "bin") + `", "rel": "bin/x"}`),
		Settings:              json.RawMessage(`{"bashIde": {"shellcheckPath": "` + tool + `", "missing": "` + filepath.Join(dir, "nope") + `", "n": 3}}`),
	}
	got := serverPaths(spec)
	want := []string{"/var/lib/lsp/bin/abc", filepath.Join(dir, "srv", "node_modules")}
	if !slices.Equal(got, want) {
		t.Errorf("serverPaths = %q, want %q", got, want)
	}
}

// TestBwrapArgsReadOnly: the entry's read_only paths that exist are bound
// read-only at their own path, before the tree and the home; missing ones
// are not.
func TestBwrapArgsReadOnly(t *testing.T) {
	s := &Spawner{opts: Options{Launcher: "/usr/local/bin/lsp-daemon", ReadOnly: []string{}}.withDefaults(), libs: systemLibs()}
	ws := runtime.Workspace{Root: "/var/lib/lsp/trees/t/r/c", Home: "/var/lib/lsp/homes/t/r"}
	dir := t.TempDir()
	spec := runtime.Spec{Executable: "/var/lib/lsp/bin/abc", ReadOnly: []string{dir, "/nonexistent/include"}}
	js := jailSpec{exe: spec.Executable, ownBinds: true}
	args, _ := s.bwrapArgs(spec, ws, js, false)
	joined := strings.Join(args, " ")
	if !strings.Contains(joined, "--ro-bind "+dir+" "+dir) {
		t.Errorf("read_only %s not bound read-only: %s", dir, joined)
	}
	if strings.Contains(joined, "/nonexistent/include") {
		t.Errorf("a missing read_only path is bound: %s", joined)
	}
	if strings.Index(joined, dir) > strings.Index(joined, "--ro-bind "+ws.Root) {
		t.Errorf("read_only bound after the tree: %s", joined)
	}
	// Without ownBinds (the canary) the entry's paths are not bound.
	js.ownBinds = false
	if args, _ := s.bwrapArgs(spec, ws, js, false); strings.Contains(strings.Join(args, " "), dir) {
		t.Error("read_only bound for a jail without the server's own binds")
	}
}

// A default compiler that is missing is said at start; one the operator
// turned off, named, or that is there, is not.
func TestCCStartWarning(t *testing.T) {
	if w := ccStartWarning("", cToolchain{}); !strings.Contains(w, "CGO_ENABLED=0") || !strings.Contains(w, "LSP_JAIL_CC") {
		t.Errorf("unset and missing: %q", w)
	}
	for _, tc := range []struct {
		opt string
		c   cToolchain
	}{{ccOff, cToolchain{}}, {"", cToolchain{cc: DefaultCC}}, {"/usr/bin/gcc-12", cToolchain{cc: "/usr/bin/gcc-12"}}} {
		if w := ccStartWarning(tc.opt, tc.c); w != "" {
			t.Errorf("LSP_JAIL_CC=%q, compiler %q: %q", tc.opt, tc.c.cc, w)
		}
	}
}

// The cargo configs a jail masks: .cargo/config.toml and .cargo/config in
// any directory of the tree, nothing else.
func TestTreeCargoConfigs(t *testing.T) {
	root := t.TempDir()
	for _, f := range []string{".cargo/config.toml", "a/b/.cargo/config", "a/.cargo/credentials.toml", "a/cargo/config.toml", "config.toml"} {
		p := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := treeCargoConfigs(runtime.Workspace{Root: root})
	want := []string{filepath.Join(root, ".cargo/config.toml"), filepath.Join(root, "a/b/.cargo/config")}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("treeCargoConfigs = %q, want %q", got, want)
	}
}

// The node_modules the dependency phase installed is not walked for cargo
// configs (registry packages: every start walked them all); one the
// repository commits is the repository's, and is.
func TestTreeCargoConfigsInstalledPackages(t *testing.T) {
	ws := runtime.Workspace{Root: filepath.Join(t.TempDir(), "c", "tree")}
	for _, f := range []string{".cargo/config.toml", "node_modules/p/.cargo/config.toml"} {
		p := filepath.Join(ws.Root, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got := treeCargoConfigs(ws); len(got) != 2 {
		t.Errorf("a committed node_modules: %q, want both configs", got)
	}
	if err := os.WriteFile(runtime.NPMIndex(ws), []byte("[]"), 0o444); err != nil {
		t.Fatal(err)
	}
	if got := treeCargoConfigs(ws); !slices.Equal(got, []string{filepath.Join(ws.Root, ".cargo/config.toml")}) {
		t.Errorf("installed packages: %q, want the tree's own config alone", got)
	}
}

// TestEmptyFileReplacesLeftovers: the empty file the jail binds over cargo
// configs lives in the state directory, and a daemon that starts there
// again replaces what one that never closed left (before, each start made
// a new directory under /tmp, which a killed daemon leaked).
func TestEmptyFileReplacesLeftovers(t *testing.T) {
	state := filepath.Join(t.TempDir(), "jail")
	first, err := emptyFile(state)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(filepath.Dir(first), "left"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := emptyFile(state)
	if err != nil {
		t.Fatal(err)
	}
	if p != first || filepath.Dir(p) != filepath.Join(state, "empty") {
		t.Fatalf("empty file at %s, then %s", first, p)
	}
	names, err := os.ReadDir(filepath.Dir(p))
	if err != nil || len(names) != 1 {
		t.Fatalf("the empty file's directory holds %v (%v); want the file alone", names, err)
	}
	fi, err := os.Lstat(p)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != 0 || fi.Mode().Perm() != 0o444 {
		t.Fatalf("empty file: %v %v", fi, err)
	}

	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	p, err = emptyFile("")
	if err != nil || !strings.HasPrefix(p, tmp+"/") {
		t.Fatalf("without a state directory: %s, %v", p, err)
	}
}
