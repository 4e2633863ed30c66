package main

// Greet returns the greeting for name.
func Greet(name string) string {
	return "hi " + name
}
