package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf16"

	"github.com/hanzoai/lsp/proxy/internal/corpus"
	"github.com/hanzoai/lsp/proxy/internal/devforge"
	"github.com/hanzoai/lsp/proxy/internal/devstack"
	"github.com/hanzoai/lsp/proxy/internal/lspdirect"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Issue 17: agents address code by name and get the code back with the
// answer, on real repositories of the corpus (google/uuid v1.6.0 from the
// Go module proxy, zustand's snapshot), the daemon jailed, each claim
// checked against the same server run directly on the same tree.

// corpusRepo is a corpus entry served by the stack's forge for one org,
// with its tree on disk for the ground truth.
type corpusRepo struct {
	*tenant
	dir string // the committed tree
}

func serveCorpusRepo(t testing.TB, org, name string) *corpusRepo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	base := t.TempDir()
	dir := filepath.Join(base, name)
	// The worktree's ../shared/corpus.
	corpusDir, err := filepath.Abs("../../../../shared/corpus")
	if err != nil {
		t.Fatal(err)
	}
	if err := corpus.Materialize(ctx, name, corpusDir, filepath.Join(base, "cache"), dir); err != nil {
		t.Fatalf("materialize %s: %v", name, err)
	}
	git := func(args ...string) {
		cmd := exec.CommandContext(ctx, "git", append([]string{"-c", "user.name=e2e", "-c", "user.email=e2e@example.com"}, args...)...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
	}
	git("init", "-q", "-b", "main")
	git("add", "-A")
	git("commit", "-q", "-m", name)
	commit, err := devforge.Import(stack.ForgeRoot, org, name, dir)
	if err != nil {
		t.Fatal(err)
	}
	tn := &tenant{org: org, repo: name, commit: commit, forgeToken: "forge-" + org}
	stack.Forge.Grant(tn.forgeToken, org+"/*")
	if tn.jwt, err = stack.Token("agent@"+org, org, nil, []string{"billing:" + org}); err != nil {
		t.Fatal(err)
	}
	if err := stack.Ledger.Credit(context.Background(), org, 10, "e2e"); err != nil {
		t.Fatal(err)
	}
	return &corpusRepo{tenant: tn, dir: dir}
}

