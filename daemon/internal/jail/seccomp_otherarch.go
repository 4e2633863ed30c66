//go:build linux && !amd64 && !arm64

package jail

// No filter is built for this architecture: the jail runs without one.
const (
	auditArch = 0
	x32Bit    = 0
)

var archDenied []uintptr
