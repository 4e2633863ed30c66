package httpapi

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/apierr"
	"github.com/hanzoai/lsp/proxy/internal/auth"
	"github.com/hanzoai/lsp/proxy/internal/ledger"
	"github.com/labstack/echo/v4"
)

// Idempotency-Key (CONTRACT §5). A POST operation request that carries the header runs at most once
// per (payer org, key) for IdempotencyTTL: the key is bound to a hash of the route and the raw body
// (and of the caller, see requestHash), the first attempt's answer is stored, and a retry gets that
// answer again, byte for byte, with Idempotent-Replayed: true — no second hold, no second ledger
// row. The same key with another route, body or caller is 422 idempotency_key_reused; while the
// first attempt runs, 409 idempotency_in_progress.
//
// What is stored: the answer of an attempt that did something a retry could repeat, i.e. one that
// reached the daemon (and so wrote its ledger row, and maybe held or charged a prepare). An attempt
// refused before that (400, 403, the forge's 404 or 502, an unreachable daemon or ledger) wrote
// nothing, so it gives the key back and a retry runs afresh.

// IdempotencyTTL is how long a key and its answer are kept.
const IdempotencyTTL = 24 * time.Hour

// defaultIdempotencyLease applies when Deps.IdempotencyLease is not set: longer than a hold lives
// with the default prepare timeout, so a retry never runs next to a dead attempt's live hold.
const defaultIdempotencyLease = 30 * time.Minute

// replayedHeaders are the answer headers a replay repeats besides the body.
var replayedHeaders = []string{echo.HeaderContentType, "Retry-After"}

// idempotency is the middleware of the POST operation routes.
func (s *Server) idempotency(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		keys := r.Header.Values("Idempotency-Key")
		if len(keys) == 0 {
			return next(c)
		}
		if len(keys) > 1 || !validIdempotencyKey(keys[0]) {
			return apierr.BadRequest("Idempotency-Key must be one value of 1 to 255 visible ASCII characters")
		}
		key := keys[0]
		p, _ := c.Get(ctxPrincipal).(*auth.Principal)
		if p == nil {
			return next(c)
		}
		org, err := p.SelectOrg(r.Header.Get("X-Org-Id"))
		if err != nil {
			return next(c) // the handler answers 403 before doing anything
		}
		raw, err := io.ReadAll(io.LimitReader(r.Body, MaxBody+1))
		r.Body = io.NopCloser(bytes.NewReader(raw))
		if err != nil || len(raw) > MaxBody {
			return next(c) // the handler answers 400
		}
		if s.d.Money == nil {
			return ledgerUnavailable(errors.New("no ledger configured"))
		}

		attempt := randomHex(16)
		lease := s.d.IdempotencyLease
		if lease <= 0 {
			lease = defaultIdempotencyLease
		}
		hash := requestHash(r.Method, c.Path(), p.Subject, r.Header.Get("X-Forge-Token"), raw)
		state, stored, err := s.d.Money.ClaimIdempotencyKey(r.Context(), ledger.IdempotencyRequest{
			Org: org, Key: key, RequestHash: hash, Attempt: attempt, TTL: IdempotencyTTL, Lease: lease,
		})
		if err != nil {
			return moneyError(err)
		}
		switch state {
		case ledger.IdempotencyReplay:
			h := c.Response().Header()
			for k, v := range stored.Header {
				h.Set(k, v)
			}
			h.Set("Idempotent-Replayed", "true")
			c.Response().WriteHeader(stored.Status)
			_, err := c.Response().Write(stored.Body)
			return err
		case ledger.IdempotencyMismatch:
			return apierr.New(http.StatusUnprocessableEntity, apierr.IdempotencyKeyReused,
				"this Idempotency-Key was used with another request")
		case ledger.IdempotencyInProgress:
			e := apierr.New(http.StatusConflict, apierr.IdempotencyInProgress,
				"a request with this Idempotency-Key is in progress")
			e.RetryAfter = time.Second
			return e
		}
		return s.runIdempotent(c, next, org, key, attempt)
	}
}

