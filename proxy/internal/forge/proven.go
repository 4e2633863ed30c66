package forge

import (
	"sync"
	"time"
)

// provenTTL is how long a commit proven reachable (a sha that is no ref
// tip) is remembered for its repository: proving it again, for anyone the
// forge lets list the repository's refs (each resolve still asks the forge
// as its caller), downloads nothing. Without it every credential paid a
// proof per access-cache lifetime, and on a forge that serves no commit by
// sha each proof is a history download counted against the org's
// history-proof limit. A commit a force-push has made unreachable stays
// provable until then.
const provenTTL = 10 * time.Minute

// maxProven bounds the remembered proofs; when full, the expired ones go,
// and if none has, all of them.
const maxProven = 4096

// provenSet is the commits proven reachable, by repository URL and sha.
type provenSet struct {
	mu  sync.Mutex
	now func() time.Time
	m   map[string]time.Time // repository URL + " " + sha → when proven
}

func newProvenSet() *provenSet {
	return &provenSet{now: time.Now, m: map[string]time.Time{}}
}

func (p *provenSet) has(repoURL, sha string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	at, ok := p.m[repoURL+" "+sha]
	return ok && p.now().Sub(at) < provenTTL
}

func (p *provenSet) add(repoURL, sha string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	if len(p.m) >= maxProven {
		for k, at := range p.m {
			if now.Sub(at) >= provenTTL {
				delete(p.m, k)
			}
		}
		if len(p.m) >= maxProven {
			clear(p.m)
		}
	}
	p.m[repoURL+" "+sha] = now
}
