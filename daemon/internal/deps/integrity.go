package deps

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"hash"
	"strings"
)

// A lockfile pins each package by an integrity string (SRI: "sha512-…",
// possibly with others). The strongest algorithm present decides: with a
// sha512 hash the tarball must match it; an entry pinned by sha1 alone
// (lockfiles written before npm 5 and many Yarn v1 lockfiles) must match
// that sha1, as npm ci and yarn check it. SHA-1's collisions need whoever
// made both files, the package's own author, who could publish anything
// anyway; against the mirror, which is what the pin guards against, a
// second preimage is still out of reach. Anything else (md5, sha256
// alone, malformed) pins nothing and the package is never fetched.

// integrityAlgs are the accepted algorithms, strongest first, with their
// digest sizes.
var integrityAlgs = []struct {
	prefix string
	size   int
	hash   func() hash.Hash
}{
	{"sha512-", sha512.Size, sha512.New},
	{"sha1-", sha1.Size, sha1.New},
}

// integrityDigests are an SRI string's well-formed digests of its
// strongest accepted algorithm, and that algorithm's index; -1 when none.
func integrityDigests(sri string) (int, [][]byte) {
	for i, a := range integrityAlgs {
		var out [][]byte
		for _, f := range strings.Fields(sri) {
			b64, ok := strings.CutPrefix(f, a.prefix)
			if !ok {
				continue
			}
			if j := strings.IndexByte(b64, '?'); j >= 0 {
				b64 = b64[:j]
			}
			if b, err := base64.StdEncoding.DecodeString(b64); err == nil && len(b) == a.size {
				out = append(out, b)
			}
		}
		if len(out) > 0 {
			return i, out
		}
	}
	return -1, nil
}

// pinnedIntegrity: the SRI string pins the tarball (a well-formed sha512,
// or else sha1).
func pinnedIntegrity(sri string) bool {
	i, _ := integrityDigests(sri)
	return i >= 0
}

// integrityHasher returns the hash to compute over a tarball for sri, or
// nil when sri pins nothing.
func integrityHasher(sri string) hash.Hash {
	i, _ := integrityDigests(sri)
	if i < 0 {
		return nil
	}
	return integrityAlgs[i].hash()
}

// integrityMatch: sum, computed with integrityHasher(sri), is one of the
// digests of sri's strongest algorithm.
func integrityMatch(sri string, sum []byte) bool {
	_, ds := integrityDigests(sri)
	for _, d := range ds {
		if bytes.Equal(d, sum) {
			return true
		}
	}
	return false
}

// sha1Fragment turns Yarn v1's "#<hex sha1>" resolved fragment, which
// lockfiles older than Yarn 1.10 carry instead of an integrity field,
// into an SRI string; "" when there is none.
func sha1Fragment(resolved string) string {
	i := strings.LastIndexByte(resolved, '#')
	if i < 0 {
		return ""
	}
	b, err := hex.DecodeString(resolved[i+1:])
	if err != nil || len(b) != sha1.Size {
		return ""
	}
	return "sha1-" + base64.StdEncoding.EncodeToString(b)
}
