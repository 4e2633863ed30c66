// Package broken does not compile.
package broken

// Seven is not a number.
func Seven() int {
	var n int = "seven"
	return n
}
