package pool

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hanzoai/lsp/daemon/internal/workspace"
	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
)

// genID is the prepare id of a key's gen-th tree: each publication of a key
// carries its own, so a served workspace says which publication it is.
func genID(gen int64) string { return fmt.Sprintf("00000000-0000-4000-8000-%012x", gen) }

func tinyTree() ([]*daemonv1.FileEntry, []byte) {
	const s = "module example.com/m\n"
	sum := sha256.Sum256([]byte(s))
	return []*daemonv1.FileEntry{{Path: "go.mod", Size: uint64(len(s)), Sha256: hex.EncodeToString(sum[:])}}, []byte(s)
}

// TestAcquireDeleteSweepRace hammers Acquire (which adopts trees published
// on disk) against Delete, Sweep and re-publication of the same keys. Every
// workspace Acquire hands out must have its tree on disk for as long as the
// request holds it, and a publication whose Delete has returned must never
// be served again. Run with -race.
func TestAcquireDeleteSweepRace(t *testing.T) {
	p, store := serverless(t)

	keys := []workspace.Key{key("a", "r", 0), key("a", "r", 1), key("b", "r", 0)}
	var gen atomic.Int64
	files, content := tinyTree()
	// The first trees are on disk only, as an earlier run left them:
	// Acquire adopts them.
	for _, k := range keys {
		if _, err := store.Write(k, genID(gen.Add(1)), files, bytes.NewReader(content), nil); err != nil {
			t.Fatal(err)
		}
	}

	// deleted holds the prepare ids whose Delete has returned.
	var deleted sync.Map
	var served, missing, reserved, deletes, sweeps atomic.Int64
	const rounds = 300
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range rounds * 3 {
				k := keys[(i+j)%len(keys)]
				// What was deleted before this Acquire began.
				gone := map[string]bool{}
				deleted.Range(func(id, _ any) bool { gone[id.(string)] = true; return true })
				w, release, ok := p.Acquire(k)
				if !ok {
					continue
				}
				served.Add(1)
				if gone[w.PrepareID] {
					reserved.Add(1)
					t.Errorf("%s: publication %s served after its Delete returned", k, w.PrepareID)
				}
				if b, err := os.ReadFile(filepath.Join(w.Dir, "go.mod")); err != nil || string(b) != string(content) {
					missing.Add(1)
					t.Errorf("%s: served workspace %s has no tree: %v", k, w.PrepareID, err)
				}
				release()
			}
		}()
	}
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range rounds {
				k := keys[(i+j)%len(keys)]
				// The publication Delete removes is whatever is held now;
				// read it under the pool's view, before deleting.
				var id string
				if w, release, ok := p.Acquire(k); ok {
					id = w.PrepareID
					release()
				}
				if _, err := p.Delete(ctx, k); err != nil {
					t.Errorf("delete %s: %v", k, err)
					return
				}
				deletes.Add(1)
				if id != "" {
					deleted.Store(id, true)
				}
				if _, _, err := p.Prepare(ctx, k, genID(gen.Add(1)), files, bytes.NewReader(content), nil, nil); err != nil {
					t.Errorf("prepare %s: %v", k, err)
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range rounds {
			p.Sweep(ctx, 0)
			sweeps.Add(1)
			for _, k := range keys {
				if !store.Published(k) {
					// Publish again, so that Delete has work to race.
					_, _, _ = p.Prepare(ctx, k, genID(gen.Add(1)), files, bytes.NewReader(content), nil, nil)
				}
			}
		}
	}()
	wg.Wait()
	t.Logf("served %d, deletes %d, sweeps %d, publications %d", served.Load(), deletes.Load(), sweeps.Load(), gen.Load())
	if served.Load() == 0 || deletes.Load() == 0 {
		t.Fatal("the hammer exercised nothing")
	}
	if missing.Load() != 0 || reserved.Load() != 0 {
		t.Fatalf("%d served without a tree, %d re-served after delete", missing.Load(), reserved.Load())
	}
	// Nothing is left claimed.
	p.mu.Lock()
	n := len(p.preparing)
	p.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d keys still marked in flight", n)
	}
}

// TestDeleteWaitsForRequest: an explicit Delete of a workspace a request
// holds takes it out of service at once (no new request gets it), keeps its
// tree until the request releases it, and deletes the tree then.
func TestDeleteWaitsForRequest(t *testing.T) {
	p, store := serverless(t)
	k := key("a", "r", 0)
	files, content := tinyTree()
	if _, _, err := p.Prepare(context.Background(), k, genID(1), files, bytes.NewReader(content), nil, nil); err != nil {
		t.Fatal(err)
	}
	w, release, ok := p.Acquire(k)
	if !ok {
		t.Fatal("not held after prepare")
	}
	type result struct {
		existed bool
		err     error
	}
	done := make(chan result, 1)
	go func() {
		existed, err := p.Delete(context.Background(), k)
		done <- result{existed, err}
	}()
	// Out of service as soon as Delete has claimed it.
	for {
		if _, r, ok := p.Acquire(k); ok {
			r()
			continue
		}
		break
	}
	select {
	case r := <-done:
		t.Fatalf("Delete returned %+v while a request held the workspace", r)
	default:
	}
	if _, err := os.Stat(filepath.Join(w.Dir, "go.mod")); err != nil {
		t.Fatalf("the tree went under its request: %v", err)
	}
	release()
	release() // a second call is harmless
	if r := <-done; !r.existed || r.err != nil {
		t.Fatalf("Delete = %+v", r)
	}
	if store.Published(k) {
		t.Fatal("the tree is still published after Delete")
	}
	if _, _, ok := p.Acquire(k); ok {
		t.Fatal("a deleted workspace was served")
	}
}
