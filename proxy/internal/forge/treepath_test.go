package forge

import (
	"context"
	"reflect"
	"strings"
	"testing"

	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
	"github.com/hanzoai/lsp/proxy/internal/devforge"
)

// TestTreeDropsPathsTheDaemonRefuses: a file named `a\b.go`, one whose
// path is over 1,024 bytes and one with a segment over 255 bytes are in
// git's tree but break the daemon's tree path rule; before, they were
// sent, the daemon refused the whole tree, and the repository could never
// be prepared. Both forge kinds now drop them, each with a warning, and
// every path they keep passes the rule.
func TestTreeDropsPathsTheDaemonRefuses(t *testing.T) {
	must := musts(t)
	fx := newFixture(t, nil)
	seg := strings.Repeat("s", 250)
	long := strings.Join([]string{seg, seg, seg, seg, "f.go"}, "/") // 1,009 bytes
	tooLong := strings.Join([]string{seg, seg, seg, seg, strings.Repeat("g", 30) + ".go"}, "/")
	files := map[string]string{
		"ok.go":                                "package ok\n",
		`a\b.go`:                               "package a\n",
		long:                                   "package long\n",
		tooLong:                                "package toolong\n",
		"x/" + strings.Repeat("n", 255):        "255 is fine\n",
		"y/" + strings.Repeat("n", 255) + "/z": "a long directory name is fine too\n",
	}
	commit := must(devforge.CreateRepo(fx.root, "acme", "paths", files, "paths"))
	git, gitea := fx.newForge(""), fx.newGitea()
	var trees []*Tree
	for _, f := range []Forge{git, gitea} {
		tree, err := f.Fetch(context.Background(), bearer(readerToken), "acme", "paths", commit, Limits{})
		if err != nil {
			t.Fatal(err)
		}
		trees = append(trees, tree)
		got := map[string]bool{}
		for _, fl := range tree.Files {
			if err := daemonv1.CheckTreePath(fl.Path); err != nil {
				t.Errorf("%q sent, but the daemon refuses it: %v", fl.Path, err)
			}
			got[fl.Path] = true
		}
		for _, p := range []string{"ok.go", long, "x/" + strings.Repeat("n", 255), "y/" + strings.Repeat("n", 255) + "/z"} {
			if !got[p] {
				t.Errorf("%.40q… not sent", p)
			}
		}
		for _, w := range []string{`dropped invalid path: "a\\b.go"`, "dropped invalid path: (over 1024 bytes)"} {
			if !contains(tree.Warnings, w) {
				t.Errorf("warnings %q lack %q", tree.Warnings, w)
			}
		}
		if len(tree.Files)+len(tree.Warnings) != len(files) {
			t.Errorf("%d files + %d warnings, want the %d entries", len(tree.Files), len(tree.Warnings), len(files))
		}
	}
	if !reflect.DeepEqual(trees[0], trees[1]) {
		t.Errorf("the kinds differ:\n git   %s\n gitea %s", describe(trees[0]), describe(trees[1]))
	}
}
