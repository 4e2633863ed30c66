package query

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hanzoai/lsp/daemon/internal/pool"
	"github.com/hanzoai/lsp/daemon/internal/runtime"
	"github.com/hanzoai/lsp/daemon/internal/servertest"
	"github.com/hanzoai/lsp/daemon/internal/uri"
	"github.com/hanzoai/lsp/daemon/internal/workspace"
	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// goplsWorkspace is a small Go module of two packages, prepared as the
// daemon prepares one (Warm, then the first-load wait), served by the real
// gopls unjailed.
func goplsWorkspace(t *testing.T) (*Runner, *pool.Workspace, *pool.Spec) {
	t.Helper()
	gopls := servertest.Gopls(t)
	store, err := workspace.NewStore(t.TempDir(), workspace.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	p := pool.New(store, []pool.Spec{{Spec: runtime.Spec{
		ID: "gopls", Language: "go", Extensions: []string{".go"}, Executable: gopls, Args: []string{"serve"},
		RequestTimeout: 2 * time.Minute,
	}, Extensions: []string{".go"}}}, runtime.Unjailed(log), log)
	t.Cleanup(func() { p.Close(context.Background()) })
	files := []struct{ path, text string }{
		{"go.mod", "module example.com/m\n\ngo 1.22\n"},
		{"greet/greet.go", "package greet\n\n// Greet greets.\nfunc Greet(name string) string { return \"hello \" + name }\n"},
		{"main.go", "package main\n\nimport \"example.com/m/greet\"\n\nfunc main() { println(greet.Greet(\"x\")) }\n"},
		{"other.go", "package main\n\nimport \"example.com/m/greet\"\n\nvar _ = greet.Greet(\"y\")\n"},
	}
	var entries []*daemonv1.FileEntry
	var body bytes.Buffer
	for _, f := range files {
		sum := sha256.Sum256([]byte(f.text))
		entries = append(entries, &daemonv1.FileEntry{Path: f.path, Size: uint64(len(f.text)), Sha256: hex.EncodeToString(sum[:])})
		body.WriteString(f.text)
	}
	sum := sha256.Sum256([]byte(t.Name()))
	k := workspace.Key{TenantKey: strings.Repeat("cd", 32), Repo: "restart", Commit: hex.EncodeToString(sum[:20])}
	if _, err := store.Write(k, "00000000-0000-4000-8000-000000000002", entries, &body, nil); err != nil {
		t.Fatal(err)
	}
	w, release, ok := p.Acquire(k)
	if !ok {
		t.Fatal("the workspace was not acquired")
	}
	t.Cleanup(release)
	r := &Runner{Pool: p, Externals: func(*pool.Workspace) []uri.External { return nil }, MaxDocument: 1 << 20}
	ctx := ctxFor(t, 2*time.Minute)
	if _, warnings, _ := w.Warm(ctx, entries, ""); len(warnings) > 0 {
		t.Fatalf("warm: %q", warnings)
	}
	r.AwaitLoad(ctx, w, "", true)
	return r, w, &p.Specs()[0]
}

// TestRestartedServerAnswersLoadedOrSaysSo: a gopls killed after the
// prepare comes back as a new generation on the next question. Asked at
// once, before it has loaded the module, it may answer a definition,
// references or a hover across packages with nothing; the answer must
// then be the loaded server's answer, or say it is not current — never
// an empty answer passed off as current. (gopls v0.21.1 holds most of
// these requests until its load on a module this small, so the race is
// rarely hit here: TestRestartedServerLoadsBeforeItAnswers makes it
// certain.)
func TestRestartedServerAnswersLoadedOrSaysSo(t *testing.T) {
	r, w, spec := goplsWorkspace(t)
	questions := []*daemonv1.QueryRequest{
		{Op: daemonv1.Op_OP_DEFINITION, Path: "main.go", Text: "Greet", Position: &daemonv1.Position{Line: 4}},
		{Op: daemonv1.Op_OP_REFERENCES, Path: "greet/greet.go", Text: "Greet", Position: &daemonv1.Position{Line: 3}},
		{Op: daemonv1.Op_OP_HOVER, Path: "other.go", Text: "Greet", Position: &daemonv1.Position{Line: 4}},
		{Op: daemonv1.Op_OP_WORKSPACE_SYMBOLS, Query: "Greet"},
		{Op: daemonv1.Op_OP_INCOMING_CALLS, Path: "greet/greet.go", Text: "Greet", Position: &daemonv1.Position{Line: 3}},
	}
	// What the loaded server answers, without evidence and without the
	// resolved position (which the text address fixes).
	answer := func(resp *daemonv1.QueryResponse) string {
		switch x := resp.GetResult().(type) {
		case *daemonv1.QueryResponse_Locations:
			return protojson.Format(x.Locations)
		case *daemonv1.QueryResponse_Hover:
			return protojson.Format(x.Hover)
		case *daemonv1.QueryResponse_Symbols:
			return protojson.Format(x.Symbols)
		case *daemonv1.QueryResponse_Calls:
			return protojson.Format(x.Calls)
		}
		return ""
	}
	want := make([]string, len(questions))
	for i, q := range questions {
		resp := r.Run(ctxFor(t, time.Minute), w, q)
		if resp.GetStatus() != daemonv1.Status_STATUS_OK || resp.GetEvidence().GetState() != daemonv1.EvidenceState_EVIDENCE_STATE_CURRENT || emptyAnswer(resp) {
			t.Fatalf("%v before the restart: %v", q.GetOp(), resp)
		}
		want[i] = answer(resp)
	}
	srv, err := w.Server(ctxFor(t, time.Minute), spec)
	if err != nil {
		t.Fatal(err)
	}
	// The tree was adopted (fakeWorkspace writes it to the store): its
	// generations start past an earlier daemon's; each restart adds one.
	first := srv.Info().Generation
	for round := 2; round <= 4; round++ {
		kill(t, srv)
		// Every question at once, the moment the server is gone: the
		// first restarts it, and all go to the new instance.
		resps := make([]*daemonv1.QueryResponse, len(questions))
		var wg sync.WaitGroup
		for i, q := range questions {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resps[i] = r.Run(ctxFor(t, time.Minute), w, q)
			}()
		}
		wg.Wait()
		for i, resp := range resps {
			ev := resp.GetEvidence()
			switch {
			case resp.GetStatus() != daemonv1.Status_STATUS_OK:
				t.Fatalf("round %d, %v: %v", round, questions[i].GetOp(), resp)
			case ev.GetServer().GetGeneration() != first+uint64(round-1):
				t.Fatalf("round %d, %v: answered by generation %d", round, questions[i].GetOp(), ev.GetServer().GetGeneration())
			case ev.GetState() == daemonv1.EvidenceState_EVIDENCE_STATE_CURRENT && answer(resp) != want[i]:
				t.Fatalf("round %d, %v: a current answer that is not the loaded server's: %s (evidence %v); want %s",
					round, questions[i].GetOp(), answer(resp), ev, want[i])
			case ev.GetState() != daemonv1.EvidenceState_EVIDENCE_STATE_CURRENT:
				t.Logf("round %d, %v: %v %q", round, questions[i].GetOp(), ev.GetState(), ev.GetWarnings())
			}
		}
	}
}

