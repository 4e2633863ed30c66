package forge

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// secretForms are the ways a token could leak: itself and inside a header.
func secretForms(token string) []string {
	return []string{
		token,
		base64.StdEncoding.EncodeToString([]byte(defaultBasicUser + ":" + token)),
	}
}

func assertNoSecret(t *testing.T, where, text, token string) {
	t.Helper()
	for _, s := range secretForms(token) {
		if strings.Contains(text, s) {
			t.Errorf("%s contains the credential: %q", where, text)
		}
	}
}

// TestTokenNotInArgv runs every git path through a wrapper that records
// git's command lines.
func TestTokenNotInArgv(t *testing.T) {
	realGit, err := exec.LookPath("git")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	argvLog := filepath.Join(dir, "argv.log")
	wrapper := filepath.Join(dir, "git")
	script := fmt.Sprintf("#!/bin/sh\nprintf '%%s\\n' \"$*\" >> %s\nexec %s \"$@\"\n", argvLog, realGit)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"bearer", "basic"} {
		fx := newFixture(t, nil)
		// Without reachable-sha wants every fallback path runs.
		if err := fx.forge.SetAllowReachableSHA1InWant("acme", "app", false); err != nil {
			t.Fatal(err)
		}
		f := fx.newForge(wrapper)
		cred := Credential{Mode: mode, Token: readerToken}
		ctx := context.Background()
		if _, err := f.Resolve(ctx, cred, "acme", "app", mustRev(t, fx.c0)); err != nil {
			t.Fatal(err)
		}
		for _, c := range []string{fx.c0, fx.c3} {
			if _, err := f.Fetch(ctx, cred, "acme", "app", c, Limits{}); err != nil {
				t.Fatal(err)
			}
		}
		assertNoSecret(t, "log", fx.logs.String(), readerToken)
	}
	argv, err := os.ReadFile(argvLog)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(argv), "fetch") || !strings.Contains(string(argv), "ls-tree") {
		t.Fatalf("the wrapper did not see git's fetches:\n%s", argv)
	}
	assertNoSecret(t, "git argv", string(argv), readerToken)
}

// TestHostileForgeNeverLeaksToken points the client at forges that echo the
// credential back in every way they can.
func TestHostileForgeNeverLeaksToken(t *testing.T) {
	var redirectHits atomic.Int64
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		redirectHits.Add(1)
		http.NotFound(w, r)
	}))
	defer elsewhere.Close()

	echo := func(r *http.Request) string { return "you sent " + r.Header.Get("Authorization") }
	type hostileForge struct {
		wrap func(next http.Handler) http.Handler
		// refsOK: listing refs passes through to the real forge, so
		// resolving a ref succeeds and only git's own fetches meet it.
		refsOK bool
	}
	hostile := map[string]hostileForge{
		"500 echoing the header": {wrap: func(http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.Error(w, echo(r), http.StatusInternalServerError)
			})
		}},
		"200 garbage echoing the header": {wrap: func(http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/x-git-upload-pack-advertisement")
				fmt.Fprintf(w, "zz%s", echo(r))
			})
		}},
		"ERR line echoing the header": {wrap: func(http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/x-git-upload-pack-advertisement")
				msg := "ERR " + echo(r) + "\n"
				fmt.Fprintf(w, "%04x%s", len(msg)+4, msg)
			})
		}},
		// Git's own fetches (protocol v0 by sha, and the content fetch)
		// fail with the credential in the forge's error text, which git
		// prints as "remote error".
		"git fetch sees an ERR echoing the header": {refsOK: true, wrap: func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("Git-Protocol") == "" || strings.HasPrefix(r.Header.Get("User-Agent"), "git/2.") {
					w.Header().Set("Content-Type", "application/x-git-upload-pack-advertisement")
					msg := "ERR " + echo(r) + "\n"
					fmt.Fprintf(w, "%04x%s", len(msg)+4, msg)
					return
				}
				next.ServeHTTP(w, r)
			})
		}},
		"git fetch is redirected elsewhere": {refsOK: true, wrap: func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if strings.HasPrefix(r.Header.Get("User-Agent"), "git/2.") {
					http.Redirect(w, r, elsewhere.URL+r.URL.RequestURI(), http.StatusMovedPermanently)
					return
				}
				next.ServeHTTP(w, r)
			})
		}},
		"redirect elsewhere": {wrap: func(http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, elsewhere.URL+r.URL.RequestURI(), http.StatusFound)
			})
		}},
	}
	for name, h := range hostile {
		t.Run(name, func(t *testing.T) {
			fx := newFixture(t, h.wrap)
			f := fx.newForge("")
			ctx := context.Background()
			for _, cred := range []Credential{bearer(readerToken), {Mode: "basic", Token: readerToken}} {
				for _, rev := range []string{"main", fx.c0} {
					_, err := f.Resolve(ctx, cred, "acme", "app", mustRev(t, rev))
					if h.refsOK && rev == "main" {
						if err != nil {
							t.Fatalf("Resolve(main) = %v", err)
						}
						continue
					}
					if err == nil {
						t.Fatalf("Resolve(%s) succeeded against a hostile forge", rev)
					}
					if !errors.Is(err, ErrUnavailable) && !errors.Is(err, ErrNotFound) {
						t.Errorf("Resolve(%s) = %v, want ErrUnavailable or ErrNotFound", rev, err)
					}
					assertNoSecret(t, "Resolve error", err.Error(), readerToken)
				}
				_, err := f.Fetch(ctx, cred, "acme", "app", fx.c3, Limits{})
				if err == nil {
					t.Fatal("Fetch succeeded against a hostile forge")
				}
				assertNoSecret(t, "Fetch error", err.Error(), readerToken)
			}
			assertNoSecret(t, "log", fx.logs.String(), readerToken)
		})
	}
	if n := redirectHits.Load(); n != 0 {
		t.Errorf("a redirect was followed %d times", n)
	}
}

