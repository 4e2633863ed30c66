// Package shapes is a fixture for the language-server tests.
package shapes

import "fmt"

// Shape is anything with an area.
type Shape interface {
	Area() float64
}

// Square is a Shape.
type Square struct {
	Side float64
}

// Area returns the square's area.
func (s Square) Area() float64 {
	return s.Side * s.Side
}

// Describe returns a one-line description of a shape.
func Describe(s Shape) string {
	return fmt.Sprintf("area %.2f", s.Area())
}
