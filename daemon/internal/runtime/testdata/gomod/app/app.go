// Package app calls into shapes through a short call chain.
package app

import "example.com/fixture/shapes"

// Run is the top of the call chain.
func Run() string {
	return step1()
}

func step1() string {
	return step2()
}

func step2() string {
	sq := shapes.Square{Side: 2}
	return shapes.Describe(sq)
}
