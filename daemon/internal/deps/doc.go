// Package deps is the dependency phase of a prepare: after a pushed tree is
// verified and before it is published (so before any language server
// starts on it; see pool.Prepare), the daemon itself puts
// what the repository's lockfiles pin where its servers find it (Go
// modules in the workspace's private home, npm packages beside its tree),
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
// TypeScript: one root lockfile is read (chooseLockfile: pnpm-lock.yaml
// when pnpm-workspace.yaml or packageManager says pnpm, else the one
// packageManager names, else package-lock.json); a package.json with
// dependencies and no lockfile is a warning. Each format has its own
// parser and fuzz target, and all produce package-lock.json's shape for
// one installer. package-lock.json is validated first (lockfile version 2
// or 3, every resolved URL under LSP_DEPS_NPM_REGISTRY, no git, file or
// http specs by npm's grammar, specKind); a refused lockfile makes no
// request. A package with no sha512 integrity (sha1 alone) is left out
// by install, with a warning. npm workspaces (npmworkspace.go) link each
// workspace package from node_modules into its directory in the tree by a
// relative link, once that directory is checked to be a real one inside
// the repository, and hoist the workspaces' own nested packages to the
// top where free. pnpm-lock.yaml v6 to v9 (pnpm.go) is decoded as YAML,
// its importers, packages and snapshots resolved into a graph, and laid
// out as npm would hoist it (pnpmhoist.go); what is not from the registry
// is left out with a warning.
//
// The packages are installed by the phase itself, never by npm or pnpm,
// so no package script runs: each tarball is fetched from its resolved URL
// through the same bounded mirror client, its bytes checked against the
// lockfile's sha512 before any is unpacked, and extracted by
// extractTarball (regular files and directories only, read-only; links,
// devices, climbing or absolute paths, duplicates and anything over the
// depth, count or size bounds refuse the tarball). The tree is immutable
// once published, so packages go beside it, into runtime.NodeModules
// (<commit>/node_modules), where module resolution walking up from the
// tree's files finds them, in the lockfile's nested layout; they appear by
// one rename of a staging directory. Bundled packages come inside their
// parent, optional packages for another platform are skipped, and dev
// dependencies are installed (types live there). NPMExternals names each
// installed package directory an external root, "name@version"; workspace
// links are not roots: their files are the repository's.
//
// Every problem is a warning for the prepare answer, never a failure of the
// prepare: a workspace without its dependencies still answers for its own
// code. Warnings name modules and reasons, never host paths or mirror URLs.
package deps
