package rpc

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf16"

	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
)

// goModule is testdata/gomod, prepared once and shared by every query
// test: one gopls for the whole suite.
var goModule struct {
	once    sync.Once
	key     *daemonv1.WorkspaceKey
	id      string
	prepare *daemonv1.PrepareResponse
	files   map[string][]byte
	err     string
}

const goplsVersion = "v0.21.1"

func goWorkspace(t *testing.T) (*daemonv1.WorkspaceKey, string) {
	t.Helper()
	if fx.gopls == "" {
		t.Skip("no gopls: set LSP_TEST_GOPLS or install it at /root/go/bin/gopls")
	}
	goModule.once.Do(func() {
		files := readTree(t, "testdata/gomod")
		goModule.files = map[string][]byte{}
		for _, f := range files {
			goModule.files[f.path] = f.data
		}
		// Keyed by a fixed name, not the first test's.
		tenant := sha256.Sum256([]byte("tenant/go-module"))
		goModule.key = &daemonv1.WorkspaceKey{TenantKey: hex.EncodeToString(tenant[:]), Repo: "hello", Commit: strings.Repeat("ab", 20)}
		goModule.id = newID()
		entries, data := treeOf(files...)
		r := push(ctxT(t), append([]*daemonv1.PrepareRequest{headerMsg(goModule.key, goModule.id, entries)}, dataMsgs(data, 64)...)...)
		switch {
		case r.err != nil:
			goModule.err = r.err.Error()
		case !r.resp.GetPrepared() || r.resp.GetPrepareId() != goModule.id:
			goModule.err = "the Go module was not prepared by its push: " + r.resp.String()
		}
		goModule.prepare = r.resp
	})
	if goModule.err != "" {
		t.Fatal(goModule.err)
	}
	return goModule.key, goModule.id
}

// position finds the UTF-16 position of the first occurrence of needle in
// a testdata file (plus skip code units).
func position(t *testing.T, path, needle string, skip uint32) *daemonv1.Position {
	t.Helper()
	for i, line := range strings.Split(string(goModule.files[path]), "\n") {
		if j := strings.Index(line, needle); j >= 0 {
			return &daemonv1.Position{Line: uint32(i), Character: utf16Len(line[:j]) + skip}
		}
	}
	t.Fatalf("%q not in %s", needle, path)
	return nil
}

func utf16Len(s string) uint32 { return uint32(len(utf16.Encode([]rune(s)))) }

// checkEvidence: an OK answer says what produced it.
func checkEvidence(t *testing.T, resp *daemonv1.QueryResponse, path string) {
	t.Helper()
	e := resp.GetEvidence()
	if e == nil {
		t.Fatalf("no evidence: %v", resp)
	}
	if s := e.GetServer(); s.GetId() != "gopls" || s.GetVersion() != goplsVersion || s.GetGeneration() < 1 {
		t.Fatalf("evidence server %v, want gopls %s generation ≥ 1", s, goplsVersion)
	}
	sum := sha256.Sum256(goModule.files[path])
	if e.GetDocumentSha256() != hex.EncodeToString(sum[:]) {
		t.Fatalf("evidence document_sha256 %q is not the sha256 of %s", e.GetDocumentSha256(), path)
	}
	if e.GetState() != daemonv1.EvidenceState_EVIDENCE_STATE_CURRENT || e.GetCapabilityFingerprint() == "" || e.GetQueryFingerprint() == "" {
		t.Fatalf("evidence %v", e)
	}
}

// TestPrepareGo: preparing a Go module starts gopls and reports what it
// negotiated: the tools it offers, and no declaration.
func TestPrepareGo(t *testing.T) {
	goWorkspace(t)
	langs := goModule.prepare.GetLanguages()
	if len(langs) != 1 || len(goModule.prepare.GetWarnings()) != 0 {
		t.Fatalf("prepare answer %v", goModule.prepare)
	}
	l := langs[0]
	if l.GetLanguage() != "go" || l.GetServer().GetId() != "gopls" || l.GetServer().GetVersion() != goplsVersion || l.GetServer().GetGeneration() != 1 {
		t.Fatalf("language %v", l)
	}
	for _, tool := range []string{"hover", "definition", "references", "document_symbols", "workspace_symbols", "diagnostics", "completion", "signature_help", "call_hierarchy", "type_hierarchy"} {
		if !slices.Contains(l.GetTools(), tool) {
			t.Errorf("gopls does not offer %s: %v", tool, l.GetTools())
		}
	}
	if slices.Contains(l.GetTools(), "declaration") {
		t.Errorf("gopls offers declaration: %v", l.GetTools())
	}
	caps, err := fx.client.Capabilities(ctxT(t), &daemonv1.CapabilitiesRequest{Workspace: goModule.key})
	if err != nil || !caps.GetWarm() || caps.GetPrepareId() != goModule.id {
		t.Fatalf("capabilities: %v, %v", caps, err)
	}
	if len(caps.GetLanguages()) != 1 || caps.GetLanguages()[0].GetCapabilityFingerprint() != l.GetCapabilityFingerprint() {
		t.Fatalf("capabilities languages %v, prepare said %v", caps.GetLanguages(), l)
	}
}