// direct starts the entry's server itself on the same tree.
func (r *corpusRepo) direct(t *testing.T) *lspdirect.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sf, err := devstack.WriteServerFile("../../../deploy/images/servers.json.in", filepath.Join(t.TempDir(), "servers.json"),
		devstack.RenderForTests(filepath.Dir(gopls)))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := corpus.StartDirect(ctx, r.repo, sf, r.dir, t.TempDir(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return srv
}

type lspLoc struct {
	URI   string `json:"uri"`
	Range struct {
		Start lspdirect.Position `json:"start"`
		End   lspdirect.Position `json:"end"`
	} `json:"range"`
}

// directDefinition is the server's own definition at pos, retried while
// it is still loading (an empty answer).
func directDefinition(t *testing.T, srv *lspdirect.Server, path string, pos lspdirect.Position) lspLoc {
	t.Helper()
	return directDefinitions(t, srv, path, pos)[0]
}

// directDefinitions is every location of the server's definition at pos.
func directDefinitions(t *testing.T, srv *lspdirect.Server, path string, pos lspdirect.Position) []lspLoc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for {
		raw, err := srv.Definition(ctx, path, pos)
		if err != nil {
			t.Fatal(err)
		}
		var locs []lspLoc
		if json.Unmarshal(raw, &locs) != nil {
			var one lspLoc
			if json.Unmarshal(raw, &one) == nil && one.URI != "" {
				locs = []lspLoc{one}
			}
		}
		if len(locs) > 0 {
			return locs
		}
		select {
		case <-ctx.Done():
			t.Fatalf("direct definition at %s %+v: nothing", path, pos)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

type docSymbol struct {
	Name     string      `json:"name"`
	Sel      rangeJSON   `json:"selectionRange"`
	Children []docSymbol `json:"children"`
}

type rangeJSON struct {
	Start lspdirect.Position `json:"start"`
	End   lspdirect.Position `json:"end"`
}

// directSelection is the selection range start of the document symbol
// named name in path, as the server lists it.
func directSelection(t *testing.T, srv *lspdirect.Server, path, name string) lspdirect.Position {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var syms []docSymbol
	if err := srv.Call(ctx, "textDocument/documentSymbol", map[string]any{"textDocument": map[string]any{"uri": srv.URI(path)}}, &syms); err != nil {
		t.Fatal(err)
	}
	var walk func([]docSymbol) (lspdirect.Position, bool)
	walk = func(ss []docSymbol) (lspdirect.Position, bool) {
		for _, s := range ss {
			if s.Name == name {
				return s.Sel.Start, true
			}
			if p, ok := walk(s.Children); ok {
				return p, true
			}
		}
		return lspdirect.Position{}, false
	}
	p, ok := walk(syms)
	if !ok {
		t.Fatalf("the server lists no symbol %s in %s", name, path)
	}
	return p
}

// fileLines is a file's lines as the tree holds them.
func fileLines(t *testing.T, p string) []string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

func startOf(m map[string]any) (int, int) {
	r, _ := m["range"].(map[string]any)
	s, _ := r["start"].(map[string]any)
	l, _ := s["line"].(float64)
	c, _ := s["character"].(float64)
	return int(l), int(c)
}

func codeOf(t *testing.T, m map[string]any) (int, []string, bool) {
	t.Helper()
	c, ok := m["code"].(map[string]any)
	if !ok {
		t.Fatalf("no code with %v", m)
	}
	var lines []string
	for _, l := range c["lines"].([]any) {
		lines = append(lines, l.(string))
	}
	return int(c["start_line"].(float64)), lines, c["truncated"] == true
}

// checkCode: code's lines are the file's own, from its start line.
func checkCode(t *testing.T, what string, file []string, start int, lines []string) {
	t.Helper()
	if len(lines) == 0 {
		t.Fatalf("%s: no code lines", what)
	}
	for i, l := range lines {
		if start+i >= len(file) || file[start+i] != l {
			t.Fatalf("%s: code line %d = %q; the file has %q", what, start+i, l, file[min(start+i, len(file)-1)])
		}
	}
}

func firstLoc(t *testing.T, a answer) map[string]any {
	t.Helper()
	if a.status != http.StatusOK {
		t.Fatalf("%d %s", a.status, a.raw)
	}
	locs, _ := a.body["locations"].([]any)
	if len(locs) == 0 {
		t.Fatalf("no locations: %s", a.raw)
	}
	return locs[0].(map[string]any)
}

// structured is a tool call's structured content and its text.
func (c *mcpConn) callText(t *testing.T, name string, args map[string]any) (map[string]any, string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := c.session.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("call %s: %v", name, err)
	}
	raw, _ := json.Marshal(res.StructuredContent)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("call %s: structured content is not an object: %s", name, raw)
	}
	return out, res.Content[0].(*mcp.TextContent).Text, res.IsError
}

// TestAgentsGo: uuid by name, through REST, MCP and lspctl.
func TestAgentsGo(t *testing.T) {
	r := serveCorpusRepo(t, "agents-go", "uuid")
	srv := r.direct(t)
	if err := srv.Open("version4.go", "go"); err != nil {
		t.Fatal(err)
	}
	v4 := fileLines(t, filepath.Join(r.dir, "version4.go"))

	// Ground truth: NewRandom's name in its declaration, and the
	// definition gopls gives from a call of it (New's body).
	sel := directSelection(t, srv, "version4.go", "NewRandom")
	callLine := slices.IndexFunc(v4, func(l string) bool { return strings.Contains(l, "return Must(NewRandom())") })
	def := directDefinition(t, srv, "version4.go", lspdirect.Position{Line: callLine, Character: strings.Index(v4[callLine], "NewRandom")})
	if !strings.HasSuffix(def.URI, "/version4.go") || def.Range.Start != sel {
		t.Fatalf("ground truth disagrees with itself: definition %+v, symbol %+v", def, sel)
	}

	// REST: one call from the name to the code, by every spelling.
	var restAnswer answer
	for _, body := range []map[string]any{
		{"repo": r.repo, "symbol": "NewRandom", "context_lines": 8},
		{"repo": r.repo, "symbol": "uuid.NewRandom", "context_lines": 8},
		{"repo": r.repo, "symbol": "github.com/google/uuid.NewRandom", "context_lines": 8},
		{"repo": r.repo, "symbol": "NewRandom", "path": "version4.go", "context_lines": 8},
	} {
		a := r.post(t, "/locate", body)
		l := firstLoc(t, a)
		res, _ := a.body["resolved"].(map[string]any)
		if res == nil || res["path"] != "version4.go" {
			t.Fatalf("%v: resolved = %v", body, a.body["resolved"])
		}
		if line, char := startOf(res); line != sel.Line || char != sel.Character {
			t.Fatalf("%v: resolved to %d:%d; gopls's symbol is at %+v", body, line, char, sel)
		}
		if line, char := startOf(l); l["path"] != "version4.go" || line != def.Range.Start.Line || char != def.Range.Start.Character {
			t.Fatalf("%v: definition %v; gopls directly: %+v", body, l, def)
		}
		start, lines, _ := codeOf(t, l)
		checkCode(t, "NewRandom's code", v4, start, lines)
		if start != sel.Line-8 || !slices.Contains(lines, "func NewRandom() (UUID, error) {") || !slices.ContainsFunc(lines, func(s string) bool { return strings.Contains(s, "return NewRandomFromReader(rander)") }) {
			t.Fatalf("%v: code from %d = %q; want NewRandom's declaration with 8 lines around it", body, start, lines)
		}
		if ev := a.body["evidence"].(map[string]any); ev["state"] != "current" {
			t.Fatalf("%v: evidence %v", body, ev)
		}
		if restAnswer.raw == "" {
			restAnswer = a
		}
	}
	t.Logf("REST POST /v1/lsp/locate {\"repo\":\"uuid\",\"symbol\":\"NewRandom\",\"context_lines\":8}\n%s", indent(restAnswer.raw))
	// Charged once: the first call prepared, the rest were 0¢ rows.
	if ps := filter(rows(t, r.org), "prepare"); len(ps) != 1 || ps[0].AmountCents != -2 {
		t.Fatalf("prepare rows = %+v; want one of -2", ps)
	}

	// An ambiguous name lists every candidate: each String method of the
	// module (the source says which), never a guess.
	want := map[string]bool{}
	stringRE := regexp.MustCompile(`^func \([^)]*\) String\(\) string`)
	ents, _ := os.ReadDir(r.dir)
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".go") {
			continue
		}
		for i, l := range fileLines(t, filepath.Join(r.dir, e.Name())) {
			if stringRE.MatchString(l) {
				want[e.Name()+":"+itoa(i)] = true
			}
		}
	}
	amb := r.post(t, "/hover", map[string]any{"repo": r.repo, "symbol": "String"})
	if amb.status != http.StatusConflict || amb.errorCode() != "ambiguous_symbol" {
		t.Fatalf("hover String: %d %s", amb.status, amb.raw)
	}
	got := map[string]bool{}
	for _, c := range amb.body["error"].(map[string]any)["candidates"].([]any) {
		m := c.(map[string]any)
		sr := m["selection_range"].(map[string]any)["start"].(map[string]any)
		got[m["path"].(string)+":"+itoa(int(sr["line"].(float64)))] = true
		if m["kind"] != "method" || m["name"] == nil {
			t.Fatalf("candidate %v", m)
		}
	}
	if len(want) < 3 || !mapsEqual(got, want) {
		t.Fatalf("ambiguous String: candidates %v; the source's String methods %v", got, want)
	}
	t.Logf("REST POST /v1/lsp/hover {\"repo\":\"uuid\",\"symbol\":\"String\"} → %d\n%s", amb.status, indent(amb.raw))
	// A container path picks one; a name that is nothing is 404.
	if a := r.post(t, "/hover", map[string]any{"repo": r.repo, "symbol": "UUID.String"}); a.status != 200 || a.body["resolved"].(map[string]any)["path"] != "uuid.go" {
		t.Fatalf("hover UUID.String: %d %s", a.status, a.raw)
	}
	if a := r.post(t, "/hover", map[string]any{"repo": r.repo, "symbol": "NoSuchThing"}); a.status != 404 || a.errorCode() != "symbol_not_found" {
		t.Fatalf("hover NoSuchThing: %d %s", a.status, a.raw)
	}

	// A text anchor after multi-byte characters: the service counts UTF-16
	// code units, and its hover is gopls's own at that position.
	testLines := fileLines(t, filepath.Join(r.dir, "uuid_test.go"))
	tl := slices.IndexFunc(testLines, func(l string) bool { return strings.Contains(l, "expected ‘%s’ was invalid\", short)") })
	if tl < 0 {
		t.Fatal("uuid_test.go has no line with ‘…’ before short")
	}
	prefix := testLines[tl][:strings.LastIndex(testLines[tl], "short")]
	wantChar := len(utf16.Encode([]rune(prefix)))
	if wantChar == len(prefix) {
		t.Fatal("the anchor line has no multi-byte character before the text")
	}
	ta := r.post(t, "/hover", map[string]any{"repo": r.repo, "path": "uuid_test.go", "line": tl, "text": "short)"})
	if ta.status != 200 {
		t.Fatalf("hover by text: %d %s", ta.status, ta.raw)
	}
	if line, char := startOf(ta.body["resolved"].(map[string]any)); line != tl || char != wantChar {
		t.Fatalf("text anchor resolved to %d:%d; want %d:%d (UTF-16; the byte offset is %d)", line, char, tl, wantChar, len(prefix))
	}
	if err := srv.Open("uuid_test.go", "go"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	wantHover, err := srv.Hover(ctx, "uuid_test.go", lspdirect.Position{Line: tl, Character: wantChar})
	if err != nil {
		t.Fatal(err)
	}
	gotHover := ta.body["hover"].(map[string]any)["markdown"].(string)
	if wantHover == "" || !strings.Contains(gotHover, "short") || codeBlock.FindString(gotHover) != codeBlock.FindString(wantHover) {
		t.Fatalf("hover by text = %q; gopls at %d:%d = %q", gotHover, tl, wantChar, wantHover)
	}

	// An external definition comes with its code, read from GOROOT's
	// source as gopls read it: rand.Reader in uuid.go.
	ul := fileLines(t, filepath.Join(r.dir, "uuid.go"))
	rl := slices.IndexFunc(ul, func(l string) bool { return strings.Contains(l, "= rand.Reader") })
	ext := r.post(t, "/locate", map[string]any{"repo": r.repo, "path": "uuid.go", "line": rl, "text": "Reader", "context_lines": 2})
	el := firstLoc(t, ext)
	if err := srv.Open("uuid.go", "go"); err != nil {
		t.Fatal(err)
	}
	extDef := directDefinition(t, srv, "uuid.go", lspdirect.Position{Line: rl, Character: strings.Index(ul[rl], "Reader")})
	goenv, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Fatal(err)
	}
	goroot := strings.TrimSpace(string(goenv))
	extFile := strings.TrimPrefix(extDef.URI, "file://"+goroot+"/src/")
	if line, char := startOf(el); el["external"] != true || !strings.HasPrefix(el["module"].(string), "std@go") || el["path"] != extFile ||
		line != extDef.Range.Start.Line || char != extDef.Range.Start.Character {
		t.Fatalf("rand.Reader: %v; gopls directly %+v", el, extDef)
	}
	stdLines := fileLines(t, filepath.Join(goroot, "src", extFile))
	start, lines, _ := codeOf(t, el)
	checkCode(t, "rand.Reader's code", stdLines, start, lines)
	if !slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, "Reader") }) {
		t.Fatalf("rand.Reader's code %q does not declare Reader", lines)
	}
	t.Logf("REST POST /v1/lsp/locate {\"repo\":\"uuid\",\"path\":\"uuid.go\",\"line\":%d,\"text\":\"Reader\",\"context_lines\":2}\n%s", rl, indent(ext.raw))

	// read: the lines of a prepared revision's file, with its digest, and
	// of the external module; free.
	sum := sha256.Sum256([]byte(strings.Join(v4, "\n") + "\n"))
	rd := r.post(t, "/read", map[string]any{"repo": r.repo, "path": "version4.go", "start_line": 35, "end_line": 45})
	if rd.status != 200 || rd.body["evidence"].(map[string]any)["document_sha256"] != hex.EncodeToString(sum[:]) {
		t.Fatalf("read: %d %s", rd.status, rd.raw)
	}
	var rlines []string
	for _, l := range rd.body["lines"].([]any) {
		rlines = append(rlines, l.(string))
	}
	checkCode(t, "read", v4, 35, rlines)
	if len(rlines) != min(11, len(v4)-35) || rd.body["line_count"] != float64(len(v4)) {
		t.Fatalf("read 35-45: %d lines of %v", len(rlines), rd.body["line_count"])
	}
	xr := r.post(t, "/read", map[string]any{"repo": r.repo, "module": el["module"], "path": extFile, "start_line": start, "end_line": start + 3})
	if xr.status != 200 || xr.body["lines"].([]any)[0] != stdLines[start] {
		t.Fatalf("read of std: %d %s", xr.status, xr.raw)
	}
	if a := r.post(t, "/read", map[string]any{"repo": r.repo, "module": "std@go0.0.0", "path": extFile}); a.status != 404 {
		t.Fatalf("read of a module the workspace does not have: %d %s", a.status, a.raw)
	}

	// calls by name are the calls by position, each caller with its code.
	byPos := r.post(t, "/calls", map[string]any{"repo": r.repo, "path": "version4.go", "line": sel.Line, "character": sel.Character, "direction": "incoming"})
	byName := r.post(t, "/calls", map[string]any{"repo": r.repo, "symbol": "uuid.NewRandom", "direction": "incoming", "context_lines": 0})
	if byPos.status != 200 || byName.status != 200 {
		t.Fatalf("calls: %d %s / %d %s", byPos.status, byPos.raw, byName.status, byName.raw)
	}
	pc, nc := byPos.body["calls"].([]any), byName.body["calls"].([]any)
	if len(pc) < 2 || len(pc) != len(nc) {
		t.Fatalf("incoming calls by position %d, by name %d", len(pc), len(nc))
	}
	for i := range pc {
		p, n := pc[i].(map[string]any), nc[i].(map[string]any)
		if p["name"] != n["name"] || p["path"] != n["path"] || !reflectEqual(p["range"], n["range"]) {
			t.Fatalf("call %d: by position %v, by name %v", i, p, n)
		}
		start, lines, _ := codeOf(t, n)
		checkCode(t, "caller's code", fileLines(t, filepath.Join(r.dir, n["path"].(string))), start, lines)
		// From the caller's name to its last call of NewRandom.
		if l, _ := startOf(n); start != l || !strings.Contains(lines[len(lines)-1], "NewRandom()") {
			t.Fatalf("caller %v: code from %d %q", n["name"], start, lines)
		}
	}

	// symbols with include_body: NewRandom's whole declaration.
	sy := r.post(t, "/symbols", map[string]any{"repo": r.repo, "path": "version4.go", "include_body": true})
	if sy.status != 200 {
		t.Fatalf("symbols: %d %s", sy.status, sy.raw)
	}
	var body []string
	for _, x := range sy.body["symbols"].([]any) {
		m := x.(map[string]any)
		if m["name"] == "NewRandom" {
			var start int
			start, body, _ = codeOf(t, m)
			checkCode(t, "NewRandom's body", v4, start, body)
			if l, _ := startOf(m); start != l {
				t.Fatalf("body from %d; the symbol's range starts at %d", start, l)
			}
		}
	}
	if len(body) < 5 || body[len(body)-1] != "}" || !slices.Contains(body, "func NewRandom() (UUID, error) {") {
		t.Fatalf("NewRandom's body = %q", body)
	}
	t.Logf("symbols version4.go: evidence %v", sy.body["evidence"])

	// MCP, the SDK's own client: the same answer in one call, code at the
	// default context, and a text rendering a model reads.
	mc := mcpConnect(t, "", r.mcpHeaders())
	if !slices.Contains(mc.tools(t), "read") {
		t.Fatalf("tools %v lack read", mc.tools(t))
	}
	out, text, isErr := mc.callText(t, "locate", map[string]any{"repo": r.repo, "symbol": "NewRandom"})
	if isErr {
		t.Fatalf("mcp locate: %v", out)
	}
	ml := out["locations"].([]any)[0].(map[string]any)
	if line, _ := startOf(ml); ml["path"] != "version4.go" || line != def.Range.Start.Line {
		t.Fatalf("mcp locate: %v", ml)
	}
	start, lines, _ = codeOf(t, ml)
	checkCode(t, "mcp code", v4, start, lines)
	if start != sel.Line-3 || len(lines) != 7 {
		t.Fatalf("mcp code from %d, %d lines; want the default 3 around line %d", start, len(lines), sel.Line)
	}
	wantPlace := "version4.go:" + itoa(sel.Line+1) + ":" + itoa(sel.Character+1)
	if !strings.Contains(text, wantPlace) || !strings.Contains(text, "func NewRandom() (UUID, error) {") || strings.HasPrefix(text, "{") {
		t.Fatalf("mcp text content:\n%s\nwant %s with its code, not JSON", text, wantPlace)
	}
	t.Logf("MCP tools/call locate {\"repo\":\"uuid\",\"symbol\":\"NewRandom\"} text content:\n%s", text)
	_, atext, isErr := mc.callText(t, "hover", map[string]any{"repo": r.repo, "symbol": "String"})
	if !isErr || !strings.Contains(atext, "ambiguous_symbol") || strings.Count(atext, "String (method)") != len(want) {
		t.Fatalf("mcp ambiguous hover: %v\n%s", isErr, atext)
	}
	hout, htext, _ := mc.callText(t, "hover", map[string]any{"repo": r.repo, "path": "uuid_test.go", "line": tl, "text": "short)"})
	if !strings.Contains(htext, "short") || hout["hover"] == nil {
		t.Fatalf("mcp hover by text: %s", htext)
	}
	_, rtext, _ := mc.callText(t, "read", map[string]any{"repo": r.repo, "path": "version4.go", "start_line": sel.Line, "end_line": sel.Line + 2})
	if !strings.Contains(rtext, itoa(sel.Line+1)+"| func NewRandom() (UUID, error) {") {
		t.Fatalf("mcp read text:\n%s", rtext)
	}

	// lspctl.
	code, stdout, stderr := lspctl(t, r.env(), "locate", "--repo", r.repo, "--symbol", "NewRandom", "--context", "4")
	if code != 0 || !strings.Contains(stdout, wantPlace) || !strings.Contains(stdout, "| func NewRandom() (UUID, error) {") ||
		!strings.Contains(stderr, "resolved to "+wantPlace) {
		t.Fatalf("lspctl locate --symbol: %d\n%s\n%s", code, stdout, stderr)
	}
	t.Logf("$ lspctl locate --repo uuid --symbol NewRandom --context 4\n%s%s", stderr, stdout)
	code, stdout, stderr = lspctl(t, r.env(), "hover", "--repo", r.repo, "--symbol", "String")
	if code != 1 || strings.Count(stderr, "method ") != len(want) || !strings.Contains(stderr, "ambiguous_symbol") {
		t.Fatalf("lspctl hover --symbol String: %d\n%s\n%s", code, stdout, stderr)
	}
	code, stdout, _ = lspctl(t, r.env(), "hover", "--repo", r.repo, "--path", "uuid_test.go", "--line", itoa(tl), "--text", "short)")
	if code != 0 || !strings.Contains(stdout, "short") {
		t.Fatalf("lspctl hover --text: %d %s", code, stdout)
	}
	code, stdout, _ = lspctl(t, r.env(), "locate", "--repo", r.repo, "--path", "uuid.go", "--line", itoa(rl), "--text", "Reader", "--context", "1")
	if code != 0 || !strings.Contains(stdout, "(std@go") || !strings.Contains(stdout, "| "+stdLines[extDef.Range.Start.Line]) {
		t.Fatalf("lspctl external code: %d %s", code, stdout)
	}
	code, stdout, _ = lspctl(t, r.env(), "read", "--repo", r.repo, "--path", "version4.go", "--start", itoa(sel.Line), "--end", itoa(sel.Line))
	if code != 0 || strings.TrimSpace(stdout) != itoa(sel.Line+1)+"| func NewRandom() (UUID, error) {" {
		t.Fatalf("lspctl read: %d %q", code, stdout)
	}

	// All of it cost one prepare.
	if ps := filter(rows(t, r.org), "prepare"); len(ps) != 1 {
		t.Fatalf("prepare rows = %d; want 1", len(ps))
	}
}

