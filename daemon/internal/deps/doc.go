// Package deps is the dependency phase of a prepare: after a pushed tree is
// verified and before it is published (so before any language server
// starts on it; see pool.Prepare), the daemon itself puts
// what the repository's lockfiles pin where its servers find it (Go
// modules in the workspace's private home, npm packages in its tree's
// node_modules),
// reaching only the operator's mirror and running no repository code.
// Serving stays offline (GOPROXY=off): a server finds exactly what this
// phase wrote, or nothing.
//
// Go (gomod.go, gomodules.go, govendor.go, gowork.go, sumdb.go; the one place
// that knows Go): every module of the tree is found by a bounded walk that
// skips what the go command skips (findModules). A module whose
// vendor/modules.txt matches its go.mod (the go command's rule) runs with
// -mod=vendor and needs nothing. For the others, their requirements (after
// replace directives) and every other version whose zip go.sum vouches for
// (as go mod download would) are downloaded with the GOPROXY protocol from
// LSP_DEPS_GO_PROXY, each .mod and .zip checked against the module's go.sum
// (the h1: hashes the go command uses) and staged in the go command's
// layout beside the tree, the zip extracted read-only, then moved into
// runtime.ModCache through descriptors that never follow a link
// (gocache.go). What go.sum lacks
// is never trusted on first use: the checksum database (LSP_DEPS_GO_SUMDB,
// sum.golang.org by default), reached through the same mirror, must vouch
// for it, and an incomplete go.sum walks the go.mod files it fetches for
// the rest of the graph. A module nothing vouches for, or one the mirror
// does not serve (private), is reported, never fetched with a credential;
// a go or toolchain line newer than the local Go is refused before any
// request (GOTOOLCHAIN=local). Bounds: modules found, module versions,
// bytes per file and in total, and time.
//
// Nothing writes the published tree. Each module that does not vendor gets
// a private overlay in the home (go/overlay/<hash>/go.mod and go.sum: its
// go.mod, with the go directive the go command would add, and its go.sum
// with the verified lines), written through descriptors that never follow
// a link (safefs, home.go: a home belongs to the jail's uid, and servers of
// other revisions may be running in it). An index beside the
// tree lists each module and its GOFLAGS; GoFolders turns it into gopls
// workspace folders whose settings gopls asks for per folder, so each
// nested module loads with its own requirements: a module with an overlay
// gets env.GOWORK, a go.work in the home that uses only that module of the
// published tree, with the overlay's go.sum as go.work.sum (through
// -modfile, go list reports the overlay's go.mod as the module's, and
// gopls then counts only packages with an open file as the workspace's:
// references missed the rest of the module); one whose go.mod has no go
// directive keeps env.GOFLAGS = -mod=mod -modfile=… (workspace mode would
// report no go version, and gopls would check it as the newest Go); a
// vendoring module gets -mod=vendor. A root go.work (gowork.go) loads the tree in workspace mode, as
// on an ordinary checkout: GoFolders writes the home's copy with the
// published tree's paths and a go.work.sum with the verified lines, and
// gives the root folder env.GOWORK (workspace mode never writes a go.mod,
// and forbids -modfile); modules it does not use keep their own folders.
//
// TypeScript: one root lockfile is read (chooseLockfile: pnpm-lock.yaml
// when pnpm-workspace.yaml or packageManager says pnpm, else the one
// packageManager names, else package-lock.json); a package.json with
// dependencies and no lockfile is a warning. Each format has its own
// parser and fuzz target, and all produce package-lock.json's shape for
// one installer. package-lock.json is validated first (lockfile version 2
// or 3, every resolved URL under LSP_DEPS_NPM_REGISTRY, no git, file or
// http specs by npm's grammar, specKind); a refused lockfile makes no
// request. Integrity is checked by the strongest hash present (sha512,
// else sha1, as npm ci checks it; integrity.go); a package pinned by
// neither is left out by install, with a warning. npm workspaces (npmworkspace.go) link each
// workspace package from node_modules into its directory in the tree by a
// relative link, once that directory is checked to be a real one inside
// the repository, and hoist the workspaces' own nested packages to the
// top where free. pnpm-lock.yaml v6 to v9 (pnpm.go) is decoded as YAML,
// its importers, packages and snapshots resolved into a graph, and laid
// out as npm would hoist it except that only the importers' own
// dependencies go to the top, as in pnpm's layout (pnpmhoist.go); what is
// not from the registry
// is left out with a warning.
//
// The packages are installed by the phase itself, never by npm or pnpm,
// so no package script runs: each tarball is fetched from its resolved URL
// through the same bounded mirror client, its bytes checked against the
// lockfile's sha512 before any is unpacked, and extracted by
// extractTarball (regular files and directories only, read-only; links,
// devices, climbing or absolute paths, a file where a directory is (a file repeated keeps its later copy, as npm has it) and anything over the
// depth, count or size bounds refuse the tarball). Packages go where `npm
// ci` puts them on a checkout, runtime.NodeModules (<commit>/tree/
// node_modules), so that module resolution and a tsconfig naming
// ./node_modules (extends, typeRoots, paths) find them, in the lockfile's
// nested layout; staged beside the tree, they appear by one rename into
// it — the one entry the phase adds to an otherwise immutable tree. A
// repository with a node_modules of its own keeps it, and nothing is
// installed (a warning says so). Bundled packages come inside their
// parent, optional packages for another platform are skipped, and dev
// dependencies are installed (types live there). Each package unpacked
// from verified bytes is also kept in the repository's cache directory
// (runtime.Workspace.Cache, the daemon's alone; pkgcache.go), whose files
// the next revision's install links instead of downloading and unpacking
// the package again. NPMExternals names each
// installed package directory an external root, "name@version"; workspace
// links are not roots: their files are the repository's.
//
// Yarn: when chooseLockfile picks yarn.lock, a root yarn.lock is installed the
// same way (install, the same bounds and checks), after its own parser
// reads it: Yarn v1's indentation grammar (parseYarnV1) or Berry's YAML
// subset (parseSyml, parseBerry, told apart by __metadata). Neither lists
// a layout, so hoist computes npm's: breadth first from package.json's
// dependencies (dev and optional included) and every workspace's, each
// package at the shallowest node_modules on its dependent's path that
// holds no other version of it in between and shadows nothing already
// placed (bounded in depth, placements and work; past the work bound a
// package nests below its dependent, still correct). For Yarn v1 a
// prepass first puts at the top what Yarn 1 puts there (yarnV1Popular):
// of a name the project does not require itself and that comes in several
// versions, the version the most packages require (more than one; on a
// tie the one that sorts first). Workspaces become link entries (node_modules/<name> → its
// directory); a workspace's dependency the root holds at another
// version shares the root's, since the workspace's own node_modules
// would be inside the read-only tree. package.json "resolutions" are
// honoured as the lockfile recorded them. A v1 resolved URL must be under
// LSP_DEPS_NPM_REGISTRY, or on registry.yarnpkg.com or registry.npmjs.org
// with exactly the entry's conventional tarball path
// (/<name>/-/<base>-<version>.tgz), which is then fetched from the
// configured registry: Yarn's registry serves npm's tarballs, every
// mirror serves that path, and the sha512 must still match. A v1 entry
// pinned by no sha512 or sha1 (its integrity, else its resolved URL's
// #sha1 fragment), or resolving to git, a file or another host,
// is left out (with what nests in it) and counted in one warning; the
// rest installs. Berry's checksum hashes Yarn's zip of a package, not the
// tarball, so each package's tarball and sha512 come from the registry's
// version manifest (<registry>/<name>/<version>, through the same bounded
// client) and the tarball is checked against that. Berry "patch:"
// resolutions install the package they patch: Yarn's builtin compat
// patches change nothing a declaration shows, and a repository's own
// patch is named in a warning; git, file, link, portal and URL
// resolutions are left out. Every nodeLinker gets the hoisted
// node_modules: Plug'n'Play writes none, but the pinned tsserver does not
// read .pnp.cjs, so the tree's node_modules is how it finds the same
// packages; an unknown linker refuses the lockfile.
//
// Every problem is a warning for the prepare answer, never a failure of the
// prepare: a workspace without its dependencies still answers for its own
// code. Warnings name modules and reasons, never host paths or mirror URLs.
package deps
