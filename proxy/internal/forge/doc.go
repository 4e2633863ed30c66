// Package forge reads repositories from a git forge as the caller: it
// resolves a revision to a commit with the caller's own credential, so the
// forge's ACL decides what the caller may read, and fetches a commit's tree
// normalised for the daemon.
//
// Two forge kinds: plain git smart HTTP (NewGit), which every forge speaks,
// with repositories at {base}/{owner}/{repo}.git; and the Gitea/Forgejo REST
// API (NewGitea, gitea.go): a revision resolves with one or two GETs of
// {base}/api/v1/repos/{owner}/{repo}/… (the repository's default branch, a
// branch, a tag, or a commit by sha), and a tree is the forge's listing of
// it (…/git/trees/{commit}, paged) with its contents from one archive
// download (…/archive/{commit}.tar.gz, read as a bounded stream,
// archive.go) and, for the files the archive leaves out or rewrites
// (.gitattributes export-ignore, export-subst), the raw-file API
// (giteatree.go). Both kinds list into the same treeReader and end in the
// same normalisation, so they yield the same Tree for the same commit. One difference is deliberate: for a full sha the gitea kind
// asks the forge's own commit API, which serves any commit object of the
// repository; what the forge serves its caller is what its ACL allows.
//
// Resolve speaks protocol v2 in Go: a GET of /info/refs (the capability
// advertisement) and one POST of `ls-refs` restricted to the refs the
// revision can name. A protocol v0 server is understood from the GET alone.
// Resolving a ref downloads no content. A full sha that is not a ref tip is
// confirmed reachable with the git CLI: a fetch of that commit alone (depth
// 1, commits only when the forge supports filters) over protocol v0, where
// the forge itself checks reachability (uploadpack.allowReachableSHA1InWant;
// protocol v2 servers hand out any object they hold, reachable or not, so v2
// is never used to fetch by sha). When the forge refuses, the ref tips'
// history is fetched (commits only where possible) and ancestry is checked
// locally. This runs before the payment gate, so it is bounded like every
// download of the package: git is stopped once what it has received passes
// what a tree within the limits can weigh (packBound of NewGit's limits
// here, of Fetch's own there). A proof or fetch that needs more history
// than that is a *TooLargeError with Bound "history".
//
// Fetch downloads the commit's tree with the git CLI into a temporary bare
// repository that is removed afterwards: the commit alone at depth 1 over
// protocol v0 (the forge checks reachability), or, when the forge refuses,
// the tips' history without trees to find the nearest ref containing the
// commit, then that ref just deep enough to hold it. It then reads the tree
// with ls-tree and cat-file, enforcing Limits from the listing (entry count,
// depth, blob sizes) before any content is read.
// Normalisation: regular files are kept (with their executable bit); an
// in-tree symlink to a regular file becomes a copy of its target; every
// other symlink, submodules, git-LFS pointers and unusable paths are dropped
// and each is named in Tree.Warnings. Nothing is dropped silently.
//
// Credentials reach the forge only in an Authorization header: set on the Go
// requests directly, and passed to git through GIT_CONFIG_* environment
// variables (http.extraHeader), never on a command line. git runs without
// system or global configuration, credential helpers or prompts, with
// redirects off and only http/https allowed; commands that read the
// temporary repository run with every protocol disabled, so a partial clone
// can never fetch lazily behind our back. Neither client follows redirects:
// a redirect is reported as ErrUnavailable (the forge URL or the repository
// moved, which the operator must see; following it would send the credential
// elsewhere). Credentials never appear in errors or logs; text the forge
// sends back is redacted before it is logged and never returned.
//
// Errors match one of ErrNotFound, ErrUnavailable, ErrBadRev,
// ErrUnauthenticated (errors.Is), or are a *TooLargeError; their messages are
// short and safe to show to the caller. A repository that does not exist and
// one the credential cannot see give the very same error.
//
// NewCache wraps a Forge with a short, bounded cache of successful Resolve
// answers keyed by an HMAC of the credential, owner, repository and revision.
package forge
