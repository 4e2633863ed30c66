//go:build linux

package jail

import "golang.org/x/sys/unix"

const (
	auditArch = unix.AUDIT_ARCH_X86_64
	// x32Bit marks x32-ABI system call numbers on x86-64.
	x32Bit = 0x40000000
)

var archDenied = []uintptr{unix.SYS_IOPL, unix.SYS_IOPERM}
