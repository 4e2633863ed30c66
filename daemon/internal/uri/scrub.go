package uri

import (
	"cmp"
	"net/url"
	"slices"
	"strings"
)

// Host is a host directory that may appear in a server's free text (a
// message, a log line, markdown) and the placeholder it becomes.
type Host struct {
	Dir  string
	Name string // "$HOME", "$LSP_DAEMON_ROOT"
}

// Scrubber replaces host paths in free text with the terms an answer may
// use: the tree (as a path or a file URI) becomes repo-relative ("." for
// the root itself), an external root its module ("std@go1.26.8/fmt/…";
// a module cache's paths already start with module@version), and every
// host directory its placeholder. The most specific directory wins, so a
// module cache under a home is named by module, not "$HOME/…".
func (p Policy) Scrubber(hosts ...Host) *strings.Replacer {
	type pair struct{ old, new string }
	var pairs []pair
	add := func(dir, name string) {
		if dir == "" || dir == "/" {
			return
		}
		dir = strings.TrimRight(dir, "/")
		slash := name
		switch {
		case name == "":
			slash = ""
		case !strings.HasSuffix(name, "/"):
			slash = name + "/"
		}
		root := name
		if root == "" {
			root = "."
		}
		for _, d := range []string{dir, (&url.URL{Scheme: "file", Path: dir}).String()} {
			pairs = append(pairs, pair{d + "/", slash}, pair{d, root})
		}
	}
	add(p.Root, "")
	for _, x := range p.Externals {
		add(x.Dir, x.Module)
	}
	for _, h := range hosts {
		add(h.Dir, h.Name)
	}
	// strings.Replacer tries the old strings in argument order at each
	// position: longest first makes the most specific directory win.
	slices.SortStableFunc(pairs, func(a, b pair) int { return cmp.Compare(len(b.old), len(a.old)) })
	args := make([]string, 0, 2*len(pairs))
	for _, pr := range pairs {
		args = append(args, pr.old, pr.new)
	}
	return strings.NewReplacer(args...)
}
