package forge

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestHeldDownloadsBounded: at most maxHeld downloads wait, the oldest
// removed first, one per key, each removed from the disk when its time is
// up unless a fetch took it.
func TestHeldDownloadsBounded(t *testing.T) {
	var held heldDownloads // the test's own, not the process's
	home := func() string {
		d, err := os.MkdirTemp(t.TempDir(), "held-")
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }

	a, b, c, a2 := home(), home(), home(), home()
	held.put("a", a, filepath.Join(a, "x"))
	held.put("b", b, filepath.Join(b, "x"))
	held.put("a", a2, filepath.Join(a2, "x")) // replaces a
	held.put("c", c, filepath.Join(c, "x"))   // no room: b, now the oldest, goes
	if exists(a) || exists(b) || !exists(a2) || !exists(c) {
		t.Fatalf("held after the puts: a %v, b %v, a2 %v, c %v; want a2 and c alone", exists(a), exists(b), exists(a2), exists(c))
	}
	if d := held.take("a"); d == nil || d.home != a2 {
		t.Fatalf("take(a) = %+v, want a2's download", d)
	}
	if held.take("a") != nil {
		t.Fatal("a download was taken twice")
	}
	if !exists(a2) {
		t.Fatal("a taken download was removed: it is the taker's")
	}

	old := heldTTL
	heldTTL = 10 * time.Millisecond
	defer func() { heldTTL = old }()
	d := home()
	held.put("d", d, filepath.Join(d, "x"))
	for deadline := time.Now().Add(5 * time.Second); exists(d); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a download nobody took outlived its time")
		}
	}
	if held.take("d") != nil {
		t.Fatal("an expired download was still held")
	}

	// Released (the proxy stops): what is held goes, and so does what a
	// proof still running puts afterwards.
	e, f := home(), home()
	held.put("e", e, filepath.Join(e, "x"))
	held.release()
	held.put("f", f, filepath.Join(f, "x"))
	if exists(e) || exists(f) || held.take("f") != nil {
		t.Fatalf("after release: e %v, f %v; want both gone, nothing held", exists(e), exists(f))
	}
}
