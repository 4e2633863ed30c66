package forge

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"strings"
)

// ref is one advertised ref.
type ref struct {
	name   string
	oid    string
	peeled string // the object an annotated tag points at, when given
	symref string // the target of a symbolic ref (HEAD), when given
}

// advert is a parsed /info/refs answer.
type advert struct {
	version int               // 0 (v0 or v1) or 2
	caps    map[string]string // capability → value ("" when it has none)
	refs    []ref             // protocol v0 only: the refs come with the advertisement
}

var errForgeERR = errors.New("forge sent an error line")

// filter reports whether the forge serves partial fetches.
func (a *advert) filter() bool {
	if a.version == 2 {
		for _, f := range strings.Fields(a.caps["fetch"]) {
			if f == "filter" {
				return true
			}
		}
		return false
	}
	_, ok := a.caps["filter"]
	return ok
}

// objectFormat is the forge's hash ("sha1" unless it says otherwise).
func (a *advert) objectFormat() string {
	if f := a.caps["object-format"]; f != "" {
		return f
	}
	return "sha1"
}

// parseAdvertisement parses the answer to GET /info/refs?service=git-upload-pack,
// either a protocol v2 capability advertisement or a v0/v1 ref advertisement,
// with or without the smart-HTTP "# service=" preamble. Of a v0 ref
// advertisement it keeps the refs keep takes (all when keep is nil),
// deciding each once its peeled line, if any, has been read.
func parseAdvertisement(r io.Reader, limit int64, keep func(ref) bool) (*advert, error) {
	p := newPktReader(r, limit)
	kind, line, err := p.next()
	if err != nil {
		return nil, err
	}
	if kind == pktData && bytes.HasPrefix(line, []byte("# service=")) {
		if string(bytes.TrimSuffix(line, []byte("\n"))) != "# service=git-upload-pack" {
			return nil, errPktMalformed
		}
		// The preamble ends with a flush; the advertisement follows.
		if kind, _, err = p.next(); err != nil {
			return nil, err
		}
		if kind != pktFlush {
			return nil, errPktMalformed
		}
		if kind, line, err = p.next(); err != nil {
			return nil, err
		}
	}
	a := &advert{caps: make(map[string]string)}
	if kind == pktData && bytes.HasPrefix(line, []byte("ERR ")) {
		return nil, errForgeERR
	}
	switch {
	case kind == pktData && string(trimLF(line)) == "version 2":
		a.version = 2
		for {
			kind, line, err := p.next()
			if err != nil {
				return nil, err
			}
			if kind == pktFlush {
				return a, nil
			}
			if kind != pktData {
				return nil, errPktMalformed
			}
			k, v, _ := strings.Cut(string(trimLF(line)), "=")
			a.caps[k] = v
		}
	case kind == pktData && string(trimLF(line)) == "version 1":
		if kind, line, err = p.next(); err != nil {
			return nil, err
		}
	}
	// Protocol v0: "<oid> <name>\0<caps>" first, then "<oid> <name>" lines,
	// then a flush. An empty repository advertises "capabilities^{}".
	first := true
	var pending *ref // the last ref, until its peeled line could follow
	settle := func() {
		if pending != nil && (keep == nil || keep(*pending)) {
			a.refs = append(a.refs, *pending)
		}
		pending = nil
	}
	for {
		if kind == pktFlush {
			settle()
			return a, nil
		}
		if kind != pktData {
			return nil, errPktMalformed
		}
		if bytes.HasPrefix(line, []byte("ERR ")) {
			return nil, errForgeERR
		}
		text := string(trimLF(line))
		if first {
			var caps string
			text, caps, _ = strings.Cut(text, "\x00")
			for _, c := range strings.Fields(caps) {
				k, v, _ := strings.Cut(c, "=")
				if k == "symref" {
					// symref=HEAD:refs/heads/main
					if from, to, ok := strings.Cut(v, ":"); ok {
						a.caps["symref "+from] = to
					}
					continue
				}
				a.caps[k] = v
			}
			first = false
		}
		oid, name, ok := strings.Cut(text, " ")
		if !ok || !isFullSHA(oid) || name == "" {
			return nil, errPktMalformed
		}
		switch {
		case name == "capabilities^{}":
		case strings.HasSuffix(name, "^{}"):
			if pending != nil && pending.name == strings.TrimSuffix(name, "^{}") {
				pending.peeled = oid
			}
		default:
			settle()
			pending = &ref{name: name, oid: oid, symref: a.caps["symref "+name]}
		}
		if kind, line, err = p.next(); err != nil {
			return nil, err
		}
	}
}

