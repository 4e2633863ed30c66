//go:build race

package jail

// raceEnabled: the race detector's shadow memory, outside the Go heap and
// GOMEMLIMIT, counts against a jail's memory too.
const raceEnabled = true
