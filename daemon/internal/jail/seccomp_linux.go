//go:build linux

package jail

import (
	"bytes"
	"encoding/binary"

	"golang.org/x/sys/unix"
)

// The seccomp filter bwrap installs (--seccomp) right before it runs the
// jail's first program. It is a deny list on top of the namespaces, not the
// boundary itself: it refuses the system calls that widen a sandbox or
// reach shared kernel state and that no language server needs — tracing
// other processes, kernel keyrings, BPF, perf, userfaultfd, module and
// kexec loading, (un)mounting and namespace changes, file handles
// (open_by_handle_at escapes a bind mount), io_uring, clock setting — and
// the terminal ioctls that inject input (TIOCSTI, TIOCLINUX). A system call
// of another ABI (32-bit, x32) kills the process, so the numbers below mean
// what they say.

// denied are refused with EPERM on every architecture; archDenied
// (per-architecture files) adds the rest.
var denied = []uintptr{
	unix.SYS_PTRACE, unix.SYS_PROCESS_VM_READV, unix.SYS_PROCESS_VM_WRITEV,
	unix.SYS_KEYCTL, unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY,
	unix.SYS_BPF, unix.SYS_PERF_EVENT_OPEN, unix.SYS_USERFAULTFD,
	unix.SYS_KEXEC_LOAD, unix.SYS_KEXEC_FILE_LOAD,
	unix.SYS_INIT_MODULE, unix.SYS_FINIT_MODULE, unix.SYS_DELETE_MODULE,
	unix.SYS_REBOOT, unix.SYS_SWAPON, unix.SYS_SWAPOFF, unix.SYS_ACCT, unix.SYS_SYSLOG,
	unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT, unix.SYS_UNSHARE, unix.SYS_SETNS,
	unix.SYS_OPEN_TREE, unix.SYS_MOVE_MOUNT, unix.SYS_FSOPEN, unix.SYS_FSCONFIG,
	unix.SYS_FSMOUNT, unix.SYS_FSPICK, unix.SYS_MOUNT_SETATTR, unix.SYS_QUOTACTL,
	unix.SYS_NAME_TO_HANDLE_AT, unix.SYS_OPEN_BY_HANDLE_AT, unix.SYS_FANOTIFY_INIT,
	unix.SYS_SETTIMEOFDAY, unix.SYS_CLOCK_SETTIME, unix.SYS_CLOCK_ADJTIME, unix.SYS_VHANGUP,
}

// enosys are refused as not implemented, so that programs that probe for
// them (libuv and io_uring) fall back quietly.
var enosys = []uintptr{unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER}

// deniedIoctls are refused with EPERM.
var deniedIoctls = []uint32{unix.TIOCSTI, unix.TIOCLINUX}

type sockFilter struct {
	Code   uint16
	Jt, Jf uint8
	K      uint32
}

// Offsets into struct seccomp_data.
const (
	offNr   = 0
	offArch = 4
	offArg1 = 16 + 8 // low 32 bits on little-endian machines
)

func stmt(code uint16, k uint32) sockFilter { return sockFilter{Code: code, K: k} }
func jeq(k uint32, jt, jf uint8) sockFilter {
	return sockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: jt, Jf: jf, K: k}
}

// seccompProgram returns the filter as bwrap reads it (an array of struct
// sock_filter), or nil where this architecture has no filter.
func seccompProgram() []byte {
	if auditArch == 0 {
		return nil
	}
	ret := func(v uint32) sockFilter { return stmt(unix.BPF_RET|unix.BPF_K, v) }
	errno := func(e unix.Errno) sockFilter { return ret(unix.SECCOMP_RET_ERRNO | uint32(e)) }
	ld := func(off uint32) sockFilter { return stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, off) }

	p := []sockFilter{
		ld(offArch),
		jeq(auditArch, 1, 0),
		ret(unix.SECCOMP_RET_KILL_PROCESS),
		ld(offNr),
	}
	if x32Bit != 0 {
		p = append(p, sockFilter{Code: unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K, Jt: 0, Jf: 1, K: x32Bit},
			ret(unix.SECCOMP_RET_KILL_PROCESS))
	}
	// Each check is "if nr == k then return the errno, else skip it".
	for _, nr := range append(append([]uintptr{}, denied...), archDenied...) {
		p = append(p, jeq(uint32(nr), 0, 1), errno(unix.EPERM))
	}
	for _, nr := range enosys {
		p = append(p, jeq(uint32(nr), 0, 1), errno(unix.ENOSYS))
	}
	block := []sockFilter{ld(offArg1)}
	for _, req := range deniedIoctls {
		block = append(block, jeq(req, 0, 1), errno(unix.EPERM))
	}
	p = append(p, jeq(unix.SYS_IOCTL, 0, uint8(len(block))))
	p = append(p, block...)
	p = append(p, ret(unix.SECCOMP_RET_ALLOW))

	var b bytes.Buffer
	_ = binary.Write(&b, binary.NativeEndian, p)
	return b.Bytes()
}
