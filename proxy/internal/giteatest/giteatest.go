// Package giteatest runs a real Gitea for tests: the pinned release that
// `make deps` builds from the Go module proxy (LSP_TEST_GITEA names the
// binary, which sits beside the release's options/ and templates/: a build
// without bindata reads them from there), on SQLite in a throwaway directory, listening on loopback only,
// with an administrator made through Gitea's own CLI and everything else —
// users, tokens, repositories, pushes — through its public API and git, as
// a real installation would be driven.
package giteatest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Env names the Gitea binary; tests that need it skip without it.
const Env = "LSP_TEST_GITEA"

// Binary returns the Gitea binary from Env, or "" when unset.
func Binary() string { return os.Getenv(Env) }

// Server is a running Gitea.
type Server struct {
	URL       string // http://127.0.0.1:PORT, no trailing slash
	AdminUser string
	AdminPass string

	bin, dir, config string
	runUser          string
	cred             *syscall.Credential // nil: as the test's own user
	cmd              *exec.Cmd
	done             chan struct{}
	client           *http.Client
}

// Start runs Gitea for the duration of t.
func Start(t testing.TB, bin string) *Server {
	t.Helper()
	// As root Gitea runs as nobody, who must reach its directory: under
	// /tmp itself, not a TMPDIR a test made private.
	parent := ""
	if os.Geteuid() == 0 {
		parent = "/tmp"
	}
	dir, err := os.MkdirTemp(parent, "giteatest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{
		URL:       fmt.Sprintf("http://127.0.0.1:%d", port),
		AdminUser: "root-admin",
		AdminPass: randomHex(16),
		bin:       bin,
		dir:       dir,
		config:    filepath.Join(dir, "app.ini"),
		done:      make(chan struct{}),
		client:    &http.Client{Timeout: 30 * time.Second},
	}
	// Gitea refuses to run as root, rightly: as root the tests run it as
	// nobody, owning its directory.
	s.runUser = currentUser()
	if os.Geteuid() == 0 {
		s.runUser, s.cred = "nobody", &syscall.Credential{Uid: 65534, Gid: 65534}
	}
	if s.cred != nil {
		// The release may be cached where nobody cannot reach it (root's
		// home is 0700): nobody runs a copy in its own directory.
		if s.bin, err = copyRelease(bin, filepath.Join(dir, "release")); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(s.config, []byte(s.appINI(port)), 0o600); err != nil {
		t.Fatal(err)
	}
	if s.cred != nil {
		for _, p := range []string{dir, s.config} {
			if err := os.Chown(p, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if out, err := s.cli(context.Background(), "migrate"); err != nil {
		t.Fatalf("gitea migrate: %v\n%s", err, out)
	}
	if out, err := s.cli(context.Background(), "admin", "user", "create", "--admin", "--username", s.AdminUser,
		"--password", s.AdminPass, "--email", "admin@example.test", "--must-change-password=false"); err != nil {
		t.Fatalf("gitea admin user create: %v\n%s", err, out)
	}
	log, err := os.Create(filepath.Join(t.TempDir(), "gitea.log"))
	if err != nil {
		t.Fatal(err)
	}
	logPath := log.Name()
	s.cmd = exec.Command(s.bin, "web", "--config", s.config)
	s.cmd.Dir = dir
	s.cmd.Env = s.env()
	s.cmd.Stdout, s.cmd.Stderr = log, log
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: s.cred}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.cmd.Wait(); log.Close(); close(s.done) }()
	t.Cleanup(s.stop)
	deadline := time.Now().Add(90 * time.Second)
	for {
		req, _ := http.NewRequest(http.MethodGet, s.URL+"/api/v1/version", nil)
		req.Header.Set("Authorization", s.adminAuth())
		resp, err := s.client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case <-s.done:
			b, _ := os.ReadFile(logPath)
			t.Fatalf("gitea exited at start:\n%s", tail(b))
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logPath)
			t.Fatalf("gitea did not answer within 90s:\n%s", tail(b))
		}
	}
	return s
}

