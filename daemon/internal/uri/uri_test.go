package uri

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
)

var pol = Policy{
	Root: "/srv/ws/t/demo/abc",
	Externals: []External{
		{Dir: "/usr/local/go/src", Module: "std@go1.26.8"},
		{Dir: "/srv/homes/t/demo/go/pkg/mod"},
	},
}

func TestMap(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Location
	}{
		{"file:///srv/ws/t/demo/abc/pkg/a.go", Location{Path: "pkg/a.go"}},
		{"file:///srv/ws/t/demo/abc/sp%20ace.go", Location{Path: "sp ace.go"}},
		{"file:///usr/local/go/src/fmt/print.go", Location{Path: "fmt/print.go", External: true, Module: "std@go1.26.8"}},
		{"file:///srv/homes/t/demo/go/pkg/mod/github.com/!burnt!sushi/toml@v1.5.0/decode.go",
			Location{Path: "decode.go", External: true, Module: "github.com/BurntSushi/toml@v1.5.0"}},
	} {
		got, err := pol.Map(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("Map(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

// TestMapNodeModules: the npm packages installed in the tree's
// node_modules are external roots, nested before their parents; what is
// in node_modules but in no package, and the rest of the tree, is the
// repository's.
func TestMapNodeModules(t *testing.T) {
	p := Policy{Root: "/w/tree", Externals: []External{
		{Dir: "/w/tree/node_modules/a/node_modules/b", Module: "b@2.0.0"},
		{Dir: "/w/tree/node_modules/a", Module: "a@1.0.0"},
		{Dir: "/usr/local/go/src", Module: "std@go1.26.8"},
	}}
	for in, want := range map[string]Location{
		"file:///w/tree/node_modules/a/index.d.ts":                {Path: "index.d.ts", External: true, Module: "a@1.0.0"},
		"file:///w/tree/node_modules/a/node_modules/b/lib/b.d.ts": {Path: "lib/b.d.ts", External: true, Module: "b@2.0.0"},
		"file:///w/tree/node_modules/.bin/tool":                   {Path: "node_modules/.bin/tool"},
		"file:///w/tree/src/node_modules/a/index.d.ts":            {Path: "src/node_modules/a/index.d.ts"},
		"file:///w/tree/src/main.ts":                              {Path: "src/main.ts"},
	} {
		got, err := p.Map(in)
		if err != nil || got != want {
			t.Errorf("Map(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
}

func TestMapRefuses(t *testing.T) {
	for _, in := range []string{
		"file:///etc/passwd",
		"file:///srv/ws/t/demo/abc/../other/x.go",
		"file:///srv/ws/t/demo/abcd/x.go",
		"file:///SRV/ws/t/demo/abc/x.go",
		"file:///srv/ws/t/demo/abc%2fx.go",
		"file:///srv/ws/t/demo/abc/a%00b.go",
		"file://evil.example/srv/ws/t/demo/abc/x.go",
		"https://srv/ws/t/demo/abc/x.go",
		"file:///srv/ws/t/demo/abc/x.go?q=1",
		"file:///srv/ws/t/demo/abc/x.go#frag",
		"file:///srv/ws/t/demo/abc/%zz.go",
		"file:///srv/ws/t/demo/abc",
		"file:///srv/homes/t/demo/go/pkg/mod/cache/download/x@v1/y",
		"file:///srv/homes/t/demo/go/pkg/mod/github.com/Bad@v1/x.go",
		"relative/x.go",
		// Decoded, not UTF-8 or a control character: an answer's proto
		// string cannot carry the first, a client must not get the second.
		"file:///srv/ws/t/demo/abc/a%ff.go",
		"file:///srv/ws/t/demo/abc/a%1b%5b2J.go",
		"file:///srv/ws/t/demo/abc/a%0ab.go",
		"file:///srv/ws/t/demo/abc/a%5cb.go",
		"file:///srv/homes/t/demo/go/pkg/mod/example.com/m%ff@v1.0.0/x.go",
		"file:///srv/homes/t/demo/go/pkg/mod/example.com/m@v1.0.0/a%7f.go",
	} {
		if got, err := pol.Map(in); !errors.Is(err, ErrRefused) {
			t.Errorf("Map(%q) = %+v, %v; want ErrRefused", in, got, err)
		}
	}
}

func FuzzMap(f *testing.F) {
	f.Add("file:///srv/ws/t/demo/abc/pkg/a.go")
	f.Add("file:///srv/ws/t/demo/abc/../../etc/passwd")
	f.Fuzz(func(t *testing.T, in string) {
		loc, err := pol.Map(in)
		if err != nil {
			return
		}
		if strings.HasPrefix(loc.Path, "/") || strings.Contains("/"+loc.Path+"/", "/../") || strings.Contains(loc.Path, "/srv/") {
			t.Fatalf("Map(%q) leaked or escaped: %+v", in, loc)
		}
		if daemonv1.CheckTreePath(loc.Path) != nil || loc.Module != "" && daemonv1.CheckTreePath(loc.Module) != nil {
			t.Fatalf("Map(%q) = %+v, which no answer may carry", in, loc)
		}
	})
}

func TestScrubber(t *testing.T) {
	p := Policy{Root: "/srv/lsp/trees/t/r/c/tree", Externals: []External{
		{Dir: "/srv/lsp/homes/t/r/go/pkg/mod"},
		{Dir: "/usr/local/go/src", Module: "std@go1.26.8"},
	}}
	s := p.Scrubber(Host{Dir: "/srv/lsp/homes/t/r", Name: "$HOME"}, Host{Dir: "/srv/lsp", Name: "$LSP_DAEMON_ROOT"})
	for _, tc := range []struct{ in, want string }{
		{"stat /srv/lsp/trees/t/r/c/tree/pkg/a.go: no such file", "stat pkg/a.go: no such file"},
		{"directory=/srv/lsp/trees/t/r/c/tree", "directory=."},
		{"file:///srv/lsp/trees/t/r/c/tree/main.go:3:1: x", "main.go:3:1: x"},
		{"open /srv/lsp/homes/t/r/go/pkg/mod/example.com/dep@v1.0.0/x.go", "open example.com/dep@v1.0.0/x.go"},
		{"GOCACHE=/srv/lsp/homes/t/r/.cache/go-build", "GOCACHE=$HOME/.cache/go-build"},
		{"/usr/local/go/src/fmt/print.go:10", "std@go1.26.8/fmt/print.go:10"},
		{"/srv/lsp/trees/t/r/c/node_modules/zod", "$LSP_DAEMON_ROOT/trees/t/r/c/node_modules/zod"},
		{"no path here: data: unknown", "no path here: data: unknown"},
	} {
		if got := s.Replace(tc.in); got != tc.want {
			t.Errorf("Scrub(%q) = %q; want %q", tc.in, got, tc.want)
		}
	}
}

// FuzzPlainFilePath: what PlainFilePath accepts, url.Parse reads as the
// same local file path with nothing else, and a file URI of that path is
// spelled exactly so — the fast path is a subset of the slow one.
func FuzzPlainFilePath(f *testing.F) {
	for _, s := range []string{"file:///srv/ws/a.go", "file:///srv/mod/example.com/dep@v1.0.0/x_test.go", "file:///a+b/~c", "file://host/a",
		"file:///a%2fb", "file:///a?b", "file:///a#b", "file:////a", "FILE:///a", "file:///a b", "file:///a!b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		p, ok := PlainFilePath(raw)
		if !ok {
			return
		}
		u, err := url.Parse(raw)
		if err != nil || u.Scheme != "file" || u.Host != "" || u.User != nil || u.Opaque != "" || u.RawQuery != "" || u.Fragment != "" ||
			u.RawPath != "" || u.Path != p {
			t.Fatalf("PlainFilePath(%q) = %q, but url.Parse says %#v, %v", raw, p, u, err)
		}
		if back := (&url.URL{Scheme: "file", Path: p}).String(); back != raw {
			t.Fatalf("PlainFilePath(%q) = %q, but its file URI is %q", raw, p, back)
		}
	})
}
