package forge

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/devforge"
)

// forgeAnswer is what statusFixture's forge answers instead of serving:
// status code with a Retry-After (when not ""), for the requests only
// matches (nil: every repository request of either kind).
type forgeAnswer struct {
	code  int
	retry string
	only  func(*http.Request) bool
}

// statusFixture is a fixture whose forge answers what answer holds (nil:
// serves honestly); a redirect points at elsewhere, which counts its visits.
func statusFixture(t *testing.T) (fx *fixture, answer *atomic.Pointer[forgeAnswer], elsewhere *atomic.Int32) {
	answer, elsewhere = new(atomic.Pointer[forgeAnswer]), new(atomic.Int32)
	other := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { elsewhere.Add(1) }))
	t.Cleanup(other.Close)
	fx = newFixture(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			a := answer.Load()
			repoRequest := strings.HasPrefix(r.URL.Path, "/api/v1/repos/") || strings.Contains(r.URL.Path, ".git/")
			if a == nil || !repoRequest || (a.only != nil && !a.only(r)) {
				h.ServeHTTP(w, r)
				return
			}
			if a.retry != "" {
				w.Header().Set("Retry-After", a.retry)
			}
			if a.code >= 300 && a.code < 400 {
				w.Header().Set("Location", other.URL+r.URL.Path)
			}
			w.WriteHeader(a.code)
		})
	})
	return fx, answer, elsewhere
}

// TestForgeStatuses: what each kind makes of the forge's 401, 429, 503
// and redirects. 401 is, to the gitea kind, the forge refusing the
// credential (Gitea answers it before any repository is looked at, so it
// is the same for every repository); to the git kind, not found, as 403
// and 404 are (a smart-HTTP forge in general may answer 401 for a private
// repository that exists and 404 for one that does not), 429 a rate limit carrying the forge's Retry-After within
// bounds, a redirect a failure that retrying cannot mend, never followed.
func TestForgeStatuses(t *testing.T) {
	fx, answer, elsewhere := statusFixture(t)
	fx.addUsers()
	soon := time.Now().Add(40 * time.Second).UTC().Format(http.TimeFormat)
	cases := []struct {
		name  string
		a     forgeAnswer
		check func(t *testing.T, err error)
	}{
		{"401", forgeAnswer{code: 401}, func(t *testing.T, err error) {
			d, _ := DetailOf(err)
			if !errors.Is(err, ErrUnauthenticated) || errors.Is(err, ErrNotFound) || !d.Refused || d.Message != "forge refused the credential" {
				t.Errorf("%v (%+v); want ErrUnauthenticated, refused by the forge", err, d)
			}
		}},
		{"429 with Retry-After", forgeAnswer{code: 429, retry: "7"}, wantRateLimited(7 * time.Second)},
		{"429 without", forgeAnswer{code: 429}, wantRateLimited(0)},
		{"429 with a day", forgeAnswer{code: 429, retry: "86400"}, wantRateLimited(maxRetryAfter)},
		{"429 with a date", forgeAnswer{code: 429, retry: soon}, func(t *testing.T, err error) {
			if d, _ := DetailOf(err); !errors.Is(err, ErrRateLimited) || d.RetryAfter < 30*time.Second || d.RetryAfter > 41*time.Second {
				t.Errorf("%v (%+v); want ErrRateLimited, about 40 s", err, d)
			}
		}},
		{"429 with garbage", forgeAnswer{code: 429, retry: "soon"}, wantRateLimited(0)},
		{"503 with Retry-After", forgeAnswer{code: 503, retry: "3"}, func(t *testing.T, err error) {
			d, _ := DetailOf(err)
			if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrRateLimited) || d.RetryAfter != 3*time.Second || d.Final || d.Message != "forge answered HTTP 503" {
				t.Errorf("%v (%+v); want ErrUnavailable, HTTP 503, 3 s", err, d)
			}
		}},
		{"302", forgeAnswer{code: 302}, func(t *testing.T, err error) {
			d, _ := DetailOf(err)
			if !errors.Is(err, ErrUnavailable) || !d.Final || d.RetryAfter != 0 || d.Message != "forge answered with a redirect (HTTP 302), which is not followed" {
				t.Errorf("%v (%+v); want ErrUnavailable, a final redirect", err, d)
			}
		}},
	}
	ctx := context.Background()
	for _, kind := range []struct {
		name string
		f    Forge
	}{{"git", fx.newForge("")}, {"gitea", fx.newGitea()}} {
		for _, tc := range cases {
			t.Run(kind.name+"/"+tc.name, func(t *testing.T) {
				answer.Store(&tc.a)
				defer answer.Store(nil)
				check := tc.check
				if kind.name == "git" && tc.a.code == 401 {
					check = func(t *testing.T, err error) {
						if !errors.Is(err, ErrNotFound) || errors.Is(err, ErrUnauthenticated) || !strings.HasSuffix(err.Error(), ": "+repoNotFound) {
							t.Errorf("%v; want repository not found, as for a 404", err)
						}
					}
				}
				tc := tc
				tc.check = check
				for _, repo := range []string{"app", "missing"} {
					_, err := kind.f.Resolve(ctx, bearer(readerToken), "acme", repo, mustRev(t, "main"))
					tc.check(t, err)
				}
				_, err := kind.f.Resolve(ctx, bearer(readerToken), "acme", "app", mustRev(t, fx.c0))
				tc.check(t, err)
				_, err = kind.f.Fetch(ctx, bearer(readerToken), "acme", "app", fx.c3, Limits{})
				tc.check(t, err)
			})
		}
	}
	// The gitea kind's archive and raw downloads carry the forge's wait too.
	answer.Store(&forgeAnswer{code: 429, retry: "9", only: func(r *http.Request) bool { return strings.Contains(r.URL.Path, "/archive/") }})
	_, err := fx.newGitea().Fetch(ctx, bearer(readerToken), "acme", "app", fx.c3, Limits{})
	wantRateLimited(9*time.Second)(t, err)

	// In sudo mode the credential is the proxy's admin token: the forge
	// refusing it is the operator's to fix, not the caller's.
	answer.Store(&forgeAnswer{code: 401})
	_, err = fx.newGitea().Resolve(ctx, Credential{Mode: "sudo", Token: adminToken, User: "alice"}, "acme", "app", Rev{})
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrUnauthenticated) {
		t.Errorf("sudo, 401: %v; want ErrUnavailable (misconfigured)", err)
	}

	// git's own fetch, rate limited once the advertisement was served.
	answer.Store(&forgeAnswer{code: 429, retry: "4", only: func(r *http.Request) bool { return r.Method == http.MethodPost }})
	_, err = fx.newForge("").Fetch(ctx, bearer(readerToken), "acme", "app", fx.c3, Limits{})
	wantRateLimited(0)(t, err)

	answer.Store(nil)
	if _, err := fx.newGitea().Fetch(ctx, bearer(readerToken), "acme", "app", fx.c3, Limits{}); err != nil {
		t.Errorf("honest forge: %v", err)
	}
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("a redirect was followed %d times", n)
	}
	assertNoSecret(t, "log", fx.logs.String(), readerToken)
	assertNoSecret(t, "log", fx.logs.String(), adminToken)
}

