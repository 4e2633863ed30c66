// Package apierr is the one place where failures become the contract's error
// codes (CONTRACT §4): every layer returns ordinary wrapped errors, and the
// HTTP layer and the ledger (which records each request's status) ask this
// package what they mean.
package apierr

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Error is a failure with its contract code. Message is short, true and
// safe to show: no stack, no host path, no secret.
type Error struct {
	Status     int
	Code       string
	Message    string
	RetryAfter time.Duration
	Err        error // the cause, for logs only
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Code + ": " + e.Message + ": " + e.Err.Error()
	}
	return e.Code + ": " + e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// New makes an Error.
func New(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// Wrap makes an Error that keeps err as its cause.
func Wrap(err error, status int, code, message string) *Error {
	return &Error{Status: status, Code: code, Message: message, Err: err}
}

// The contract's codes.
const (
	InvalidRequest        = "invalid_request"
	Unauthenticated       = "unauthenticated"
	InsufficientFunds     = "insufficient_funds"
	SpendCapExceeded      = "spend_cap_exceeded"
	Forbidden             = "forbidden"
	NotFound              = "not_found"
	CursorExpired         = "cursor_expired"
	IdempotencyInProgress = "idempotency_in_progress"
	TreeTooLarge          = "tree_too_large"
	UnsupportedLanguage   = "unsupported_language"
	CapabilityUnavailable = "capability_unavailable"
	PositionOutOfRange    = "position_out_of_range"
	AmbiguousSymbol       = "ambiguous_symbol"
	SymbolNotFound        = "symbol_not_found"
	NotPrepared           = "not_prepared"
	IdempotencyKeyReused  = "idempotency_key_reused"
	RateLimited           = "rate_limited"
	ForgeUnavailable      = "forge_unavailable"
	DaemonUnavailable     = "daemon_unavailable"
	LedgerUnavailable     = "ledger_unavailable"
	CapacityExhausted     = "capacity_exhausted"
	Timeout               = "timeout"
	Internal              = "internal"
)

// Shorthands for the common cases.
func BadRequest(format string, args ...any) *Error {
	return New(http.StatusBadRequest, InvalidRequest, format, args...)
}

func Unauth(format string, args ...any) *Error {
	return New(http.StatusUnauthorized, Unauthenticated, format, args...)
}

// From returns err as an *Error: itself when it already is one, a timeout for
// deadline errors, and an opaque 500 otherwise (the cause stays in logs).
func From(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return Wrap(err, http.StatusGatewayTimeout, Timeout, "the request ran out of time")
	}
	if errors.Is(err, context.Canceled) {
		// The client went away; nobody reads this, but the ledger records it.
		return Wrap(err, 499, Timeout, "the client closed the request")
	}
	return Wrap(err, http.StatusInternalServerError, Internal, "internal error")
}

// Status is the HTTP status err would be answered with (200 for nil).
func Status(err error) int {
	if err == nil {
		return http.StatusOK
	}
	return From(err).Status
}
