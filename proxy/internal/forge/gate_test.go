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
	g := NewGate(b, 3, 2).(*gate)
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
	run(ctxA, false) // a full-sha resolve takes a slot too
	if _, err := g.Fetch(ctxA, Credential{}, "o", "r", strings.Repeat("a", 40), Limits{}); !errors.Is(err, ErrBusy) {
		t.Fatalf("org a's third download: %v; want ErrBusy", err)
	}
	run(ctxB, true)
	if _, err := g.Resolve(ctxC, Credential{}, "o", "r", sha); !errors.Is(err, ErrCapacity) {
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
	if g.n != 0 || len(g.per) != 0 {
		t.Fatalf("slots left taken: %d %v", g.n, g.per)
	}
}
