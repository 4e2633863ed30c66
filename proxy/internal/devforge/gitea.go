package devforge

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// The Gitea side of the dev forge: the part of the Gitea/Forgejo REST API
// (under /api/v1) that the proxy's gitea forge kind uses, answered from the
// same bare repositories with real git:
//
//	GET /api/v1/repos/{owner}/{repo}                      default_branch, empty
//	GET /api/v1/repos/{owner}/{repo}/branches/{branch}    commit.id
//	GET /api/v1/repos/{owner}/{repo}/tags/{tag}           commit.sha (peeled), id
//	GET /api/v1/repos/{owner}/{repo}/git/commits/{sha}    sha (any commit object of the repository)
//	GET /api/v1/repos/{owner}/{repo}/archive/{ref}.tar.gz `git archive --prefix={repo}/`, gzipped
//	GET /api/v1/repos/{owner}/{repo}/git/trees/{sha}      ?recursive=true&page=&per_page= (Gitea's paging)
//	GET /api/v1/repos/{owner}/{repo}/raw/{path}           ?ref= a file's blob as stored
//	GET /api/v1/users/{login}                             login, is_admin
//
// Identity follows Gitea: a token is sent as `Authorization: token T`,
// `Bearer T` or a basic-auth password. A token made with Grant reads what
// it was granted; a token made with AddUser acts as that user, who reads
// what the user was granted, or everything when an administrator. With
// `Sudo: LOGIN` an administrator acts as LOGIN (anyone else gets 403, an
// unknown LOGIN 404). A repository the identity cannot read is 404, like one
// that does not exist. is_admin is shown only to administrators and to the
// user itself, and is false otherwise, as in Gitea.

// devUser is one forge account.
type devUser struct {
	login  string
	admin  bool
	grants map[string]bool // "owner/repo" or "owner/*"
}

// giteaState is kept under Server.mu.
type giteaState struct {
	users  map[string]*devUser // lower-case login → user
	tokens map[string]string   // token → lower-case login
}

// AddUser creates (or updates) the account login, administrator or not,
// authenticated by token (when not empty), with read access to each
// "owner/repo" or "owner/*" in repos. Grants accumulate.
func (s *Server) AddUser(login string, admin bool, token string, repos ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gitea.users == nil {
		s.gitea.users = make(map[string]*devUser)
		s.gitea.tokens = make(map[string]string)
	}
	key := strings.ToLower(login)
	u := s.gitea.users[key]
	if u == nil {
		u = &devUser{login: login, grants: make(map[string]bool)}
		s.gitea.users[key] = u
	}
	u.admin = admin
	for _, r := range repos {
		u.grants[r] = true
	}
	if token != "" {
		s.gitea.tokens[token] = key
	}
}

// identity is who an API request acts as: a user, or a bare granted token.
type identity struct {
	user  *devUser
	token string
}

