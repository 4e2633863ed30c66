package spawnthread

import (
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"
)

func sleeper() *exec.Cmd {
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

func exited(cmd *exec.Cmd) chan error {
	ch := make(chan error, 1)
	go func() { ch <- cmd.Wait() }()
	return ch
}

// TestChildOutlivesExitingThreads: the hazard is real (a child forked from
// a thread that then ends is killed), and a child forked by Start survives
// threads ending all around it.
func TestChildOutlivesExitingThreads(t *testing.T) {
	// The control: fork from a locked goroutine, then let it return, which
	// ends its thread (unless it happened to be the main thread, which Go
	// never ends: hence a few tries).
	killed := false
	for try := 0; try < 5 && !killed; try++ {
		control := sleeper()
		started := make(chan error)
		go func() {
			runtime.LockOSThread()
			started <- control.Start()
			time.Sleep(50 * time.Millisecond)
		}()
		if err := <-started; err != nil {
			t.Fatal(err)
		}
		select {
		case <-exited(control):
			killed = true
		case <-time.After(2 * time.Second):
			_ = control.Process.Kill()
		}
	}
	if !killed {
		t.Fatal("no control child died with its thread; the test proves nothing")
	}

	child := sleeper()
	if err := Start(child); err != nil {
		t.Fatal(err)
	}
	done := exited(child)
	for i := 0; i < 50; i++ {
		ended := make(chan struct{})
		go func() { runtime.LockOSThread(); close(ended) }()
		<-ended
	}
	select {
	case err := <-done:
		t.Fatalf("a child started by Start died when other threads ended: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	_ = child.Process.Kill()
	<-done
}
