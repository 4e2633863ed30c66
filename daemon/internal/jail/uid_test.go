//go:build linux

package jail

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestHandOverDoesNotStallOtherHomes: while one home is being given to its
// new uid (a whole module cache chowned), another home's start gets its
// own uid: the hand-over holds its home's lock, not the allocator's.
func TestHandOverDoesNotStallOtherHomes(t *testing.T) {
	u, err := newUIDs(3_000_000, 100, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	a := filepath.Join(base, "a")
	b := ""
	for i := 0; b == "" || u.homeLock(b) == u.homeLock(a); i++ {
		b = filepath.Join(base, fmt.Sprintf("b%d", i))
	}
	for _, d := range []string{a, b} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	entered, release := make(chan struct{}), make(chan struct{})
	u.chown = func(dir string, uid int) error {
		if dir == a {
			close(entered)
			<-release
		}
		return nil
	}
	type got struct {
		id  int
		err error
	}
	first := make(chan got, 1)
	go func() {
		id, err := u.forHome(a)
		first <- got{id, err}
	}()
	<-entered
	second := make(chan got, 1)
	go func() {
		id, err := u.forHome(b)
		second <- got{id, err}
	}()
	var gb got
	select {
	case gb = <-second:
	case <-time.After(30 * time.Second):
		close(release)
		t.Fatal("another home's hand-over waited for the first one's chown")
	}
	close(release)
	ga := <-first
	if ga.err != nil || gb.err != nil || ga.id == gb.id || !u.inRange(uint32(ga.id)) || !u.inRange(uint32(gb.id)) {
		t.Fatalf("uids %d (%v) and %d (%v): want two distinct ones in range", ga.id, ga.err, gb.id, gb.err)
	}
}
