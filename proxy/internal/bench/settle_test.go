package bench

import "testing"

func TestBusyOf(t *testing.T) {
	for _, tc := range []struct {
		line string
		busy int64
		ok   bool
	}{
		// user nice system idle iowait irq softirq steal guest guest_nice
		{"cpu  100 2 30 9000 400 5 6 7 0 0", 150, true},
		{"cpu 1 2 3 4 5 6 7 8", 27, true},
		{"cpu0 1 2 3 4 5 6 7 8 9 10", 0, false}, // one CPU's line, not the sum
		{"cpu 1 2 3", 0, false},
		{"cpu 1 2 x 4 5 6 7 8 9", 0, false},
		{"", 0, false},
	} {
		busy, ok := busyOf([]byte(tc.line))
		if busy != tc.busy || ok != tc.ok {
			t.Errorf("busyOf(%q) = %d, %v; want %d, %v", tc.line, busy, ok, tc.busy, tc.ok)
		}
	}
	if _, ok := busyTicks(); !ok {
		t.Error("busyTicks: /proc/stat unreadable")
	}
}
