package devforge

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const token = "tok-devforge-test"

type fixture struct {
	root   string
	srv    *Server
	http   *httptest.Server
	c1, c2 string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	fx := &fixture{root: t.TempDir()}
	var err error
	if fx.c1, err = CreateRepo(fx.root, "acme", "app", map[string]string{
		"README.md":   "hello\n",
		"run.sh":      ExecPrefix + "#!/bin/sh\n",
		"link":        SymlinkPrefix + "README.md",
		"vendor/sub":  SubmodulePrefix + strings.Repeat("1", 40),
		"\"odd\nname": "quoted path",
	}, "one"); err != nil {
		t.Fatal(err)
	}
	if fx.c2, err = CreateRepo(fx.root, "acme", "app", map[string]string{"README.md": "two\n"}, "two"); err != nil {
		t.Fatal(err)
	}
	if _, err := CreateRepo(fx.root, "acme", "other", map[string]string{"x": "x"}, "x"); err != nil {
		t.Fatal(err)
	}
	if fx.srv, err = New(fx.root, "", nil); err != nil {
		t.Fatal(err)
	}
	fx.http = httptest.NewServer(fx.srv)
	t.Cleanup(fx.http.Close)
	return fx
}

func gitOut(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(gitEnv(), "HOME="+dir)
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func TestRepositoryContent(t *testing.T) {
	fx := newFixture(t)
	dir := filepath.Join(fx.root, "acme", "app.git")
	tree, err := gitOut(t, dir, "ls-tree", "-r", fx.c1)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"100644 blob", "\tREADME.md",
		"100755 blob", "\trun.sh",
		"120000 blob", "\tlink",
		"160000 commit " + strings.Repeat("1", 40) + "\tvendor/sub",
		`"\"odd\nname"`,
	} {
		if !strings.Contains(tree, want) {
			t.Errorf("tree of c1 lacks %q:\n%s", want, tree)
		}
	}
	if parent, _ := gitOut(t, dir, "rev-parse", fx.c2+"^"); parent != fx.c1 {
		t.Errorf("c2's parent = %s, want %s", parent, fx.c1)
	}
	if head, _ := gitOut(t, dir, "symbolic-ref", "HEAD"); head != "refs/heads/main" {
		t.Errorf("HEAD = %s", head)
	}
	// Another branch starts from nothing; tags of both kinds.
	b, err := Commit(fx.root, "acme", "app", "topic", map[string]string{"t": "t"}, "topic")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := gitOut(t, dir, "rev-list", "--count", b); err != nil || out != "1" {
		t.Errorf("topic history = %s, %v", out, err)
	}
	if err := Tag(fx.root, "acme", "app", "light", fx.c1, ""); err != nil {
		t.Fatal(err)
	}
	if err := Tag(fx.root, "acme", "app", "annotated", fx.c2, "release"); err != nil {
		t.Fatal(err)
	}
	if typ, _ := gitOut(t, dir, "cat-file", "-t", "refs/tags/light"); typ != "commit" {
		t.Errorf("light tag is a %s", typ)
	}
	if typ, _ := gitOut(t, dir, "cat-file", "-t", "refs/tags/annotated"); typ != "tag" {
		t.Errorf("annotated tag is a %s", typ)
	}
	if err := Tag(fx.root, "acme", "missing", "x", fx.c1, ""); err == nil {
		t.Error("tagging a missing repository succeeded")
	}
	for _, bad := range []struct{ owner, repo, branch string }{{"../x", "app", "main"}, {"acme", "a/b", "main"}, {"acme", "app", "a..b"}} {
		if _, err := Commit(fx.root, bad.owner, bad.repo, bad.branch, nil, "x"); err == nil {
			t.Errorf("Commit(%v) succeeded", bad)
		}
	}
}

