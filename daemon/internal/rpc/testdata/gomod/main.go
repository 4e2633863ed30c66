package main

import "fmt"

// Greeting is what main prints.
const Greeting = "héllo, wörld 😀"

func main() {
	fmt.Println(Greet(Greeting))
}