func TestRedirectIsUnavailable(t *testing.T) {
	fx := newFixture(t, func(http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "https://example.invalid/"+r.URL.Path, http.StatusMovedPermanently)
		})
	})
	f := fx.newForge("")
	_, err := f.Resolve(context.Background(), bearer(readerToken), "acme", "app", Rev{})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Resolve = %v, want ErrUnavailable", err)
	}
	_, err = f.Fetch(context.Background(), bearer(readerToken), "acme", "app", fx.c3, Limits{})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Fetch = %v, want ErrUnavailable", err)
	}
}

func TestUnavailableForge(t *testing.T) {
	fx := newFixture(t, nil)
	f := NewGit("http://127.0.0.1:1", nil, "", Limits{}, nil) // nothing listens on port 1
	_, err := f.Resolve(context.Background(), bearer(readerToken), "acme", "app", Rev{})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Resolve = %v, want ErrUnavailable", err)
	}
	_, err = f.Fetch(context.Background(), bearer(readerToken), "acme", "app", fx.c3, Limits{})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Fetch = %v, want ErrUnavailable", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = fx.newForge("").Resolve(ctx, bearer(readerToken), "acme", "app", Rev{})
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Resolve with a cancelled context = %v", err)
	}
	_, err = fx.newForge("").Fetch(ctx, bearer(readerToken), "acme", "app", fx.c3, Limits{})
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Fetch with a cancelled context = %v", err)
	}
	for _, bad := range []string{"ftp://forge", "http://user:pw@forge", "not a url\x7f", "http://"} {
		_, err := NewGit(bad, nil, "", Limits{}, nil).Resolve(context.Background(), bearer(readerToken), "a", "b", Rev{})
		if !errors.Is(err, ErrUnavailable) {
			t.Errorf("NewGit(%q).Resolve = %v, want ErrUnavailable", bad, err)
		}
		if strings.Contains(fmt.Sprint(err), "pw") {
			t.Errorf("error shows the URL's password: %v", err)
		}
	}
}

func TestCredentialNeverPrinted(t *testing.T) {
	c := Credential{Mode: "basic", Token: readerToken, User: "u"}
	for _, s := range []string{fmt.Sprint(c), fmt.Sprintf("%v %+v %#v %s", c, c, c, c), c.LogValue().String()} {
		assertNoSecret(t, "formatted credential", s, readerToken)
	}
}
