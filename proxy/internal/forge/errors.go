package forge

import (
	"errors"
	"fmt"
)

// Sentinels matched with errors.Is. Errors returned by this package wrap one
// of them with a short, safe message of their own.
var (
	// ErrNotFound: the repository does not exist, the credential cannot see
	// it, or the revision is not in it.
	ErrNotFound = errors.New("not found")
	// ErrUnavailable: the forge failed (5xx, network, timeout, redirect, a
	// protocol it does not speak).
	ErrUnavailable = errors.New("forge unavailable")
	// ErrBadRev: the revision or commit is malformed (a short sha among them).
	ErrBadRev = errors.New("bad revision")
	// ErrUnauthenticated: no usable forge credential was given.
	ErrUnauthenticated = errors.New("no usable forge credential")
	// ErrForbidden: the credential is usable but acting with it is refused
	// (sudo as a forge administrator).
	ErrForbidden = errors.New("forge access refused")
)

// The two not-found messages. A repository that does not exist and one the
// credential cannot see must be indistinguishable, so both use repoNotFound.
const (
	repoNotFound = "repository not found"
	revNotFound  = "revision not found"
)

// TooLargeError reports the bound a fetch went over: one of the tree's
// Limits, or "history" when reaching a commit that is no ref tip would take
// more history from the forge than a fetch may download (packBound; Limit
// is then in bytes of pack). Both are answered 413: the same request fails
// the same way until the repository or the forge changes.
type TooLargeError struct {
	Bound string // "files", "total_bytes", "file_bytes", "depth", "directories", "files_outside_archive" or "history"
	Limit int64
}

func (e *TooLargeError) Error() string {
	switch e.Bound {
	case "files":
		return fmt.Sprintf("tree too large: more than %d files", e.Limit)
	case "total_bytes":
		return fmt.Sprintf("tree too large: more than %d bytes in total", e.Limit)
	case "file_bytes":
		return fmt.Sprintf("tree too large: a file is larger than %d bytes", e.Limit)
	case "depth":
		return fmt.Sprintf("tree too large: a path is deeper than %d levels", e.Limit)
	case "directories":
		return fmt.Sprintf("tree too large: more than %d directories", e.Limit)
	case "files_outside_archive":
		return fmt.Sprintf("tree too costly to fetch: the forge's archive of it leaves out or rewrites more than %d files (.gitattributes export-ignore or export-subst), each then fetched on its own", e.Limit)
	case "history":
		return fmt.Sprintf("revision too costly to reach: the forge would send more than %d bytes of history for this commit (a branch or tag tip needs none)", e.Limit)
	}
	return fmt.Sprintf("tree too large: over the %s bound (%d)", e.Bound, e.Limit)
}

// opError is the package's error: the operation, a short safe message, the
// sentinel it matches and, optionally, a cause that is itself safe (only
// context errors are kept, so callers can tell a deadline from an outage).
type opError struct {
	op    string
	msg   string
	kind  error
	cause error
}

func (e *opError) Error() string { return e.op + ": " + e.msg }

func (e *opError) Is(target error) bool { return target == e.kind }

func (e *opError) Unwrap() error { return e.cause }

func newError(op string, kind error, msg string) error {
	return &opError{op: op, msg: msg, kind: kind}
}

// lateError is the forge not answering within the request's time (cause:
// the context's error, kept so callers can tell a deadline from an
// outage).
func lateError(op string, cause error) error {
	return &opError{op: op, msg: "forge did not answer in time", kind: ErrUnavailable, cause: cause}
}
