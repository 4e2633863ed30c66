package servertest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// AsNobody runs tests (tests of the running binary) in a copy of the
// binary as uid and gid 65534 and fails t unless each passes there. Root
// passes every file mode (CAP_DAC_OVERRIDE), and the daemon runs as an
// ordinary uid in production (deploy/k8s), so a test about what modes
// allow means something only there. The copy's directory and its TMPDIR
// are world-usable; the child's environment is only TMPDIR and HOME (that
// directory) and PATH.
func AsNobody(t *testing.T, tests ...string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o777); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dir, tmp} {
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, filepath.Base(os.Args[0]))
	exe, err := os.ReadFile(os.Args[0])
	if err == nil {
		err = os.WriteFile(bin, exe, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^("+strings.Join(tests, "|")+")$", "-test.v", "-test.count=1")
	cmd.Env = []string{"TMPDIR=" + tmp, "HOME=" + tmp, "PATH=" + os.Getenv("PATH")}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	for _, test := range tests {
		if err != nil || !strings.Contains(string(out), "--- PASS: "+test+" ") {
			t.Fatalf("%s as uid 65534: %v\n%s", test, err, out)
		}
	}
}