// TestAgentsReadIsWarmOnly: a read of a cold revision neither prepares
// nor charges, unless it asks to.
func TestAgentsReadIsWarmOnly(t *testing.T) {
	tn := newTenant(t, "agents-read", 10)
	cold := tn.post(t, "/read", map[string]any{"repo": tn.repo, "path": "main.go"})
	if cold.status != http.StatusConflict || cold.errorCode() != "not_prepared" {
		t.Fatalf("cold read: %d %s", cold.status, cold.raw)
	}
	if b := balance(t, tn.org); b.BalanceCents != 10 || len(filter(rows(t, tn.org), "prepare")) != 0 {
		t.Fatalf("a cold read charged: %+v", b)
	}
	warm := tn.post(t, "/read", map[string]any{"repo": tn.repo, "path": "main.go", "prepare": true})
	if warm.status != 200 || warm.body["prepared"] != true || len(warm.body["lines"].([]any)) == 0 {
		t.Fatalf("read with prepare: %d %s", warm.status, warm.raw)
	}
	again := tn.post(t, "/read", map[string]any{"repo": tn.repo, "path": "main.go", "start_line": 2, "end_line": 2})
	if again.status != 200 || again.body["prepared"] != false || len(again.body["lines"].([]any)) != 1 {
		t.Fatalf("warm read: %d %s", again.status, again.raw)
	}
	if b := balance(t, tn.org); b.BalanceCents != 8 {
		t.Fatalf("balance %+v; want 8 (the one prepare)", b)
	}
	if a := tn.post(t, "/read", map[string]any{"repo": tn.repo, "path": "main.go", "start_line": 100000}); a.status != 422 {
		t.Fatalf("read past the end: %d %s", a.status, a.raw)
	}
}

