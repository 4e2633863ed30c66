//go:build !linux

package jail

import (
	"context"
	"errors"
	"log/slog"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
)

var errNotLinux = errors.New("jail: language servers are jailed only on Linux")

// Spawner is available only on Linux.
type Spawner struct{}

// New fails outside Linux.
func New(Options, *slog.Logger) (*Spawner, error) { return nil, errNotLinux }

// Spawn fails outside Linux.
func (*Spawner) Spawn(context.Context, runtime.Spec, runtime.Workspace) (runtime.Process, error) {
	return nil, errNotLinux
}

// Describe says the jail is unavailable.
func (*Spawner) Describe() string { return errNotLinux.Error() }

// Close does nothing.
func (*Spawner) Close() error { return nil }

// SelfTestParams mirror the Linux ones.
type SelfTestParams struct {
	Scratch string
	Hidden  []string
}

// SelfTest fails outside Linux.
func SelfTest(context.Context, *Spawner, SelfTestParams) error { return errNotLinux }

// Main handles no hidden mode outside Linux.
func Main([]string) (int, bool) { return 0, false }

// MemoryLimit knows no limit outside Linux.
func MemoryLimit() (limit int64, from string) { return 0, "" }
