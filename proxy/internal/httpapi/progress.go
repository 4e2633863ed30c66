package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/forge"
	"github.com/hanzoai/lsp/proxy/internal/operation"
	"github.com/labstack/echo/v4"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Progress of the long call. POST /prepare with Accept: text/event-stream
// answers as server-sent events: `progress` events ({stage, files, bytes};
// operation.Progress), then one `answer` event carrying the normal answer,
// or one `error` event carrying the normal error envelope. Everything
// refused before the prepare starts (401, 400, 403, 429) is the ordinary
// JSON error answer; with an Idempotency-Key the answer is never streamed
// (it is stored and replayed whole).

// progressJSON is a progress event's data.
type progressJSON struct {
	Stage string `json:"stage"`
	Files int    `json:"files,omitempty"`
	Bytes int64  `json:"bytes,omitempty"`
}

// wantsEventStream reports whether the client asked for the event stream.
func wantsEventStream(r *http.Request) bool {
	if r.Header.Get("Idempotency-Key") != "" {
		return false
	}
	for _, v := range r.Header.Values("Accept") {
		for _, part := range strings.Split(v, ",") {
			mt, _, _ := strings.Cut(strings.TrimSpace(part), ";")
			if strings.EqualFold(strings.TrimSpace(mt), "text/event-stream") {
				return true
			}
		}
	}
	return false
}

// eventStream writes server-sent events. The leader of a prepare reports
// from its own goroutine and may outlive the request (its push runs on):
// once closed, events are dropped.
type eventStream struct {
	mu     sync.Mutex
	w      *echo.Response
	closed bool
}

func (e *eventStream) send(event string, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	fmt.Fprintf(e.w, "event: %s\ndata: %s\n\n", event, data)
	e.w.Flush()
}

func (e *eventStream) close() {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
}

// prepareStream is POST /prepare answered as an event stream.
func (s *Server) prepareStream(c echo.Context, caller operation.Caller, repo string, rev forge.Rev, focus string, start time.Time) error {
	resp := c.Response()
	h := resp.Header()
	h.Set(echo.HeaderContentType, "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // a buffering reverse proxy would hold the events back
	resp.WriteHeader(http.StatusOK)
	resp.Flush()
	es := &eventStream{w: resp}
	defer es.close()
	caller.Progress = func(p operation.Progress) {
		es.send("progress", progressJSON{Stage: p.Stage, Files: p.Files, Bytes: p.Bytes})
	}
	out, _, err := s.runPrepare(c.Request().Context(), caller, repo, rev, focus, start)
	if err != nil {
		_, body, _ := s.envelope(err, c.Get(ctxRequestID))
		es.send("error", body)
		return nil
	}
	es.send("answer", out)
	return nil
}

// mcpProgress turns prepare steps into MCP progress notifications for the
// request's progress token; nil when the client sent none. stop ends it.
func mcpProgress(ctx context.Context, req *mcp.CallToolRequest) (report func(operation.Progress), stop func()) {
	tok := req.Params.GetProgressToken()
	if tok == nil || req.Session == nil {
		return nil, func() {}
	}
	var mu sync.Mutex
	done := false
	step := 0.0
	report = func(p operation.Progress) {
		mu.Lock()
		defer mu.Unlock()
		if done {
			return
		}
		step++ // progress must increase with every notification
		msg := p.Stage
		if p.Files > 0 {
			msg = fmt.Sprintf("%s: %d files, %d bytes", p.Stage, p.Files, p.Bytes)
		}
		_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Message: msg, Progress: step})
	}
	stop = func() {
		mu.Lock()
		done = true
		mu.Unlock()
	}
	return report, stop
}