func wantRateLimited(wait time.Duration) func(*testing.T, error) {
	return func(t *testing.T, err error) {
		t.Helper()
		d, _ := DetailOf(err)
		if !errors.Is(err, ErrRateLimited) || !errors.Is(err, ErrUnavailable) || d.RetryAfter != wait || d.Final || d.Message != "forge is rate limiting requests (HTTP 429)" {
			t.Errorf("%v (%+v); want ErrRateLimited (and ErrUnavailable) waiting %v", err, d, wait)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		v    string
		want time.Duration
	}{
		{"", 0},
		{"12", 12 * time.Second},
		{" 12 ", 12 * time.Second},
		{"0", minRetryAfter},
		{"300", 5 * time.Minute},
		{"301", maxRetryAfter},
		{"99999999999999999999", maxRetryAfter},
		{"-5", 0},
		{"1.5", 0},
		{"soon", 0},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Hour).Format(http.TimeFormat), minRetryAfter},
		{now.Add(24 * time.Hour).Format(http.TimeFormat), maxRetryAfter},
	} {
		h := http.Header{}
		if tc.v != "" {
			h.Set("Retry-After", tc.v)
		}
		if got := retryAfter(h, now); got != tc.want {
			t.Errorf("Retry-After %q: %v, want %v", tc.v, got, tc.want)
		}
	}
	if got := retryAfter(nil, now); got != 0 {
		t.Errorf("no header: %v", got)
	}
}

// TestFileBytesNamesTheFile: a tree over the per-file bound names the
// file, quoted, on both kinds; a long name is cut.
func TestFileBytesNamesTheFile(t *testing.T) {
	must := musts(t)
	fx := newFixture(t, nil)
	long := "deep/" + strings.Repeat("ü", 100) + "/" + strings.Repeat("ü", 100) + "/big.bin"
	commit := must(devforge.CreateRepo(fx.root, "acme", "sizes", map[string]string{
		"small.txt":      "s",
		"assets/big.bin": strings.Repeat("x", 1000),
	}, "sizes"))
	longCommit := must(devforge.CreateRepo(fx.root, "acme", "longname", map[string]string{long: strings.Repeat("x", 1000)}, "long"))
	for _, f := range []Forge{fx.newForge(""), fx.newGitea()} {
		_, err := f.Fetch(context.Background(), bearer(readerToken), "acme", "sizes", commit, Limits{MaxFileBytes: 999})
		var tl *TooLargeError
		if !errors.As(err, &tl) || tl.Path != "assets/big.bin" || tl.Error() != `tree too large: file "assets/big.bin" is larger than 999 bytes` {
			t.Errorf("Fetch = %v; want file_bytes naming assets/big.bin", err)
		}
		_, err = f.Fetch(context.Background(), bearer(readerToken), "acme", "longname", longCommit, Limits{MaxFileBytes: 999})
		if !errors.As(err, &tl) || tl.Path != long {
			t.Fatalf("long name: %v", err)
		}
		msg := tl.Error()
		if shown := strings.TrimSuffix(strings.TrimPrefix(msg, "tree too large: file "), " is larger than 999 bytes"); len(shown) > maxShownPath+len(`"…"`) || !strings.HasPrefix(shown, `"deep/üü`) || !strings.HasSuffix(shown, `ü…"`) {
			t.Errorf("long name shown as %q", msg)
		}
	}
	if got := (&TooLargeError{Bound: "file_bytes", Limit: 1, Path: "a\"b\x7f"}).Error(); got != `tree too large: file "a\"b\x7f" is larger than 1 bytes` {
		t.Errorf("quoted: %s", got)
	}
}