// runIdempotent runs the claimed attempt with its answer buffered, stores the answer (or gives the
// key back) and only then sends it, so a retry that arrives after the answer always finds it.
func (s *Server) runIdempotent(c echo.Context, next echo.HandlerFunc, org, key, attempt string) (err error) {
	// The bookkeeping must happen even when the client went away.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Request().Context()), 10*time.Second)
	defer cancel()
	resp := c.Response()
	orig := resp.Writer
	rec := &answerRecorder{header: orig.Header()}
	resp.Writer = rec
	done := false
	defer func() {
		resp.Writer = orig
		if !done {
			// A panic: nothing known about the attempt's effects; the lease frees the key.
			return
		}
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		orig.WriteHeader(rec.status)
		_, err = orig.Write(rec.body.Bytes())
	}()

	herr := next(c)
	if herr != nil {
		s.handleError(herr, c)
	}
	done = true
	if herr != nil && !reachedDaemon(herr) {
		if err := s.d.Money.ReleaseIdempotencyKey(ctx, org, key, attempt); err != nil {
			s.d.Log.Warn("release idempotency key", "request_id", c.Get(ctxRequestID), "err", err)
		}
		return nil
	}
	a := ledger.StoredAnswer{Status: rec.status, Header: map[string]string{}, Body: rec.body.Bytes()}
	if a.Status == 0 {
		a.Status = http.StatusOK
	}
	for _, h := range replayedHeaders {
		if v := rec.header.Get(h); v != "" {
			a.Header[h] = v
		}
	}
	if err := s.d.Money.StoreIdempotentAnswer(ctx, org, key, attempt, a); err != nil {
		// The caller still gets its answer. A retry meets the in-flight record until the lease
		// lapses (409), then runs again.
		s.d.Log.Warn("store idempotent answer", "request_id", c.Get(ctxRequestID), "err", err)
	}
	return nil
}

// reachedDaemon reports whether a failed operation got as far as the daemon, and so wrote its ledger
// row (or held or charged a prepare): such an answer is final for its key. A ledger that could not
// be reached wrote nothing.
func reachedDaemon(err error) bool {
	if apierr.From(err).Code == apierr.LedgerUnavailable {
		return false
	}
	var f *failure
	if !errors.As(err, &f) || f.res == nil {
		return false
	}
	return f.res.Answer != nil || f.res.Prepare != nil || f.res.Prepared || f.res.PrepareID != ""
}

// answerRecorder buffers an answer. Headers go to the real writer's map, which is sent when the
// buffered status and body are.
type answerRecorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (a *answerRecorder) Header() http.Header { return a.header }

func (a *answerRecorder) WriteHeader(code int) {
	if a.status == 0 {
		a.status = code
	}
}

// Flush does nothing: the answer leaves only once it is stored. (Streamed answers are not offered
// to requests that carry a key.)
func (a *answerRecorder) Flush() {}

func (a *answerRecorder) Write(b []byte) (int, error) {
	if a.status == 0 {
		a.status = http.StatusOK
	}
	return a.body.Write(b)
}

// requestHash binds a key to one route and one body, byte for byte, and to the caller: the subject
// and the forge credential. A stored answer was computed with one caller's forge access; another
// member of the org, or another credential, presenting the same key and body must not read it
// without the forge being asked (CONTRACT §3), so for them the key is simply taken (422).
func requestHash(method, route, subject, forgeToken string, body []byte) string {
	cred := sha256.Sum256([]byte(forgeToken))
	h := sha256.New()
	fmt.Fprintf(h, "%s %s\n%q\n%x\n", method, route, subject, cred)
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

func validIdempotencyKey(k string) bool {
	if k == "" || len(k) > 255 {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
