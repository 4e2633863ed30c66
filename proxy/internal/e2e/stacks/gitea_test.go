package stacks

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/auth"
	"github.com/hanzoai/lsp/proxy/internal/devforge"
	"github.com/hanzoai/lsp/proxy/internal/devstack"
)

// forgeLog records what reached the forge.
type forgeLog struct {
	mu    sync.Mutex
	paths []string
	auths []string
}

func (l *forgeLog) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		l.paths = append(l.paths, r.URL.Path)
		l.auths = append(l.auths, r.Header.Get("Authorization")+"|"+r.Header.Get("Sudo"))
		l.mu.Unlock()
		h.ServeHTTP(w, r)
	})
}

func (l *forgeLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.paths)
}

func (l *forgeLog) seen(sub string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, a := range l.auths {
		if strings.Contains(a, sub) {
			return true
		}
	}
	return false
}

// TestGiteaKindWithSudo: the whole path over the Gitea API (one archive
// download per prepare), acting as the login of a verified claim with the
// proxy's admin token; an administrator login is refused, a token without
// the claim is 401, a login without access is the same 404 as no such user.
func TestGiteaKindWithSudo(t *testing.T) {
	dir := stackDir(t)
	tokenFile := filepath.Join(dir, "sudo-token")
	const adminToken = "gitea-admin-token-4f1c"
	if err := os.WriteFile(tokenFile, []byte(adminToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fl := &forgeLog{}
	s := startStack(t, devstack.Options{
		Dir:       dir,
		ForgeWrap: fl.wrap,
		ProxyEnv: map[string]string{
			"LSP_FORGE_KIND": "gitea", "LSP_FORGE_AUTH": "sudo",
			"LSP_FORGE_SUDO_TOKEN_FILE": tokenFile, "LSP_FORGE_SUDO_CLAIM": "forge_login",
		},
	})
	org := "gorg"
	commit, err := devforge.CreateRepo(s.ForgeRoot, org, "hello", devstack.SampleRepo, "sample")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Ledger.Credit(t.Context(), org, 10, "e2e"); err != nil {
		t.Fatal(err)
	}
	s.Forge.AddUser("root", true, adminToken)
	s.Forge.AddUser("alice", false, "", org+"/*")
	s.Forge.AddUser("bob", false, "")
	s.Forge.AddUser("boss", true, "")
	token := func(claims map[string]string) string {
		tok, err := auth.SignDevToken(s.KeyFile, auth.DevClaims{Subject: "someone@" + org, Owner: org, Audience: devstack.Audience, Claims: claims}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	hover := func(jwt string) answer {
		return do(t, s, http.MethodPost, "/hover", hoverBody("hello"), "Authorization", "Bearer "+jwt)
	}

	first := hover(token(map[string]string{"forge_login": "alice"}))
	if first.status != http.StatusOK || first.body["prepared"] != true || first.body["commit"] != commit {
		t.Fatalf("hover as alice: %d %s", first.status, first.raw)
	}
	md, _ := first.body["hover"].(map[string]any)["markdown"].(string)
	if !strings.Contains(md, "Hello(name string) string") {
		t.Fatalf("hover markdown %q is not Hello's", md)
	}
	// Only the Gitea API was asked, and the archive was downloaded once.
	fl.mu.Lock()
	archives := 0
	for _, p := range fl.paths {
		if !strings.HasPrefix(p, "/api/v1/") {
			t.Errorf("the gitea kind asked %s", p)
		}
		if strings.Contains(p, "/archive/") {
			archives++
		}
	}
	fl.mu.Unlock()
	if archives != 1 {
		t.Fatalf("archive downloads = %d, want 1", archives)
	}
	if !fl.seen("Bearer " + adminToken + "|alice") {
		t.Fatal("the forge never saw the admin token with Sudo: alice")
	}
	// A warm hover: no download; an X-Forge-Token is not used in sudo mode.
	second := do(t, s, http.MethodPost, "/hover", hoverBody("hello"), "Authorization", "Bearer "+token(map[string]string{"forge_login": "alice"}), "X-Forge-Token", "ignored")
	if second.status != http.StatusOK || second.body["prepared"] != false {
		t.Fatalf("warm hover: %d %s", second.status, second.raw)
	}
	rowsBefore := len(rows(t, s, org))
	downloads := s.Forge.PackDownloads(org, "hello")

	for _, tc := range []struct {
		name   string
		claims map[string]string
		status int
		code   string
	}{
		{"an administrator login", map[string]string{"forge_login": "root"}, 403, "forbidden"},
		{"another administrator, other case", map[string]string{"forge_login": "BOSS"}, 403, "forbidden"},
		{"no login claim", nil, 401, "unauthenticated"},
		{"a login in another claim", map[string]string{"preferred_username": "alice"}, 401, "unauthenticated"},
		{"not a login", map[string]string{"forge_login": "alice\nSudo: root"}, 401, "unauthenticated"},
		{"a login without access", map[string]string{"forge_login": "bob"}, 404, "not_found"},
		{"no such login", map[string]string{"forge_login": "carol"}, 404, "not_found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := hover(token(tc.claims))
			if a.status != tc.status || a.errorCode() != tc.code {
				t.Fatalf("%d %s; want %d %s", a.status, a.raw, tc.status, tc.code)
			}
		})
	}
	if fl.seen("|root") || fl.seen("|BOSS") {
		t.Fatal("the proxy sent Sudo as an administrator")
	}
	if n := len(rows(t, s, org)); n != rowsBefore {
		t.Fatalf("refused requests wrote %d rows", n-rowsBefore)
	}
	if n := s.Forge.PackDownloads(org, "hello"); n != downloads {
		t.Fatalf("refused requests downloaded %d archives", n-downloads)
	}
	if b := balance(t, s, org); b.BalanceCents != 8 {
		t.Fatalf("balance = %+v, want 8", b)
	}
}

// TestForwardedJWT: with LSP_FORGE_AUTH=jwt the caller's own token goes to
// the forge, and only a token whose audience names the forge.
func TestForwardedJWT(t *testing.T) {
	fl := &forgeLog{}
	s := startStack(t, devstack.Options{
		ForgeWrap: fl.wrap,
		ProxyEnv:  map[string]string{"LSP_FORGE_AUTH": "jwt", "LSP_FORGE_JWT_AUDIENCE": "forge.example"},
	})
	org := "jorg"
	tn := newTenant(t, s, org, "hello", 10)
	sign := func(extra ...string) string {
		tok, err := auth.SignDevToken(s.KeyFile, auth.DevClaims{Subject: "alice@" + org, Owner: org, Audience: devstack.Audience, ExtraAudiences: extra}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	forForge, forUsOnly := sign("forge.example"), sign()
	s.Forge.Grant(forForge, org+"/*")
	s.Forge.Grant(forUsOnly, org+"/*") // the forge would accept it: the proxy must not send it

	a := do(t, s, http.MethodPost, "/hover", hoverBody(tn.repo), "Authorization", "Bearer "+forForge)
	if a.status != http.StatusOK || a.body["prepared"] != true {
		t.Fatalf("hover with a token for the forge: %d %s", a.status, a.raw)
	}
	if !fl.seen("Bearer " + forForge) {
		t.Fatal("the forge never saw the forwarded token")
	}
	before := fl.count()
	refused := do(t, s, http.MethodPost, "/hover", hoverBody(tn.repo), "Authorization", "Bearer "+forUsOnly, "X-Forge-Token", tn.forgeToken)
	if refused.status != http.StatusUnauthorized || refused.errorCode() != "unauthenticated" || !strings.Contains(refused.raw, "audience") {
		t.Fatalf("hover with a token for the service only: %d %s", refused.status, refused.raw)
	}
	if fl.count() != before || fl.seen(forUsOnly) {
		t.Fatal("a token not meant for the forge reached it")
	}
}
