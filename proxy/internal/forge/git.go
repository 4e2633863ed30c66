package forge

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Forge reads repositories as the caller.
type Forge interface {
	// Resolve resolves rev to a full commit sha and confirms, with the
	// caller's credential, that it is reachable in owner/repo — also when rev
	// is already a full sha. A repository the caller cannot see and one that
	// does not exist both return ErrNotFound (same error, same message).
	// Forge 5xx, network failures and timeouts are ErrUnavailable.
	Resolve(ctx context.Context, cred Credential, owner, repo string, rev Rev) (commit string, err error)
	// Fetch downloads the tree of commit with the caller's credential and
	// normalises it, enforcing lim (zero fields take DefaultLimits).
	Fetch(ctx context.Context, cred Credential, owner, repo, commit string, lim Limits) (*Tree, error)
}

// Bounds on what the forge may send to the Go client.
const (
	maxAdvertBytes = 64 << 20 // a v0 advertisement lists every ref
	maxLsRefsBytes = 64 << 20
	userAgent      = "git/2-hanzo-lsp" // forges serve smart HTTP to "git/" agents
)

type gitForge struct {
	base   string // no trailing slash; "" when baseErr is set
	client *http.Client
	git    string
	log    *slog.Logger
	// lim bounds Resolve's downloads, which take no Limits (reachable).
	lim Limits
	// proven remembers the older commits reachable proved (provenTTL).
	proven *provenSet

	baseErr error
}

// NewGit returns a Forge speaking git smart HTTP to the forge at baseURL
// (http or https, without credentials in it); repositories are at
// {baseURL}/{owner}/{repo}.git. httpClient may be nil for a keep-alive
// client with a 30 s timeout; whatever client is given, redirects are never
// followed. gitBinary may be empty for "git" from PATH. lim should be the
// limits Fetch is called with (zero fields take DefaultLimits): proving an
// older commit reachable in Resolve, before anyone has paid, downloads no
// more than fetching a tree within lim may. A nil log discards. A bad
// baseURL is logged and makes every call fail with ErrUnavailable.
func NewGit(baseURL string, httpClient *http.Client, gitBinary string, lim Limits, log *slog.Logger) Forge {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if gitBinary == "" {
		gitBinary = "git"
	}
	c := noRedirects(httpClient)
	g := &gitForge{client: &c, git: gitBinary, log: log, lim: lim.withDefaults(), proven: newProvenSet()}
	g.base, g.baseErr = parseBaseURL(baseURL)
	if g.baseErr != nil {
		log.Error("forge: unusable forge URL", "err", g.baseErr)
	}
	return g
}

// parseBaseURL checks a forge base URL and returns it without a trailing
// slash.
func parseBaseURL(baseURL string) (string, error) {
	u, err := url.Parse(baseURL)
	switch {
	case err != nil:
		return "", errors.New("forge URL does not parse")
	case u.Scheme != "http" && u.Scheme != "https":
		return "", errors.New("forge URL must be http or https")
	case u.Host == "":
		return "", errors.New("forge URL has no host")
	case u.User != nil:
		return "", errors.New("forge URL must not carry credentials")
	case u.RawQuery != "" || u.Fragment != "":
		return "", errors.New("forge URL must not have a query or fragment")
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// repoURL is the clone URL of owner/repo, path-escaped.
func (g *gitForge) repoURL(owner, repo string) string {
	return g.base + "/" + url.PathEscape(owner) + "/" + url.PathEscape(repo) + ".git"
}

// check validates what every call needs and returns the Authorization value.
func (g *gitForge) check(op string, cred Credential, owner, repo string) (string, error) {
	if g.baseErr != nil {
		return "", newError(op, ErrUnavailable, "forge is misconfigured")
	}
	auth, err := cred.authorization()
	if err != nil {
		return "", err
	}
	if owner == "" || repo == "" {
		return "", newError(op, ErrNotFound, repoNotFound)
	}
	return auth, nil
}

// Resolve implements Forge.
func (g *gitForge) Resolve(ctx context.Context, cred Credential, owner, repo string, rev Rev) (string, error) {
	const op = "resolve"
	auth, err := g.check(op, cred, owner, repo)
	if err != nil {
		return "", err
	}
	log := g.log.With("op", op, "owner", owner, "repo", repo, "rev", rev.String())
	secrets := cred.secrets()
	u := g.repoURL(owner, repo)

	adv, err := g.advertise(ctx, op, log, secrets, auth, u, rev.keepRefs())
	if err != nil {
		return "", err
	}
	refs := adv.refs
	if adv.version == 2 {
		if _, ok := adv.caps["ls-refs"]; !ok {
			log.Warn("forge: protocol v2 without ls-refs")
			return "", newError(op, ErrUnavailable, "forge does not speak git smart HTTP")
		}
		refs, err = g.lsRefs(ctx, op, log, secrets, auth, u, adv.objectFormat(), refPrefixes(rev), rev.keepRefs())
		if err != nil {
			return "", err
		}
	}
	if commit, ok := pick(refs, rev); ok {
		return commit, nil
	}
	sha, isSHA := rev.Commit()
	if !isSHA {
		return "", rev.errNoSuchRef(op)
	}
	if !matchesFormat(sha, adv.objectFormat()) {
		return "", newError(op, ErrNotFound, revNotFound)
	}
	// Not a tip: the git CLI proves reachability, within g.lim's bound,
	// unless it was proved lately.
	if g.proven.has(u, sha) {
		return sha, nil
	}
	if err := g.reachable(ctx, log, cred, auth, u, sha, adv.filter()); err != nil {
		return "", err
	}
	g.proven.add(u, sha)
	return sha, nil
}

// advertise GETs /info/refs asking for protocol v2; of a v0 forge's
// advertisement it keeps the refs keep takes (parseAdvertisement).
func (g *gitForge) advertise(ctx context.Context, op string, log *slog.Logger, secrets []string, auth, repoURL string, keep func(ref) bool) (*advert, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, repoURL+"/info/refs?service=git-upload-pack", nil)
	if err != nil {
		return nil, newError(op, ErrUnavailable, "forge request failed")
	}
	req.Header.Set("Git-Protocol", "version=2")
	req.Header.Set("Accept", "*/*")
	resp, err := g.do(ctx, op, log, secrets, req, auth, "application/x-git-upload-pack-advertisement")
	if err != nil {
		return nil, err
	}
	defer drain(resp.Body)
	adv, err := parseAdvertisement(resp.Body, maxAdvertBytes, keep)
	if err != nil {
		return nil, g.protocolError(ctx, op, log, err)
	}
	return adv, nil
}

// lsRefs POSTs one protocol v2 ls-refs command.
func (g *gitForge) lsRefs(ctx context.Context, op string, log *slog.Logger, secrets []string, auth, repoURL, objectFormat string, prefixes []string, keep func(ref) bool) ([]ref, error) {
	body := lsRefsRequest(objectFormat, prefixes)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, repoURL+"/git-upload-pack", bytes.NewReader(body))
	if err != nil {
		return nil, newError(op, ErrUnavailable, "forge request failed")
	}
	req.Header.Set("Git-Protocol", "version=2")
	req.Header.Set("Content-Type", "application/x-git-upload-pack-request")
	req.Header.Set("Accept", "application/x-git-upload-pack-result")
	resp, err := g.do(ctx, op, log, secrets, req, auth, "application/x-git-upload-pack-result")
	if err != nil {
		return nil, err
	}
	defer drain(resp.Body)
	refs, err := parseLsRefs(resp.Body, maxLsRefsBytes, keep)
	if err != nil {
		return nil, g.protocolError(ctx, op, log, err)
	}
	return refs, nil
}

