package forge

import (
	"strings"
	"testing"
)

// treeIndex builds a treeReader index from "path" → "file" | "exec" |
// "sub" | "->target".
func treeIndex(spec map[string]string) (*treeReader, map[string]string) {
	tr := &treeReader{entries: make(map[string]*entry), dirs: make(map[string]bool)}
	targets := make(map[string]string)
	for p, v := range spec {
		e := &entry{path: p, size: 1, oid: p}
		switch {
		case v == "exec":
			e.exec = true
		case v == "sub":
			e.kind = kindSubmodule
		case strings.HasPrefix(v, "->"):
			e.kind = kindSymlink
			targets[p] = strings.TrimPrefix(v, "->")
		}
		tr.entries[p] = e
		parts := strings.Split(p, "/")
		for i := 1; i < len(parts); i++ {
			tr.dirs[strings.Join(parts[:i], "/")] = true
		}
	}
	return tr, targets
}

func TestResolveSymlink(t *testing.T) {
	tr, targets := treeIndex(map[string]string{
		"a/file":      "file",
		"a/b/deep":    "file",
		"a/up":        "->../top",
		"top":         "file",
		"a/dot":       "->./b/../file",
		"a/slash":     "->b/",
		"a/trailing":  "->file/",
		"a/dirlink":   "->b",
		"a/viadir":    "->dirlink/deep",
		"a/back-in":   "->../../x/a/file",
		"a/abs":       "->/a/file",
		"a/self":      "->self",
		"a/sub":       "->../s",
		"s":           "sub",
		"a/empty":     "->",
		"a/nul":       "->fi\x00le",
		"a/linkchain": "->up",
		"a/abschain":  "->abs",
	})
	for link, want := range map[string]string{
		"a/up":        "top",
		"a/dot":       "a/file",
		"a/viadir":    "a/b/deep",
		"a/linkchain": "top",
		"a/slash":     "symlink to directory",
		"a/dirlink":   "symlink to directory",
		"a/trailing":  "dangling symlink",
		"a/back-in":   "symlink out of tree",
		"a/abs":       "symlink out of tree",
		"a/abschain":  "symlink out of tree",
		"a/self":      "symlink loop",
		"a/sub":       "symlink to submodule",
		"a/empty":     "dangling symlink",
		"a/nul":       "dangling symlink",
	} {
		e, why := tr.resolve(link, targets[link], targets)
		got := why
		if e != nil {
			got = e.path
		}
		if got != want {
			t.Errorf("resolve(%s) = %q, want %q", link, got, want)
		}
	}
}

func FuzzResolveSymlink(f *testing.F) {
	f.Add("a/l", "../b/../a/f")
	f.Add("l", "l")
	f.Add("a/b/l", "../../../../x")
	f.Fuzz(func(t *testing.T, link, target string) {
		if !validPath(link) {
			return
		}
		tr, targets := treeIndex(map[string]string{"a/f": "file", "a/b/g": "file", "x": "->a", "y": "->y"})
		tr.entries[link] = &entry{path: link, kind: kindSymlink}
		targets[link] = target
		e, why := tr.resolve(link, target, targets)
		if (e == nil) == (why == "") {
			t.Fatalf("resolve(%q, %q) = %v, %q", link, target, e, why)
		}
		if e != nil && e.kind != kindFile {
			t.Fatalf("resolved to a non-file %+v", e)
		}
	})
}