// TestAgentsTypeScript: zustand's createStore by name, through REST, MCP
// and lspctl, and the TypeScript library's code for an external one.
func TestAgentsTypeScript(t *testing.T) {
	if typescript == "" {
		t.Skip("the reviewed TypeScript server is not installed (make deps)")
	}
	r := serveCorpusRepo(t, "agents-ts", "zustand")
	srv := r.direct(t)
	const file = "src/vanilla.ts"
	if err := srv.Open(file, "typescript"); err != nil {
		t.Fatal(err)
	}
	vl := fileLines(t, filepath.Join(r.dir, file))
	sel := directSelection(t, srv, file, "createStore")
	callLine := slices.IndexFunc(fileLines(t, filepath.Join(r.dir, "src/react.ts")), func(l string) bool { return strings.Contains(l, "= createStore(") })
	if err := srv.Open("src/react.ts", "typescript"); err != nil {
		t.Fatal(err)
	}
	rl := fileLines(t, filepath.Join(r.dir, "src/react.ts"))
	// From the call, tsserver gives every declaration of createStore's
	// type's call signatures and the const itself; by name, the const.
	defs := directDefinitions(t, srv, "src/react.ts", lspdirect.Position{Line: callLine, Character: strings.Index(rl[callLine], "createStore")})
	var def lspLoc
	want := map[string]bool{}
	for _, d := range defs {
		want[strings.TrimPrefix(d.URI, "file://"+r.dir+"/")+":"+itoa(d.Range.Start.Line)+":"+itoa(d.Range.Start.Character)] = true
		if d.Range.Start.Line == sel.Line {
			def = d
		}
	}
	if !strings.HasSuffix(def.URI, "/"+file) || def.Range.Start != sel {
		t.Fatalf("ground truth: createStore's definitions %+v, its symbol %+v", defs, sel)
	}

	var last answer
	for _, body := range []map[string]any{
		{"repo": r.repo, "symbol": "createStore", "path": file, "context_lines": 3},
		{"repo": r.repo, "path": "src/react.ts", "line": callLine, "text": "createStore", "context_lines": 3},
	} {
		a := r.post(t, "/locate", body)
		firstLoc(t, a)
		got := map[string]bool{}
		for _, x := range a.body["locations"].([]any) {
			l := x.(map[string]any)
			line, char := startOf(l)
			got[l["path"].(string)+":"+itoa(line)+":"+itoa(char)] = true
			start, lines, _ := codeOf(t, l)
			checkCode(t, "createStore's code", fileLines(t, filepath.Join(r.dir, l["path"].(string))), start, lines)
			if line == sel.Line && !slices.ContainsFunc(lines, func(s string) bool { return strings.Contains(s, "export const createStore") }) {
				t.Fatalf("%v: code %q", body, lines)
			}
		}
		if _, byName := body["symbol"]; (byName && !got[file+":"+itoa(sel.Line)+":"+itoa(sel.Character)]) || (!byName && !mapsEqual(got, want)) {
			t.Fatalf("%v: locations %v; tsserver directly %v (by name: its symbol %+v)", body, got, want, sel)
		}
		last = a
	}
	if line, char := startOf(last.body["resolved"].(map[string]any)); line != callLine || char != strings.Index(rl[callLine], "createStore") {
		t.Fatalf("text anchor resolved to %d:%d", line, char)
	}
	ws := r.post(t, "/locate", map[string]any{"repo": r.repo, "symbol": "createStore", "context_lines": 3})
	t.Logf("REST POST /v1/lsp/locate {\"repo\":\"zustand\",\"symbol\":\"createStore\"} → %d\n%s", ws.status, indent(ws.raw))
	switch ws.status {
	case 200:
		if line, _ := startOf(firstLoc(t, ws)); line != def.Range.Start.Line {
			t.Fatalf("workspace createStore: %s", ws.raw)
		}
	case 409:
		// Tests declare createStore helpers of their own: the candidates
		// are every declaration of the name the sources hold.
		declRE := regexp.MustCompile(`\b(const|let|var|function)\s+createStore\b`)
		want := map[string]bool{}
		_ = filepath.WalkDir(r.dir, func(p string, d os.DirEntry, err error) error {
			if err != nil || (d.IsDir() && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), "."))) {
				return filepath.SkipDir
			}
			if ext := filepath.Ext(p); ext != ".ts" && ext != ".tsx" {
				return nil
			}
			rel, _ := filepath.Rel(r.dir, p)
			for i, l := range fileLines(t, p) {
				if declRE.MatchString(l) {
					want[rel+":"+itoa(i)] = true
				}
			}
			return nil
		})
		got := map[string]bool{}
		for _, c := range ws.body["error"].(map[string]any)["candidates"].([]any) {
			m := c.(map[string]any)
			line, _ := startOf(map[string]any{"range": m["selection_range"]})
			got[m["path"].(string)+":"+itoa(line)] = true
		}
		if len(want) < 2 || !mapsEqual(got, want) || !got[file+":"+itoa(sel.Line)] {
			t.Fatalf("ambiguous createStore: candidates %v; the sources declare %v", got, want)
		}
	default:
		t.Fatalf("workspace createStore: %d %s", ws.status, ws.raw)
	}
	t.Logf("REST POST /v1/lsp/locate {\"repo\":\"zustand\",\"symbol\":\"createStore\",\"path\":%q,\"context_lines\":3}\n%s", file, indent(last.raw))

	// The TypeScript library's own code for Set.
	setLine := slices.IndexFunc(vl, func(l string) bool { return strings.Contains(l, "new Set()") })
	ext := r.post(t, "/locate", map[string]any{"repo": r.repo, "path": file, "line": setLine, "text": "Set()", "context_lines": 1})
	el := firstLoc(t, ext)
	if el["external"] != true || !strings.HasPrefix(el["module"].(string), "typescript@") {
		t.Fatalf("Set's definition: %s", ext.raw)
	}
	extDef := directDefinition(t, srv, file, lspdirect.Position{Line: setLine, Character: strings.Index(vl[setLine], "Set()")})
	tsLib := extDef.URI[len("file://"):]
	if !strings.HasSuffix(tsLib, "/"+el["path"].(string)) {
		t.Fatalf("Set: service %v; tsserver directly %s", el, extDef.URI)
	}
	start, lines, _ := codeOf(t, el)
	checkCode(t, "Set's code", fileLines(t, tsLib), start, lines)
	xr := r.post(t, "/read", map[string]any{"repo": r.repo, "module": el["module"], "path": el["path"], "start_line": start, "end_line": start + 2})
	if xr.status != 200 || xr.body["lines"].([]any)[0] != lines[0] {
		t.Fatalf("read of the TypeScript library: %d %s", xr.status, xr.raw)
	}

	mc := mcpConnect(t, "", r.mcpHeaders())
	out, text, isErr := mc.callText(t, "locate", map[string]any{"repo": r.repo, "symbol": "createStore", "path": file})
	if isErr || !strings.Contains(text, file+":"+itoa(def.Range.Start.Line+1)) || !strings.Contains(text, "export const createStore") {
		t.Fatalf("mcp locate createStore: %v\n%s", out, text)
	}
	t.Logf("MCP tools/call locate {\"repo\":\"zustand\",\"symbol\":\"createStore\",\"path\":%q} text content:\n%s", file, text)
	_, stext, _ := mc.callText(t, "symbols", map[string]any{"repo": r.repo, "path": file, "include_body": true})
	if !strings.Contains(stext, "createStoreImpl") || !strings.Contains(stext, "listeners.forEach") {
		t.Fatalf("mcp symbols include_body:\n%s", stext)
	}

	code, stdout, stderr := lspctl(t, r.env(), "locate", "--repo", r.repo, "--symbol", "createStore", "--path", file, "--context", "3")
	if code != 0 || !strings.Contains(stdout, file+":"+itoa(def.Range.Start.Line+1)) || !strings.Contains(stdout, "| export const createStore") {
		t.Fatalf("lspctl locate: %d\n%s\n%s", code, stdout, stderr)
	}
	t.Logf("$ lspctl locate --repo zustand --symbol createStore --path %s --context 3\n%s%s", file, stderr, stdout)
}

