// Package runtime runs one reviewed language server for one workspace: it
// spawns the process through a Spawner, drives the initialize handshake
// through package lsp, restarts the server with backoff (and a new
// generation) when it dies, and on Close shuts it down, kills its whole
// process group and reaps every process it left behind.
//
// The Spawner is the seam for isolation. Unjailed runs the server as a plain
// child with a minimal environment, its own process group and a
// parent-death signal; the jail supplies another Spawner with the same
// contract. Either way the process tree is the runtime's to clean up: the
// daemon calls BecomeSubreaper at start so that orphaned grandchildren are
// re-parented to it (the machines' PID 1 does not reap them), and every
// Process.Wait reaps the members of the server's process group before it
// reaps the server itself.
//
// A server can also hang: alive, and silent. Each request is bounded by
// Spec.RequestTimeout, and when requests run it out in a row with not a
// byte from the server meanwhile (hangWatch has the policy) the instance
// is declared hung, its process group killed, and the next use restarts
// it like a crashed one.
//
// Generation numbers identify server instances: the first instance of a
// Server is generation 1 and each successful restart adds one. Results and
// cursors carry the generation so that evidence from a previous instance is
// recognisably stale.
package runtime
