// Package soak is the reliability run behind `make soak` and its 30-second
// version in `make test`: a mixed load of many orgs and repositories against
// the real stack (devstack: Postgres, the dev forge, two daemon processes
// with the pinned gopls and TypeScript, jailed and budgeted as in
// production, the proxy in-process), faults injected while it runs (down to
// a daemon's disk budget reached), a corpus of hostile requests with the
// contract's answer for each, and, at the end, the invariants that say
// nothing was lost, nothing was charged twice and nothing leaked.
//
// Every request carries an X-Request-Id of its own, so the ledger can be
// held to what the client saw: an answer the contract says reached the
// daemon has exactly one row with its id, one refused before the daemon has
// none, and one that failed inside a fault window has at most one of each
// model. The money rules themselves are checked by `lspctl ledger
// reconcile` (package ctl), run unchanged at the end.
//
// Faults are injected in sequence, each followed by a recovery probe that
// times how long until every warm workspace answers again. Nothing here
// asserts a duration: the test asserts invariants only, so the timing of a
// fault can change the figures but never the verdict.
package soak
