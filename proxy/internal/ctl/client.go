package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Exit codes of the client commands. Scripts may rely on them; the README
// documents them.
const (
	exitOK        = 0 // the service answered
	exitService   = 1 // the service answered with an error (code and message printed)
	exitUsage     = 2 // bad flags or a missing variable; nothing was sent
	exitTransport = 3 // the service could not be reached, or its answer was not the contract's
	exitFunds     = 4 // 402: insufficient_funds or spend_cap_exceeded (credit the org, or wait for the cap)
)

// exitError ends Main with its code after printing err.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// serviceError is the contract's error envelope as the client received it.
type serviceError struct {
	Status   int
	Code     string  `json:"code"`
	Message  string  `json:"message"`
	Repo     *string `json:"repo"`
	Commit   *string `json:"commit"`
	Prepared *bool   `json:"prepared"`
	// Candidates are an ambiguous_symbol's symbols.
	Candidates []struct {
		Name           string  `json:"name"`
		Kind           string  `json:"kind"`
		Path           string  `json:"path"`
		SelectionRange *rng    `json:"selection_range"`
		Container      *string `json:"container"`
	} `json:"candidates"`
}

func (e *serviceError) Error() string {
	s := fmt.Sprintf("%s: %s", e.Code, e.Message)
	for _, c := range e.Candidates {
		name := c.Name
		if ct := deref(c.Container); ct != "" {
			name = ct + "." + name
		}
		s += fmt.Sprintf("\n  %s %s\t%s", c.Kind, name, at(c.Path, c.SelectionRange))
	}
	if e.Status != 0 { // an error event of a stream carries no status
		s = fmt.Sprintf("%d %s", e.Status, s)
	}
	if e.Prepared != nil && *e.Prepared {
		s += " (this request prepared the revision and was charged for it)"
	}
	return s
}

// exitCode is what a failed call ends the process with.
func exitCode(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	var se *serviceError
	if errors.As(err, &se) {
		if se.Code == "insufficient_funds" || se.Code == "spend_cap_exceeded" {
			return exitFunds
		}
		return exitService
	}
	var ue usageError
	if errors.As(err, &ue) {
		return exitUsage
	}
	return exitService
}

// client speaks the service's HTTP API as the person or script at the
// terminal: LSP_URL, LSP_TOKEN (the JWT), LSP_FORGE_TOKEN (the forge
// credential, not needed when the proxy runs LSP_FORGE_AUTH=sudo or jwt)
// and LSP_ORG (X-Org-Id: one of the principal's orgs).
type client struct {
	url        string
	token      string
	forgeToken string
	org        string
	http       *http.Client
}

func newClient(getenv func(string) string) (*client, error) {
	c := &client{
		url:        strings.TrimRight(getenv("LSP_URL"), "/"),
		token:      getenv("LSP_TOKEN"),
		forgeToken: getenv("LSP_FORGE_TOKEN"),
		org:        getenv("LSP_ORG"),
		// No overall timeout: a prepare may take minutes and the service
		// bounds it (LSP_REQUEST_TIMEOUT); Ctrl-C cancels.
		http: &http.Client{},
	}
	if c.url == "" {
		c.url = "http://127.0.0.1:8080"
	}
	if !strings.HasPrefix(c.url, "http://") && !strings.HasPrefix(c.url, "https://") {
		return nil, usageError("LSP_URL must be an http:// or https:// URL")
	}
	if c.token == "" {
		return nil, usageError("LSP_TOKEN is required (a JWT; for make run: lspctl dev-token)")
	}
	return c, nil
}

// request builds a POST of body to route with the caller's headers.
func (c *client) request(ctx context.Context, route string, body map[string]any) (*http.Request, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url+"/v1/lsp/"+route, bytes.NewReader(b))
	if err != nil {
		return nil, &exitError{exitUsage, fmt.Errorf("LSP_URL: %w", err)}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.token)
	if c.forgeToken != "" {
		req.Header.Set("X-Forge-Token", c.forgeToken)
	}
	if c.org != "" {
		req.Header.Set("X-Org-Id", c.org)
	}
	return req, nil
}

// post sends body to route and returns the answer's raw JSON. A 2xx answer
// is returned as is; an error envelope becomes a *serviceError (with the
// raw envelope, for --json); anything else is a transport failure.
func (c *client) post(ctx context.Context, route string, body map[string]any) ([]byte, error) {
	req, err := c.request(ctx, route, body)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, &exitError{exitTransport, fmt.Errorf("%s: %w", route, err)}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, &exitError{exitTransport, fmt.Errorf("%s: read the answer: %w", route, err)}
	}
	return raw, answerError(resp.StatusCode, raw)
}

// answerError reads an answer's status and body: nil for a 2xx JSON
// object, the *serviceError of an error envelope, else a transport failure.
func answerError(status int, raw []byte) error {
	if status >= 200 && status < 300 {
		var probe map[string]json.RawMessage
		if json.Unmarshal(raw, &probe) != nil {
			return &exitError{exitTransport, fmt.Errorf("the service answered %d with a body that is not a JSON object", status)}
		}
		return nil
	}
	var env struct {
		Error *serviceError `json:"error"`
	}
	if json.Unmarshal(raw, &env) != nil || env.Error == nil || env.Error.Code == "" {
		return &exitError{exitTransport, fmt.Errorf("the service answered %d %s without the contract's error envelope", status, http.StatusText(status))}
	}
	env.Error.Status = status
	return env.Error
}
