// Package spawnthread starts child processes from one OS thread that lives
// as long as the process.
//
// Linux delivers a child's parent-death signal (Pdeathsig) when the thread
// that forked it exits, not the process, and the Go runtime ends a thread
// when a goroutine locked to it returns. A child forked from an ordinary
// goroutine's thread can therefore be killed at any time later, when some
// unrelated locked goroutine that happened to run on that thread exits —
// which is how a dev stack's daemon once died the moment its Postgres was
// stopped. Every Pdeathsig child of the proxy's process is forked here.
package spawnthread

import (
	"os/exec"
	"runtime"
	"sync"
)

type request struct {
	cmd  *exec.Cmd
	done chan error
}

var (
	once sync.Once
	reqs chan request
)

// Goroutine names the spawn thread's goroutine, which lives as long as the
// process, for leak checks to leave alone.
const Goroutine = "github.com/hanzoai/lsp/proxy/internal/spawnthread.loop"

func loop(reqs <-chan request) {
	// Locked for good and never returning: this thread outlives every
	// child it forks.
	runtime.LockOSThread()
	for r := range reqs {
		r.done <- r.cmd.Start()
	}
}

// Start runs cmd.Start on the spawn thread. Waiting for the child may then
// happen from any goroutine.
func Start(cmd *exec.Cmd) error {
	once.Do(func() {
		reqs = make(chan request)
		go loop(reqs)
	})
	done := make(chan error, 1)
	reqs <- request{cmd, done}
	return <-done
}
