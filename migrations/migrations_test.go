package migrations

import (
	"strings"
	"testing"
)

func TestAllOrderedAndComplete(t *testing.T) {
	all, err := All()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) == 0 {
		t.Fatal("no migrations embedded")
	}
	for i, m := range all {
		if m.Version != i+1 {
			t.Errorf("migration %d is %q (version %d): versions must be 1..n without gaps", i, m.Name, m.Version)
		}
		if strings.TrimSpace(m.SQL) == "" {
			t.Errorf("%s is empty", m.Name)
		}
		if len(m.Checksum) != 64 {
			t.Errorf("%s: checksum %q", m.Name, m.Checksum)
		}
	}
	for _, v := range ReadonlyViews {
		found := false
		for _, m := range all {
			if strings.Contains(m.SQL, "CREATE VIEW "+v+" ") {
				found = true
			}
		}
		if !found {
			t.Errorf("view %s granted to %s is created by no migration", v, ReadonlyRole)
		}
	}
}

func TestFingerprintStable(t *testing.T) {
	a, err := Fingerprint()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Fingerprint()
	if a != b || len(a) != 64 {
		t.Fatalf("fingerprint %q then %q", a, b)
	}
}
