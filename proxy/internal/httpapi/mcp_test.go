package httpapi

import (
	"encoding/json"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

// TestToolSchemasMatchBodies: each MCP tool's input schema names exactly
// the fields its route's strict decoder accepts (without repo and rev in
// a bound session), and every required field is a property.
func TestToolSchemasMatchBodies(t *testing.T) {
	for _, name := range append([]string{"prepare"}, routeNames()...) {
		allowed := prepareFields
		if rt, ok := routeByName(name); ok {
			allowed = rt.fields
		}
		for _, bound := range []bool{false, true} {
			want := allowed
			if bound {
				want = without(allowed, "repo", "rev")
			}
			schema := toolSpec(name, bound).InputSchema.(map[string]any)
			props := schema["properties"].(map[string]any)
			got := slices.Sorted(maps.Keys(props))
			if w := slices.Sorted(maps.Keys(want)); !slices.Equal(got, w) {
				t.Errorf("%s (bound %v): schema properties %v; the body accepts %v", name, bound, got, w)
			}
			req, _ := schema["required"].([]string)
			for _, r := range req {
				if _, ok := props[r]; !ok {
					t.Errorf("%s (bound %v): required %q is not a property", name, bound, r)
				}
			}
			if schema["additionalProperties"] != false {
				t.Errorf("%s: the schema allows other properties", name)
			}
			if toolDescriptions[name] == "" {
				t.Errorf("%s has no description", name)
			}
		}
	}
}

func routeNames() []string {
	var out []string
	for _, rt := range opRoutes {
		out = append(out, rt.name)
	}
	return out
}

// TestMCPUnauthenticated: a request without a token is 401 with the
// envelope and a WWW-Authenticate naming the metadata, which names the
// issuer; a foreign Origin is refused before the token is looked at.
func TestMCPUnauthenticated(t *testing.T) {
	s := New(Deps{Issuer: "https://id.example", MCPAllowedOrigins: []string{"https://app.example"}, Log: slog.New(slog.DiscardHandler)})
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()

	for _, tc := range []struct {
		origin string
		status int
		code   string
	}{
		{"", http.StatusUnauthorized, "unauthenticated"},
		{"https://app.example", http.StatusUnauthorized, "unauthenticated"},
		{"https://evil.example", http.StatusForbidden, "forbidden"},
	} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/lsp/mcp", strings.NewReader(`{}`))
		if tc.origin != "" {
			req.Header.Set("Origin", tc.origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var env errorBody
		_ = json.NewDecoder(resp.Body).Decode(&env)
		resp.Body.Close()
		if resp.StatusCode != tc.status || env.Error.Code != tc.code {
			t.Errorf("origin %q: %d %q; want %d %s", tc.origin, resp.StatusCode, env.Error.Code, tc.status, tc.code)
		}
		wa := resp.Header.Get("WWW-Authenticate")
		if tc.status == http.StatusUnauthorized && wa != `Bearer resource_metadata="`+srv.URL+`/.well-known/oauth-protected-resource/v1/lsp/mcp"` {
			t.Errorf("WWW-Authenticate = %q", wa)
		}
	}

	resp, err := http.Get(srv.URL + "/.well-known/oauth-protected-resource/v1/lsp/mcp")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var meta struct {
		Resource             string   `json:"resource"`
		AuthorizationServers []string `json:"authorization_servers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&meta); err != nil {
		t.Fatal(err)
	}
	if meta.Resource != srv.URL+"/v1/lsp/mcp" || !slices.Equal(meta.AuthorizationServers, []string{"https://id.example"}) {
		t.Fatalf("metadata = %+v", meta)
	}
}

// TestMCPPublicURL: with LSP_PUBLIC_URL set, neither the metadata nor the
// challenge echo a client's Host header (a shared cache keeps the metadata
// for five minutes).
func TestMCPPublicURL(t *testing.T) {
	s := New(Deps{Issuer: "https://id.example", PublicURL: "https://lsp.example", Log: slog.New(slog.DiscardHandler)})
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	for _, tc := range []struct{ method, path, header, want string }{
		{http.MethodGet, "/.well-known/oauth-protected-resource/v1/lsp/mcp", "", ""},
		{http.MethodPost, "/v1/lsp/mcp", "WWW-Authenticate", `Bearer resource_metadata="https://lsp.example/.well-known/oauth-protected-resource/v1/lsp/mcp"`},
	} {
		req, _ := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(`{}`))
		req.Host = "evil.example"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var meta struct {
			Resource string `json:"resource"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&meta)
		resp.Body.Close()
		switch {
		case tc.header != "" && resp.Header.Get(tc.header) != tc.want:
			t.Errorf("%s %s: %s = %q", tc.method, tc.path, tc.header, resp.Header.Get(tc.header))
		case tc.header == "" && meta.Resource != "https://lsp.example/v1/lsp/mcp":
			t.Errorf("%s %s: resource = %q", tc.method, tc.path, meta.Resource)
		}
	}
}
