package operation

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/apierr"
	"github.com/hanzoai/lsp/proxy/internal/forge"
)

// TestForgeError maps the forge's real errors: each comes from a forge
// client asking a server that answers one status (or from a credential
// the client refuses to send), so the table follows what the forge
// package really returns.
func TestForgeError(t *testing.T) {
	const token = "tok-secret-4f1a9c"
	ask := func(kind, status string, cred forge.Credential) error {
		t.Helper()
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			code, retry, _ := strings.Cut(status, " ")
			if retry != "" {
				w.Header().Set("Retry-After", retry)
			}
			if strings.HasPrefix(code, "3") {
				w.Header().Set("Location", "http://127.0.0.1:1/elsewhere?token="+token)
			}
			var n int
			fmt.Sscan(code, &n)
			w.WriteHeader(n)
		}))
		defer srv.Close()
		f := forge.NewGit(srv.URL, srv.Client(), "", forge.Limits{}, nil)
		if kind == "gitea" {
			f = forge.NewGitea(srv.URL, srv.Client(), nil)
		}
		_, err := f.Resolve(context.Background(), cred, "acme", "app", forge.Rev{})
		if err == nil {
			t.Fatalf("%s %s: no error", kind, status)
		}
		return err
	}
	tok := forge.Credential{Token: token}
	for _, kind := range []string{"git", "gitea"} {
		// A forge's 401 is its refusal of the credential to the gitea
		// kind; to the git kind it is not found, as a 403 (any
		// smart-HTTP forge may answer 401 for a private repository that
		// exists and 404 for one that does not).
		status401, code401, msg401 := 401, apierr.Unauthenticated, "the forge refused the forge credential"
		if kind == "git" {
			status401, code401, msg401 = 404, apierr.NotFound, "no such repository or revision, or no access to it"
		}
		for _, tc := range []struct {
			name   string
			err    error
			status int
			code   string
			msg    string
			retry  time.Duration
		}{
			{"forge 401", ask(kind, "401", tok), status401, code401, msg401, 0},
			{"unusable token", ask(kind, "200", forge.Credential{Token: "has space"}), 401, apierr.Unauthenticated, "no usable forge credential (X-Forge-Token)", 0},
			{"404", ask(kind, "404", tok), 404, apierr.NotFound, "no such repository or revision, or no access to it", 0},
			{"429 with Retry-After", ask(kind, "429 17", tok), 429, apierr.RateLimited, "the forge is rate limiting requests; retry after the time in Retry-After", 17 * time.Second},
			{"429 without", ask(kind, "429", tok), 429, apierr.RateLimited, "the forge is rate limiting requests; retry after the time in Retry-After", forgeRateLimitWait},
			{"429 with an hour", ask(kind, "429 3600", tok), 429, apierr.RateLimited, "the forge is rate limiting requests; retry after the time in Retry-After", 5 * time.Minute},
			{"302", ask(kind, "302", tok), 502, apierr.ForgeUnavailable, "forge answered with a redirect (HTTP 302), which is not followed", 0},
			{"301", ask(kind, "301", tok), 502, apierr.ForgeUnavailable, "forge answered with a redirect (HTTP 301), which is not followed", 0},
			{"500", ask(kind, "500", tok), 502, apierr.ForgeUnavailable, "forge answered HTTP 500", 5 * time.Second},
			{"503 with Retry-After", ask(kind, "503 30", tok), 502, apierr.ForgeUnavailable, "forge answered HTTP 503", 30 * time.Second},
		} {
			t.Run(kind+"/"+tc.name, func(t *testing.T) {
				checkForgeError(t, tc.err, tc.status, tc.code, tc.msg, tc.retry)
				if e := apierr.From(forgeError(tc.err)); strings.Contains(e.Message, token) || strings.Contains(e.Message, "127.0.0.1") {
					t.Errorf("message %q shows the token or the forge's address", e.Message)
				}
			})
		}
	}
	sudoLogin := func() error {
		f := forge.NewGitea("http://127.0.0.1:1", nil, nil)
		_, err := f.Resolve(context.Background(), forge.Credential{Mode: "sudo", Token: "admin", User: "not a login"}, "acme", "app", forge.Rev{})
		return err
	}()
	for _, tc := range []struct {
		name   string
		err    error
		status int
		code   string
		msg    string
		retry  time.Duration
	}{
		{"sudo login", sudoLogin, 401, apierr.Unauthenticated, "no usable forge login to act as (the bearer token's forge login claim)", 0},
		{"file_bytes", fmt.Errorf("fetch: %w", &forge.TooLargeError{Bound: "file_bytes", Limit: 10, Path: "assets/big.bin"}), 413, apierr.TreeTooLarge, `tree too large: file "assets/big.bin" is larger than 10 bytes`, 0},
		{"not a forge error", errors.New("credential: unsupported forge credential mode \"x\""), 502, apierr.ForgeUnavailable, "the forge is unavailable", 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) { checkForgeError(t, tc.err, tc.status, tc.code, tc.msg, tc.retry) })
	}
}

func checkForgeError(t *testing.T, err error, status int, code, msg string, retry time.Duration) {
	t.Helper()
	e := apierr.From(forgeError(err))
	if e.Status != status || e.Code != code || e.Message != msg || e.RetryAfter != retry {
		t.Errorf("forgeError(%v) = %d %s %q Retry-After %v; want %d %s %q %v", err, e.Status, e.Code, e.Message, e.RetryAfter, status, code, msg, retry)
	}
	if !errors.Is(forgeError(err), err) {
		t.Errorf("forgeError(%v) does not keep its cause", err)
	}
}

// TestForgeErrorNoRoom: a fetch the proxy has no disk for is the proxy's
// capacity (503 capacity_exhausted, Retry-After), not the forge failing.
func TestForgeErrorNoRoom(t *testing.T) {
	t.Setenv("TMPDIR", filepath.Join(t.TempDir(), "gone"))
	f := forge.NewGit("http://127.0.0.1:1", nil, "", forge.Limits{}, nil)
	_, err := f.Fetch(context.Background(), forge.Credential{Token: "tok"}, "acme", "app", strings.Repeat("a", 40), forge.Limits{})
	if !errors.Is(err, forge.ErrNoRoom) {
		t.Fatalf("Fetch without a temporary directory: %v, want ErrNoRoom", err)
	}
	checkForgeError(t, err, 503, apierr.CapacityExhausted, "the proxy has no room to fetch the tree now; retry after the time in Retry-After", 5*time.Second)
}