// kill kills srv's process group and waits until the server knows it is
// down: the next question restarts it.
func kill(t *testing.T, srv *runtime.Server) {
	t.Helper()
	pid := srv.Pid()
	if pid == 0 {
		t.Fatal("the server is not running")
	}
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for srv.Alive() {
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRestartedServerLoadsBeforeItAnswers is the restart made
// deterministic: a fake under gopls's signs whose restarts take loadTime
// to load, reporting the load as gopls does, and answer definitions and
// workspace symbols with nothing until then. A question right after the
// restart waits for the load when its time allows (the loaded answer,
// current); when it does not, its empty answer says the server had not
// loaded (unavailable), never current. Once loaded, answers are current.
func TestRestartedServerLoadsBeforeItAnswers(t *testing.T) {
	const loadTime = 3 * time.Second
	s := fakeSpec(t, "go", "-names=Foo", "-load="+loadTime.String(), "-starts="+filepath.Join(t.TempDir(), "starts"))
	// Only the load's end ends a wait for it, not a quiet before the
	// fake's report of it begins.
	s.LoadQuiet = time.Hour
	r, w := fakeWorkspace(t, s)
	r.AwaitLoad(ctxFor(t, time.Minute), w, "", true)
	spec := &r.Pool.Specs()[0]
	srv, err := w.Server(ctxFor(t, time.Minute), spec)
	if err != nil {
		t.Fatal(err)
	}
	// The prepare's wait recorded the instance it saw load: a question
	// to it waits for nothing, even with no time at all.
	c, _, err := srv.Client(ctxFor(t, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if !r.awaitLoad(done, w, spec, c, uri.Policy{Root: w.Dir}) {
		t.Fatal("a question to the instance the prepare saw load waits for its load again")
	}
	definition := &daemonv1.QueryRequest{Op: daemonv1.Op_OP_DEFINITION, Path: "go/x.go", Position: &daemonv1.Position{}}
	symbols := &daemonv1.QueryRequest{Op: daemonv1.Op_OP_WORKSPACE_SYMBOLS, Query: "foo"}
	// ask asks both questions at once, each within d.
	ask := func(d time.Duration) [2]*daemonv1.QueryResponse {
		var out [2]*daemonv1.QueryResponse
		var wg sync.WaitGroup
		for i, q := range []*daemonv1.QueryRequest{definition, symbols} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), d)
				defer cancel()
				out[i] = r.Run(ctx, w, q)
			}()
		}
		wg.Wait()
		return out
	}
	loadedAnswer := func(when string, gen uint64, resps [2]*daemonv1.QueryResponse) {
		t.Helper()
		for _, resp := range resps {
			ev := resp.GetEvidence()
			if resp.GetStatus() != daemonv1.Status_STATUS_OK || ev.GetState() != daemonv1.EvidenceState_EVIDENCE_STATE_CURRENT ||
				ev.GetServer().GetGeneration() != gen || resp.GetTotal() != 1 {
				t.Fatalf("%s: want the loaded server's answer (one item, current, generation %d): %v", when, gen, resp)
			}
		}
	}
	first := srv.Info().Generation // past an earlier daemon's: the tree was adopted
	loadedAnswer("after the prepare", first, ask(time.Minute))

	kill(t, srv)
	// Too little time to wait for the load: the question is asked anyway,
	// and its empty answer must say why.
	for _, resp := range ask(loadTime / 2) {
		ev := resp.GetEvidence()
		switch {
		case resp.GetStatus() != daemonv1.Status_STATUS_OK:
			t.Fatalf("a question with too little time for the load: %v", resp)
		case ev.GetState() == daemonv1.EvidenceState_EVIDENCE_STATE_CURRENT:
			t.Fatalf("a restarted server that had not loaded answered %d item(s) as current: %v", resp.GetTotal(), ev)
		case resp.GetTotal() != 0 || ev.GetServer().GetGeneration() != first+1 || ev.GetState() != daemonv1.EvidenceState_EVIDENCE_STATE_UNAVAILABLE ||
			!slices.ContainsFunc(ev.GetWarnings(), func(m string) bool { return strings.Contains(m, "had not finished loading the project") }):
			t.Fatalf("the empty answer of a server still loading: %v", resp)
		}
	}
	// The same instance, asked with time to spare, is waited for.
	loadedAnswer("the same instance, with time for its load", first+1, ask(time.Minute))

	kill(t, srv)
	loadedAnswer("right after another restart", first+2, ask(time.Minute))
}

