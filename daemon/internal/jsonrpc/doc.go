// Package jsonrpc is a JSON-RPC 2.0 connection with LSP base-protocol framing
// (a header section holding Content-Length, a blank line, then the body).
//
// It is written for talking to language servers, which are untrusted
// processes: every frame is bounded (a configurable maximum body size and a
// fixed maximum header section), and anything malformed — a header that does
// not parse, a body over the bound, a body that is not JSON — ends the
// connection with an error naming the problem instead of guessing. Nothing is
// allocated before the declared size has been checked against the bound.
//
// A Conn is symmetric: it issues calls and notifications, and a Handler set
// at construction answers the peer's requests and notifications. Handlers run
// on the reader goroutine, in arrival order, so they see notifications in the
// order the peer sent them; they must return quickly and must not call back
// into the Conn synchronously. Writers take turns, one whole frame each, so
// frames never interleave and a caller waiting for its turn can still give
// up when its context ends. Every write is bounded — by its caller's
// deadline and by Options.WriteTimeout, which also covers replies to the
// peer — so a peer that stops reading cannot hold a writer, or the reader
// goroutine answering it, forever: past the write timeout the connection
// stops.
package jsonrpc