func (s *Server) appINI(port int) string {
	return fmt.Sprintf(`APP_NAME = giteatest
RUN_MODE = prod
RUN_USER = %[5]s
WORK_PATH = %[1]s

[server]
STATIC_ROOT_PATH = %[6]s
PROTOCOL = http
HTTP_ADDR = 127.0.0.1
HTTP_PORT = %[2]d
ROOT_URL = http://127.0.0.1:%[2]d/
DISABLE_SSH = true
OFFLINE_MODE = true
APP_DATA_PATH = %[1]s/data
LFS_START_SERVER = false

[database]
DB_TYPE = sqlite3
PATH = %[1]s/data/gitea.db
SQLITE_JOURNAL_MODE = WAL

[repository]
ROOT = %[1]s/repos
DEFAULT_BRANCH = main

[security]
INSTALL_LOCK = true
SECRET_KEY = %[3]s
INTERNAL_TOKEN = %[4]s
PASSWORD_HASH_ALGO = pbkdf2_hi

[oauth2]
ENABLED = false

[service]
DISABLE_REGISTRATION = true
REQUIRE_SIGNIN_VIEW = true
DEFAULT_ALLOW_CREATE_ORGANIZATION = true

[mailer]
ENABLED = false

[cron]
ENABLED = false

[indexer]
REPO_INDEXER_ENABLED = false

[log]
MODE = console
LEVEL = Warn
ROOT_PATH = %[1]s/log

[session]
PROVIDER = memory

[cache]
ADAPTER = memory

[queue]
TYPE = level
DATADIR = %[1]s/queues
`, s.dir, port, randomHex(32), "giteatest-internal-"+randomHex(24), s.runUser, filepath.Dir(s.bin))
}

// env is Gitea's environment: nothing of the test's own.
func (s *Server) env() []string {
	return []string{
		"HOME=" + s.dir,
		"PATH=" + os.Getenv("PATH"),
		"GITEA_WORK_DIR=" + s.dir,
		"GIT_CONFIG_NOSYSTEM=1",
	}
}

func (s *Server) cli(ctx context.Context, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.bin, append(args, "--config", s.config)...)
	cmd.Dir = s.dir
	cmd.Env = s.env()
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	return cmd.CombinedOutput()
}

func (s *Server) stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(15 * time.Second):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
	}
}

// User is a Gitea account.
type User struct {
	Login, Password string
}

// CreateUser makes an account through the admin API.
func (s *Server) CreateUser(t testing.TB, login string, admin bool) User {
	t.Helper()
	u := User{Login: login, Password: "pw-" + randomHex(12)}
	s.api(t, s.adminAuth(), http.MethodPost, "/admin/users", map[string]any{
		"username": login, "password": u.Password, "email": login + "@example.test",
		"must_change_password": false, "visibility": "public",
	}, http.StatusCreated, nil)
	if admin {
		s.api(t, s.adminAuth(), http.MethodPatch, "/admin/users/"+login, map[string]any{
			"admin": true, "login_name": login, "source_id": 0,
		}, http.StatusOK, nil)
	}
	return u
}

// Token makes an access token for u that reads repositories and users
// (what the forge client needs), and returns it with its id.
func (s *Server) Token(t testing.TB, u User, name string) (token string, id int64) {
	t.Helper()
	var out struct {
		ID    int64  `json:"id"`
		SHA1  string `json:"sha1"`
		Token string `json:"token"`
	}
	s.api(t, basic(u.Login, u.Password), http.MethodPost, "/users/"+u.Login+"/tokens", map[string]any{
		"name": name, "scopes": []string{"read:repository", "read:user", "read:organization"},
	}, http.StatusCreated, &out)
	if out.SHA1 == "" {
		out.SHA1 = out.Token
	}
	return out.SHA1, out.ID
}

// AdminToken makes an all-scopes token for the administrator (sudo mode
// needs one).
func (s *Server) AdminToken(t testing.TB) string {
	t.Helper()
	var out struct {
		SHA1 string `json:"sha1"`
	}
	s.api(t, s.adminAuth(), http.MethodPost, "/users/"+s.AdminUser+"/tokens", map[string]any{
		"name": "sudo-" + randomHex(4), "scopes": []string{"all"},
	}, http.StatusCreated, &out)
	return out.SHA1
}