func TestAccess(t *testing.T) {
	fx := newFixture(t)
	fx.srv.Grant(token, "acme/app")
	fx.srv.Grant("owner-wide", "acme/*")
	refs := "/info/refs?service=git-upload-pack"
	basic := func(user, pass string) string {
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
	}
	var notFoundBody string
	for _, tc := range []struct {
		name, path, auth string
		want             int
	}{
		{"bearer", "/acme/app.git" + refs, "Bearer " + token, 200},
		{"basic password", "/acme/app.git" + refs, basic("x-access-token", token), 200},
		{"owner grant", "/acme/other.git" + refs, "Bearer owner-wide", 200},
		{"no token", "/acme/app.git" + refs, "", 404},
		{"unknown token", "/acme/app.git" + refs, "Bearer nope", 404},
		{"token as basic user", "/acme/app.git" + refs, basic(token, ""), 404},
		{"no grant", "/acme/other.git" + refs, "Bearer " + token, 404},
		{"missing repo", "/acme/missing.git" + refs, "Bearer owner-wide", 404},
		{"traversal", "/acme/..%2F..%2Fetc.git" + refs, "Bearer owner-wide", 404},
		{"dumb protocol", "/acme/app.git/info/refs", "Bearer " + token, 404},
		{"dumb objects", "/acme/app.git/HEAD", "Bearer " + token, 404},
		{"receive-pack advert", "/acme/app.git/info/refs?service=git-receive-pack", "Bearer " + token, 403},
		{"receive-pack", "/acme/app.git/git-receive-pack", "Bearer " + token, 403},
	} {
		req, _ := http.NewRequest(http.MethodGet, fx.http.URL+tc.path, nil)
		if strings.HasSuffix(tc.path, "git-receive-pack") {
			req.Method = http.MethodPost
		}
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: status %d, want %d", tc.name, resp.StatusCode, tc.want)
		}
		if tc.want == 404 && strings.HasSuffix(tc.path, refs) && !strings.Contains(tc.path, "%2F") {
			if notFoundBody == "" {
				notFoundBody = string(body)
			} else if string(body) != notFoundBody {
				t.Errorf("%s: 404 body %q differs from %q", tc.name, body, notFoundBody)
			}
		}
	}
	fx.srv.Revoke(token)
	req, _ := http.NewRequest(http.MethodGet, fx.http.URL+"/acme/app.git"+refs, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("revoked token: status %d", resp.StatusCode)
	}
	http.DefaultClient.CloseIdleConnections()
}

func TestGitClientAndDownloads(t *testing.T) {
	fx := newFixture(t)
	fx.srv.Grant(token, "acme/app")
	work := t.TempDir()
	url := fx.http.URL + "/acme/app.git"
	hdr := "http.extraHeader=Authorization: Bearer " + token

	// Listing refs (protocol v2 ls-refs) is not a download.
	out, err := gitOut(t, work, "-c", hdr, "-c", "protocol.version=2", "ls-remote", url)
	if err != nil || !strings.Contains(out, fx.c2+"\tHEAD") {
		t.Fatalf("ls-remote: %v\n%s", err, out)
	}
	if n := fx.srv.PackDownloads("acme", "app"); n != 0 {
		t.Fatalf("PackDownloads after ls-remote = %d", n)
	}
	if out, err := gitOut(t, work, "-c", hdr, "clone", "--quiet", "--bare", url, "clone.git"); err != nil {
		t.Fatalf("clone: %v\n%s", err, out)
	}
	if n := fx.srv.PackDownloads("acme", "app"); n == 0 {
		t.Fatal("clone did not count as a download")
	}
	if got, _ := gitOut(t, filepath.Join(work, "clone.git"), "rev-parse", "HEAD"); got != fx.c2 {
		t.Fatalf("cloned HEAD = %s", got)
	}
	if n := fx.srv.PackDownloads("acme", "other"); n != 0 {
		t.Fatalf("another repository counted %d downloads", n)
	}
	// Pushing is refused.
	if out, err := gitOut(t, filepath.Join(work, "clone.git"), "-c", hdr, "push", url, "HEAD:refs/heads/pushed"); err == nil {
		t.Fatalf("push succeeded:\n%s", out)
	}
}

