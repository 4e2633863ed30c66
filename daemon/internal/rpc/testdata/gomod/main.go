package main

import "fmt"

// Greeting is what main prints.
const Greeting = "héllo, wörld 😀"

// main prints «Greeting» 😀 once.
func main() {
	fmt.Println(Greet(Greeting))
}