// TestQueryGo asks the real gopls through the daemon.
func TestQueryGo(t *testing.T) {
	k, id := goWorkspace(t)
	mainGo := goModule.files["main.go"]
	greetingLine := position(t, "main.go", "const Greeting", 0)
	line := strings.Split(string(mainGo), "\n")[greetingLine.Line]
	if utf16Len(line) == uint32(len(line)) {
		t.Fatal("the multi-byte line is not multi-byte")
	}
	commentLine := position(t, "main.go", "// main prints", 0)
	comment := strings.Split(string(mainGo), "\n")[commentLine.Line]
	lines := uint32(bytes.Count(mainGo, []byte("\n")))

	type check func(t *testing.T, resp *daemonv1.QueryResponse)
	cases := []struct {
		name   string
		req    *daemonv1.QueryRequest
		status daemonv1.Status
		check  check
	}{
		{"hover", &daemonv1.QueryRequest{Op: daemonv1.Op_OP_HOVER, Path: "main.go", Position: position(t, "main.go", "Greet(Greeting)", 1)},
			daemonv1.Status_STATUS_OK, func(t *testing.T, resp *daemonv1.QueryResponse) {
				h := resp.GetHover()
				if !h.GetPresent() || !strings.Contains(h.GetMarkdown(), "func Greet(name string) string") {
					t.Fatalf("hover %v", h)
				}
				if !strings.Contains(h.GetMarkdown(), "Greet returns the greeting for name") {
					t.Fatalf("hover without the doc comment: %q", h.GetMarkdown())
				}
				if r := h.GetRange(); r == nil || r.GetStart().GetLine() != position(t, "main.go", "Greet(Greeting)", 0).GetLine() {
					t.Fatalf("hover range %v", r)
				}
				checkEvidence(t, resp, "main.go")
			}},
		{"definition across files", &daemonv1.QueryRequest{Op: daemonv1.Op_OP_DEFINITION, Path: "main.go", Position: position(t, "main.go", "Greet(Greeting)", 2), Limit: 10},
			daemonv1.Status_STATUS_OK, func(t *testing.T, resp *daemonv1.QueryResponse) {
				locs := resp.GetLocations().GetItems()
				want := position(t, "greet.go", "Greet(name", 0)
				if len(locs) != 1 || locs[0].GetPath() != "greet.go" || locs[0].GetExternal() || locs[0].GetRange().GetStart().GetLine() != want.GetLine() || locs[0].GetRange().GetStart().GetCharacter() != want.GetCharacter() {
					t.Fatalf("definition %v, want greet.go at %v", locs, want)
				}
				checkEvidence(t, resp, "main.go")
				// The daemon's split of its time: the server's wire time
				// lies inside the handler's.
				if tm := resp.GetTiming(); tm.GetServerNanos() == 0 || tm.GetHandlerNanos() < tm.GetServerNanos() {
					t.Fatalf("timing %v: want 0 < server ≤ handler", tm)
				}
			}},
		{"definition in the standard library", &daemonv1.QueryRequest{Op: daemonv1.Op_OP_DEFINITION, Path: "main.go", Position: position(t, "main.go", "Println", 1), Limit: 10},
			daemonv1.Status_STATUS_OK, func(t *testing.T, resp *daemonv1.QueryResponse) {
				locs := resp.GetLocations().GetItems()
				if len(locs) != 1 || !locs[0].GetExternal() || !strings.HasPrefix(locs[0].GetModule(), "std@go") || locs[0].GetPath() != "fmt/print.go" {
					t.Fatalf("definition of fmt.Println %v", locs)
				}
				checkEvidence(t, resp, "main.go")
			}},
		{"character at the end of a multi-byte line", &daemonv1.QueryRequest{Op: daemonv1.Op_OP_HOVER, Path: "main.go", Position: &daemonv1.Position{Line: commentLine.Line, Character: utf16Len(comment)}},
			daemonv1.Status_STATUS_OK, func(t *testing.T, resp *daemonv1.QueryResponse) { checkEvidence(t, resp, "main.go") }},
		{"character past the end of a multi-byte comment", &daemonv1.QueryRequest{Op: daemonv1.Op_OP_HOVER, Path: "main.go", Position: &daemonv1.Position{Line: commentLine.Line, Character: utf16Len(comment) + 1}},
			daemonv1.Status_STATUS_POSITION_OUT_OF_RANGE, nil},
		{"the empty last line", &daemonv1.QueryRequest{Op: daemonv1.Op_OP_HOVER, Path: "main.go", Position: &daemonv1.Position{Line: lines, Character: 0}},
			daemonv1.Status_STATUS_OK, nil},
		{"missing file", &daemonv1.QueryRequest{Op: daemonv1.Op_OP_HOVER, Path: "nope.go", Position: &daemonv1.Position{}},
			daemonv1.Status_STATUS_NOT_FOUND, nil},
		{"a directory", &daemonv1.QueryRequest{Op: daemonv1.Op_OP_HOVER, Path: "main.go/x.go", Position: &daemonv1.Position{}},
			daemonv1.Status_STATUS_NOT_FOUND, nil},
		{"the prepare id file", &daemonv1.QueryRequest{Op: daemonv1.Op_OP_HOVER, Path: ".lsp-prepare-id", Position: &daemonv1.Position{}},
			daemonv1.Status_STATUS_NOT_FOUND, nil},
		{"line past the end", &daemonv1.QueryRequest{Op: daemonv1.Op_OP_HOVER, Path: "main.go", Position: &daemonv1.Position{Line: lines + 1}},
			daemonv1.Status_STATUS_POSITION_OUT_OF_RANGE, nil},
		{"far line", &daemonv1.QueryRequest{Op: daemonv1.Op_OP_DEFINITION, Path: "main.go", Position: &daemonv1.Position{Line: 1 << 31}},
			daemonv1.Status_STATUS_POSITION_OUT_OF_RANGE, nil},
		{"character past the UTF-16 length", &daemonv1.QueryRequest{Op: daemonv1.Op_OP_HOVER, Path: "main.go", Position: &daemonv1.Position{Line: greetingLine.Line, Character: utf16Len(line) + 1}},
			daemonv1.Status_STATUS_POSITION_OUT_OF_RANGE, nil},
		{"character within the byte length only", &daemonv1.QueryRequest{Op: daemonv1.Op_OP_COMPLETION, Path: "main.go", Position: &daemonv1.Position{Line: greetingLine.Line, Character: uint32(len(line))}},
			daemonv1.Status_STATUS_POSITION_OUT_OF_RANGE, nil},
		{"character past the empty last line", &daemonv1.QueryRequest{Op: daemonv1.Op_OP_HOVER, Path: "main.go", Position: &daemonv1.Position{Line: lines, Character: 1}},
			daemonv1.Status_STATUS_POSITION_OUT_OF_RANGE, nil},
		{"text file", &daemonv1.QueryRequest{Op: daemonv1.Op_OP_HOVER, Path: "notes.txt", Position: &daemonv1.Position{}},
			daemonv1.Status_STATUS_UNSUPPORTED_LANGUAGE, nil},
		{"go.mod", &daemonv1.QueryRequest{Op: daemonv1.Op_OP_DOCUMENT_SYMBOLS, Path: "go.mod"},
			daemonv1.Status_STATUS_UNSUPPORTED_LANGUAGE, nil},
		{"declaration on gopls", &daemonv1.QueryRequest{Op: daemonv1.Op_OP_DECLARATION, Path: "main.go", Position: position(t, "main.go", "Greet(Greeting)", 1)},
			daemonv1.Status_STATUS_CAPABILITY_UNAVAILABLE, nil},
		{"no operation", &daemonv1.QueryRequest{Path: "main.go", Position: &daemonv1.Position{}},
			daemonv1.Status_STATUS_INVALID_REQUEST, nil},
		{"path with ..", &daemonv1.QueryRequest{Op: daemonv1.Op_OP_HOVER, Path: "x/../main.go", Position: &daemonv1.Position{}},
			daemonv1.Status_STATUS_INVALID_REQUEST, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.req.Workspace = k
			resp, err := fx.client.Query(ctxT(t), c.req)
			if err != nil {
				t.Fatalf("error instead of a status: %v", err)
			}
			if resp.GetStatus() != c.status {
				t.Fatalf("status %v (%q), want %v", resp.GetStatus(), resp.GetMessage(), c.status)
			}
			// The path check comes before the workspace is looked up, so
			// only that refusal does not name the workspace's prepare.
			if c.name != "path with .." && resp.GetPrepareId() != id {
				t.Fatalf("prepare_id %q, want %q", resp.GetPrepareId(), id)
			}
			if c.status != daemonv1.Status_STATUS_OK && resp.GetMessage() == "" {
				t.Fatal("a refusal without a message")
			}
			if c.check != nil {
				c.check(t, resp)
			}
		})
	}
}

