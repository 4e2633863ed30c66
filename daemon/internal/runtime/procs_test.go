package runtime

import (
	"os"
	"testing"
)

// TestOpenProcOnlyTheListedProcess: OpenProc opens the /proc directory of
// the process a listing described and of no other: the same pid with
// another start time (a pid reused since) is refused.
func TestOpenProcOnlyTheListedProcess(t *testing.T) {
	procs, err := ListProcs()
	if err != nil {
		t.Fatal(err)
	}
	var self ProcStat
	for _, p := range procs {
		if p.PID == os.Getpid() {
			self = p
		}
	}
	if self.PID == 0 || self.Start == 0 {
		t.Fatalf("this process listed as %+v: want its pid and start time", self)
	}
	dir, err := OpenProc(self)
	if err != nil {
		t.Fatalf("OpenProc of this process: %v", err)
	}
	dir.Close()
	reused := self
	reused.Start++
	if dir, err := OpenProc(reused); err == nil {
		dir.Close()
		t.Fatal("OpenProc opened a process whose start time is not the listed one")
	}
}