// TestQuietServerSettlesUnderQuestions: a server whose only load sign is
// a quiet is never seen quiet by questions whose share of time is shorter
// than that quiet. Once questions have waited for its instance as long as
// a prepare would (settleAfter) while it reports no work in flight, it
// counts as loaded: answers stop saying it had not loaded, and it is
// recorded, so questions stop waiting.
func TestQuietServerSettlesUnderQuestions(t *testing.T) {
	defer func(d time.Duration) { settleAfter = d }(settleAfter)
	settleAfter = time.Second
	s := fakeSpec(t, "python", "-names=Foo")
	s.LoadQuiet = time.Hour // never quiet within a question's share
	r, w := fakeWorkspace(t, s)
	q := &daemonv1.QueryRequest{Op: daemonv1.Op_OP_WORKSPACE_SYMBOLS, Query: "foo"}
	ask := func() (*daemonv1.QueryResponse, bool) {
		t.Helper()
		resp := r.Run(ctxFor(t, 400*time.Millisecond), w, q)
		if resp.GetStatus() != daemonv1.Status_STATUS_OK || resp.GetTotal() != 1 {
			t.Fatalf("workspace symbols: %v", resp)
		}
		return resp, slices.ContainsFunc(resp.GetEvidence().GetWarnings(), func(m string) bool { return strings.Contains(m, "had not finished loading the project") })
	}
	if resp, warned := ask(); !warned {
		t.Fatalf("the first question, with less time than the quiet: %v", resp.GetEvidence())
	}
	time.Sleep(settleAfter)
	if resp, warned := ask(); warned {
		t.Fatalf("a question after the instance settled still says it had not loaded: %v", resp.GetEvidence())
	}
	// Recorded: the next question reads the record and waits for nothing.
	if loadRecordFor(w, &r.Pool.Specs()[0]).client.Load() == nil {
		t.Fatal("the settled instance was not recorded as loaded")
	}
}
