package shapes

import "math"

// Circle is round.
type Circle struct {
	R float64
}

// Area of a circle.
func (c Circle) Area() float64 { return math.Pi * c.R * c.R }
