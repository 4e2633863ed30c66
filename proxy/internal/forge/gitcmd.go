package forge

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// remote says how a git command may reach the forge. A nil *remote means the
// command must not reach anything: every protocol is disabled, which also
// stops a partial clone from fetching missing objects lazily.
type remote struct {
	auth     string // the Authorization header value
	protocol int    // 0 or 2
}

// maxStderr bounds what is kept of git's standard error.
const maxStderr = 32 << 10

// passEnv are the variables git may inherit: how to find programs and how the
// operator reaches the network (proxies, CA bundles). Nothing else.
var passEnv = []string{
	"PATH", "TMPDIR",
	"http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "all_proxy",
	"SSL_CERT_FILE", "SSL_CERT_DIR", "GIT_SSL_CAINFO", "GIT_SSL_CAPATH",
}

// gitEnv builds git's whole environment. The credential travels in a
// GIT_CONFIG_* pair (http.extraHeader), never in argv where any local user
// could read it.
func gitEnv(home string, r *remote) []string {
	env := []string{
		"HOME=" + home,
		"XDG_CONFIG_HOME=" + home,
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_ASKPASS=",
		"SSH_ASKPASS=",
		"LC_ALL=C", // git's messages are classified below
	}
	for _, k := range passEnv {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	cfg := [][2]string{
		{"credential.helper", ""},
		{"core.askPass", ""},
		{"core.hooksPath", "/dev/null"},
		{"gc.auto", "0"},
		{"maintenance.auto", "false"},
		{"init.defaultBranch", "main"},
		{"protocol.allow", "never"},
		// Keep what a fetch receives as one pack, written as it arrives,
		// so its size on disk is what the forge has sent (fetch.go).
		{"transfer.unpackLimit", "1"},
	}
	if r != nil {
		cfg = append(cfg,
			[2]string{"protocol.http.allow", "always"},
			[2]string{"protocol.https.allow", "always"},
			[2]string{"protocol.version", strconv.Itoa(r.protocol)},
			[2]string{"http.followRedirects", "false"},
			[2]string{"http.extraHeader", "Authorization: " + r.auth},
		)
	}
	env = append(env, "GIT_CONFIG_COUNT="+strconv.Itoa(len(cfg)))
	for i, kv := range cfg {
		n := strconv.Itoa(i)
		env = append(env, "GIT_CONFIG_KEY_"+n+"="+kv[0], "GIT_CONFIG_VALUE_"+n+"="+kv[1])
	}
	return env
}

// gitCmd prepares git in its own process group, so cancelling ctx kills the
// helpers it spawns (remote-http, index-pack) too.
func (g *gitForge) gitCmd(ctx context.Context, dir, home string, r *remote, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, g.git, args...)
	cmd.Dir = dir
	cmd.Env = gitEnv(home, r)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// run runs git to completion, with stdout going to stdout (may be nil), and
// returns its (bounded) standard error.
func (g *gitForge) run(ctx context.Context, dir, home string, r *remote, stdout io.Writer, args ...string) (string, error) {
	cmd := g.gitCmd(ctx, dir, home, r, args...)
	stderr := &boundedBuffer{max: maxStderr}
	cmd.Stdout = stdout
	cmd.Stderr = stderr
	err := cmd.Run()
	return stderr.String(), err
}

// output runs git and returns its standard output, bounded by max bytes.
func (g *gitForge) output(ctx context.Context, dir, home string, max int, args ...string) (string, string, error) {
	out := &boundedBuffer{max: max}
	stderr, err := g.run(ctx, dir, home, nil, out, args...)
	if err == nil && out.overflow {
		err = errors.New("output too large")
	}
	return out.String(), stderr, err
}

// failure is what a failed network git command means.
type failure uint8

const (
	failUnavailable failure = iota
	failNotFound            // the repository is missing or invisible to the credential
	failRefused             // the forge will not serve that object by sha
)

var httpStatus = regexp.MustCompile(`returned error: (\d{3})`)

// classify reads git's (LC_ALL=C) standard error.
func classify(stderr string) failure {
	switch {
	case strings.Contains(stderr, "not our ref"),
		strings.Contains(stderr, "not allow request for unadvertised object"),
		strings.Contains(stderr, "couldn't find remote ref"),
		strings.Contains(stderr, "no such remote ref"):
		return failRefused
	case strings.Contains(stderr, "' not found"), // fatal: repository '…' not found
		strings.Contains(stderr, "terminal prompts disabled"),
		strings.Contains(stderr, "Authentication failed"),
		strings.Contains(stderr, "could not read Username"),
		strings.Contains(stderr, "could not read Password"):
		return failNotFound
	}
	if m := httpStatus.FindStringSubmatch(stderr); m != nil {
		switch m[1] {
		case "401", "403", "404", "410":
			return failNotFound
		}
	}
	return failUnavailable
}

// boundedBuffer keeps the first max bytes written and swallows the rest, so
// a chatty or hostile process cannot grow memory.
type boundedBuffer struct {
	buf      bytes.Buffer
	max      int
	overflow bool
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.buf.Len(); room < len(p) {
		b.overflow = true
		if room > 0 {
			b.buf.Write(p[:room])
		}
		return len(p), nil
	}
	return b.buf.Write(p)
}

func (b *boundedBuffer) String() string { return b.buf.String() }
