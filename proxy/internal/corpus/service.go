package corpus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// client asks the proxy's HTTP API as a tenant would.
type client struct {
	url, jwt, forge string
	http            *http.Client
	// rev, when set, is the revision every request names (at).
	rev string
}

// at is c asking about revision rev instead of the default branch's head.
func (c *client) at(rev string) *client {
	pinned := *c
	pinned.rev = rev
	return &pinned
}

// apiAnswer is the part of an operation's answer the corpus compares.
type apiAnswer struct {
	Hover *struct {
		Markdown string `json:"markdown"`
	} `json:"hover"`
	Locations   []serviceLocation `json:"locations"`
	NextCursor  string            `json:"next_cursor"`
	Symbols     []serviceSymbol   `json:"symbols"`
	Diagnostics []struct {
		Range    lspRange `json:"range"`
		Severity string   `json:"severity"`
		Code     string   `json:"code"`
		Source   string   `json:"source"`
		Message  string   `json:"message"`
	} `json:"diagnostics"`
	Warnings []string `json:"warnings"` // of /prepare
	Evidence struct {
		State    string   `json:"state"`
		Warnings []string `json:"warnings"`
	} `json:"evidence"`
}

type serviceSymbol struct {
	Name      string   `json:"name"`
	Kind      string   `json:"kind"`
	Container string   `json:"container"`
	Range     lspRange `json:"range"`
}

func (c *client) do(ctx context.Context, method, route string, body any) (*apiAnswer, []byte, error) {
	var rd io.Reader
	if m, ok := body.(map[string]any); ok && c.rev != "" {
		m["rev"] = c.rev
	}
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.url+"/v1/lsp"+route, rd)
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.jwt)
	req.Header.Set("X-Forge-Token", c.forge)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, out, fmt.Errorf("%s %d: %s", route, resp.StatusCode, bytes.TrimSpace(out))
	}
	var a apiAnswer
	if err := json.Unmarshal(out, &a); err != nil {
		return nil, out, fmt.Errorf("%s: %w", route, err)
	}
	return &a, out, nil
}

func posBody(repo string, p Position) map[string]any {
	return map[string]any{"repo": repo, "path": p.Path, "line": p.Line, "character": p.Character}
}

// serviceAnswers asks the service what the ground truth was asked.
func serviceAnswers(ctx context.Context, c *client, repo string, t *truth) (pos, file map[string][]Answer) {
	pos, file = map[string][]Answer{}, map[string][]Answer{}
	wrap := func(a *apiAnswer, err error, lines func(*apiAnswer) []string) Answer {
		if err != nil {
			return Answer{Err: err.Error()}
		}
		return Answer{Lines: lines(a), State: a.Evidence.State, Warnings: a.Evidence.Warnings}
	}
	locLines := func(a *apiAnswer) []string {
		var out []string
		for _, l := range a.Locations {
			out = append(out, l.key())
		}
		return sortUniq(out)
	}
	// The ground truth's order, question for question: a file's document
	// symbols, then each of its positions' definition, hover and
	// references, then every file's diagnostics. Some answers depend on
	// what the server checked before them (tsserver prints a union's
	// members in the order the checker first met them), so asking in
	// another order compares two different sessions.
	for _, tool := range Tools[:3] {
		pos[tool] = make([]Answer, len(t.positions))
	}
	ask := func(i int) {
		p := t.positions[i]
		body := posBody(repo, p)
		body["relation"] = "definition"
		start := time.Now()
		a, _, err := c.do(ctx, http.MethodPost, "/locate", body)
		pos["definition"][i] = timed(wrap(a, err, locLines), start)
		start = time.Now()
		a, _, err = c.do(ctx, http.MethodPost, "/hover", posBody(repo, p))
		pos["hover"][i] = timed(wrap(a, err, func(a *apiAnswer) []string {
			if a.Hover == nil {
				return nil
			}
			return hoverLines(a.Hover.Markdown, "")
		}), start)
		start = time.Now()
		pos["references"][i] = timed(references(ctx, c, repo, p), start)
	}
	fileSymbols := map[string]Answer{}
	for _, f := range t.chosen {
		fileSymbols[f] = symbols(ctx, c, repo, f)
		for i, p := range t.positions {
			if p.Path == f && ctx.Err() == nil {
				ask(i)
			}
		}
	}
	for _, f := range t.chosen {
		file["symbols"] = append(file["symbols"], fileSymbols[f])
		a, _, err := c.do(ctx, http.MethodPost, "/diagnostics", map[string]any{"repo": repo, "path": f})
		file["diagnostics"] = append(file["diagnostics"], wrap(a, err, func(a *apiAnswer) []string {
			var out []string
			for _, d := range a.Diagnostics {
				out = append(out, diagLine(d.Range, d.Severity, d.Code, d.Source, d.Message))
			}
			return sortUniq(out)
		}))
	}
	return pos, file
}

// timed is a with the time since start.
func timed(a Answer, start time.Time) Answer {
	a.Seconds = time.Since(start).Seconds()
	return a
}

