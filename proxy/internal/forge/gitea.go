package forge

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Bounds on what a Gitea API answer may be.
const (
	maxAPIBytes     = 4 << 20 // one repository, branch, tag, commit or user object
	adminCacheTTL   = 30 * time.Second
	maxAdminEntries = 10_000
)

// loginPattern is what the sudo mode accepts as a forge login: Gitea's and
// Forgejo's user names (letters, digits, '-', '_', '.'; at most 40).
var loginPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,39}$`)

// ValidLogin reports whether s can be a Gitea or Forgejo login.
func ValidLogin(s string) bool { return loginPattern.MatchString(s) }

type giteaForge struct {
	api     string       // {base}/api/v1; "" when baseErr is set
	client  *http.Client // API calls
	archive *http.Client // archive downloads: no overall timeout, ctx bounds them
	log     *slog.Logger
	baseErr error

	mu     sync.Mutex
	admins map[string]adminEntry // sudo: login → is_admin, briefly
}

type adminEntry struct {
	admin   bool
	expires time.Time
}

// NewGitea returns a Forge speaking the Gitea/Forgejo REST API at
// {baseURL}/api/v1 (see the package doc). A revision resolves with one or two
// GETs (the repository for its default branch, a branch, a tag, or a commit
// by sha); a tree is the forge's listing of it with the contents of one
// archive download, /repos/{owner}/{repo}/archive/{commit}.tar.gz, read as
// a stream, and of the raw files the archive lacks (giteatree.go),
// normalised into the same Tree the git kind yields for the commit. httpClient
// may be nil for a keep-alive client with a 30 s timeout (archives are not
// bound by it: the caller's context is); redirects are never followed. A nil
// log discards. A bad baseURL is logged and makes every call fail with
// ErrUnavailable.
//
// Credentials: bearer, basic and jwt as for the git kind. In sudo mode the
// credential's Token is the proxy's admin token and its User the login to act
// as; every call carries `Sudo: <login>`, and before the first call for a
// login (then at most every 30 s) the forge is asked, as the admin and
// without Sudo, whether that login is an administrator: acting as one is
// refused with ErrForbidden, so a leaked or forged identity claim can never
// borrow admin rights.
func NewGitea(baseURL string, httpClient *http.Client, log *slog.Logger) Forge {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := noRedirects(httpClient)
	archive := c
	archive.Timeout = 0

	g := &giteaForge{client: &c, archive: &archive, log: log, admins: make(map[string]adminEntry)}
	base, err := parseBaseURL(baseURL)
	if err != nil {
		g.baseErr = err
		log.Error("forge: unusable forge URL", "err", err)
	} else {
		g.api = base + "/api/v1"
	}
	return g
}

// giteaCall is one operation's view of the forge: its headers and the
// strings its logs must never show.
type giteaCall struct {
	g       *giteaForge
	op      string
	log     *slog.Logger
	header  http.Header
	secrets []string
	sudo    bool
}

// begin validates what every call needs, builds the credential's headers
// and, in sudo mode, refuses an administrator login.
func (g *giteaForge) begin(ctx context.Context, op string, cred Credential, owner, repo string, log *slog.Logger) (*giteaCall, error) {
	if g.baseErr != nil {
		return nil, newError(op, ErrUnavailable, "forge is misconfigured")
	}
	c := &giteaCall{g: g, op: op, log: log, header: http.Header{}}
	if strings.EqualFold(cred.Mode, "sudo") {
		if !headerSafe(cred.Token) {
			log.Error("forge: the sudo token is missing or unusable")
			return nil, newError(op, ErrUnavailable, "forge is misconfigured")
		}
		if !ValidLogin(cred.User) {
			return nil, &opError{op: "credential", msg: "no usable forge login to act as", kind: ErrUnauthenticated, login: true}
		}
		c.secrets = []string{cred.Token, "Bearer " + cred.Token}
		c.header.Set("Authorization", "Bearer "+cred.Token)
		if err := c.refuseAdmin(ctx, cred.User); err != nil {
			return nil, err
		}
		c.header.Set("Sudo", cred.User)
		c.sudo = true
	} else {
		auth, err := cred.authorization()
		if err != nil {
			return nil, err
		}
		c.secrets = cred.secrets()
		c.header.Set("Authorization", auth)
	}
	if owner == "" || repo == "" {
		return nil, newError(op, ErrNotFound, repoNotFound)
	}
	return c, nil
}

// refuseAdmin asks the forge, as the admin token itself, whether login is an
// administrator. The answer is kept briefly; an administrator is refused.
func (c *giteaCall) refuseAdmin(ctx context.Context, login string) error {
	g := c.g
	key := strings.ToLower(login)
	now := time.Now()
	g.mu.Lock()
	e, ok := g.admins[key]
	g.mu.Unlock()
	if !ok || !now.Before(e.expires) {
		var u struct {
			Login   string `json:"login"`
			IsAdmin *bool  `json:"is_admin"`
		}
		resp, err := c.send(ctx, http.MethodGet, "/users/"+url.PathEscape(login), g.client)
		if err != nil {
			return err
		}
		defer drain(resp.Body)
		switch code := resp.StatusCode; {
		case code == http.StatusOK:
		case code == http.StatusNotFound:
			// No such login: the same answer as a repository it cannot see.
			return newError(c.op, ErrNotFound, repoNotFound)
		case code == http.StatusUnauthorized || code == http.StatusForbidden:
			c.log.Error("forge: the sudo token was refused by the forge", "status", code)
			return newError(c.op, ErrUnavailable, "forge is misconfigured")
		default:
			return c.answerError(code, resp.Header)
		}
		if err := c.decode(ctx, resp, &u); err != nil {
			return err
		}
		if !strings.EqualFold(u.Login, login) || u.IsAdmin == nil {
			// A forge that hides is_admin from our token cannot vouch that
			// the login is not an administrator.
			c.log.Error("forge: the user answer does not say whether the login is an administrator; is the sudo token an admin's?")
			return newError(c.op, ErrUnavailable, "forge is misconfigured")
		}
		e = adminEntry{admin: *u.IsAdmin, expires: now.Add(adminCacheTTL)}
		g.mu.Lock()
		if len(g.admins) >= maxAdminEntries {
			clear(g.admins)
		}
		g.admins[key] = e
		g.mu.Unlock()
	}
	if e.admin {
		c.log.Warn("forge: sudo as an administrator refused")
		return newError(c.op, ErrForbidden, "acting as a forge administrator is refused")
	}
	return nil
}

// send makes one request with the call's headers.
func (c *giteaCall) send(ctx context.Context, method, apiPath string, client *http.Client) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.g.api+apiPath, nil)
	if err != nil {
		return nil, newError(c.op, ErrUnavailable, "forge request failed")
	}
	for k, v := range c.header {
		req.Header[k] = v
	}
	req.Header.Set("User-Agent", userAgent)
	resp, err := client.Do(req)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, lateError(c.op, ctxErr)
		}
		reason := "forge unreachable"
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			reason = "forge did not answer in time"
		}
		c.log.Warn("forge: request failed", "err", redact(err.Error(), c.secrets))
		return nil, newError(c.op, ErrUnavailable, reason)
	}
	return resp, nil
}

// get sends a GET and maps the forge's status (answerError). On success
// the body is the caller's to close.
func (c *giteaCall) get(ctx context.Context, apiPath string, client *http.Client) (*http.Response, error) {
	resp, err := c.send(ctx, http.MethodGet, apiPath, client)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		drain(resp.Body)
		return nil, c.answerError(resp.StatusCode, resp.Header)
	}
	return resp, nil
}

// answerError maps a status other than 200 (h: the answer's header). 401 is the forge refusing the credential: Gitea
// authenticates a token before it looks at any repository (a token it
// does not know is 401 for every path, forge.TestRealGitea), so the
// answer tells nothing about one; in sudo mode the credential is the
// proxy's own, which is the operator's to fix. 403, 404 and 410 are
// "repository not found" (Gitea answers 404 for a repository the caller
// may not see, 403 for what the token's scopes do not cover), 422 is
// "revision not found" (a malformed name or sha), 429 is ErrRateLimited,
// a redirect or anything else is ErrUnavailable (httpError).
func (c *giteaCall) answerError(code int, h http.Header) error {
	if c.sudo && code == http.StatusForbidden {
		// Gitea answers 403 to Sudo from a token that is not an
		// administrator's: the operator must hear of it.
		c.log.Error("forge: Sudo refused; is the sudo token an administrator's?")
	}
	switch {
	case code == http.StatusUnauthorized && c.sudo:
		c.log.Error("forge: the sudo token was refused by the forge", "status", code)
		return newError(c.op, ErrUnavailable, "forge is misconfigured")
	case code == http.StatusUnauthorized:
		c.log.Info("forge: the credential was refused", "status", code)
		return refusedError(c.op)
	case code == http.StatusForbidden || code == http.StatusNotFound || code == http.StatusGone:
		c.log.Debug("forge: not visible", "status", code)
		return newError(c.op, ErrNotFound, repoNotFound)
	case code == http.StatusUnprocessableEntity:
		return newError(c.op, ErrNotFound, revNotFound)
	case code >= 300 && code < 400:
		c.log.Warn("forge: redirect not followed", "status", code)
		return httpError(c.op, code, h)
	}
	c.log.Warn("forge: error status", "status", code)
	return httpError(c.op, code, h)
}

// getJSON GETs apiPath and decodes one bounded JSON object into out.
func (c *giteaCall) getJSON(ctx context.Context, apiPath string, out any) error {
	resp, err := c.get(ctx, apiPath, c.g.client)
	if err != nil {
		return err
	}
	defer drain(resp.Body)
	return c.decode(ctx, resp, out)
}

func (c *giteaCall) decode(ctx context.Context, resp *http.Response, out any) error {
	return c.decodeMax(ctx, resp, out, maxAPIBytes)
}

// decodeMax is decode for an answer of at most max bytes.
func (c *giteaCall) decodeMax(ctx context.Context, resp *http.Response, out any, max int64) error {
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "application/json" {
		c.log.Warn("forge: unexpected content type", "content_type", mt)
		return newError(c.op, ErrUnavailable, "forge does not speak the Gitea API")
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return lateError(c.op, ctxErr)
		}
		return newError(c.op, ErrUnavailable, "forge connection failed")
	}
	if int64(len(body)) > max {
		return newError(c.op, ErrUnavailable, "forge answer too large")
	}
	if err := json.Unmarshal(body, out); err != nil {
		c.log.Warn("forge: malformed API answer", "err", err.Error())
		return newError(c.op, ErrUnavailable, "forge sent a malformed answer")
	}
	return nil
}

// repoPath is /repos/{owner}/{repo}, path-escaped.
func repoPath(owner, repo string) string {
	return "/repos/" + url.PathEscape(owner) + "/" + url.PathEscape(repo)
}

// refPath escapes each '/'-separated component of a branch or tag name.
func refPath(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return strings.Join(parts, "/")
}

// Resolve implements Forge.
func (g *giteaForge) Resolve(ctx context.Context, cred Credential, owner, repo string, rev Rev) (string, error) {
	const op = "resolve"
	log := g.log.With("op", op, "owner", owner, "repo", repo, "rev", rev.String(), "kind", "gitea")
	c, err := g.begin(ctx, op, cred, owner, repo, log)
	if err != nil {
		return "", err
	}
	base := repoPath(owner, repo)
	switch rev.kind {
	case revDefault:
		var r struct {
			DefaultBranch string `json:"default_branch"`
			Empty         bool   `json:"empty"`
		}
		if err := c.getJSON(ctx, base, &r); err != nil {
			return "", err
		}
		if r.Empty || r.DefaultBranch == "" || !validRefName(r.DefaultBranch) {
			return "", newError(op, ErrNotFound, revNotFound)
		}
		return c.branch(ctx, base, r.DefaultBranch)
	case revSHA:
		var cm struct {
			SHA string `json:"sha"`
		}
		// The forge's own commit API decides what it serves the caller: a
		// commit object of this repository, reachable or not, is what the
		// caller can read through the forge anyway.
		if err := c.getJSON(ctx, base+"/git/commits/"+rev.name+"?stat=false&verification=false&files=false", &cm); err != nil {
			return "", c.missing(ctx, base, rev, err)
		}
		if strings.ToLower(cm.SHA) != rev.name {
			log.Warn("forge: the commit answer names another commit")
			return "", newError(op, ErrUnavailable, "forge sent a malformed answer")
		}
		return rev.name, nil
	case revBranch:
		commit, err := c.branch(ctx, base, rev.name)
		return commit, c.missing(ctx, base, rev, err)
	case revTag:
		commit, err := c.tag(ctx, base, rev.name)
		return commit, c.missing(ctx, base, rev, err)
	}
	commit, err := c.branch(ctx, base, rev.name)
	if errors.Is(err, ErrNotFound) {
		commit, err = c.tag(ctx, base, rev.name)
	}
	return commit, c.missing(ctx, base, rev, err)
}

// missing gives a lookup's not-found the answer the git kind gives. Gitea
// answers 404 alike for a repository the caller cannot see and for a
// branch, tag or commit the repository lacks, so on that path alone the
// repository itself is asked for: invisible or absent, it is "repository
// not found" whatever rev named (an all-hex name is not called an
// abbreviated sha before a repository is found); found, the rev is what is
// missing. Any other error, and nil, pass through.
func (c *giteaCall) missing(ctx context.Context, base string, rev Rev, err error) error {
	if !errors.Is(err, ErrNotFound) {
		return err
	}
	var r struct {
		ID int64 `json:"id"`
	}
	if err := c.getJSON(ctx, base, &r); err != nil {
		return err
	}
	return rev.errNoSuchRef(c.op)
}

func (c *giteaCall) branch(ctx context.Context, base, name string) (string, error) {
	var b struct {
		Name   string `json:"name"`
		Commit struct {
			ID string `json:"id"`
		} `json:"commit"`
	}
	if err := c.getJSON(ctx, base+"/branches/"+refPath(name), &b); err != nil {
		return "", err
	}
	return c.sha(b.Commit.ID)
}

func (c *giteaCall) tag(ctx context.Context, base, name string) (string, error) {
	var t struct {
		Name   string `json:"name"`
		Commit struct {
			SHA string `json:"sha"`
		} `json:"commit"`
	}
	if err := c.getJSON(ctx, base+"/tags/"+refPath(name), &t); err != nil {
		return "", err
	}
	return c.sha(t.Commit.SHA)
}

func (c *giteaCall) sha(s string) (string, error) {
	s = strings.ToLower(s)
	if !isFullSHA(s) {
		c.log.Warn("forge: a ref answer carries no full commit sha")
		return "", newError(c.op, ErrUnavailable, "forge sent a malformed answer")
	}
	return s, nil
}

// Fetch implements Forge: the commit's tree as the forge lists it, its
// contents from one archive download (giteatree.go).
func (g *giteaForge) Fetch(ctx context.Context, cred Credential, owner, repo, commit string, lim Limits) (*Tree, error) {
	const op = "fetch"
	if !isFullSHA(commit) {
		return nil, newError(op, ErrBadRev, "commit must be a full lowercase sha")
	}
	log := g.log.With("op", op, "owner", owner, "repo", repo, "commit", commit, "kind", "gitea")
	c, err := g.begin(ctx, op, cred, owner, repo, log)
	if err != nil {
		return nil, err
	}
	return c.fetchTree(ctx, owner, repo, commit, lim.withDefaults())
}
