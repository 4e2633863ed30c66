package query

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hanzoai/lsp/daemon/internal/lsp"
	"github.com/hanzoai/lsp/daemon/internal/pool"
	"github.com/hanzoai/lsp/daemon/internal/uri"
	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
)

func TestFindAnchor(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files []string
		exts  []string
		want  string
	}{
		{"first in path order", []string{"src/b.ts", "src/a.ts", "z.ts"}, []string{".ts"}, "src/a.ts"},
		{"node_modules and hidden dirs skipped", []string{"node_modules/typescript/lib/x.ts", ".git/y.ts", "app/main.tsx"}, []string{".ts", ".tsx"}, "app/main.tsx"},
		{"other languages ignored", []string{"go.mod", "main.go", "web/index.js"}, []string{".js"}, "web/index.js"},
		{"none", []string{"README.md", "node_modules/x.ts"}, []string{".ts"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for _, f := range tc.files {
				p := filepath.Join(root, filepath.FromSlash(f))
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if got := findAnchor(root, tc.exts); got != tc.want {
				t.Fatalf("findAnchor = %q; want %q", got, tc.want)
			}
		})
	}
}

// TestAwaitLoadNamesTheUndiagnosed: a server that reports its diagnoses
// (a fake speaking as gopls, under gopls's signs) and has not ended its
// initial diagnosis when the first-load wait ends is named, for the
// prepare to say so; one whose report ended is not. The quiet is short
// where the diagnosis never ends and unbounded where it does, so only the
// report's end can end that wait: a loaded machine that delays the fake's
// report past a short quiet does not decide the outcome.
func TestAwaitLoadNamesTheUndiagnosed(t *testing.T) {
	for _, report := range []string{"runs", "ends"} {
		s := fakeSpec(t, "go", "-diagnosis="+report)
		s.LoadQuiet = 100 * time.Millisecond
		if report == "ends" {
			s.LoadQuiet = time.Hour
		}
		r, w := fakeWorkspace(t, s)
		notAwaited, undiagnosed := r.AwaitLoad(ctxFor(t, time.Minute), w, "", false)
		if len(notAwaited) != 0 {
			t.Errorf("%s: not awaited %q", report, notAwaited)
		}
		if want := report == "runs"; slices.Equal(undiagnosed, []string{"go-server"}) != want || len(undiagnosed) > 1 {
			t.Errorf("diagnosis %s: undiagnosed %q", report, undiagnosed)
		}
	}
}

// TestAwaitLoadBeforeAQuestion: when a question follows the prepare, a
// server that reports its diagnoses (a fake speaking as gopls) is waited
// for until its load has ended, not for the diagnosis of the project
// after it, however long the quiet it was given; the question's answer
// says the project was not yet checked, and stays current. Once a
// diagnosis of the whole project has run to its end, answers say nothing.
func TestAwaitLoadBeforeAQuestion(t *testing.T) {
	for _, diagnosis := range []string{"loads", "ends"} {
		s := fakeSpec(t, "go", "-names=Foo", "-diagnosis="+diagnosis)
		s.LoadQuiet = time.Hour
		r, w := fakeWorkspace(t, s)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, undiagnosed := r.AwaitLoad(ctx, w, "", true)
		waited := ctx.Err()
		cancel()
		if waited != nil {
			t.Fatalf("diagnosis %s: the wait for the load ran to the deadline: %v", diagnosis, waited)
		}
		if want := diagnosis == "loads"; slices.Equal(undiagnosed, []string{"go-server"}) != want || len(undiagnosed) > 1 {
			t.Errorf("diagnosis %s: undiagnosed %q", diagnosis, undiagnosed)
		}
		resp := symbolsQuery(ctxFor(t, time.Minute), t, r, w, &daemonv1.QueryRequest{Query: "foo"})
		ev := resp.GetEvidence()
		said := slices.ContainsFunc(ev.GetWarnings(), func(m string) bool { return strings.Contains(m, "had not finished checking the whole project") })
		if resp.GetStatus() != daemonv1.Status_STATUS_OK || !slices.Equal(names(resp), []string{"go:Foo"}) ||
			ev.GetState() != daemonv1.EvidenceState_EVIDENCE_STATE_CURRENT || said != (diagnosis == "loads") {
			t.Errorf("diagnosis %s: answer %v %v, evidence %v", diagnosis, resp.GetStatus(), names(resp), ev)
		}
	}
}

// TestFocusedWarmDefersTheOthers: a prepare with a focus starts only the
// focus's server before its first-load wait; the others are listed by
// language and server id, without tools, until StartDeferred starts them
// and gives each its anchor. Without a focus every server starts at once.
func TestFocusedWarmDefersTheOthers(t *testing.T) {
	running := func(w *pool.Workspace) []string {
		var ids []string
		for _, r := range w.Running() {
			ids = append(ids, r.Spec.ID)
		}
		return ids
	}
	listed := func(w *pool.Workspace) map[string]int {
		tools := map[string]int{}
		for _, l := range w.Languages() {
			tools[l.Server.ID] = len(l.Tools)
		}
		return tools
	}
	r, w, deferred := focusedWorkspace(t, "alpha/x.alpha", fakeSpec(t, "alpha"), fakeSpec(t, "beta"))
	if got := running(w); !slices.Equal(got, []string{"alpha-server"}) {
		t.Fatalf("running after a focused warm: %q; want the focus's server only", got)
	}
	if len(deferred) != 1 || deferred[0].ID != "beta-server" {
		t.Fatalf("deferred %v; want beta-server", deferred)
	}
	if l := listed(w); len(l) != 2 || l["alpha-server"] == 0 || l["beta-server"] != 0 {
		t.Fatalf("languages before the deferred start (server → tools): %v; want both, beta without tools", l)
	}
	r.StartDeferred(ctxFor(t, time.Minute), w, deferred)
	if got := running(w); !slices.Equal(got, []string{"alpha-server", "beta-server"}) {
		t.Fatalf("running after StartDeferred: %q", got)
	}
	if l := listed(w); len(l) != 2 || l["beta-server"] == 0 {
		t.Fatalf("languages after the deferred start: %v; want beta with its tools", l)
	}
	for _, run := range w.Running() {
		c, _, err := run.Server.Client(ctxFor(t, time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if u := lsp.DocumentURI(uri.Policy{Root: w.Dir}.FileURI("beta/x.beta")); run.Spec.ID == "beta-server" && !c.IsOpen(u) {
			t.Fatalf("the deferred server got no anchor (%s not open)", u)
		}
	}

	_, w, deferred = focusedWorkspace(t, "", fakeSpec(t, "alpha"), fakeSpec(t, "beta"))
	if got := running(w); len(deferred) != 0 || !slices.Equal(got, []string{"alpha-server", "beta-server"}) {
		t.Fatalf("without a focus: running %q, deferred %v; want both running", got, deferred)
	}
}
