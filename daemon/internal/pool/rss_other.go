//go:build !linux

package pool

// TreeRSS is only measurable from /proc: elsewhere the RSS budget sees 0.
func TreeRSS(roots []int) map[int]int64 { return map[int]int64{} }

// TreeUnlinked is only measurable from /proc: elsewhere the disk budget
// sees no unlinked open file.
func TreeUnlinked(roots []int, dev uint64) map[int]int64 { return map[int]int64{} }
