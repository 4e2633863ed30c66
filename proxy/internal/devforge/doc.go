// Package devforge is a small git forge for development and tests: it serves
// bare repositories under a root directory over git smart HTTP, read-only,
// with a token-based read ACL that behaves like GitHub's.
//
// Repositories live at {root}/{owner}/{repo}.git and are served at
// /{owner}/{repo}.git by the real `git http-backend` (through net/http/cgi),
// so the proxy's forge client is exercised against the same protocol code a
// production forge runs, protocol v2 included (the Git-Protocol header is
// passed to the backend as GIT_PROTOCOL).
//
// Access: a request carries its token as `Authorization: Bearer T` or as the
// password of basic auth. A request without a token, with an unknown token,
// or with a token that has no grant for the repository gets the same 404 as
// a repository that does not exist, so a caller cannot probe for private
// repositories. Pushes (receive-pack) and the dumb HTTP protocol are refused.
//
// The server counts content downloads per repository: upload-pack POSTs whose
// request carries `want` lines. Listing refs (ls-refs) is not a download,
// which lets tests prove that resolving a revision downloads nothing.
//
// Under /api/v1/ it also answers the part of the Gitea/Forgejo REST API the
// proxy's gitea forge kind uses, from the same repositories (see gitea.go),
// with Gitea's users, administrators and Sudo.
//
// CreateRepo, Commit and Tag build repositories for `make run` and tests
// without a working tree.
package devforge
