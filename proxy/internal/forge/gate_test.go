package forge

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// blockingForge holds every call until released.
type blockingForge struct {
	entered chan struct{}
	release chan struct{}
}

func (b *blockingForge) Resolve(ctx context.Context, _ Credential, _, _ string, rev Rev) (string, error) {
	if _, isSHA := rev.Commit(); !isSHA {
		return strings.Repeat("b", 40), nil // a branch: answered at once
	}
	// A sha that is no tip: a proof, as gitForge.reachable makes it.
	release, err := takeProofSlot(ctx)
	if err != nil {
		return "", err
	}
	defer release()
	b.entered <- struct{}{}
	<-b.release
	return strings.Repeat("a", 40), nil
}

func (b *blockingForge) Fetch(ctx context.Context, _ Credential, _, _, _ string, _ Limits) (*Tree, error) {
	b.entered <- struct{}{}
	<-b.release
	return &Tree{}, nil
}

// TestGate: at most perOrg downloads of one org and total of the process
// run at once; over an org's bound the call fails with ErrBusy, over the
// process's with ErrCapacity, after a short wait; a freed slot is taken by
// a waiter; a branch resolve takes no slot.
func TestGate(t *testing.T) {
	b := &blockingForge{entered: make(chan struct{}, 10), release: make(chan struct{})}
	g := NewGate(b, 3, 2, 0).(*gate)
	g.wait = 100 * time.Millisecond
	sha := mustRev(t, strings.Repeat("ab", 20))
	ctxA, ctxB, ctxC := WithOrg(context.Background(), "a"), WithOrg(context.Background(), "b"), WithOrg(context.Background(), "c")

	var wg sync.WaitGroup
	run := func(ctx context.Context, fetch bool) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if fetch {
				_, _ = g.Fetch(ctx, Credential{}, "o", "r", strings.Repeat("a", 40), Limits{})
			} else {
				_, _ = g.Resolve(ctx, Credential{}, "o", "r", sha)
			}
		}()
		<-b.entered
	}
	run(ctxA, true)
	run(ctxA, true)
	if _, err := g.Fetch(ctxA, Credential{}, "o", "r", strings.Repeat("a", 40), Limits{}); !errors.Is(err, ErrBusy) {
		t.Fatalf("org a's third download: %v; want ErrBusy", err)
	}
	run(ctxB, true)
	if _, err := g.Fetch(ctxC, Credential{}, "o", "r", strings.Repeat("a", 40), Limits{}); !errors.Is(err, ErrCapacity) {
		t.Fatalf("past the process's bound: %v; want ErrCapacity", err)
	}
	// A branch resolve lists refs only: it passes however full the gate.
	if _, err := g.Resolve(ctxC, Credential{}, "o", "r", mustRev(t, "main")); err != nil {
		t.Fatalf("a branch resolve with the gate full: %v", err)
	}
	// A waiter gets the slot a finished download frees.
	got := make(chan error, 1)
	go func() {
		_, err := g.Fetch(ctxC, Credential{}, "o", "r", strings.Repeat("a", 40), Limits{})
		got <- err
	}()
	time.Sleep(20 * time.Millisecond)
	b.release <- struct{}{} // one of the three running ends
	<-b.entered             // the waiter runs
	close(b.release)
	if err := <-got; err != nil {
		t.Fatalf("the waiter: %v", err)
	}
	wg.Wait()
	if g.downloads.n != 0 || len(g.downloads.per) != 0 {
		t.Fatalf("slots left taken: %d %v", g.downloads.n, g.downloads.per)
	}
}

// TestGateProofs: proofs of older commits, which run before anyone pays,
// have slots of their own — half of the process's and of an org's — so
// that probes filling theirs leave the paid fetches theirs.
func TestGateProofs(t *testing.T) {
	b := &blockingForge{entered: make(chan struct{}, 10), release: make(chan struct{})}
	g := NewGate(b, 6, 2, 0).(*gate) // proofs: 3 in all, 1 an org
	g.wait = 100 * time.Millisecond
	sha := mustRev(t, strings.Repeat("ab", 20))
	org := func(name string) context.Context { return WithOrg(context.Background(), name) }
	var wg sync.WaitGroup
	start := func(ctx context.Context, call func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = call(ctx)
		}()
		<-b.entered
	}
	resolve := func(ctx context.Context) error { _, err := g.Resolve(ctx, Credential{}, "o", "r", sha); return err }
	fetch := func(ctx context.Context) error {
		_, err := g.Fetch(ctx, Credential{}, "o", "r", strings.Repeat("a", 40), Limits{})
		return err
	}
	start(org("a"), resolve)
	if err := resolve(org("a")); !errors.Is(err, ErrBusy) {
		t.Fatalf("org a's second proof: %v; want ErrBusy", err)
	}
	start(org("b"), resolve)
	start(org("c"), resolve)
	if err := resolve(org("d")); !errors.Is(err, ErrCapacity) {
		t.Fatalf("a fourth proof: %v; want ErrCapacity", err)
	}
	// Every proof slot taken: org a's fetches still run, two of them.
	start(org("a"), fetch)
	start(org("a"), fetch)
	close(b.release)
	wg.Wait()
	if g.proofs.n != 0 || g.downloads.n != 0 {
		t.Fatalf("slots left taken: %d proofs, %d downloads", g.proofs.n, g.downloads.n)
	}
}

// historyForge asks the gate, as gitForge.reachable does, before a proof's
// history download.
type historyForge struct{ Forge }

func (historyForge) Resolve(ctx context.Context, _ Credential, _, _ string, _ Rev) (string, error) {
	return strings.Repeat("a", 40), allowHistory(ctx)
}

// TestHistoryProofLimit: an org may make the proxy download a repository's
// history to prove a commit reachable only so often; past that the proof
// is ErrBusy with the time until the next, and other orgs are not held to
// its count.
func TestHistoryProofLimit(t *testing.T) {
	g := NewGate(historyForge{}, 0, 0, 3) // bursts of one, one every 20 s
	sha := mustRev(t, strings.Repeat("ab", 20))
	a, b := WithOrg(context.Background(), "a"), WithOrg(context.Background(), "b")
	if _, err := g.Resolve(a, Credential{}, "o", "r", sha); err != nil {
		t.Fatalf("org a's first history proof: %v", err)
	}
	_, err := g.Resolve(a, Credential{}, "o", "r", sha)
	var busy *BusyError
	if !errors.Is(err, ErrBusy) || !errors.As(err, &busy) || busy.RetryAfter <= 0 {
		t.Fatalf("org a's second history proof: %v; want ErrBusy with a Retry-After", err)
	}
	if _, err := g.Resolve(b, Credential{}, "o", "r", sha); err != nil {
		t.Fatalf("org b's first history proof: %v", err)
	}
	if err := allowHistory(a); err != nil {
		t.Fatalf("outside a gate's proof: %v", err)
	}
}