func (s *Server) canRead(id identity, owner, repo string) bool {
	if id.user == nil {
		return s.allowed(id.token, owner, repo)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return id.user.admin || id.user.grants[owner+"/"+repo] || id.user.grants[owner+"/*"]
}

// apiIdentity authenticates an API request; ok is false when the answer
// (401, 403 or 404) has been written.
func (s *Server) apiIdentity(w http.ResponseWriter, r *http.Request) (identity, bool) {
	tok := tokenOf(r)
	if t, ok := strings.CutPrefix(r.Header.Get("Authorization"), "token "); ok {
		tok = strings.TrimSpace(t)
	}
	s.mu.Lock()
	var id identity
	if key, ok := s.gitea.tokens[tok]; ok && tok != "" {
		id.user = s.gitea.users[key]
	} else if _, ok := s.grants[tok]; ok && tok != "" {
		id.token = tok
	}
	sudo := r.Header.Get("Sudo")
	var target *devUser
	if sudo != "" {
		target = s.gitea.users[strings.ToLower(sudo)]
	}
	s.mu.Unlock()
	if id.user == nil && id.token == "" {
		apiError(w, http.StatusUnauthorized, "token is required")
		return identity{}, false
	}
	if sudo != "" {
		if id.user == nil || !id.user.admin {
			apiError(w, http.StatusForbidden, "Only administrators allowed to sudo.")
			return identity{}, false
		}
		if target == nil {
			apiError(w, http.StatusNotFound, "user does not exist")
			return identity{}, false
		}
		id = identity{user: target}
	}
	return id, true
}

// serveAPI answers /api/v1/….
func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		apiError(w, http.StatusMethodNotAllowed, "method not allowed")
		return
	}
	rest := strings.TrimPrefix(r.URL.Path, "/api/v1/")
	id, ok := s.apiIdentity(w, r)
	if !ok {
		return
	}
	if login, ok := strings.CutPrefix(rest, "users/"); ok {
		s.apiUser(w, id, login)
		return
	}
	parts := strings.SplitN(rest, "/", 5) // repos, owner, repo, what, name
	if len(parts) < 3 || parts[0] != "repos" || !namePattern.MatchString(parts[1]) || !namePattern.MatchString(parts[2]) {
		apiError(w, http.StatusNotFound, "not found")
		return
	}
	owner, repo := parts[1], parts[2]
	dir := filepath.Join(s.root, owner, repo+".git")
	if _, err := os.Stat(filepath.Join(dir, "HEAD")); err != nil || !s.canRead(id, owner, repo) {
		apiError(w, http.StatusNotFound, "The target couldn't be found.")
		return
	}
	if len(parts) == 3 {
		s.apiRepo(w, r.Context(), dir, owner, repo)
		return
	}
	if len(parts) != 5 || parts[4] == "" {
		apiError(w, http.StatusNotFound, "not found")
		return
	}
	switch what, name := parts[3], parts[4]; what {
	case "branches":
		s.apiRef(w, r.Context(), dir, "refs/heads/"+name, name, false)
	case "tags":
		s.apiRef(w, r.Context(), dir, "refs/tags/"+name, name, true)
	case "git":
		if sha, ok := strings.CutPrefix(name, "trees/"); ok {
			s.apiTree(w, r, dir, sha)
			return
		}
		sha, ok := strings.CutPrefix(name, "commits/")
		if !ok || !hexPattern.MatchString(sha) {
			apiError(w, http.StatusNotFound, "not found")
			return
		}
		out, err := runGit(r.Context(), s.git, dir, nil, "cat-file", "-t", sha)
		if err != nil || strings.TrimSpace(string(out)) != "commit" {
			apiError(w, http.StatusNotFound, "commit does not exist")
			return
		}
		apiJSON(w, map[string]any{"sha": sha, "url": "", "commit": map[string]any{}})
	case "archive":
		ref, ok := strings.CutSuffix(name, ".tar.gz")
		if !ok {
			apiError(w, http.StatusNotFound, "not found")
			return
		}
		s.apiArchive(w, r.Context(), dir, owner, repo, ref)
	case "raw":
		s.apiRaw(w, r, dir, owner, repo, name)
	default:
		apiError(w, http.StatusNotFound, "not found")
	}
}

func (s *Server) apiUser(w http.ResponseWriter, id identity, login string) {
	s.mu.Lock()
	u := s.gitea.users[strings.ToLower(login)]
	var out map[string]any
	if u != nil {
		// Gitea shows is_admin to administrators and to the user itself.
		shown := id.user != nil && (id.user.admin || id.user == u)
		out = map[string]any{"login": u.login, "is_admin": shown && u.admin}
	}
	s.mu.Unlock()
	if out == nil {
		apiError(w, http.StatusNotFound, "user does not exist")
		return
	}
	apiJSON(w, out)
}

func (s *Server) apiRepo(w http.ResponseWriter, ctx context.Context, dir, owner, repo string) {
	head, err := runGit(ctx, s.git, dir, nil, "symbolic-ref", "HEAD")
	branch := strings.TrimPrefix(strings.TrimSpace(string(head)), "refs/heads/")
	if err != nil {
		branch = ""
	}
	_, err = runGit(ctx, s.git, dir, nil, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
	apiJSON(w, map[string]any{
		"name": repo, "full_name": owner + "/" + repo, "private": true,
		"default_branch": branch, "empty": err != nil,
	})
}

func (s *Server) apiRef(w http.ResponseWriter, ctx context.Context, dir, ref, name string, tag bool) {
	if _, err := runGit(ctx, s.git, dir, nil, "check-ref-format", ref); err != nil {
		apiError(w, http.StatusNotFound, "not found")
		return
	}
	commit, err := runGit(ctx, s.git, dir, nil, "rev-parse", "--verify", "--quiet", ref+"^{commit}")
	if err != nil {
		apiError(w, http.StatusNotFound, "not found")
		return
	}
	sha := strings.TrimSpace(string(commit))
	if !tag {
		apiJSON(w, map[string]any{"name": name, "commit": map[string]any{"id": sha}})
		return
	}
	obj, err := runGit(ctx, s.git, dir, nil, "rev-parse", "--verify", "--quiet", ref)
	if err != nil {
		apiError(w, http.StatusNotFound, "not found")
		return
	}
	apiJSON(w, map[string]any{"name": name, "id": strings.TrimSpace(string(obj)), "commit": map[string]any{"sha": sha}})
}

// apiArchive streams `git archive` of ref with the repository's name as the
// prefix, as Gitea does (its on-disk name: lower case), gzipped. It counts
// as a content download.
func (s *Server) apiArchive(w http.ResponseWriter, ctx context.Context, dir, owner, repo, ref string) {
	if !hexPattern.MatchString(ref) {
		if _, err := runGit(ctx, s.git, dir, nil, "check-ref-format", "--allow-onelevel", ref); err != nil {
			apiError(w, http.StatusNotFound, "not found")
			return
		}
	}
	if _, err := runGit(ctx, s.git, dir, nil, "rev-parse", "--verify", "--quiet", ref+"^{commit}"); err != nil {
		apiError(w, http.StatusNotFound, "not found")
		return
	}
	s.mu.Lock()
	s.downloads[owner+"/"+repo]++
	s.mu.Unlock()
	cmd := exec.CommandContext(ctx, s.git, "archive", "--format=tar", "--prefix="+strings.ToLower(repo)+"/", ref)
	cmd.Dir = dir
	cmd.Env = gitEnv()
	out, err := cmd.StdoutPipe()
	if err != nil {
		apiError(w, http.StatusInternalServerError, "archive failed")
		return
	}
	if err := cmd.Start(); err != nil {
		apiError(w, http.StatusInternalServerError, "archive failed")
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	gz := gzip.NewWriter(w)
	if _, err := io.Copy(gz, out); err != nil {
		_ = cmd.Process.Kill() // the client went away
	}
	_ = gz.Close()
	if err := cmd.Wait(); err != nil {
		s.log.Warn("devforge: git archive failed", "err", err)
	}
}

func apiJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json;charset=utf-8")
	_ = json.NewEncoder(w).Encode(v)
}

func apiError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json;charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"message": msg})
}

