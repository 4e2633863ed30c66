package devforge

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// maxRequestBody bounds an upload-pack request body. Requests are small
// (wants, haves, ref prefixes); the bound only stops a runaway client.
const maxRequestBody = 32 << 20

// namePattern is what the forge accepts as an owner or repository name. It is
// the contract's repository slug, which also keeps every name inside root.
var namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$`)

// protocolPattern bounds what a client may pass through Git-Protocol into the
// backend's environment ("version=2", possibly with ':'-joined extras).
var protocolPattern = regexp.MustCompile(`^[A-Za-z0-9=:._-]{1,64}$`)

// Server is a read-only git smart-HTTP forge over the bare repositories under
// its root. It is an http.Handler; its zero value is not usable, use New.
type Server struct {
	root string
	git  string
	log  *slog.Logger

	mu        sync.Mutex
	grants    map[string]map[string]bool // token → "owner/repo" or "owner/*"
	downloads map[string]int             // "owner/repo" → upload-pack POSTs with wants, archive downloads
	gitea     giteaState                 // the Gitea API's users (gitea.go)
	perPage   int                        // SetTreesPerPage
}

// New returns a forge serving the bare repositories {root}/{owner}/{repo}.git
// with gitBinary (empty means "git" from PATH). A nil log discards.
func New(root, gitBinary string, log *slog.Logger) (*Server, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("devforge: root: %w", err)
	}
	if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("devforge: root %s is not a directory", abs)
	}
	if gitBinary == "" {
		gitBinary = "git"
	}
	bin, err := exec.LookPath(gitBinary)
	if err != nil {
		return nil, fmt.Errorf("devforge: git binary: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{
		root:      abs,
		git:       bin,
		log:       log,
		grants:    make(map[string]map[string]bool),
		downloads: make(map[string]int),
	}, nil
}

// Grant gives token read access to each repository named "owner/repo", or to
// every repository of an owner with "owner/*". Grants accumulate.
func (s *Server) Grant(token string, repos ...string) {
	if token == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.grants[token]
	if g == nil {
		g = make(map[string]bool)
		s.grants[token] = g
	}
	for _, r := range repos {
		g[r] = true
	}
}

// Revoke removes every grant of token, as a forge does when a token is
// revoked.
func (s *Server) Revoke(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.grants, token)
}

// PackDownloads reports how many upload-pack POSTs for owner/repo carried
// `want` lines, that is, asked for content, plus how many archives of it the
// Gitea API served. Listing refs does not count. One fetch may take more
// than one such POST (a shallow fetch over protocol v0 negotiates the
// shallow boundary first), so callers compare with zero.
func (s *Server) PackDownloads(owner, repo string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.downloads[owner+"/"+repo]
}

// SetAllowReachableSHA1InWant sets uploadpack.allowReachableSHA1InWant in the
// repository, which decides whether a client may fetch a commit by its sha
// when it is not a ref tip.
func (s *Server) SetAllowReachableSHA1InWant(owner, repo string, allow bool) error {
	return s.setConfig(owner, repo, "uploadpack.allowReachableSHA1InWant", allow)
}

// SetAllowFilter sets uploadpack.allowFilter in the repository, which decides
// whether the forge serves partial fetches (--filter). CreateRepo turns it on,
// as on GitHub; tests turn it off to exercise clients against older forges.
func (s *Server) SetAllowFilter(owner, repo string, allow bool) error {
	return s.setConfig(owner, repo, "uploadpack.allowFilter", allow)
}

func (s *Server) setConfig(owner, repo, key string, value bool) error {
	dir, err := repoDir(s.root, owner, repo)
	if err != nil {
		return err
	}
	if _, err := runGit(context.Background(), s.git, dir, nil, "config", key, strconv.FormatBool(value)); err != nil {
		return fmt.Errorf("devforge: set %s: %w", key, err)
	}
	return nil
}

// ServeHTTP serves git smart HTTP for upload-pack only, and the Gitea API
// subset of gitea.go under /api/v1/.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/api/v1/") {
		s.serveAPI(w, r)
		return
	}
	owner, repo, rest, ok := splitRepoPath(r.URL.Path)
	if !ok {
		http.NotFound(w, r)
		return
	}
	service := r.URL.Query().Get("service")
	switch {
	case rest == "git-receive-pack" || (rest == "info/refs" && service == "git-receive-pack"):
		http.Error(w, "this forge is read-only", http.StatusForbidden)
		return
	case rest == "info/refs" && r.Method == http.MethodGet && service == "git-upload-pack":
	case rest == "git-upload-pack" && r.Method == http.MethodPost:
	default:
		// The dumb protocol and anything else are not served.
		http.NotFound(w, r)
		return
	}
	if !s.allowed(tokenOf(r), owner, repo) {
		s.log.Debug("devforge: refused", "owner", owner, "repo", repo, "path", rest)
		notFound(w)
		return
	}
	if _, err := os.Stat(filepath.Join(s.root, owner, repo+".git", "HEAD")); err != nil {
		notFound(w)
		return
	}

	// The backend sees neither the token nor any other credential.
	r = r.Clone(r.Context())
	r.Header.Del("Authorization")
	r.Header.Del("Cookie")

	if rest == "git-upload-pack" {
		body, err := io.ReadAll(io.LimitReader(r.Body, maxRequestBody+1))
		if err != nil {
			http.Error(w, "reading request", http.StatusBadRequest)
			return
		}
		if len(body) > maxRequestBody {
			http.Error(w, "request too large", http.StatusRequestEntityTooLarge)
			return
		}
		if hasWants(body, r.Header.Get("Content-Encoding")) {
			s.mu.Lock()
			s.downloads[owner+"/"+repo]++
			s.mu.Unlock()
		}
		// CGI needs a length, and git sends large requests chunked.
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		r.TransferEncoding = nil
	}

	env := []string{
		"GIT_PROJECT_ROOT=" + s.root,
		"GIT_HTTP_EXPORT_ALL=1",
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
	}
	if p := r.Header.Get("Git-Protocol"); protocolPattern.MatchString(p) {
		env = append(env, "GIT_PROTOCOL="+p)
	} else {
		r.Header.Del("Git-Protocol")
	}
	h := &cgi.Handler{
		Path:   s.git,
		Args:   []string{"http-backend"},
		Root:   "/",
		Env:    env,
		Logger: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		Stderr: stderrLog{s.log},
	}
	s.log.Debug("devforge: serve", "owner", owner, "repo", repo, "path", rest)
	h.ServeHTTP(w, r)
}

// stderrLog sends the backend's standard error ("not our ref" and the like,
// which clients see anyway) to the debug log instead of the process's.
type stderrLog struct{ log *slog.Logger }

func (l stderrLog) Write(p []byte) (int, error) {
	l.log.Debug("devforge: git http-backend", "stderr", strings.TrimSpace(string(p)))
	return len(p), nil
}

func notFound(w http.ResponseWriter) {
	http.Error(w, "Repository not found.", http.StatusNotFound)
}

func (s *Server) allowed(token, owner, repo string) bool {
	if token == "" {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.grants[token]
	return g[owner+"/"+repo] || g[owner+"/*"]
}

// tokenOf returns the bearer token or the basic-auth password.
func tokenOf(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if t, ok := strings.CutPrefix(h, "Bearer "); ok {
		return strings.TrimSpace(t)
	}
	if enc, ok := strings.CutPrefix(h, "Basic "); ok {
		raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(enc))
		if err != nil {
			return ""
		}
		if _, pass, ok := strings.Cut(string(raw), ":"); ok {
			return pass
		}
	}
	return ""
}

// splitRepoPath splits "/owner/repo.git/rest".
func splitRepoPath(p string) (owner, repo, rest string, ok bool) {
	parts := strings.SplitN(strings.TrimPrefix(p, "/"), "/", 3)
	if len(parts) != 3 {
		return "", "", "", false
	}
	owner = parts[0]
	repo, found := strings.CutSuffix(parts[1], ".git")
	if !found || !namePattern.MatchString(owner) || !namePattern.MatchString(repo) {
		return "", "", "", false
	}
	return owner, repo, parts[2], true
}

// hasWants reports whether an upload-pack request body carries a `want` line,
// in protocol v0/v1 (first line "want <oid> caps") or v2 (a fetch command's
// arguments). It reads pkt-lines and stops at the first malformed one.
func hasWants(body []byte, encoding string) bool {
	var r io.Reader = bytes.NewReader(body)
	if strings.EqualFold(encoding, "gzip") {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return false
		}
		defer zr.Close()
		r = io.LimitReader(zr, maxRequestBody)
	}
	var hdr [4]byte
	buf := make([]byte, 65520)
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return false
		}
		n, err := strconv.ParseUint(string(hdr[:]), 16, 16)
		if err != nil {
			return false
		}
		if n < 4 { // flush, delim, response-end
			continue
		}
		if n > uint64(len(buf))+4 {
			return false
		}
		line := buf[:n-4]
		if _, err := io.ReadFull(r, line); err != nil {
			return false
		}
		if bytes.HasPrefix(line, []byte("want ")) || bytes.HasPrefix(line, []byte("want-ref ")) {
			return true
		}
	}
}

func repoDir(root, owner, repo string) (string, error) {
	if !namePattern.MatchString(owner) || !namePattern.MatchString(repo) {
		return "", fmt.Errorf("devforge: invalid repository name %q", owner+"/"+repo)
	}
	return filepath.Join(root, owner, repo+".git"), nil
}

// runGit runs git in dir with a configuration-free environment and returns
// its standard output.
func runGit(ctx context.Context, git, dir string, stdin io.Reader, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, git, args...)
	cmd.Dir = dir
	cmd.Env = gitEnv()
	cmd.Stdin = stdin
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 500 {
			msg = msg[:500]
		}
		return nil, fmt.Errorf("git %s: %w: %s", args[0], err, msg)
	}
	return stdout.Bytes(), nil
}

func gitEnv() []string {
	env := []string{
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_AUTHOR_NAME=devforge",
		"GIT_AUTHOR_EMAIL=devforge@localhost",
		"GIT_COMMITTER_NAME=devforge",
		"GIT_COMMITTER_EMAIL=devforge@localhost",
		"LC_ALL=C",
	}
	if p := os.Getenv("PATH"); p != "" {
		env = append(env, "PATH="+p)
	}
	return env
}

// errNoRepo is returned by helpers that need an existing repository.
var errNoRepo = errors.New("devforge: repository does not exist")
