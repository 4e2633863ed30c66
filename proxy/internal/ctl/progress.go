package ctl

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
)

// progressEvent is one step of a prepare as the service streams it
// (operation.Progress).
type progressEvent struct {
	Stage string `json:"stage"`
	Files int    `json:"files"`
	Bytes int64  `json:"bytes"`
}

// stageStep places a stage on the bar: five steps to ready.
var stageStep = map[string]int{"resolving": 1, "waiting": 2, "fetching": 2, "pushing": 3, "indexing": 4, "ready": 5}

// progressTo returns the progress bar drawn on w, or nil when nobody
// watches (w is not a terminal, unless force) or the output is --json.
func progressTo(w io.Writer, force, quiet bool) func(progressEvent) {
	if quiet || !(force || isTerminal(w)) {
		return nil
	}
	const width = 20
	return func(ev progressEvent) {
		n := stageStep[ev.Stage] * width / 5
		bar := strings.Repeat("█", n) + strings.Repeat("░", width-n)
		detail := ""
		if ev.Files > 0 {
			detail = fmt.Sprintf("  %d files, %s", ev.Files, humanBytes(ev.Bytes))
		}
		// \r and an erase to the end of the line redraw in place.
		fmt.Fprintf(w, "\r%s %-10s%s\x1b[K", bar, ev.Stage, detail)
		if ev.Stage == "ready" {
			fmt.Fprintln(w)
		}
	}
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// prepare posts a prepare. With progress it asks for the event stream and
// calls progress for each step; the answer is the stream's final event.
func (c *client) prepare(ctx context.Context, body map[string]any, progress func(progressEvent)) ([]byte, error) {
	if progress == nil {
		return c.post(ctx, "prepare", body)
	}
	req, err := c.request(ctx, "prepare", body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, &exitError{exitTransport, fmt.Errorf("prepare: %w", err)}
	}
	defer resp.Body.Close()
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); resp.StatusCode != http.StatusOK || mt != "text/event-stream" {
		// Refused before the prepare started: the ordinary answer.
		raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
		if err != nil {
			return nil, &exitError{exitTransport, fmt.Errorf("prepare: read the answer: %w", err)}
		}
		return raw, answerError(resp.StatusCode, raw)
	}
	return readPrepareEvents(resp.Body, progress)
}

// readPrepareEvents reads the prepare's server-sent events until its
// answer or error event.
func readPrepareEvents(r io.Reader, progress func(progressEvent)) ([]byte, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	event, data := "", ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event:"):
			event = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			data += strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " ")
		case line == "":
			switch event {
			case "progress":
				var ev progressEvent
				if json.Unmarshal([]byte(data), &ev) == nil {
					progress(ev)
				}
			case "answer":
				return []byte(data), answerError(http.StatusOK, []byte(data))
			case "error":
				var env struct {
					Error *serviceError `json:"error"`
				}
				if json.Unmarshal([]byte(data), &env) != nil || env.Error == nil {
					return nil, &exitError{exitTransport, fmt.Errorf("prepare: an error event without the contract's envelope")}
				}
				return []byte(data), env.Error
			}
			event, data = "", ""
		}
	}
	return nil, &exitError{exitTransport, fmt.Errorf("prepare: the event stream ended without an answer")}
}
