package devstack

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
)

// SampleRepo is the Go module `make run` seeds the forge with: two packages,
// a documented function, an interface and its implementation.
var SampleRepo = map[string]string{
	"go.mod": "module example.com/hello\n\ngo 1.22\n",
	"greet/greet.go": `// Package greet says hello.
package greet

import "fmt"

// Greeter greets someone.
type Greeter interface {
	Greet(name string) string
}

// English greets in English.
type English struct{}

// Greet implements Greeter.
func (English) Greet(name string) string { return Hello(name) }

// Hello returns a friendly greeting for name.
func Hello(name string) string {
	return fmt.Sprintf("Hello, %s!", name)
}
`,
	"main.go": `package main

import (
	"fmt"

	"example.com/hello/greet"
)

func main() {
	var g greet.Greeter = greet.English{}
	fmt.Println(greet.Hello("world"), g.Greet("you"))
}
`,
	"README.md": "# hello\n\nA sample repository for the LSP service.\n",
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
