package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/apierr"
	"github.com/hanzoai/lsp/proxy/internal/forge"
	"github.com/hanzoai/lsp/proxy/internal/operation"
)

// TestOrgSlots: an org holds at most its bound of slots, another org is
// not held back by it, and a release (once, however often it is called)
// frees one.
func TestOrgSlots(t *testing.T) {
	o := newOrgSlots(2)
	r1, err1 := o.take("acme")
	r2, err2 := o.take("acme")
	if err1 != nil || err2 != nil {
		t.Fatalf("the first two: %v, %v", err1, err2)
	}
	if _, err := o.take("acme"); apierr.Status(err) != http.StatusTooManyRequests || apierr.From(err).RetryAfter <= 0 {
		t.Fatalf("a third at once: %v; want 429 with a Retry-After", err)
	}
	rb, err := o.take("beta")
	if err != nil {
		t.Fatalf("another org: %v", err)
	}
	r1()
	r1()
	r3, err := o.take("acme")
	if err != nil {
		t.Fatalf("after a release: %v", err)
	}
	if _, err := o.take("acme"); err == nil {
		t.Fatal("a release called twice freed two slots")
	}
	r2()
	r3()
	rb()
	if len(o.n) != 0 {
		t.Fatalf("slots left after every release: %v", o.n)
	}
}

// TestInFlightBoundBothDoors: an org at its bound gets 429 from an
// operation and from a prepare before either asks the forge or the daemon
// (this server has neither: reaching them would panic).
func TestInFlightBoundBothDoors(t *testing.T) {
	s := New(Deps{MaxInFlightPerOrg: 1, Log: slog.New(slog.DiscardHandler)})
	release, err := s.inflight.take("acme")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	c := operation.Caller{Org: "acme"}
	rt, _ := routeByName("hover")
	if _, err := s.runOperation(context.Background(), rt, &body{}, operation.Request{}, c, time.Now()); apierr.Status(err) != http.StatusTooManyRequests {
		t.Errorf("operation at the bound: %v; want 429", err)
	}
	if _, _, err := s.runPrepare(context.Background(), c, "app", forge.Rev{}, "", time.Now()); apierr.Status(err) != http.StatusTooManyRequests {
		t.Errorf("prepare at the bound: %v; want 429", err)
	}
}