// DeleteToken revokes u's token id.
func (s *Server) DeleteToken(t testing.TB, u User, id int64) {
	t.Helper()
	s.api(t, basic(u.Login, u.Password), http.MethodDelete, fmt.Sprintf("/users/%s/tokens/%d", u.Login, id), nil, http.StatusNoContent, nil)
}

// CreateRepo makes owner/name (owner a user) through the admin API.
func (s *Server) CreateRepo(t testing.TB, owner, name string, private bool) {
	t.Helper()
	s.api(t, s.adminAuth(), http.MethodPost, "/admin/users/"+owner+"/repos", map[string]any{
		"name": name, "private": private, "default_branch": "main", "auto_init": false,
	}, http.StatusCreated, nil)
}

// AddCollaborator gives login read access to owner/repo.
func (s *Server) AddCollaborator(t testing.TB, owner, repo, login string) {
	t.Helper()
	s.api(t, s.adminAuth(), http.MethodPut, "/repos/"+owner+"/"+repo+"/collaborators/"+login, map[string]any{"permission": "read"}, http.StatusNoContent, nil)
}

// Push commits files (path → content) on branch in a fresh clone of
// owner/repo and pushes it, with tags (name → "" for a lightweight tag on
// the new commit). It returns the commit.
func (s *Server) Push(t testing.TB, owner, repo, branch string, files map[string]string, tags ...string) string {
	t.Helper()
	work := t.TempDir()
	remote := strings.Replace(s.URL, "http://", "http://"+url.PathEscape(s.AdminUser)+":"+url.PathEscape(s.AdminPass)+"@", 1) + "/" + owner + "/" + repo + ".git"
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = work
		cmd.Env = []string{"HOME=" + work, "PATH=" + os.Getenv("PATH"), "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0",
			"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.test", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.test"}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v\n%s", args[0], err, strings.ReplaceAll(string(out), s.AdminPass, "***"))
		}
		return strings.TrimSpace(string(out))
	}
	run("init", "-q", "-b", branch)
	run("remote", "add", "origin", remote)
	if _, err := exec.Command("git", "-C", work, "fetch", "-q", "origin", branch).CombinedOutput(); err == nil {
		run("reset", "-q", "--hard", "FETCH_HEAD")
	}
	for p, c := range files {
		full := filepath.Join(work, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run("add", "-A")
	run("commit", "-q", "-m", "commit on "+branch)
	for _, tag := range tags {
		run("tag", tag)
	}
	run("push", "-q", "origin", "HEAD:refs/heads/"+branch)
	if len(tags) > 0 {
		run("push", "-q", "origin", "--tags")
	}
	return run("rev-parse", "HEAD")
}

func (s *Server) adminAuth() string { return basic(s.AdminUser, s.AdminPass) }

func basic(user, pass string) string {
	req, _ := http.NewRequest(http.MethodGet, "/", nil)
	req.SetBasicAuth(user, pass)
	return req.Header.Get("Authorization")
}

// api calls the Gitea API and fails t unless it answers want.
func (s *Server) api(t testing.TB, auth, method, path string, body any, want int, out any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, s.URL+"/api/v1"+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", auth)
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != want {
		t.Fatalf("gitea %s %s: %d, want %d: %s", method, path, resp.StatusCode, want, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("gitea %s %s: %v", method, path, err)
		}
	}
}

// copyRelease copies the Gitea binary and the options/ and templates/
// beside it into dst (readable by all), and returns the copy's binary.
func copyRelease(bin, dst string) (string, error) {
	src := filepath.Dir(bin)
	for _, d := range []string{"options", "templates"} {
		if err := os.CopyFS(filepath.Join(dst, d), os.DirFS(filepath.Join(src, d))); err != nil {
			return "", fmt.Errorf("copy the Gitea release: %w", err)
		}
	}
	in, err := os.Open(bin)
	if err != nil {
		return "", err
	}
	defer in.Close()
	out := filepath.Join(dst, filepath.Base(bin))
	f, err := os.OpenFile(out, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(f, in); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	return out, filepath.WalkDir(dst, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.Chmod(p, 0o755)
		}
		return nil
	})
}

func currentUser() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return os.Getenv("USER")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	addr, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		return 0, errors.New("no TCP address")
	}
	return addr.Port, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func tail(b []byte) string {
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}
