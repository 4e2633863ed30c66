package corpus

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/devstack"
)

// TestTruthOpensAsTheServiceDoes: tsserver's references search the
// projects of the open files, and loose JavaScript files share one
// inferred project (ES modules here, as axios's bin/*.js), so the answer
// depends on what is open. The service opens its anchor document at the
// prepare and a file at its first query; the ground truth must too. With
// every chosen file open up front, references asked in a.js found b.js's
// use before the service could have opened b.js (axios's bin/*.js); without
// the anchor it missed what the service has open from the start (immer's
// __tests__/base.js).
func TestTruthOpensAsTheServiceDoes(t *testing.T) {
	dir := findFile(os.Getenv("LSP_TEST_TYPESCRIPT"), "../../../.bin/ts")
	if dir == "" {
		t.Skip("no TypeScript server: set LSP_TEST_TYPESCRIPT")
	}
	if _, err := devstack.FindTypeScript(dir, ""); err != nil {
		t.Skip(err)
	}
	sf := testServerFile(t, filepath.Dir(dir), t.TempDir())
	if _, ok := sf.Server("typescript"); !ok {
		t.Skip("no TypeScript server in", filepath.Dir(dir))
	}
	checkout := t.TempDir()
	files := map[string]string{
		"helper.js": "export function colorize(s) { return s; }\n",
		"a.js":      "import { colorize } from './helper.js';\ncolorize('a');\n",
		"b.js":      "import { colorize } from './helper.js';\ncolorize('b');\n",
		// The daemon's anchor (first in path order), open from the prepare on.
		"0.js": "import { colorize } from './helper.js';\ncolorize('0');\n",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(checkout, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	fix := []Fixed{{Path: "a.js", Needle: "colorize('a')", Ident: "colorize"}, {Path: "b.js", Needle: "colorize('b')", Ident: "colorize"}}
	tr, err := groundTruth(ctx, Repo{Name: "loose-js", Language: "typescript"}, servers{file: sf}, checkout, t.TempDir(), t.TempDir(), len(fix), fix, false, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	refs := tr.pos["references"]
	if len(refs) != 2 {
		t.Fatalf("references %+v, want two answers", refs)
	}
	in := func(a Answer, file string) bool {
		for _, l := range a.Lines {
			if strings.HasPrefix(l, file+" ") {
				return true
			}
		}
		return false
	}
	// Asked in a.js, with the anchor and a.js open (and helper.js they import).
	if !in(refs[0], "a.js") || !in(refs[0], "helper.js") || !in(refs[0], "0.js") || in(refs[0], "b.js") {
		t.Errorf("references from a.js: %q, want 0.js, a.js and helper.js only", refs[0].Lines)
	}
	if !in(refs[1], "b.js") || !in(refs[1], "helper.js") {
		t.Errorf("references from b.js: %q, want b.js and helper.js", refs[1].Lines)
	}
}

// published fakes a server's publications: when, and how many diagnostics.
type published map[string]publication

type publication struct {
	at time.Time
	n  int
}

func (p published) Diagnostics(f string) (json.RawMessage, time.Time) {
	ds := make([]struct{}, p[f].n)
	raw, _ := json.Marshal(ds)
	return raw, p[f].at
}

// TestSettled: the ground truth's diagnostics are taken once every chosen
// file has been published (with the count the server says its pass
// ends with, when it says) and the server has been quiet on all of them,
// not as soon as the first file is quiet.
func TestSettled(t *testing.T) {
	now := time.Now()
	ago := func(d time.Duration, n int) publication { return publication{now.Add(-d), n} }
	files := []string{"a.go", "b.go"}
	for _, tc := range []struct {
		name string
		p    published
		want map[string]int
		ok   bool
	}{
		{"first quiet, second never published", published{"a.go": ago(time.Minute, 0)}, nil, false},
		{"first quiet, second just published", published{"a.go": ago(time.Minute, 0), "b.go": ago(0, 0)}, nil, false},
		{"both quiet", published{"a.go": ago(time.Minute, 0), "b.go": ago(3*time.Second, 1)}, nil, true},
		{"both quiet with their counts", published{"a.go": ago(time.Minute, 0), "b.go": ago(3*time.Second, 1)}, map[string]int{"a.go": 0, "b.go": 1}, true},
		{"both quiet, second's pass not over", published{"a.go": ago(time.Minute, 0), "b.go": ago(3*time.Second, 1)}, map[string]int{"a.go": 0, "b.go": 2}, false},
	} {
		if got := settled(tc.p, files, tc.want, 2*time.Second); got != tc.ok {
			t.Errorf("%s: settled = %v, want %v", tc.name, got, tc.ok)
		}
	}
}

// A shell script's positions are its parameter expansions (in double
// quotes too) and calls of its own functions, never comments, single
// quotes or the definition itself.
func TestShellCandidates(t *testing.T) {
	src := "#!/bin/sh\n# uses $HIDDEN in a comment\ngreet() {\n\techo \"hi ${name}\" '$quoted'\n}\nname=x\ngreet \"$name\" # $also\n"
	var got []string
	for _, p := range candidates("s.sh", []byte(src)) {
		got = append(got, fmt.Sprintf("%d:%d:%s", p.Line, p.Character, p.Ident))
	}
	want := []string{"3:13:name", "6:1:greet", "6:9:name"} // one character inside each name
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("candidates %v, want %v", got, want)
	}
}
