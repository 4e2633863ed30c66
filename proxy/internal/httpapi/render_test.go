package httpapi

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
	"github.com/hanzoai/lsp/proxy/internal/apierr"
	"github.com/hanzoai/lsp/proxy/internal/operation"
	"google.golang.org/protobuf/proto"
)

// renderGrowth bounds how much larger an answer's JSON (REST, and the MCP
// structured content) is than the daemon's reply on the wire: an empty
// symbol is 2 bytes of protobuf and about 110 of JSON, every field's name
// and null spelled out. renderOverhead is the answer head and cursor.
const (
	renderGrowth   = 64
	renderOverhead = 4 << 10
)

// FuzzRenderAnswer: any reply the daemon could send (the fuzz bytes as a
// QueryResponse) renders on every route, as REST JSON, as MCP text and, as
// an ambiguous_symbol's candidates, as the error envelope, without a
// panic; the JSON stays within renderGrowth of the reply and the text
// within maxTextRendering.
func FuzzRenderAnswer(f *testing.F) {
	rg := &daemonv1.Range{Start: &daemonv1.Position{Line: 3, Character: 4}, End: &daemonv1.Position{Line: 3, Character: 9}}
	code := &daemonv1.Code{StartLine: 2, Lines: []string{"func F() {", "\treturn <nil>", "}"}, Truncated: true}
	sym := &daemonv1.Symbol{Name: "F", Kind: "function", Path: "a.go", Range: rg, SelectionRange: rg, Container: "pkg", Code: code, Language: "go"}
	loc := &daemonv1.Location{Path: "a.go", Range: rg, Code: code}
	next := uint32(5)
	for _, ans := range []*daemonv1.QueryResponse{
		{Result: &daemonv1.QueryResponse_Hover{Hover: &daemonv1.Hover{Present: true, Markdown: "```go\nfunc F()\n```", Range: rg}}},
		// Over the text's bound in two-byte characters, at both parities:
		// one of them is cut in the middle of a character.
		{Result: &daemonv1.QueryResponse_Hover{Hover: &daemonv1.Hover{Present: true, Markdown: strings.Repeat("é", 40000)}}},
		{Result: &daemonv1.QueryResponse_Hover{Hover: &daemonv1.Hover{Present: true, Markdown: "x" + strings.Repeat("é", 40000)}}},
		{Result: &daemonv1.QueryResponse_Locations{Locations: &daemonv1.Locations{Items: []*daemonv1.Location{loc, {Path: "x.go", External: true, Module: "example.com/x@v1"}}}}, NextOffset: &next, PrepareId: "p-1"},
		{Result: &daemonv1.QueryResponse_Symbols{Symbols: &daemonv1.Symbols{Items: []*daemonv1.Symbol{sym, {}}}}, Resolved: loc},
		{Result: &daemonv1.QueryResponse_Diagnostics{Diagnostics: &daemonv1.Diagnostics{Items: []*daemonv1.Diagnostic{{Range: rg, Severity: "error", Message: "undefined: x"}}}}},
		{Result: &daemonv1.QueryResponse_Completions{Completions: &daemonv1.Completions{Items: []*daemonv1.Completion{{Label: "Println", Kind: "function"}}, Incomplete: true}}},
		{Result: &daemonv1.QueryResponse_Signatures{Signatures: &daemonv1.Signatures{Items: []*daemonv1.Signature{{Label: "F(a int)", Parameters: []*daemonv1.Parameter{{Label: "a int"}}}}, ActiveParameter: &next}}},
		{Result: &daemonv1.QueryResponse_Calls{Calls: &daemonv1.Calls{Items: []*daemonv1.Call{{Name: "G", Path: "b.go", Range: rg, FromRanges: []*daemonv1.Range{rg, {}}, Code: code}}}}},
		{Result: &daemonv1.QueryResponse_Types{Types: &daemonv1.Types{Items: []*daemonv1.TypeItem{{Name: "T", Kind: "struct", Path: "t.go", Range: rg}}}}},
		{Result: &daemonv1.QueryResponse_Read{Read: &daemonv1.Read{Path: "a.go", Module: "m", Code: code, LineCount: 40}}},
		// More candidates than the daemon ever sends.
		{Status: daemonv1.Status_STATUS_AMBIGUOUS_SYMBOL, Candidates: slices.Repeat([]*daemonv1.Symbol{sym}, 25), TotalCandidates: 30},
		{Status: daemonv1.Status_STATUS_AMBIGUOUS_SYMBOL, Candidates: []*daemonv1.Symbol{sym, sym}, TotalCandidates: 30,
			Evidence: &daemonv1.Evidence{State: daemonv1.EvidenceState_EVIDENCE_STATE_PARTIAL, Warnings: []string{"w"}, Server: &daemonv1.ServerInfo{Id: "gopls", Generation: 2}}},
	} {
		raw, err := proto.Marshal(ans)
		if err != nil {
			f.Fatal(err)
		}
		for i := range opRoutes {
			f.Add(raw, uint8(i))
		}
	}
	s := New(Deps{CursorSecret: []byte("fuzz-secret")})
	f.Fuzz(func(t *testing.T, raw []byte, which uint8) {
		ans := &daemonv1.QueryResponse{}
		if proto.Unmarshal(raw, ans) != nil {
			return
		}
		rt := opRoutes[int(which)%len(opRoutes)]
		res := &operation.Result{Repo: "r", Commit: cursorCommit, Answer: ans}
		// As runOperation renders an answer.
		out := answerHead(res)
		rt.render(out, ans)
		renderResolved(out, ans)
		if rt.list {
			out["next_cursor"] = nil
			if n := ans.NextOffset; n != nil {
				out["next_cursor"] = s.sealCursor(cursorTenant, ptr(cursorRequest()), cursorCommit, ans.GetPrepareId(), *n, ans.GetEvidence().GetServer().GetGeneration())
			}
		}
		reply := proto.Size(ans)
		js, err := json.Marshal(out)
		if err != nil {
			t.Fatalf("%s: the answer does not encode: %v", rt.name, err)
		}
		if len(js) > renderGrowth*reply+renderOverhead {
			t.Fatalf("%s: a reply of %d bytes renders %d bytes of JSON", rt.name, reply, len(js))
		}
		if text := renderText(rt.name, out); text == "" || len(text) > maxTextRendering+100 || !utf8.ValidString(text) {
			t.Fatalf("%s: text of %d bytes (valid UTF-8: %v)", rt.name, len(text), utf8.ValidString(text))
		}

		status, env, _ := s.envelope(&failure{err: apierr.New(http.StatusConflict, apierr.AmbiguousSymbol, "ambiguous"), res: res}, "req-1")
		js, err = json.Marshal(env)
		if err != nil || status != http.StatusConflict || len(env.Error.Candidates) != min(len(ans.GetCandidates()), maxCandidates) {
			t.Fatalf("error envelope %d with %d of %d candidates: %v", status, len(env.Error.Candidates), len(ans.GetCandidates()), err)
		}
		if text := renderErrorText(env); len(js) > renderGrowth*reply+renderOverhead || len(text) > renderGrowth*reply+renderOverhead {
			t.Fatalf("a reply of %d bytes renders an error of %d bytes of JSON, %d of text", reply, len(js), len(text))
		}
	})
}
