//go:build linux

package jail

import (
	"log/slog"

	"golang.org/x/sys/unix"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
)

// process is one jail: a process group led by bwrap (runtime.GroupProcess
// kills and reaps it), and its cgroups (nil without), which the self-test
// reads while the jail runs.
type process struct {
	*runtime.GroupProcess
	cg *jailCgroup
}

// removeCgroup removes a reaped jail's cgroups. The jail's PID namespace
// is gone with its init, so anything still listed is a bug worth a loud
// line, and is killed before the removal.
func removeCgroup(cg *jailCgroup, log *slog.Logger) {
	if cg == nil {
		return
	}
	if left := cg.members(); len(left) > 0 {
		log.Warn("processes left in the jail's cgroup after its init died", "pids", left)
		for _, pid := range left {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}
	if err := cg.remove(); err != nil {
		log.Warn("cannot remove the jail's cgroup", "err", err)
	}
}
