package forge

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"sync"
	"time"
)

// On a forge that cannot filter a fetch, proving an older commit reachable
// (gitForge.reachable) downloads its whole tree, before anyone has paid; the
// paid fetch that follows would download it again. The proof leaves its
// download here instead, and that fetch takes it: the work done before the
// payment gate is then the only download.

// heldTTL is how long a proof's download waits for its fetch, which
// follows within the same request once the gate has answered (a var for
// tests).
var heldTTL = 30 * time.Second

// maxHeld bounds the downloads waiting, and so the disk they hold (each
// within packBound); the oldest goes first.
const maxHeld = 2

// heldDownload is one proof's fetched repository: dir inside home, home
// removed by whoever holds it last.
type heldDownload struct {
	key       string
	home, dir string
	timer     *time.Timer
}

// heldDownloads is the proofs' downloads waiting for their fetches, keyed by
// the credential, the repository and the commit: a fetch takes only what a
// proof made with its own credential, so a download never crosses callers
// (each fetch still asks the forge, as its caller, first). There is one per
// process (held), so that maxHeld bounds the process's disk.
type heldDownloads struct {
	mu     sync.Mutex
	list   []*heldDownload // oldest first
	closed bool            // ReleaseHeld ran: nothing more is held
}

var held heldDownloads

// ReleaseHeld removes every proof's download still waiting for its fetch;
// the proxy calls it as it stops, so that none outlives the process.
func ReleaseHeld() { held.release() }

// release removes every download held, and any put after it at once.
func (h *heldDownloads) release() {
	h.mu.Lock()
	list := h.list
	h.list = nil
	h.closed = true
	h.mu.Unlock()
	for _, d := range list {
		d.timer.Stop()
		os.RemoveAll(d.home)
	}
}

func heldKey(auth, repoURL, commit string) string {
	sum := sha256.Sum256([]byte(auth))
	return hex.EncodeToString(sum[:]) + " " + repoURL + " " + commit
}

// put keeps home (holding the fetched repository dir) for heldTTL under
// key, in place of one held under the same key, removing the oldest
// download held when there is no room.
func (h *heldDownloads) put(key, home, dir string) {
	d := &heldDownload{key: key, home: home, dir: dir}
	h.mu.Lock()
	if h.closed {
		// The proxy is stopping: a proof that ends now holds nothing.
		h.mu.Unlock()
		os.RemoveAll(home)
		return
	}
	var gone []*heldDownload
	if old := h.unlistLocked(func(d *heldDownload) bool { return d.key == key }); old != nil {
		gone = append(gone, old)
	}
	for len(h.list) >= maxHeld {
		gone = append(gone, h.list[0])
		h.list = h.list[1:]
	}
	h.list = append(h.list, d)
	// Armed once listed: firing before, it would find nothing to remove.
	d.timer = time.AfterFunc(heldTTL, func() { h.remove(d) })
	h.mu.Unlock()
	for _, old := range gone {
		old.timer.Stop()
		os.RemoveAll(old.home)
	}
}

// take returns the download held under key, now the caller's to remove, or
// nil.
func (h *heldDownloads) take(key string) *heldDownload {
	h.mu.Lock()
	d := h.unlistLocked(func(d *heldDownload) bool { return d.key == key })
	h.mu.Unlock()
	if d != nil {
		d.timer.Stop()
	}
	return d
}

// remove removes d's download if it is still held (its time is up).
func (h *heldDownloads) remove(d *heldDownload) {
	h.mu.Lock()
	listed := h.unlistLocked(func(e *heldDownload) bool { return e == d }) != nil
	h.mu.Unlock()
	if listed {
		os.RemoveAll(d.home)
	}
}

// unlistLocked takes the first download match accepts off the list; h.mu
// is held.
func (h *heldDownloads) unlistLocked(match func(*heldDownload) bool) *heldDownload {
	for i, d := range h.list {
		if match(d) {
			h.list = append(h.list[:i], h.list[i+1:]...)
			return d
		}
	}
	return nil
}
