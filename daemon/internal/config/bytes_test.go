package config

import "testing"

func TestParseBytes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"8GiB", 8 << 30, true},
		{"512MiB", 512 << 20, true},
		{"2GB", 2e9, true},
		{"1048576", 1 << 20, true},
		{" 3 KiB ", 3 << 10, true},
		{"0", 0, true},
		{"", 0, false},
		{"-1GiB", 0, false},
		{"1.5GiB", 0, false},
		{"8gib", 0, false},
		{"GiB", 0, false},
		{"99999999999TiB", 0, false},
	} {
		got, err := ParseBytes(tc.in)
		if (err == nil) != tc.ok || (tc.ok && got != tc.want) {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func FuzzParseBytes(f *testing.F) {
	for _, s := range []string{"8GiB", "1", "12TB", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseBytes(s)
		if err == nil && n < 0 {
			t.Fatalf("ParseBytes(%q) = %d", s, n)
		}
	})
}

func TestPoolBudgetEnv(t *testing.T) {
	env := map[string]string{"LSP_DAEMON_CONFIG": "/x", "LSP_POOL_MAX_SERVERS": "4", "LSP_POOL_MAX_RSS": "8GiB", "LSP_POOL_MAX_DISK": "100GB"}
	e, err := LoadEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if e.PoolMaxServers != 4 || e.PoolMaxRSS != 8<<30 || e.PoolMaxDisk != 100e9 {
		t.Fatalf("got %d %d %d", e.PoolMaxServers, e.PoolMaxRSS, e.PoolMaxDisk)
	}
	for _, bad := range []map[string]string{{"LSP_POOL_MAX_SERVERS": "-1"}, {"LSP_POOL_MAX_RSS": "lots"}, {"LSP_POOL_MAX_DISK": "1.5GiB"}} {
		bad["LSP_DAEMON_CONFIG"] = "/x"
		if _, err := LoadEnv(func(k string) string { return bad[k] }); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

func TestPoolRSSFor(t *testing.T) {
	for _, tc := range []struct{ limit, want int64 }{
		{8 << 30, 7 << 30}, {16 << 30, 15 << 30}, {2 << 30, 1 << 30}, {1 << 30, 512 << 20}, {128 << 20, 64 << 20}, {127 << 20, 0}, {0, 0},
	} {
		if got := PoolRSSFor(tc.limit); got != tc.want {
			t.Errorf("PoolRSSFor(%d) = %d, want %d", tc.limit, got, tc.want)
		}
	}
}