// lsRefsRequest builds a protocol v2 ls-refs command.
func lsRefsRequest(objectFormat string, prefixes []string) []byte {
	var b bytes.Buffer
	writePkt(&b, "command=ls-refs\n")
	if objectFormat != "" && objectFormat != "sha1" {
		writePkt(&b, "object-format="+objectFormat+"\n")
	}
	b.WriteString("0001")
	writePkt(&b, "peel\n")
	writePkt(&b, "symrefs\n")
	for _, p := range prefixes {
		writePkt(&b, "ref-prefix "+p+"\n")
	}
	b.WriteString("0000")
	return b.Bytes()
}

// parseLsRefs parses a protocol v2 ls-refs answer:
// "<oid> <name>[ symref-target:<t>][ peeled:<oid>]" lines up to a flush.
// Unborn refs (an empty repository's HEAD) carry no commit and are skipped,
// and so is every ref keep (when not nil) does not take: a forge's million
// tags, listed for a sha, are read and let go one by one.
func parseLsRefs(r io.Reader, limit int64, keep func(ref) bool) ([]ref, error) {
	p := newPktReader(r, limit)
	var refs []ref
	for {
		kind, line, err := p.next()
		if err != nil {
			return nil, err
		}
		switch kind {
		case pktFlush:
			return refs, nil
		case pktData:
		default:
			return nil, errPktMalformed
		}
		if bytes.HasPrefix(line, []byte("ERR ")) {
			return nil, errForgeERR
		}
		fields := strings.Split(string(trimLF(line)), " ")
		if len(fields) < 2 || fields[1] == "" {
			return nil, errPktMalformed
		}
		if fields[0] == "unborn" {
			continue
		}
		if !isFullSHA(fields[0]) {
			return nil, errPktMalformed
		}
		rf := ref{oid: fields[0], name: fields[1]}
		for _, attr := range fields[2:] {
			switch {
			case strings.HasPrefix(attr, "symref-target:"):
				rf.symref = strings.TrimPrefix(attr, "symref-target:")
			case strings.HasPrefix(attr, "peeled:"):
				rf.peeled = strings.TrimPrefix(attr, "peeled:")
				if !isFullSHA(rf.peeled) {
					return nil, errPktMalformed
				}
			}
		}
		if keep == nil || keep(rf) {
			refs = append(refs, rf)
		}
	}
}

// refPrefixes are the ls-refs prefixes that can answer rev.
func refPrefixes(rev Rev) []string {
	switch rev.kind {
	case revDefault:
		return []string{"HEAD"}
	case revBranch:
		return []string{"refs/heads/" + rev.name}
	case revTag:
		return []string{"refs/tags/" + rev.name}
	case revName:
		return []string{"refs/heads/" + rev.name, "refs/tags/" + rev.name}
	}
	// A sha: any branch or tag tip (or HEAD) proves it reachable.
	return []string{"HEAD", "refs/heads/", "refs/tags/"}
}

// pick finds rev among refs. ref-prefix matches prefixes, so names are
// compared exactly here. For a sha it reports whether a tip (or what a tag
// peels to) is that commit.
func pick(refs []ref, rev Rev) (string, bool) {
	find := func(name string) (string, bool) {
		for _, r := range refs {
			if r.name == name {
				if r.peeled != "" {
					return r.peeled, true
				}
				return r.oid, true
			}
		}
		return "", false
	}
	switch rev.kind {
	case revDefault:
		return find("HEAD")
	case revBranch:
		return find("refs/heads/" + rev.name)
	case revTag:
		return find("refs/tags/" + rev.name)
	case revName:
		if c, ok := find("refs/heads/" + rev.name); ok {
			return c, true
		}
		return find("refs/tags/" + rev.name)
	}
	for _, r := range refs {
		if rev.isTip(r) {
			return rev.name, true
		}
	}
	return "", false
}

// isTip reports whether t is a tip of sha r: an annotated tag's own
// object is not a commit, only what it peels to counts.
func (r Rev) isTip(t ref) bool {
	return t.peeled == r.name || (t.peeled == "" && t.oid == r.name)
}

// noRefs keeps no ref: a fetch wants the advertisement's capabilities.
func noRefs(ref) bool { return false }

// keepRefs is what a listing of refs need keep to answer r (pick): for a
// sha its tips, for a name the refs refPrefixes names exactly (a v0
// forge advertises every ref, ls-refs those under the prefixes).
func (r Rev) keepRefs() func(ref) bool {
	if _, ok := r.Commit(); ok {
		return r.isTip
	}
	names := refPrefixes(r)
	return func(t ref) bool { return slices.Contains(names, t.name) }
}

func trimLF(b []byte) []byte { return bytes.TrimSuffix(b, []byte("\n")) }
