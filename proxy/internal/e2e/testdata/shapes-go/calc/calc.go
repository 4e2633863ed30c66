// Package calc adds figures up.
package calc

import "example.com/shapes/shapes"

// Total sums the areas of ss.
func Total(ss []shapes.Shape) float64 {
	sum := 0.0
	for _, s := range ss {
		sum += area(s)
	}
	return sum
}

func area(s shapes.Shape) float64 {
	return s.Area()
}
