//go:build !race

package jail

const raceEnabled = false