// TestCapabilitiesColdIsStatic: a cold workspace's answer comes from the
// configuration alone. Another tenant's warm Go workspace on the same
// shard shows neither its server generation nor its tools nor that Go was
// used at all: the answer equals the one for a shard where nothing ran.
func TestCapabilitiesColdIsStatic(t *testing.T) {
	goWorkspace(t) // another tenant's workspace: gopls runs, generation 1
	caps, err := fx.client.Capabilities(ctxT(t), &daemonv1.CapabilitiesRequest{Workspace: keyFor(t, "cold")})
	if err != nil || caps.GetWarm() {
		t.Fatalf("capabilities: %v, %v", caps, err)
	}
	var ids []string
	for _, l := range caps.GetLanguages() {
		ids = append(ids, l.GetServer().GetId())
		if l.GetServer().GetGeneration() != 0 || l.GetServer().GetVersion() != "" || len(l.GetTools()) != 0 || l.GetCapabilityFingerprint() != "" {
			t.Errorf("cold answer carries what a running server negotiated: %v", l)
		}
	}
	var want []string
	for _, s := range fx.pool.Specs() {
		want = append(want, s.ID)
	}
	if !slices.Equal(ids, want) {
		t.Fatalf("cold answer lists %v, the configuration %v", ids, want)
	}
}
