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
// the terminal ioctls that inject input (TIOCSTI, TIOCLINUX). Sockets may be
// made (socket, socketpair) only in the families of allowedFamilies: the
// network namespace already leaves nothing to reach over IP, but VSOCK
// reaches the host or hypervisor from any namespace, and netlink and
// packet sockets are kernel attack surface no server needs. A system call
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

// allowedFamilies are the address families a jail may make sockets in.
// AF_UNIX is all the reviewed servers use: node's IPC with its tsserver
// child (socketpair), libuv's and Go's own plumbing. Any other family
// fails with EAFNOSUPPORT, as on a kernel built without it, so programs
// that probe (IPv6 support, network interfaces) carry on.
var allowedFamilies = []uint32{unix.AF_UNIX}

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
	offArg0 = 16 // low 32 bits on little-endian machines
	offArg1 = 16 + 8
)

func stmt(code uint16, k uint32) sockFilter { return sockFilter{Code: code, K: k} }
func jeq(k uint32, jt, jf uint8) sockFilter {
	return sockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: jt, Jf: jf, K: k}
}

// seccompProgram returns the filter as bwrap reads it (an array of struct
// sock_filter), or nil where this architecture has no filter.
func seccompProgram() []byte { return buildSeccomp(allowedFamilies) }

// buildSeccomp builds the filter; families nil leaves sockets unchecked
// (only for the test that proves the self-test notices).
func buildSeccomp(families []uint32) []byte {
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
	if families != nil {
		// socket(domain, …) and socketpair(domain, …): domain is an int,
		// so its low 32 bits are all the kernel reads.
		fam := []sockFilter{ld(offArg0)}
		for _, f := range families {
			fam = append(fam, jeq(f, 0, 1), ret(unix.SECCOMP_RET_ALLOW))
		}
		fam = append(fam, errno(unix.EAFNOSUPPORT))
		p = append(p, jeq(unix.SYS_SOCKET, 1, 0), jeq(unix.SYS_SOCKETPAIR, 0, uint8(len(fam))))
		p = append(p, fam...)
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
