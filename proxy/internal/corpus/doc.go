// Package corpus measures the service against real repositories: every
// entry of Repos (a pinned Go module from the module proxy, or a snapshot
// of a real repository from shared/corpus) is made into one commit on the
// dev forge and prepared through the production path (proxy, jailed
// daemon), and every answer is compared with the ground truth of the same
// run: the same pinned server binary spoken to directly over stdio on a
// normal writable checkout of the same tree, its dependencies installed the
// ordinary way (go mod download, npm ci, pnpm, yarn).
//
// Positions are chosen from the ground truth, deterministically: a few
// source files spread over the sorted file list (most outside tests), and
// in them identifier uses (call sites, selectors, type references) that are
// not declarations and that the direct server resolves. Answers are
// normalised before they are compared: paths relative to the repository,
// external locations as module@version + path, hover text after the
// service's documented sanitising (links lose their targets, control
// characters go) applied to both sides. Nothing else is forgiven.
//
// `make corpus` (cmd/lsp-corpus) prints the table; the package's test runs
// a few fixed positions per repository kind inside `make test`.
package corpus
