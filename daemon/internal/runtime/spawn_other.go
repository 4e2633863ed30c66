//go:build !linux

package runtime

import (
	"context"
	"errors"
	"log/slog"
)

var errNotLinux = errors.New("runtime: language servers run only on Linux")

// BecomeSubreaper is available only on Linux.
func BecomeSubreaper() error { return errNotLinux }

// Unjailed is available only on Linux; elsewhere every Spawn fails.
func Unjailed(*slog.Logger) Spawner { return unsupported{} }

type unsupported struct{}

func (unsupported) Spawn(context.Context, Spec, Workspace) (Process, error) { return nil, errNotLinux }
