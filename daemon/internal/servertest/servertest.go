// Package servertest finds the reviewed language servers for the daemon's
// real-server tests: the pinned installs `make deps` puts in the checkout's
// .bin (make test names them in LSP_TEST_GOPLS and LSP_TEST_TYPESCRIPT).
// Without one a test is skipped — except under CI, where a missing server
// is a broken install step and fails the test. AsNobody re-runs tests as
// an ordinary uid, as production runs the daemon.
package servertest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Gopls returns the reviewed gopls binary.
func Gopls(t testing.TB) string {
	t.Helper()
	for _, p := range []string{os.Getenv("LSP_TEST_GOPLS"), fromCheckout(".bin/gopls"), "/root/go/bin/gopls"} {
		if p == "" {
			continue
		}
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p
		}
	}
	missing(t, "gopls is not installed (make deps installs it; LSP_TEST_GOPLS names it)")
	return ""
}

// TypeScript returns node and the reviewed TypeScript server's directory
// (the one holding node_modules/typescript-language-server), both with
// links resolved, as the daemon's config pins them.
func TypeScript(t testing.TB) (node, dir string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err == nil {
		node, err = filepath.EvalSymlinks(node)
	}
	if err != nil {
		missing(t, "node is not installed (make deps installs it)")
		return "", ""
	}
	for _, c := range []string{os.Getenv("LSP_TEST_TYPESCRIPT"), fromCheckout(".bin/ts")} {
		if c == "" {
			continue
		}
		if abs, err := filepath.Abs(c); err == nil {
			if real, err := filepath.EvalSymlinks(abs); err == nil {
				return node, real
			}
		}
	}
	missing(t, "the TypeScript server is not installed (make deps installs it; LSP_TEST_TYPESCRIPT names it)")
	return "", ""
}

func missing(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal(why)
	}
	t.Skip(why)
}

// fromCheckout is rel below the checkout the test runs in (the directory
// holding go.work), or "" outside one.
func fromCheckout(rel string) string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return filepath.Join(dir, rel)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}