// symbols follows the answer's cursors (at most 20 pages of 1000).
func symbols(ctx context.Context, c *client, repo, path string) Answer {
	body := map[string]any{"repo": repo, "path": path, "limit": 1000}
	var out Answer
	for page := 0; page < 20; page++ {
		a, _, err := c.do(ctx, http.MethodPost, "/symbols", body)
		if err != nil {
			out.Err = err.Error()
			return out
		}
		for _, s := range a.Symbols {
			out.Lines = append(out.Lines, symbolLine(s.Name, s.Kind, s.Container, s.Range))
		}
		out.State, out.Warnings = a.Evidence.State, a.Evidence.Warnings
		if a.NextCursor == "" {
			break
		}
		body["cursor"] = a.NextCursor
	}
	out.Lines = sortUniq(out.Lines)
	return out
}

// references follows the answer's cursors (at most 20 pages of 1000).
func references(ctx context.Context, c *client, repo string, p Position) Answer {
	body := posBody(repo, p)
	body["relation"], body["include_declaration"], body["limit"] = "reference", true, 1000
	var out Answer
	for page := 0; page < 20; page++ {
		a, _, err := c.do(ctx, http.MethodPost, "/locate", body)
		if err != nil {
			out.Err = err.Error()
			return out
		}
		for _, l := range a.Locations {
			out.Lines = append(out.Lines, l.key())
		}
		out.State, out.Warnings = a.Evidence.State, a.Evidence.Warnings
		if a.NextCursor == "" {
			break
		}
		body["cursor"] = a.NextCursor
	}
	out.Lines = sortUniq(out.Lines)
	return out
}

var errNoUsefulAnswer = errors.New("no useful answer")

// prepareService prepares the repository and waits for the first useful
// answer (a hover that says something at the ground truth's cold
// position): the service's side of the cold-start figure. The prepare
// names the cold position's file as its focus, as a caller about to ask
// about it does: in a polyglot tree it waits for that file's server, not
// every server (the ground truth starts only that one).
//
// call is the POST /prepare itself: the rest of took is the first useful
// answer's wait (a server still analysing the file, or sharing the cores).
func prepareService(ctx context.Context, c *client, repo string, cold Position, coldWait time.Duration) (took, call time.Duration, warnings []string, err error) {
	start := time.Now()
	a, _, err := c.do(ctx, http.MethodPost, "/prepare", map[string]any{"repo": repo, "path": cold.Path})
	call = time.Since(start)
	if err != nil {
		return 0, call, nil, err
	}
	warnings = append(warnings, a.Warnings...)
	if cold.Ident == "" {
		// A FileTools language: the first useful answer is the file's
		// document symbols.
		for {
			s := symbols(ctx, c, repo, cold.Path)
			for _, w := range s.Warnings {
				if !contains(warnings, w) {
					warnings = append(warnings, w)
				}
			}
			if len(s.Lines) > 0 {
				return time.Since(start), call, warnings, nil
			}
			if ctx.Err() != nil {
				return time.Since(start), call, warnings, ctx.Err()
			}
			if time.Since(start) > coldWait {
				return time.Since(start), call, append(warnings, fmt.Sprintf("corpus: no document symbols of %s within %s; last error %q", cold.Path, coldWait, s.Err)), errNoUsefulAnswer
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	var last []byte
	for {
		a, raw, err := c.do(ctx, http.MethodPost, "/hover", posBody(repo, cold))
		last = raw
		if err == nil {
			for _, w := range a.Evidence.Warnings {
				if !contains(warnings, w) {
					warnings = append(warnings, w)
				}
			}
			if a.Hover != nil && strings.TrimSpace(a.Hover.Markdown) != "" {
				return time.Since(start), call, warnings, nil
			}
		}
		if ctx.Err() != nil {
			return time.Since(start), call, warnings, ctx.Err()
		}
		if time.Since(start) > coldWait {
			if err != nil {
				last = []byte(err.Error())
			}
			return time.Since(start), call, append(warnings, fmt.Sprintf("corpus: no useful hover at %s:%d:%d within %s; last answer %s",
				cold.Path, cold.Line, cold.Character, coldWait, bytes.TrimSpace(last))), errNoUsefulAnswer
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stillIndexing is the daemon's warning on an answer given while the
// server's index was being built (query.go).
const stillIndexing = "was still working on the project"

// awaitIndexed asks the hover at cold until its answer no longer says the
// server is still indexing, at most wait: the service's side of the
// ground truth's wait for the server's progress to end.
func awaitIndexed(ctx context.Context, c *client, repo string, cold Position, wait time.Duration) {
	for deadline := time.Now().Add(wait); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(500 * time.Millisecond) {
		var a *apiAnswer
		var err error
		if cold.Ident == "" {
			a, _, err = c.do(ctx, http.MethodPost, "/symbols", map[string]any{"repo": repo, "path": cold.Path, "limit": 1})
		} else {
			a, _, err = c.do(ctx, http.MethodPost, "/hover", posBody(repo, cold))
		}
		if err != nil {
			continue
		}
		indexing := false
		for _, w := range a.Evidence.Warnings {
			indexing = indexing || strings.Contains(w, stillIndexing)
		}
		if !indexing {
			return
		}
	}
}

// dropWorkspace frees the revision's workspace once it is measured, so
// its servers do not compete with the next repository's.
func dropWorkspace(ctx context.Context, c *client, repo string) {
	q := url.Values{"repo": {repo}}
	if c.rev != "" {
		q.Set("rev", c.rev)
	}
	_, _, _ = c.do(ctx, http.MethodDelete, "/workspaces?"+q.Encode(), nil)
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
