// Command shapes prints the total area of two figures.
package main

import (
	"fmt"

	"example.com/shapes/calc"
	"example.com/shapes/shapes"
)

func main() {
	fmt.Println(report())
}

// report formats the total area of a square and a circle.
func report() string {
	figures := []shapes.Shape{shapes.Square{Side: 2}, shapes.Circle{R: 1}}
	return fmt.Sprintf("%.2f", calc.Total(figures))
}