// SetTreesPerPage bounds a page of the Gitea API's tree listing, as
// Gitea's setting API.DEFAULT_GIT_TREES_PER_PAGE does (0: 1000, its
// default).
func (s *Server) SetTreesPerPage(n int) {
	s.mu.Lock()
	s.perPage = n
	s.mu.Unlock()
}

// apiTree lists the tree of a commit as Gitea's GET …/git/trees/{sha} does
// with recursive=true: every entry, trees included, with size, in pages of
// per_page (at most SetTreesPerPage's) and the total count; a sha the
// repository lacks is 400, as in Gitea.
func (s *Server) apiTree(w http.ResponseWriter, r *http.Request, dir, sha string) {
	q := r.URL.Query()
	if !hexPattern.MatchString(sha) || q.Get("recursive") != "true" {
		apiError(w, http.StatusBadRequest, "sha not found")
		return
	}
	out, err := runGit(r.Context(), s.git, dir, nil, "ls-tree", "-r", "-t", "-l", "-z", "--full-tree", sha)
	if err != nil {
		apiError(w, http.StatusBadRequest, "sha not found")
		return
	}
	type entry struct {
		Path string `json:"path"`
		Mode string `json:"mode"`
		Type string `json:"type"`
		Size int64  `json:"size"`
		SHA  string `json:"sha"`
	}
	var entries []entry
	for rec := range strings.SplitSeq(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		meta, p, _ := strings.Cut(rec, "\t")
		f := strings.Fields(meta)
		if len(f) != 4 {
			continue
		}
		size, _ := strconv.ParseInt(f[3], 10, 64)
		entries = append(entries, entry{Path: p, Mode: f[0], Type: f[1], Size: size, SHA: f[2]})
	}
	s.mu.Lock()
	most := s.perPage
	s.mu.Unlock()
	if most <= 0 {
		most = 1000
	}
	perPage, _ := strconv.Atoi(q.Get("per_page"))
	if perPage <= 0 || perPage > most {
		perPage = most
	}
	page, _ := strconv.Atoi(q.Get("page"))
	page = max(page, 1)
	start := min(perPage*(page-1), len(entries))
	end := min(start+perPage, len(entries))
	apiJSON(w, map[string]any{
		"sha": sha, "tree": entries[start:end], "truncated": end < len(entries),
		"page": page, "total_count": len(entries),
	})
}

// apiRaw serves the blob at path in the commit ref names, as stored (a
// symlink's target); it counts as a content download.
func (s *Server) apiRaw(w http.ResponseWriter, r *http.Request, dir, owner, repo, path string) {
	ref := r.URL.Query().Get("ref")
	if !hexPattern.MatchString(ref) {
		apiError(w, http.StatusNotFound, "not found")
		return
	}
	out, err := runGit(r.Context(), s.git, dir, nil, "cat-file", "blob", ref+":"+path)
	if err != nil {
		apiError(w, http.StatusNotFound, "not found")
		return
	}
	s.mu.Lock()
	s.downloads[owner+"/"+repo]++
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/octet-stream")
	_, _ = w.Write(out)
}