func indent(raw string) string {
	var v any
	if json.Unmarshal([]byte(raw), &v) != nil {
		return raw
	}
	b, _ := json.MarshalIndent(v, "", "  ")
	return string(b)
}

func itoa(n int) string { return strconv.Itoa(n) }

func mapsEqual(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

// BenchmarkAgentsLocate: what addressing by name and code cost on a warm
// revision, against the same definition asked by position (uuid's
// NewRandom, through the whole path: JWT, forge check, gRPC, ledger row).
func BenchmarkAgentsLocate(b *testing.B) {
	r := serveCorpusRepo(b, "agents-bench", "uuid")
	pos := map[string]any{"repo": r.repo, "path": "version4.go", "line": 38, "character": 5}
	if a := r.post(b, "/locate", pos); a.status != 200 {
		b.Fatalf("prepare: %d %s", a.status, a.raw)
	}
	for _, c := range []struct {
		name string
		body map[string]any
	}{
		{"position", pos},
		{"text", map[string]any{"repo": r.repo, "path": "version4.go", "line": 38, "text": "NewRandom"}},
		{"symbol_in_path", map[string]any{"repo": r.repo, "path": "version4.go", "symbol": "NewRandom"}},
		{"symbol_in_workspace", map[string]any{"repo": r.repo, "symbol": "uuid.NewRandom"}},
		{"position_context_8", with(pos, "context_lines", 8)},
		{"symbol_in_workspace_context_8", map[string]any{"repo": r.repo, "symbol": "uuid.NewRandom", "context_lines": 8}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if a := r.post(b, "/locate", c.body); a.status != 200 {
					b.Fatalf("%d %s", a.status, a.raw)
				}
			}
		})
	}
}

func reflectEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}