func TestAllowReachableSHA1InWant(t *testing.T) {
	fx := newFixture(t)
	fx.srv.Grant(token, "acme/app")
	url := fx.http.URL + "/acme/app.git"
	fetchOld := func() error {
		work := t.TempDir()
		if _, err := gitOut(t, work, "init", "--quiet", "--bare"); err != nil {
			return err
		}
		// Protocol v0: the client asks only for what the server allows.
		out, err := gitOut(t, work, "-c", "http.extraHeader=Authorization: Bearer "+token,
			"-c", "protocol.version=0", "fetch", "--depth=1", url, fx.c1)
		if err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		return nil
	}
	if err := fetchOld(); err == nil {
		t.Fatal("fetching an older commit by sha succeeded without allowReachableSHA1InWant")
	}
	if err := fx.srv.SetAllowReachableSHA1InWant("acme", "app", true); err != nil {
		t.Fatal(err)
	}
	if err := fetchOld(); err != nil {
		t.Fatalf("with allowReachableSHA1InWant: %v", err)
	}
	if err := fx.srv.SetAllowReachableSHA1InWant("acme", "missing", true); err == nil {
		t.Fatal("configuring a missing repository succeeded")
	}
}

// TestBackendEnvironment runs a fake backend that prints its environment,
// to see what git http-backend would receive.
func TestBackendEnvironment(t *testing.T) {
	fx := newFixture(t)
	script := filepath.Join(t.TempDir(), "fake-git")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nprintf 'Content-Type: text/plain\\r\\n\\r\\n'\nenv\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	srv, err := New(fx.root, script, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv.Grant(token, "acme/app")
	req := httptest.NewRequest(http.MethodGet, "/acme/app.git/info/refs?service=git-upload-pack", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Git-Protocol", "version=2")
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	env := rec.Body.String()
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, env)
	}
	for _, want := range []string{"GIT_PROTOCOL=version=2", "GIT_HTTP_EXPORT_ALL=1", "GIT_PROJECT_ROOT=" + srv.root, "PATH_INFO=/acme/app.git/info/refs"} {
		if !strings.Contains(env, want) {
			t.Errorf("backend environment lacks %q:\n%s", want, env)
		}
	}
	if strings.Contains(env, token) {
		t.Errorf("the token reached the backend:\n%s", env)
	}
}

func pkt(s string) string { return fmt.Sprintf("%04x%s", len(s)+4, s) }

func TestHasWants(t *testing.T) {
	sha := strings.Repeat("a", 40)
	gz := func(s string) []byte {
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		_, _ = w.Write([]byte(s))
		_ = w.Close()
		return b.Bytes()
	}
	for _, tc := range []struct {
		name string
		body []byte
		enc  string
		want bool
	}{
		{"ls-refs", []byte(pkt("command=ls-refs\n") + "0001" + pkt("peel\n") + pkt("ref-prefix refs/heads/want\n") + "0000"), "", false},
		{"v2 fetch", []byte(pkt("command=fetch\n") + "0001" + pkt("thin-pack\n") + pkt("want "+sha+"\n") + pkt("done\n") + "0000"), "", true},
		{"v0 fetch", []byte(pkt("want "+sha+" multi_ack side-band-64k\n") + "0000" + pkt("done\n")), "", true},
		{"gzip", gz(pkt("want "+sha+"\n") + "0000"), "gzip", true},
		{"bad gzip", []byte("not gzip"), "gzip", false},
		{"malformed", []byte("zzzzwant " + sha), "", false},
		{"truncated", []byte(pkt("want " + sha + "\n")[:10]), "", false},
		{"empty", nil, "", false},
	} {
		if got := hasWants(tc.body, tc.enc); got != tc.want {
			t.Errorf("%s: hasWants = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func FuzzHasWants(f *testing.F) {
	f.Add([]byte(pkt("command=fetch\n")+"0001"+pkt("want x\n")+"0000"), false)
	f.Add([]byte("0000000100020003ffff"), false)
	f.Add([]byte{0x1f, 0x8b, 0x08}, true)
	f.Fuzz(func(t *testing.T, body []byte, gz bool) {
		enc := ""
		if gz {
			enc = "gzip"
		}
		_ = hasWants(body, enc) // must not panic or run away
	})
}