// do sends req with the credential and maps the forge's answer: 401, 403,
// 404 and 410 are "repository not found" (forges answer any of them for a
// repository the caller may not see); 429 is ErrRateLimited; a redirect or
// any other failure is ErrUnavailable (httpError). On success the body is
// the caller's to close.
func (g *gitForge) do(ctx context.Context, op string, log *slog.Logger, secrets []string, req *http.Request, auth, wantType string) (*http.Response, error) {
	req.Header.Set("Authorization", auth)
	req.Header.Set("User-Agent", userAgent)
	resp, err := g.client.Do(req)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, lateError(op, ctxErr)
		}
		reason := "forge unreachable"
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			reason = "forge did not answer in time"
		}
		// url.Error names the URL, which has no credential; still redact.
		log.Warn("forge: request failed", "err", redact(err.Error(), secrets))
		return nil, newError(op, ErrUnavailable, reason)
	}
	switch code := resp.StatusCode; {
	case code == http.StatusOK:
	case code == http.StatusUnauthorized || code == http.StatusForbidden || code == http.StatusNotFound || code == http.StatusGone:
		// 401 too: a smart-HTTP forge in general (git http-backend behind
		// a web server's per-repository rules) may answer 401 to a valid
		// credential for a private repository that exists and 404 for one
		// that does not, so 401 would tell which exist (CONTRACT §3). Only
		// the gitea kind, whose forge refuses an unknown token alike for
		// every path, says the credential was refused.
		drain(resp.Body)
		log.Debug("forge: repository not visible", "status", code)
		return nil, newError(op, ErrNotFound, repoNotFound)
	case code >= 300 && code < 400:
		drain(resp.Body)
		log.Warn("forge: redirect not followed", "status", code)
		return nil, httpError(op, code, resp.Header)
	default:
		drain(resp.Body)
		log.Warn("forge: error status", "status", code)
		return nil, httpError(op, code, resp.Header)
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != wantType {
		drain(resp.Body)
		log.Warn("forge: unexpected content type", "content_type", mt)
		return nil, newError(op, ErrUnavailable, "forge does not speak git smart HTTP")
	}
	return resp, nil
}

func (g *gitForge) protocolError(ctx context.Context, op string, log *slog.Logger, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return lateError(op, ctxErr)
	}
	log.Warn("forge: bad protocol answer", "err", err.Error())
	switch {
	case errors.Is(err, errForgeERR):
		return newError(op, ErrUnavailable, "forge refused the request")
	case errors.Is(err, errPktMalformed):
		return newError(op, ErrUnavailable, "forge sent a malformed answer")
	case errors.Is(err, errPktTooLarge):
		return newError(op, ErrUnavailable, "forge answer too large")
	}
	return newError(op, ErrUnavailable, "forge connection failed")
}

// matchesFormat reports whether sha has the length of the forge's hash.
func matchesFormat(sha, objectFormat string) bool {
	if objectFormat == "sha256" {
		return len(sha) == 64
	}
	return len(sha) == 40
}

// drain reads a little of what is left so the connection can be reused.
func drain(body io.ReadCloser) {
	_, _ = io.CopyN(io.Discard, body, 64<<10)
	_ = body.Close()
}

// noRedirects is a copy of httpClient (or a default one) that never follows
// a redirect and keeps no cookies: a redirect would carry the caller's
// credential to another URL, so the 3xx is reported instead (see doc.go).
func noRedirects(httpClient *http.Client) http.Client {
	var c http.Client
	if httpClient != nil {
		c = *httpClient
	} else {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = 32
		c = http.Client{Transport: t, Timeout: 30 * time.Second}
	}
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	c.Jar = nil
	return c
}
