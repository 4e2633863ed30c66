// Package deps is the dependency phase of a prepare: after a tree is
// published and before its language servers start, the daemon itself puts
// what the repository's lockfiles pin into the workspace's private home,
// reaching only the operator's mirror and running no repository code.
// Serving stays offline (GOPROXY=off): a server finds exactly what this
// phase wrote, or nothing.
//
// Go: the root go.mod's requirements (after replace directives) are
// downloaded with the GOPROXY protocol from LSP_DEPS_GO_PROXY, each .mod and
// .zip checked against the repository's go.sum (the h1: hashes the go
// command uses) and written into runtime.ModCache in the go command's
// layout, the zip extracted read-only. A module go.sum does not list is
// refused, never trusted on first use; one the mirror does not serve
// (private) is reported, never fetched with a credential; a go or toolchain
// line newer than the local Go is refused before any request
// (GOTOOLCHAIN=local). Bounds: module count, bytes per file and in total,
// and time.
//
// TypeScript: the root package-lock.json is validated (lockfile version 2
// or 3, every resolved URL under LSP_DEPS_NPM_REGISTRY, sha512 integrity,
// no git, file, link or http specs). Packages are not installed: the tree
// is immutable once published and tsserver resolves node_modules inside
// it, so a valid lockfile is reported as a warning naming how many
// packages stay unresolved, and a hostile one as refused; neither makes a
// request.
//
// Every problem is a warning for the prepare answer, never a failure of the
// prepare: a workspace without its dependencies still answers for its own
// code. Warnings name modules and reasons, never host paths or mirror URLs.
package deps
