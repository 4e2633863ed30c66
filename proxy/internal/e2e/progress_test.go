package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

type sse struct {
	event string
	data  map[string]any
}

// prepareEvents posts /prepare asking for the event stream and reads it
// to its end.
func prepareEvents(t *testing.T, tn *tenant, body string) (*http.Response, []sse) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, stack.ProxyURL+"/v1/lsp/prepare", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+tn.jwt)
	req.Header.Set("X-Forge-Token", tn.forgeToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []sse
	sc := bufio.NewScanner(resp.Body)
	var cur sse
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			cur.event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &cur.data); err != nil {
				t.Fatalf("event data is not JSON: %q", line)
			}
		case line == "" && cur.event != "":
			out = append(out, cur)
			cur = sse{}
		}
	}
	return resp, out
}

func stages(evs []sse) string {
	var s []string
	for _, e := range evs {
		if e.event == "progress" {
			s = append(s, e.data["stage"].(string))
		} else {
			s = append(s, e.event)
		}
	}
	return strings.Join(s, " ")
}

// TestPrepareProgress: the event stream of a cold prepare names every
// step with the tree's counts and ends in the normal answer; a warm one
// is short; a refused one ends in the error envelope; rows are the
// ordinary ones.
func TestPrepareProgress(t *testing.T) {
	tn := newTenant(t, "progress", 2)
	resp, evs := prepareEvents(t, tn, `{"repo":"hello"}`)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d, type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if got, want := stages(evs), "resolving fetching fetching pushing indexing ready answer"; got != want {
		t.Fatalf("events = %q; want %q", got, want)
	}
	push := evs[3].data
	if push["files"] != float64(len(stackSampleFiles())) || push["bytes"].(float64) <= 0 {
		t.Fatalf("pushing event = %v; want the tree's file and byte counts", push)
	}
	last := evs[len(evs)-1].data
	if last["prepared"] != true || last["commit"] != tn.commit {
		t.Fatalf("answer event = %v", last)
	}
	t.Logf("cold prepare events: %s (pushing %v files, %v bytes)", stages(evs), push["files"], push["bytes"])

	_, evs = prepareEvents(t, tn, `{"repo":"hello"}`)
	if got := stages(evs); got != "resolving ready answer" || evs[2].data["prepared"] != false {
		t.Fatalf("warm prepare events = %q %v", got, evs)
	}

	// Another revision without funds: the error envelope as the last event.
	poor := newTenant(t, "progress-poor", 0)
	_, evs = prepareEvents(t, poor, `{"repo":"hello"}`)
	if len(evs) == 0 || evs[len(evs)-1].event != "error" {
		t.Fatalf("refused prepare events = %q", stages(evs))
	}
	if e := evs[len(evs)-1].data["error"].(map[string]any); e["code"] != "insufficient_funds" || e["prepared"] != false {
		t.Fatalf("error event = %v", e)
	}
	// Refused before it starts: the ordinary JSON answer.
	resp, _ = prepareEvents(t, tn, `{"repo":"hello","org":"x"}`)
	if resp.StatusCode != 400 {
		t.Fatalf("bad body with the event stream asked: %d; want 400", resp.StatusCode)
	}
	if p, q := filter(rows(t, "progress"), "prepare"), filter(rows(t, "progress"), "query"); len(p) != 1 || len(q) != 1 {
		t.Fatalf("rows: %d prepare, %d query; want 1 and 1", len(p), len(q))
	}
}

func stackSampleFiles() []string {
	return []string{"go.mod", "greet/greet.go", "main.go", "README.md"}
}

// TestPrepareProgressCLIAndMCP: the CLI draws the bar from the stream;
// an MCP client that sent a progress token hears the steps.
func TestPrepareProgressCLIAndMCP(t *testing.T) {
	tn := newTenant(t, "progress-cli", 10)
	code, out, errs := lspctl(t, tn.env(), "prepare", "--progress", "--repo", tn.repo)
	if code != 0 || !strings.Contains(out, "is ready") || !strings.Contains(errs, "pushing") || !strings.Contains(errs, "files") {
		t.Fatalf("lspctl prepare --progress: exit %d\nstdout %q\nstderr %q", code, out, errs)
	}
	t.Logf("$ lspctl prepare --progress --repo hello\n%q\n%s", errs, out)
	poor := newTenant(t, "progress-cli-poor", 0)
	if code, _, errs := lspctl(t, poor.env(), "prepare", "--progress", "--repo", poor.repo); code != 4 || !strings.Contains(errs, "insufficient_funds") {
		t.Fatalf("lspctl prepare --progress without funds: exit %d %q; want 4", code, errs)
	}

	m := newTenant(t, "progress-mcp", 10)
	c := mcpConnect(t, "", m.mcpHeaders())
	res, isErr := c.call(t, "prepare", map[string]any{"repo": m.repo}, "tok-1")
	if isErr || res["prepared"] != true {
		t.Fatalf("prepare: %v", res)
	}
	var msgs []string
	deadline := time.After(10 * time.Second)
	for len(msgs) < 6 {
		select {
		case p := <-c.progress:
			if p.ProgressToken != "tok-1" {
				t.Fatalf("progress for token %v", p.ProgressToken)
			}
			msgs = append(msgs, p.Message)
		case <-deadline:
			t.Fatalf("progress notifications = %q; want six", msgs)
		}
	}
	if msgs[0] != "resolving" || !strings.HasPrefix(msgs[3], "pushing: 4 files") || msgs[5] != "ready" {
		t.Fatalf("progress notifications = %q", msgs)
	}
}
