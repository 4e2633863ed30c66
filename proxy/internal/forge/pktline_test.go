package forge

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

const (
	testSHA  = "aa849e2deee2478381853026ef5fe00247ffd472"
	testSHA2 = "ddf10d82dc5d406c8ea7c592662d64de5caf0535"
)

func pkts(lines ...string) []byte {
	var b bytes.Buffer
	for _, l := range lines {
		switch l {
		case "0000", "0001", "0002":
			b.WriteString(l)
		default:
			writePkt(&b, l)
		}
	}
	return b.Bytes()
}

func TestParseAdvertisement(t *testing.T) {
	v2 := pkts("version 2\n", "agent=git/2.39.5\n", "ls-refs=unborn\n", "fetch=shallow wait-for-done filter\n", "object-format=sha1\n", "0000")
	a, err := parseAdvertisement(bytes.NewReader(v2), 1<<20, nil)
	if err != nil || a.version != 2 || !a.filter() || a.objectFormat() != "sha1" {
		t.Fatalf("v2: %+v, %v", a, err)
	}
	if _, ok := a.caps["ls-refs"]; !ok {
		t.Fatal("v2: ls-refs missing")
	}
	// With the smart-HTTP preamble, as GitHub sends it.
	a, err = parseAdvertisement(bytes.NewReader(append(pkts("# service=git-upload-pack\n", "0000"), v2...)), 1<<20, nil)
	if err != nil || a.version != 2 {
		t.Fatalf("v2 with preamble: %+v, %v", a, err)
	}
	v0 := pkts("# service=git-upload-pack\n", "0000",
		testSHA+" HEAD\x00multi_ack symref=HEAD:refs/heads/main filter agent=git/2\n",
		testSHA+" refs/heads/main\n",
		testSHA2+" refs/tags/v1\n",
		testSHA+" refs/tags/v1^{}\n",
		"0000")
	a, err = parseAdvertisement(bytes.NewReader(v0), 1<<20, nil)
	if err != nil || a.version != 0 || !a.filter() || len(a.refs) != 3 {
		t.Fatalf("v0: %+v, %v", a, err)
	}
	if a.refs[0].symref != "refs/heads/main" || a.refs[2].peeled != testSHA {
		t.Fatalf("v0 refs: %+v", a.refs)
	}
	if c, ok := pick(a.refs, Rev{kind: revName, name: "v1"}); !ok || c != testSHA {
		t.Fatalf("pick(v1) = %q, %v", c, ok)
	}
	// Kept for one rev, the refs answer it alike and hold nothing else:
	// the tag peels to testSHA, so it is one of its tips; its own object
	// (testSHA2) is none.
	for _, tc := range []struct {
		rev  Rev
		want []string
	}{
		{Rev{kind: revName, name: "v1"}, []string{"refs/tags/v1"}},
		{Rev{kind: revSHA, name: testSHA}, []string{"HEAD", "refs/heads/main", "refs/tags/v1"}},
		{Rev{kind: revSHA, name: testSHA2}, nil},
		{Rev{}, []string{"HEAD"}},
	} {
		k, err := parseAdvertisement(bytes.NewReader(v0), 1<<20, tc.rev.keepRefs())
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, r := range k.refs {
			names = append(names, r.name)
		}
		if !equalSlices(names, tc.want) {
			t.Errorf("v0 kept for %v: %q, want %q", tc.rev, names, tc.want)
		}
		if got, ok := pick(k.refs, tc.rev); fmt.Sprint(pick(a.refs, tc.rev)) != fmt.Sprint(got, ok) {
			t.Errorf("pick(%v) over the kept refs = %q, %v; over all, otherwise", tc.rev, got, ok)
		}
	}
	if k, err := parseAdvertisement(bytes.NewReader(v0), 1<<20, noRefs); err != nil || len(k.refs) != 0 || !k.filter() {
		t.Fatalf("no refs kept: %+v, %v", k, err)
	}
	empty := pkts(strings.Repeat("0", 40)+" capabilities^{}\x00agent=x\n", "0000")
	if a, err = parseAdvertisement(bytes.NewReader(empty), 1<<20, nil); err != nil || len(a.refs) != 0 {
		t.Fatalf("empty repository: %+v, %v", a, err)
	}
	for name, bad := range map[string][]byte{
		"ERR":          pkts("ERR access denied\n"),
		"short sha":    pkts("abc HEAD\x00caps\n", "0000"),
		"bad service":  pkts("# service=git-receive-pack\n", "0000"),
		"truncated":    v2[:len(v2)-3],
		"bad length":   []byte("zzzzversion 2\n"),
		"length 3":     []byte("0003"),
		"no flush":     pkts("version 2\n", "agent=x\n"),
		"over limit":   pkts("version 2\n", strings.Repeat("x", 2000), "0000"),
		"delim in v2":  pkts("version 2\n", "0001"),
		"empty answer": nil,
	} {
		if _, err := parseAdvertisement(bytes.NewReader(bad), 1024, nil); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestParseLsRefs(t *testing.T) {
	resp := pkts(
		testSHA+" HEAD symref-target:refs/heads/main\n",
		testSHA+" refs/heads/main\n",
		testSHA2+" refs/tags/v2 peeled:"+testSHA+"\n",
		"unborn refs/heads/x\n",
		"0000")
	refs, err := parseLsRefs(bytes.NewReader(resp), 1<<20, nil)
	if err != nil || len(refs) != 3 {
		t.Fatalf("%+v, %v", refs, err)
	}
	if refs[0].symref != "refs/heads/main" || refs[2].peeled != testSHA {
		t.Fatalf("%+v", refs)
	}
	for _, tc := range []struct {
		rev  Rev
		want string
		ok   bool
	}{
		{Rev{}, testSHA, true},
		{Rev{kind: revTag, name: "v2"}, testSHA, true},
		{Rev{kind: revName, name: "v"}, "", false}, // prefixes match, names must not
		{Rev{kind: revSHA, name: testSHA}, testSHA, true},
		{Rev{kind: revSHA, name: testSHA2}, "", false}, // the tag object itself is no commit
		{Rev{kind: revSHA, name: strings.Repeat("1", 40)}, "", false},
	} {
		got, ok := pick(refs, tc.rev)
		if got != tc.want || ok != tc.ok {
			t.Errorf("pick(%v) = %q, %v; want %q, %v", tc.rev, got, ok, tc.want, tc.ok)
		}
		// The listing kept for the rev alone answers it the same, and for a
		// sha keeps nothing but its tips.
		kept, err := parseLsRefs(bytes.NewReader(resp), 1<<20, tc.rev.keepRefs())
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := pick(kept, tc.rev); got != tc.want || ok != tc.ok {
			t.Errorf("pick(%v) over the kept refs = %q, %v; want %q, %v", tc.rev, got, ok, tc.want, tc.ok)
		}
		if _, sha := tc.rev.Commit(); sha {
			for _, r := range kept {
				if !tc.rev.isTip(r) {
					t.Errorf("for %v kept %+v, not one of its tips", tc.rev, r)
				}
			}
		}
	}
	for name, bad := range map[string][]byte{
		"ERR":        pkts("ERR nope\n"),
		"bad oid":    pkts("xyz refs/heads/main\n", "0000"),
		"bad peeled": pkts(testSHA+" refs/tags/v peeled:nope\n", "0000"),
		"no name":    pkts(testSHA+"\n", "0000"),
		"no flush":   pkts(testSHA + " refs/heads/main\n"),
		"delim":      pkts("0001"),
	} {
		if _, err := parseLsRefs(bytes.NewReader(bad), 1<<20, nil); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestLsRefsRequestRoundTrip(t *testing.T) {
	req := lsRefsRequest("sha256", []string{"HEAD", "refs/heads/"})
	p := newPktReader(bytes.NewReader(req), 1<<20)
	var got []string
	for {
		kind, line, err := p.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch kind {
		case pktData:
			got = append(got, string(line))
		case pktDelim:
			got = append(got, "DELIM")
		case pktFlush:
			got = append(got, "FLUSH")
		}
	}
	want := []string{"command=ls-refs\n", "object-format=sha256\n", "DELIM", "peel\n", "symrefs\n",
		"ref-prefix HEAD\n", "ref-prefix refs/heads/\n", "FLUSH"}
	if !equalSlices(got, want) {
		t.Fatalf("got %q\nwant %q", got, want)
	}
}

func FuzzPktLine(f *testing.F) {
	f.Add(pkts("version 2\n", "ls-refs=unborn\n", "fetch=shallow filter\n", "0000"))
	f.Add(pkts("# service=git-upload-pack\n", "0000", testSHA+" HEAD\x00symref=HEAD:refs/heads/main\n", testSHA+" refs/tags/v^{}\n", "0000"))
	f.Add(pkts(testSHA+" HEAD symref-target:refs/heads/main\n", testSHA2+" refs/tags/v peeled:"+testSHA+"\n", "0000"))
	f.Add([]byte("0000000100020003fff0"))
	f.Add([]byte("0004000500060009abcde"))
	f.Add([]byte("ffff"))
	f.Fuzz(func(t *testing.T, data []byte) {
		const limit = 1 << 12
		r := &countingReader{r: bytes.NewReader(data)}
		p := newPktReader(r, limit)
		for {
			kind, payload, err := p.next()
			if err != nil {
				if err != io.EOF && !errors.Is(err, errPktMalformed) && !errors.Is(err, errPktTooLarge) {
					t.Fatalf("unexpected error %v", err)
				}
				break
			}
			if kind != pktData && payload != nil {
				t.Fatal("a control packet carried a payload")
			}
			if len(payload) > maxPktPayload {
				t.Fatalf("payload of %d bytes", len(payload))
			}
		}
		if r.n > limit {
			t.Fatalf("read %d bytes past the %d limit", r.n, limit)
		}
		if a, err := parseAdvertisement(bytes.NewReader(data), limit, nil); err == nil {
			for _, rf := range a.refs {
				if !isFullSHA(rf.oid) || rf.name == "" {
					t.Fatalf("advertised ref %+v", rf)
				}
			}
		}
		if refs, err := parseLsRefs(bytes.NewReader(data), limit, nil); err == nil {
			for _, rf := range refs {
				if !isFullSHA(rf.oid) || rf.name == "" || (rf.peeled != "" && !isFullSHA(rf.peeled)) {
					t.Fatalf("listed ref %+v", rf)
				}
			}
		}
	})
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}
