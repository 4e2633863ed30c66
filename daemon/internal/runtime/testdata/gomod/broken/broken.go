// Package broken has a type error on purpose.
package broken

// Count is declared as an int but given a string.
var Count int = "three"
