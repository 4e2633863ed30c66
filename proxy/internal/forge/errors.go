package forge

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Sentinels matched with errors.Is. Errors returned by this package wrap one
// of them with a short, safe message of their own.
var (
	// ErrNotFound: the repository does not exist, the credential cannot see
	// it, or the revision is not in it.
	ErrNotFound = errors.New("not found")
	// ErrUnavailable: the forge failed (5xx, network, timeout, redirect, a
	// protocol it does not speak, rate limiting).
	ErrUnavailable = errors.New("forge unavailable")
	// ErrRateLimited: the forge answered 429, asking to be called less
	// often. Such an error matches ErrUnavailable too; DetailOf tells how
	// long the forge asked to wait, when it said.
	ErrRateLimited = errors.New("forge rate limited")
	// ErrNoRoom: the proxy had no room on its own disk for a fetch (its
	// temporary directory full): the proxy's trouble, not the forge's,
	// though such an error matches ErrUnavailable too.
	ErrNoRoom = errors.New("no room to fetch")
	// ErrBadRev: the revision or commit is malformed (a short sha among them).
	ErrBadRev = errors.New("bad revision")
	// ErrUnauthenticated: no usable forge credential was given (the forge
	// was not asked), or a Gitea forge answered 401 to the one sent
	// (DetailOf: Refused). Gitea answers that 401 for a token it does not
	// know before looking at the repository (forge.TestRealGitea), so it
	// says nothing about which repositories exist; the git kind takes a 401
	// for "not found" (gitForge.do).
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
	// Path is, for "file_bytes", the file over the bound: a tree path the
	// caller can read anyway (validPath's rules). Error shows it quoted and
	// cut to maxShownPath bytes.
	Path string
}

// maxShownPath bounds the part of a path an error message shows.
const maxShownPath = 200

// shownPath is p quoted for a message, cut at a character boundary to at
// most maxShownPath bytes (an ellipsis then marks the cut).
func shownPath(p string) string {
	if len(p) <= maxShownPath {
		return strconv.Quote(p)
	}
	cut := maxShownPath
	for cut > 0 && !utf8.RuneStart(p[cut]) {
		cut--
	}
	return strconv.Quote(p[:cut] + "…")
}

func (e *TooLargeError) Error() string {
	switch e.Bound {
	case "files":
		return fmt.Sprintf("tree too large: more than %d files", e.Limit)
	case "total_bytes":
		return fmt.Sprintf("tree too large: more than %d bytes in total", e.Limit)
	case "file_bytes":
		if e.Path != "" {
			return fmt.Sprintf("tree too large: file %s is larger than %d bytes", shownPath(e.Path), e.Limit)
		}
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
// context errors are kept, so callers can tell a deadline from an outage),
// and what DetailOf reports.
type opError struct {
	op    string
	msg   string
	kind  error
	cause error

	retryAfter time.Duration // the forge's Retry-After (retryAfter); 0: none
	final      bool          // retrying cannot help (a redirect)
	refused    bool          // ErrUnauthenticated: the forge answered 401
	login      bool          // ErrUnauthenticated: the sudo login is no forge login
}

func (e *opError) Error() string { return e.op + ": " + e.msg }

// Is matches the error's sentinel; a rate limit, or no room to fetch, is
// also an unavailability.
func (e *opError) Is(target error) bool {
	return target == e.kind || (e.kind == ErrRateLimited || e.kind == ErrNoRoom) && target == ErrUnavailable
}

func (e *opError) Unwrap() error { return e.cause }

func newError(op string, kind error, msg string) error {
	return &opError{op: op, msg: msg, kind: kind}
}

// Detail is what an error of this package says beyond its sentinel, for
// the caller's answer.
type Detail struct {
	// Message is the error's message without its operation: always one of
	// this package's own texts, at most with an HTTP status number in it;
	// never a credential, a URL, a path or anything the forge sent.
	Message string
	// RetryAfter is how long the forge asked to be left alone (its
	// Retry-After, within [minRetryAfter, maxRetryAfter]); zero when it
	// named no time.
	RetryAfter time.Duration
	// Final: the same request cannot succeed until the forge or the
	// operator changes something (a redirect, which is never followed), so
	// retrying it does not help.
	Final bool
	// Refused (ErrUnauthenticated): the forge itself answered 401 to the
	// credential. Otherwise the credential was never sent: it was missing
	// or unusable.
	Refused bool
	// Login (ErrUnauthenticated, sudo mode): the login to act as cannot be
	// a forge login.
	Login bool
}

// DetailOf returns the Detail of err, and false when err is not (and does
// not wrap) an error of this package with one.
func DetailOf(err error) (Detail, bool) {
	var e *opError
	if !errors.As(err, &e) {
		return Detail{}, false
	}
	return Detail{Message: e.msg, RetryAfter: e.retryAfter, Final: e.final, Refused: e.refused, Login: e.login}, true
}

// refusedError is a Gitea forge's 401 to the credential sent.
func refusedError(op string) error {
	return &opError{op: op, msg: "forge refused the credential", kind: ErrUnauthenticated, refused: true}
}

// httpError is the error of an HTTP status that no caller case claimed:
// a redirect is reported, never followed, and retrying it cannot help; 429
// is ErrRateLimited; anything else is ErrUnavailable. h, the answer's
// header (nil when unknown), may carry a Retry-After for 429 and 503.
func httpError(op string, code int, h http.Header) error {
	e := &opError{op: op, kind: ErrUnavailable, msg: fmt.Sprintf("forge answered HTTP %d", code)}
	switch {
	case code >= 300 && code < 400:
		e.msg = fmt.Sprintf("forge answered with a redirect (HTTP %d), which is not followed", code)
		e.final = true
	case code == http.StatusTooManyRequests:
		e.kind = ErrRateLimited
		e.msg = "forge is rate limiting requests (HTTP 429)"
		e.retryAfter = retryAfter(h, time.Now())
	case code == http.StatusServiceUnavailable:
		e.retryAfter = retryAfter(h, time.Now())
	}
	return e
}

// The bounds on a forge's Retry-After: a forge asking for an hour (a
// rate-limit window's reset) is asked again within five minutes, and one
// asking for no wait at all not before a second.
const (
	minRetryAfter = time.Second
	maxRetryAfter = 5 * time.Minute
)

// retryAfter reads a Retry-After header, delay-seconds or an HTTP-date,
// and bounds it to [minRetryAfter, maxRetryAfter]; 0 when h has none or
// it does not parse.
func retryAfter(h http.Header, now time.Time) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	var d time.Duration
	if n, err := strconv.ParseUint(v, 10, 64); err == nil || errors.Is(err, strconv.ErrRange) {
		if err != nil || n > uint64(maxRetryAfter/time.Second) {
			return maxRetryAfter
		}
		d = time.Duration(n) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	} else {
		return 0
	}
	return min(max(d, minRetryAfter), maxRetryAfter)
}

// lateError is the forge not answering within the request's time (cause:
// the context's error, kept so callers can tell a deadline from an
// outage).
func lateError(op string, cause error) error {
	return &opError{op: op, msg: "forge did not answer in time", kind: ErrUnavailable, cause: cause}
}
