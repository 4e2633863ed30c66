package operation

import (
	"context"
	"errors"
	"net/http"
	"time"

	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
	"github.com/hanzoai/lsp/proxy/internal/apierr"
	"github.com/hanzoai/lsp/proxy/internal/daemonclient"
	"github.com/hanzoai/lsp/proxy/internal/forge"
	"github.com/hanzoai/lsp/proxy/internal/ledger"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// statusError turns a daemon answer's status into the contract's error.
func statusError(ans *daemonv1.QueryResponse) error {
	msg := ans.GetMessage()
	or := func(def string) string {
		if msg != "" {
			return msg
		}
		return def
	}
	switch ans.GetStatus() {
	case daemonv1.Status_STATUS_OK:
		return nil
	case daemonv1.Status_STATUS_AMBIGUOUS_SYMBOL:
		return apierr.New(http.StatusConflict, apierr.AmbiguousSymbol, "%s", or("the symbol names more than one symbol"))
	case daemonv1.Status_STATUS_SYMBOL_NOT_FOUND:
		return apierr.New(http.StatusNotFound, apierr.SymbolNotFound, "%s", or("no such symbol"))
	case daemonv1.Status_STATUS_NOT_FOUND:
		return apierr.New(http.StatusNotFound, apierr.NotFound, "%s", or("no such file in this revision"))
	case daemonv1.Status_STATUS_POSITION_OUT_OF_RANGE:
		return apierr.New(http.StatusUnprocessableEntity, apierr.PositionOutOfRange, "%s", or("the position is past the end of the file"))
	case daemonv1.Status_STATUS_UNSUPPORTED_LANGUAGE:
		return apierr.New(http.StatusUnprocessableEntity, apierr.UnsupportedLanguage, "%s", or("no language server serves this file"))
	case daemonv1.Status_STATUS_CAPABILITY_UNAVAILABLE:
		return apierr.New(http.StatusUnprocessableEntity, apierr.CapabilityUnavailable, "%s", or("the language server does not offer this operation"))
	case daemonv1.Status_STATUS_CURSOR_EXPIRED:
		return apierr.New(http.StatusConflict, apierr.CursorExpired, "%s", or("the cursor's workspace or server is gone; start again"))
	case daemonv1.Status_STATUS_INVALID_REQUEST:
		return apierr.New(http.StatusBadRequest, apierr.InvalidRequest, "%s", or("the daemon refused the request"))
	case daemonv1.Status_STATUS_TIMEOUT:
		return apierr.New(http.StatusGatewayTimeout, apierr.Timeout, "%s", or("the language server ran out of time"))
	case daemonv1.Status_STATUS_CAPACITY_EXHAUSTED:
		e := apierr.New(http.StatusServiceUnavailable, apierr.CapacityExhausted, "%s", or("the daemon is at capacity"))
		e.RetryAfter = 5e9
		return e
	default:
		e := apierr.New(http.StatusServiceUnavailable, apierr.DaemonUnavailable, "%s", or("the language server is unavailable"))
		e.RetryAfter = 2e9
		return e
	}
}

// daemonError maps a transport failure talking to a daemon.
func daemonError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, daemonclient.ErrProtocol) {
		return apierr.Wrap(err, http.StatusServiceUnavailable, apierr.DaemonUnavailable, "the daemon speaks another protocol version")
	}
	switch status.Code(err) {
	case codes.DeadlineExceeded:
		return apierr.Wrap(err, http.StatusGatewayTimeout, apierr.Timeout, "the daemon ran out of time")
	case codes.Canceled:
		// The caller's context ended: the client went away.
		return apierr.Wrap(err, 499, apierr.Timeout, "the client closed the request")
	}
	e := apierr.Wrap(err, http.StatusServiceUnavailable, apierr.DaemonUnavailable, "the daemon is unavailable")
	e.RetryAfter = 2e9
	return e
}

// pushError maps a failed push. The daemon refuses a tree larger than its
// whole disk budget with ResourceExhausted (as gRPC would a push message
// over its size bound): too large on any retry, so 413, not 503.
func pushError(err error) error {
	if status.Code(err) == codes.ResourceExhausted {
		return apierr.Wrap(err, http.StatusRequestEntityTooLarge, apierr.TreeTooLarge, "the tree is larger than the daemon can hold")
	}
	return daemonError(err)
}

