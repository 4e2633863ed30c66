package runtime

import (
	"os"
	"os/exec"
	goruntime "runtime"
	"sync"
)

// Pipes are a server's stdin, stdout and stderr, made by the daemon rather
// than by exec: exec.Cmd.Wait closes the parent's ends of pipes it made,
// which would race with the connection reading the server's last replies,
// and it waits for copying goroutines that a surviving grandchild could hold
// open forever. Every Spawner uses them.
type Pipes struct {
	InR, InW, OutR, OutW, ErrR, ErrW *os.File
}

// NewPipes makes the three pipes; on error nothing is left open.
func NewPipes() (*Pipes, error) {
	var p Pipes
	var err error
	if p.InR, p.InW, err = os.Pipe(); err != nil {
		return nil, err
	}
	if p.OutR, p.OutW, err = os.Pipe(); err != nil {
		p.Close()
		return nil, err
	}
	if p.ErrR, p.ErrW, err = os.Pipe(); err != nil {
		p.Close()
		return nil, err
	}
	return &p, nil
}

// Close closes every end (a spawn that failed).
func (p *Pipes) Close() {
	for _, f := range []*os.File{p.InR, p.InW, p.OutR, p.OutW, p.ErrR, p.ErrW} {
		if f != nil {
			_ = f.Close()
		}
	}
}

// CloseChildEnds closes the ends the started child now holds.
func (p *Pipes) CloseChildEnds() {
	_ = p.InR.Close()
	_ = p.OutW.Close()
	_ = p.ErrW.Close()
}

// The parent-death signal fires when the thread that forked the child
// exits, not the process. Go retires threads (a goroutine that exits while
// locked to its thread takes the thread with it), which would kill healthy
// servers at random; forking from one locked thread that never exits ties
// the signal to the daemon's life instead.
var spawnThread struct {
	once sync.Once
	reqs chan spawnRequest
}

type spawnRequest struct {
	cmd  *exec.Cmd
	done chan error
}

// StartOnSpawnThread runs cmd.Start on the daemon's one spawn thread. Every
// child started with a parent-death signal must be started here.
func StartOnSpawnThread(cmd *exec.Cmd) error {
	spawnThread.once.Do(func() {
		spawnThread.reqs = make(chan spawnRequest)
		go spawnLoop(spawnThread.reqs)
	})
	done := make(chan error, 1)
	spawnThread.reqs <- spawnRequest{cmd: cmd, done: done}
	return <-done
}

func spawnLoop(reqs <-chan spawnRequest) {
	goruntime.LockOSThread()
	for r := range reqs {
		r.done <- r.cmd.Start()
	}
}
