package query

import (
	"strings"
	"testing"

	"github.com/hanzoai/lsp/daemon/internal/uri"
)

// clangd's hover on assert: the macro's expansion, formatted by
// clang-format, with __FILE__ the file's absolute path split at the column
// limit. The tenant gets the repo-relative path, as for a path on one line.
func TestJoinSplitPaths(t *testing.T) {
	root := "/var/lib/lsp-daemon/trees/6441b8096e335f271061875bd498d49dd46e2dc507f1a73af92d7b14aa769cdb/jq/7b9fedb507d3ea9c46fbe467d1acdc29c21e5f3e/tree"
	scrub := uri.Policy{Root: root}.Scrubber(uri.Host{Dir: "/var/lib/lsp-daemon", Name: "$LSP_DAEMON_ROOT"})
	md := "```cpp\n__assert_fail(\n    \"block_is_const(b)\",\n    \"/var/lib/lsp-daemon/trees/\"\n" +
		"    \"6441b8096e335f271061875bd498d49dd46e2dc507f1a73af92d7b14aa769cdb/jq/\"\n" +
		"    \"7b9fedb507d3ea9c46fbe467d1acdc29c21e5f3e/tree/src/compile.c\",\n    187, __extension__ __PRETTY_FUNCTION__);\n" +
		"puts(\"a long message \"\n     \"in two pieces\");\n```"
	got := scrub.Replace(joinSplitPaths(md, scrub))
	want := "```cpp\n__assert_fail(\n    \"block_is_const(b)\",\n    \"src/compile.c\",\n    187, __extension__ __PRETTY_FUNCTION__);\n" +
		"puts(\"a long message \"\n     \"in two pieces\");\n```"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	if strings.Contains(scrub.Replace(md), "src/compile.c\"") && !strings.Contains(scrub.Replace(md), "$LSP_DAEMON_ROOT") {
		t.Fatal("the test's input is not split")
	}
}