// ledgerError maps a ledger failure.
func ledgerError(err error) error {
	if errors.Is(err, ledger.ErrInsufficientFunds) {
		return apierr.Wrap(err, http.StatusPaymentRequired, apierr.InsufficientFunds, "the org's balance does not cover a prepare")
	}
	if errors.Is(err, ledger.ErrSpendCapExceeded) {
		return apierr.Wrap(err, http.StatusPaymentRequired, apierr.SpendCapExceeded, "the org's daily spend cap does not cover a prepare")
	}
	var e *apierr.Error
	if errors.As(err, &e) {
		return err
	}
	ae := apierr.Wrap(err, http.StatusServiceUnavailable, apierr.LedgerUnavailable, "the ledger is unavailable")
	ae.RetryAfter = 2e9
	return ae
}

// forgeError maps a forge failure. A repository the caller cannot see and
// one that does not exist get the very same answer.
func forgeError(err error) error {
	var tl *forge.TooLargeError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &tl):
		return apierr.Wrap(err, http.StatusRequestEntityTooLarge, apierr.TreeTooLarge, tl.Error())
	case errors.Is(err, forge.ErrNotFound):
		return apierr.Wrap(err, http.StatusNotFound, apierr.NotFound, "no such repository or revision, or no access to it")
	case errors.Is(err, forge.ErrBadRev):
		return apierr.Wrap(err, http.StatusBadRequest, apierr.InvalidRequest, "rev must be a full commit sha, a ref or a branch or tag name")
	case errors.Is(err, forge.ErrUnauthenticated):
		return apierr.Wrap(err, http.StatusUnauthorized, apierr.Unauthenticated, unauthenticatedMessage(err))
	case errors.Is(err, forge.ErrForbidden):
		return apierr.Wrap(err, http.StatusForbidden, apierr.Forbidden, "acting on the forge as this identity is refused")
	case errors.Is(err, forge.ErrBusy):
		e := apierr.Wrap(err, http.StatusTooManyRequests, apierr.RateLimited, "too many forge downloads for this org at once; retry after the time in Retry-After")
		e.RetryAfter = forge.GateWait
		if busy := (*forge.BusyError)(nil); errors.As(err, &busy) {
			e.Message = busy.Reason() + "; retry after the time in Retry-After"
			e.RetryAfter = busy.RetryAfter
		}
		return e
	case errors.Is(err, forge.ErrNoRoom):
		// The proxy's own disk, full of other fetches: a retry, once they
		// are done, may do.
		e := apierr.Wrap(err, http.StatusServiceUnavailable, apierr.CapacityExhausted, "the proxy has no room to fetch the tree now; retry after the time in Retry-After")
		e.RetryAfter = 5e9
		return e
	case errors.Is(err, forge.ErrCapacity):
		e := apierr.Wrap(err, http.StatusServiceUnavailable, apierr.CapacityExhausted, "the proxy runs as many forge downloads as it may; retry after the time in Retry-After")
		e.RetryAfter = 2e9
		return e
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return apierr.From(err)
	case errors.Is(err, forge.ErrRateLimited):
		// The forge limits the caller's credential (or this proxy): 429,
		// the contract's code for "slow down", with the forge's own wait
		// when it named a sane one.
		e := apierr.Wrap(err, http.StatusTooManyRequests, apierr.RateLimited, "the forge is rate limiting requests; retry after the time in Retry-After")
		e.RetryAfter = forgeRateLimitWait
		if d, _ := forge.DetailOf(err); d.RetryAfter > 0 {
			e.RetryAfter = d.RetryAfter
		}
		return e
	}
	e := apierr.Wrap(err, http.StatusBadGateway, apierr.ForgeUnavailable, "the forge is unavailable")
	e.RetryAfter = 5e9
	// The forge package's messages are its own short texts, never a
	// credential, a URL or what the forge sent: they say what went wrong
	// ("forge answered with a redirect (HTTP 302), which is not
	// followed"). Anything else (not a forge error) keeps the generic one.
	if d, ok := forge.DetailOf(err); ok {
		if d.Message != "" {
			e.Message = d.Message
		}
		switch {
		case d.Final:
			e.RetryAfter = 0 // a renamed repository stays renamed
		case d.RetryAfter > 0:
			e.RetryAfter = d.RetryAfter
		}
	}
	return e
}

// forgeRateLimitWait is the Retry-After of a forge 429 that named none.
const forgeRateLimitWait = 10 * time.Second

// unauthenticatedMessage says which forge credential is missing: the one
// the forge refused, the sudo mode's login, or the caller's X-Forge-Token
// (the forge was not asked).
func unauthenticatedMessage(err error) string {
	d, _ := forge.DetailOf(err)
	switch {
	case d.Refused:
		return "the forge refused the forge credential"
	case d.Login:
		return "no usable forge login to act as (the bearer token's forge login claim)"
	}
	return "no usable forge credential (X-Forge-Token)"
}
