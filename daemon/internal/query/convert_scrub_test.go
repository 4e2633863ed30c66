package query

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hanzoai/lsp/daemon/internal/lsp"
	"github.com/hanzoai/lsp/daemon/internal/pool"
	"github.com/hanzoai/lsp/daemon/internal/uri"
	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
	"google.golang.org/protobuf/proto"
)

// TestConvertScrubsEveryText: every string an answer carries from a server
// — names, details, labels, codes, documentation, insert texts — has its
// host paths rewritten, not only hovers and diagnostic messages (CONTRACT
// §4: no host path in an answer). tsserver's type printer writes a tree's
// absolute path into a signature's label as it does into a hover.
func TestConvertScrubsEveryText(t *testing.T) {
	const daemonRoot = "/var/lib/lsp-daemon"
	root := daemonRoot + "/trees/6441b8096e33/app/7b9fedb507d3/tree"
	c := &converter{pol: uri.Policy{Root: root}, scrub: uri.Policy{Root: root}.Scrubber(uri.Host{Dir: daemonRoot, Name: "$LSP_DAEMON_ROOT"})}
	typ := `import("` + root + `/node_modules/.pnpm/x@1/node_modules/x/index").T`
	home := daemonRoot + "/homes/6441b8096e33/app/.cache"
	doc := lsp.DocumentURI("file://" + root + "/a.ts")
	var out []any
	out = append(out, c.signatures(&lsp.SignatureHelp{Signatures: []lsp.SignatureInformation{{
		Label: "f(a: " + typ + "): void", Documentation: "see " + home,
		Parameters: []lsp.ParameterInformation{{Label: "a: " + typ, Documentation: "from " + home}},
	}}}))
	out = append(out, c.completions([]lsp.CompletionItem{{Label: typ, Detail: typ, InsertText: home}}))
	out = append(out, c.symbols([]lsp.Symbol{{Name: typ, Detail: typ, Container: home, URI: doc}}, &pool.Spec{}))
	out = append(out, c.diagnostics([]lsp.Diagnostic{{Code: home, Source: home, Message: typ}}))
	out = append(out, c.calls([]lsp.CallHierarchyCall{{Item: lsp.CallHierarchyItem{Name: typ, URI: doc}}}))
	out = append(out, c.types([]lsp.TypeHierarchyItem{{Name: typ, URI: doc}}))
	for _, o := range out {
		if s := fmt.Sprint(o); strings.Contains(s, daemonRoot) {
			t.Errorf("a host path in an answer: %s", s)
		}
	}
}

// TestConvertDropsUnsendablePaths: a location whose decoded path is not
// UTF-8 or holds a control character is dropped and counted (the answer
// is partial), and what is kept marshals: one such location from a server
// used to fail the whole answer in proto.Marshal.
func TestConvertDropsUnsendablePaths(t *testing.T) {
	root := "/var/lib/lsp-daemon/trees/t/app/c/tree"
	c := &converter{pol: uri.Policy{Root: root}}
	in := []lsp.Location{{URI: lsp.DocumentURI("file://" + root + "/a.go")}}
	for _, bad := range []string{"/a%ff.go", "/a%1b%5b2J.go", "/a%0a.go"} {
		in = append(in, lsp.Location{URI: lsp.DocumentURI("file://" + root + bad)})
	}
	out := c.locations(in)
	if len(out) != 1 || out[0].GetPath() != "a.go" || c.dropped != 3 {
		t.Fatalf("locations = %v, dropped %d; want a.go alone, 3 dropped", out, c.dropped)
	}
	if _, err := proto.Marshal(&daemonv1.Locations{Items: out}); err != nil {
		t.Fatalf("the kept locations do not marshal: %v", err)
	}
}
