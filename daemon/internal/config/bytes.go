package config

import (
	"errors"
	"math"
	"strconv"
	"strings"
)

var byteUnits = []struct {
	suffix string
	mult   int64
}{
	// Longest suffixes first, so that "GiB" is not read as "B".
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"B", 1},
}

// ParseBytes reads a size such as "8GiB", "512MiB", "2GB" or "1048576":
// a non-negative integer with an optional binary (KiB…TiB) or decimal
// (KB…TB) unit, case-sensitive as written.
func ParseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	num, mult := s, int64(1)
	for _, u := range byteUnits {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			num, mult = strings.TrimSpace(v), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 {
		return 0, errors.New("want a size such as 8GiB, 512MiB or a byte count")
	}
	if n > math.MaxInt64/mult {
		return 0, errors.New("size too large")
	}
	return n * mult, nil
}

// PoolRSSFor is the pool's memory budget when LSP_POOL_MAX_RSS is unset,
// for a daemon whose cgroup or machine has limit bytes in all: the limit
// less 1 GiB for the daemon itself and the page cache its trees are read
// through (as the k8s manifests set it), or half of a limit under 2 GiB;
// none (0) under 128 MiB, where it would be below what the jail accepts
// as a pool's memory (64 MiB).
func PoolRSSFor(limit int64) int64 {
	switch {
	case limit < 128<<20:
		return 0
	case limit < 2<<30:
		return limit / 2
	}
	return limit - 1<<30
}
