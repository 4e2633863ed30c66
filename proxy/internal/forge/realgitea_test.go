package forge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/giteatest"
)

// TestRealGitea drives both forge kinds against a real Gitea (the pinned
// release `make deps` builds; LSP_TEST_GITEA): resolving every rev form,
// fetching a tree (the same through the API's archive and through git),
// the bearer, basic and sudo modes, an administrator never acted as, a
// private repository invisible to a user without access (the same 404 as
// a missing one), a token Gitea does not know refused alike whatever the
// repository, and a revoked token losing access within the cache's TTL.
func TestRealGitea(t *testing.T) {
	bin := giteatest.Binary()
	if bin == "" {
		t.Skip(giteatest.Env + " is not set (make test sets it)")
	}
	g := giteatest.Start(t, bin)
	owner := g.CreateUser(t, "acme", false)
	alice := g.CreateUser(t, "alice", false)
	bob := g.CreateUser(t, "bob", false)
	g.CreateUser(t, "admin2", true)
	g.CreateRepo(t, owner.Login, "app", true)
	g.AddCollaborator(t, owner.Login, "app", alice.Login)
	files := map[string]string{"go.mod": "module example.com/app\n\ngo 1.22\n", "main.go": "package main\n\nfunc main() {}\n", "sub/x.go": "package sub\n"}
	c1 := g.Push(t, owner.Login, "app", "main", files, "v1")
	hex := g.Push(t, owner.Login, "app", "cafe", map[string]string{"cafe.go": "package main\n"})
	c2 := g.Push(t, owner.Login, "app", "main", map[string]string{"main.go": "package main\n\nfunc main() { println() }\n"})

	aliceTok, aliceID := g.Token(t, alice, "lsp")
	bobTok, _ := g.Token(t, bob, "lsp")
	adminTok := g.AdminToken(t)

	client := &http.Client{Timeout: 30 * time.Second}
	api := NewGitea(g.URL, client, slog.New(slog.DiscardHandler))
	viaGit := NewGit(g.URL, client, "", Limits{}, slog.New(slog.DiscardHandler))
	ctx := context.Background()

	for _, kind := range []struct {
		name string
		f    Forge
	}{{"gitea", api}, {"git", viaGit}} {
		t.Run(kind.name, func(t *testing.T) {
			for _, tc := range []struct{ rev, want string }{
				{"", c2}, {"HEAD", c2}, {"main", c2}, {"refs/heads/main", c2},
				{"v1", c1}, {"refs/tags/v1", c1}, {"cafe", hex}, {c1, c1},
			} {
				got, err := kind.f.Resolve(ctx, bearer(aliceTok), "acme", "app", mustRev(t, tc.rev))
				if err != nil || got != tc.want {
					t.Errorf("Resolve(%q) = %q, %v; want %q", tc.rev, got, err, tc.want)
				}
			}
			if _, err := kind.f.Resolve(ctx, bearer(aliceTok), "acme", "app", mustRev(t, c2[:9])); !errors.Is(err, ErrBadRev) {
				t.Errorf("Resolve(short sha) = %v, want ErrBadRev", err)
			}
			// Private: bob sees the same 404 for it as for a repository
			// that does not exist.
			_, hidden := kind.f.Resolve(ctx, bearer(bobTok), "acme", "app", Rev{})
			_, missing := kind.f.Resolve(ctx, bearer(bobTok), "acme", "nope", Rev{})
			if !errors.Is(hidden, ErrNotFound) || !errors.Is(missing, ErrNotFound) || hidden.Error() != missing.Error() {
				t.Errorf("bob: private %v, missing %v; want the same not found", hidden, missing)
			}
			// A token Gitea does not know is 401 before any repository is
			// looked at (API and smart HTTP alike): the same answer for a
			// private repository, a missing one and a missing owner, so it
			// tells nothing about either — to the gitea kind the forge
			// refusing the credential, to the git kind (which cannot
			// count on that of every forge) not found. A known token
			// without access stays 404 (above).
			var refusals []string
			for _, cred := range []Credential{bearer("0123456789abcdef0123456789abcdef01234567"), {Mode: "basic", Token: "not-a-token", User: alice.Login}} {
				for _, or := range [][2]string{{"acme", "app"}, {"acme", "nope"}, {"nobody", "nope"}} {
					_, err := kind.f.Resolve(ctx, cred, or[0], or[1], Rev{})
					d, _ := DetailOf(err)
					if kind.name == "gitea" && (!errors.Is(err, ErrUnauthenticated) || !d.Refused) || kind.name == "git" && !errors.Is(err, ErrNotFound) {
						t.Errorf("unknown token, %s/%s: %v; want the forge's refusal (gitea) or not found (git)", or[0], or[1], err)
					}
					if err != nil {
						refusals = append(refusals, err.Error())
					}
				}
			}
			for _, r := range refusals {
				if r != refusals[0] {
					t.Errorf("refusals differ: %q", refusals)
					break
				}
			}
			// What is missing answers alike on both kinds: a repository bob
			// cannot see whatever the rev names (a hex name is not called an
			// abbreviated sha before the repository is found), and a rev
			// alice's repository lacks.
			for _, rev := range []string{"", "main", "refs/heads/main", "refs/tags/v1", "cafe", "abc1234", "nope", c1} {
				_, hidden := kind.f.Resolve(ctx, bearer(bobTok), "acme", "app", mustRev(t, rev))
				_, missing := kind.f.Resolve(ctx, bearer(bobTok), "acme", "nope", mustRev(t, rev))
				for _, err := range []error{hidden, missing} {
					if !errors.Is(err, ErrNotFound) || err.Error() != newError("resolve", ErrNotFound, repoNotFound).Error() {
						t.Errorf("bob, rev %q: %v; want %q", rev, err, repoNotFound)
					}
				}
			}
			for _, rev := range []string{"nope", "refs/heads/nope", "refs/tags/nope", strings.Repeat("0", 40)} {
				if _, err := kind.f.Resolve(ctx, bearer(aliceTok), "acme", "app", mustRev(t, rev)); !errors.Is(err, ErrNotFound) || err.Error() != newError("resolve", ErrNotFound, revNotFound).Error() {
					t.Errorf("alice, rev %q: %v; want %q", rev, err, revNotFound)
				}
			}
			// Basic: the token as the password.
			if got, err := kind.f.Resolve(ctx, Credential{Mode: "basic", Token: aliceTok, User: alice.Login}, "acme", "app", Rev{}); err != nil || got != c2 {
				t.Errorf("basic: %q, %v", got, err)
			}
		})
	}

	// The archive and git give the same tree.
	viaAPI, err := api.Fetch(ctx, bearer(aliceTok), "acme", "app", c1, Limits{})
	if err != nil {
		t.Fatalf("gitea Fetch: %v", err)
	}
	viaClone, err := viaGit.Fetch(ctx, bearer(aliceTok), "acme", "app", c1, Limits{})
	if err != nil {
		t.Fatalf("git Fetch: %v", err)
	}
	got := map[string]string{}
	for _, f := range viaAPI.Files {
		got[f.Path] = string(f.Data)
	}
	if !reflect.DeepEqual(got, files) || !reflect.DeepEqual(viaAPI.Files, viaClone.Files) {
		t.Errorf("trees: archive %v, git %d files; want %v", got, len(viaClone.Files), files)
	}

	// What Gitea's archive (git archive) leaves out or rewrites — paths
	// .gitattributes marks export-ignore, an export-subst file's $Format$ —
	// comes through the raw-file API, names that need escaping included;
	// the listing comes in pages of 1,000, so the tree has more.
	attrFiles := map[string]string{
		".gitattributes":            "/tests export-ignore\n.gitattributes export-ignore\nversion.go export-subst\n",
		"tests/a_test.go":           "package tests\n",
		"tests/with space/ü #?%.go": "package odd\n",
		"version.go":                "package app\n\nconst commit = \"$Format:%H$\"\n",
	}
	for i := range 1100 {
		attrFiles[fmt.Sprintf("gen/%02d/f%04d.txt", i%40, i)] = fmt.Sprint(i)
	}
	attrs := g.Push(t, owner.Login, "app", "attrs", attrFiles)
	viaAPI, err = api.Fetch(ctx, bearer(aliceTok), "acme", "app", attrs, Limits{})
	if err != nil {
		t.Fatalf("gitea Fetch of export-ignore: %v", err)
	}
	viaClone, err = viaGit.Fetch(ctx, bearer(aliceTok), "acme", "app", attrs, Limits{})
	if err != nil {
		t.Fatalf("git Fetch of export-ignore: %v", err)
	}
	if len(viaAPI.Files) != len(attrFiles) || !reflect.DeepEqual(viaAPI, viaClone) {
		t.Errorf("export-ignore: archive %d files, git %d; want %d, the same", len(viaAPI.Files), len(viaClone.Files), len(attrFiles))
	}

	// Sudo: the admin token acts as a user, never as an administrator.
	sudo := func(login string) Credential { return Credential{Mode: "sudo", Token: adminTok, User: login} }
	if got, err := api.Resolve(ctx, sudo("alice"), "acme", "app", Rev{}); err != nil || got != c2 {
		t.Errorf("sudo alice: %q, %v", got, err)
	}
	if _, err := api.Resolve(ctx, sudo("bob"), "acme", "app", Rev{}); !errors.Is(err, ErrNotFound) {
		t.Errorf("sudo bob: %v, want ErrNotFound", err)
	}
	for _, login := range []string{g.AdminUser, "admin2"} {
		if _, err := api.Resolve(ctx, sudo(login), "acme", "app", Rev{}); !errors.Is(err, ErrForbidden) {
			t.Errorf("sudo %s: %v, want ErrForbidden", login, err)
		}
	}

	// Revocation takes effect within the cache's TTL.
	const ttl = time.Second
	cached := NewCache(api, ttl, 0, nil)
	if _, err := cached.Resolve(ctx, bearer(aliceTok), "acme", "app", Rev{}); err != nil {
		t.Fatalf("cached resolve: %v", err)
	}
	g.DeleteToken(t, alice, aliceID)
	time.Sleep(ttl + 100*time.Millisecond)
	if _, err := cached.Resolve(ctx, bearer(aliceTok), "acme", "app", Rev{}); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("a revoked token after the cache's TTL: %v; want the forge's refusal", err)
	}
}
