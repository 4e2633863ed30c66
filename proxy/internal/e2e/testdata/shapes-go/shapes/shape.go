// Package shapes has plane figures.
package shapes

// Shape is a closed plane figure.
type Shape interface {
	// Area is the surface inside the figure.
	Area() float64
}
