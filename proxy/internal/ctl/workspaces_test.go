package ctl_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
	"github.com/hanzoai/lsp/proxy/internal/auth"
	"github.com/hanzoai/lsp/proxy/internal/ctl"
	"github.com/hanzoai/lsp/proxy/internal/daemonclient"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// These tests run `lspctl workspaces delete` against real gRPC servers on
// unix sockets that speak the daemon protocol's Hello and DeleteWorkspace
// and record the keys they were asked to delete.

const (
	tenantSecret = "workspaces-test-tenant-secret"
	commitSHA    = "0123456789abcdef0123456789abcdef01234567"
)

type deleteDaemon struct {
	daemonv1.UnimplementedDaemonServer
	gone bool  // what DeleteWorkspace answers
	fail error // DeleteWorkspace's error, when set

	mu   sync.Mutex
	keys []*daemonv1.WorkspaceKey
}

func (d *deleteDaemon) Hello(context.Context, *daemonv1.HelloRequest) (*daemonv1.HelloResponse, error) {
	return &daemonv1.HelloResponse{ProtocolVersion: uint32(daemonv1.ProtocolVersion_PROTOCOL_VERSION_CURRENT)}, nil
}

func (d *deleteDaemon) DeleteWorkspace(_ context.Context, req *daemonv1.DeleteWorkspaceRequest) (*daemonv1.DeleteWorkspaceResponse, error) {
	d.mu.Lock()
	d.keys = append(d.keys, req.GetWorkspace())
	d.mu.Unlock()
	if d.fail != nil {
		return nil, d.fail
	}
	return &daemonv1.DeleteWorkspaceResponse{Deleted: d.gone}, nil
}

func (d *deleteDaemon) asked() []*daemonv1.WorkspaceKey {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*daemonv1.WorkspaceKey(nil), d.keys...)
}

// serveDaemons serves each daemon on a unix socket and returns the
// addresses and a stop function per daemon.
func serveDaemons(t *testing.T, ds ...*deleteDaemon) ([]string, []func()) {
	t.Helper()
	dir := t.TempDir()
	var addrs []string
	var stops []func()
	for i, d := range ds {
		ln, err := net.Listen("unix", filepath.Join(dir, fmt.Sprintf("d%d.sock", i)))
		if err != nil {
			t.Fatal(err)
		}
		g := grpc.NewServer()
		daemonv1.RegisterDaemonServer(g, d)
		done := make(chan struct{})
		go func() { _ = g.Serve(ln); close(done) }()
		var once sync.Once
		stop := func() { once.Do(func() { g.Stop(); <-done }) }
		t.Cleanup(stop)
		addrs, stops = append(addrs, "unix://"+ln.Addr().String()), append(stops, stop)
	}
	return addrs, stops
}

// proxyEnv is a proxy's environment with these daemons.
func proxyEnv(t *testing.T, addrs []string) {
	t.Helper()
	for k, v := range map[string]string{
		"LSP_DATABASE_URL":      "postgres://unused/lsp",
		"LSP_JWT_KEYS":          "unused",
		"LSP_FORGE_URL":         "http://127.0.0.1:1",
		"LSP_TENANT_KEY_SECRET": tenantSecret,
		"LSP_DAEMONS":           strings.Join(addrs, ","),
	} {
		t.Setenv(k, v)
	}
}

// topShard is the address the key ranks first among addrs (a fresh pool
// takes every shard as live until checked).
func topShard(t *testing.T, addrs []string, k daemonclient.Key) string {
	t.Helper()
	p, err := daemonclient.New(addrs, daemonclient.Options{HealthInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	return p.Pick(k).Addr
}

func deleteCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = ctl.Main(ctx, append([]string{"workspaces", "delete"}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

var wantKey = daemonclient.Key{TenantKey: auth.TenantKey([]byte(tenantSecret), "acme"), Repo: "app", Commit: commitSHA}

func sameKey(k *daemonv1.WorkspaceKey) bool {
	return k.GetTenantKey() == wantKey.TenantKey && k.GetRepo() == wantKey.Repo && k.GetCommit() == wantKey.Commit
}

// TestWorkspacesDeleteEveryShard: the deletion reaches the key's own shard
// and every other live shard, each with the org's tenant key (derived from
// LSP_TENANT_KEY_SECRET), the repo and the commit lowercased.
func TestWorkspacesDeleteEveryShard(t *testing.T) {
	ds := []*deleteDaemon{{}, {}}
	addrs, _ := serveDaemons(t, ds...)
	proxyEnv(t, addrs)
	own := topShard(t, addrs, wantKey)
	for i, a := range addrs {
		ds[i].gone = a == own
	}
	code, out, errOut := deleteCmd(t, "--org", "acme", "--repo", "app", "--commit", strings.ToUpper(commitSHA))
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, out, errOut)
	}
	for i, d := range ds {
		keys := d.asked()
		if len(keys) != 1 || !sameKey(keys[0]) {
			t.Fatalf("shard %s was asked to delete %v; want once %+v", addrs[i], keys, wantKey)
		}
	}
	var want strings.Builder
	fmt.Fprintf(&want, "shard=%s role=own deleted=true\n", own)
	for _, a := range addrs {
		if a != own {
			fmt.Fprintf(&want, "shard=%s role=copy deleted=false\n", a)
		}
	}
	fmt.Fprintf(&want, "org=acme repo=app commit=%s deleted=true\n", commitSHA)
	if out != want.String() {
		t.Fatalf("output:\n%s\nwant:\n%s", out, want.String())
	}
}

// TestWorkspacesDeleteBadArguments: bad flags, and a proxy environment
// that does not load, exit 2 and ask no daemon.
func TestWorkspacesDeleteBadArguments(t *testing.T) {
	d := &deleteDaemon{gone: true}
	addrs, _ := serveDaemons(t, d)
	proxyEnv(t, addrs)
	ok := []string{"--org", "acme", "--repo", "app", "--commit", commitSHA}
	with := func(flag, value string) []string {
		out := append([]string(nil), ok...)
		for i := 0; i < len(out); i += 2 {
			if out[i] == flag {
				out[i+1] = value
			}
		}
		return out
	}
	del := func(args ...string) []string { return append([]string{"workspaces", "delete"}, args...) }
	for _, tc := range []struct {
		name string
		args []string
		want string // in the message
	}{
		{"no subcommand", []string{"workspaces"}, "want delete"},
		{"other subcommand", []string{"workspaces", "list"}, "want delete"},
		{"no org", del(ok[2:]...), "--org"},
		{"uppercase org", del(with("--org", "Acme")...), "--org"},
		{"owner/repo", del(with("--repo", "acme/app")...), "inside the org"},
		{"dot-dot repo", del(with("--repo", "..")...), "--repo"},
		{"no repo", del(with("--repo", "")...), "--repo"},
		{"short commit", del(with("--commit", commitSHA[:12])...), "--commit"},
		{"41-hex commit", del(with("--commit", commitSHA+"0")...), "--commit"},
		{"branch for commit", del(with("--commit", "main")...), "--commit"},
		{"no commit", del(ok[:4]...), "--commit"},
		{"unknown flag", del(append([]string{"--rev", "main"}, ok...)...), "-rev"},
		{"extra argument", del(append(ok, "more")...), "unexpected argument"},
	} {
		var out, errOut bytes.Buffer
		if code := ctl.Main(ctx, tc.args, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%s: exit %d, want 2 saying %q: %s%s", tc.name, code, tc.want, out.String(), errOut.String())
		}
	}
	t.Setenv("LSP_TENANT_KEY_SECRET", "")
	if code, out, errOut := deleteCmd(t, ok...); code != 2 || !strings.Contains(errOut, "LSP_TENANT_KEY_SECRET") {
		t.Errorf("without the proxy's tenant key secret: exit %d, want 2 naming it: %s%s", code, out, errOut)
	}
	if keys := d.asked(); len(keys) != 0 {
		t.Fatalf("the daemon was asked to delete %v", keys)
	}
}

// TestWorkspacesDeleteShardFails: a failure of the key's own shard fails
// the command and asks no other shard; a failure of another live shard
// (a copy may be left there) fails it too, after the own shard deleted.
func TestWorkspacesDeleteShardFails(t *testing.T) {
	for _, ownFails := range []bool{true, false} {
		t.Run(fmt.Sprintf("own=%v", ownFails), func(t *testing.T) {
			ds := []*deleteDaemon{{gone: true}, {gone: true}}
			addrs, _ := serveDaemons(t, ds...)
			proxyEnv(t, addrs)
			own := topShard(t, addrs, wantKey)
			var failing, other *deleteDaemon
			for i, a := range addrs {
				if (a == own) == ownFails {
					failing, ds[i].fail = ds[i], status.Error(codes.Internal, "disk on fire")
				} else {
					other = ds[i]
				}
			}
			code, out, errOut := deleteCmd(t, "--org", "acme", "--repo", "app", "--commit", commitSHA)
			if code != 1 {
				t.Fatalf("exit %d, want 1: %s%s", code, out, errOut)
			}
			if wantErr := map[bool]string{true: "delete on the key's shard", false: "delete a copy failed"}[ownFails]; !strings.Contains(errOut, wantErr) {
				t.Errorf("stderr %q does not say %q", errOut, wantErr)
			}
			if !strings.Contains(out, `error="rpc error: code = Internal desc = disk on fire"`) || !strings.HasSuffix(out, " failed\n") {
				t.Errorf("output does not show the shard's failure and the result:\n%s", out)
			}
			if len(failing.asked()) != 1 {
				t.Errorf("the failing shard was asked %d times", len(failing.asked()))
			}
			wantOther := 1
			if ownFails {
				wantOther = 0
			}
			if n := len(other.asked()); n != wantOther {
				t.Errorf("the other shard was asked %d times, want %d:\n%s", n, wantOther, out)
			}
		})
	}
}

// TestWorkspacesDeleteDownShard: with the key's first-ranked shard down,
// the own shard is the next live one, as the proxy (which has checked its
// shards) picks it; the down shard is reported, not asked, and the command
// succeeds.
func TestWorkspacesDeleteDownShard(t *testing.T) {
	ds := []*deleteDaemon{{gone: true}, {gone: true}}
	addrs, stops := serveDaemons(t, ds...)
	proxyEnv(t, addrs)
	dead := topShard(t, addrs, wantKey)
	live := addrs[0]
	for i, a := range addrs {
		if a == dead {
			stops[i]()
		} else {
			live = a
		}
	}
	code, out, errOut := deleteCmd(t, "--org", "acme", "--repo", "app", "--commit", commitSHA)
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, out, errOut)
	}
	want := fmt.Sprintf("shard=%s role=own deleted=true\nshard=%s role=copy skipped=down\norg=acme repo=app commit=%s deleted=true\n", live, dead, commitSHA)
	if out != want {
		t.Fatalf("output:\n%s\nwant:\n%s", out, want)
	}
}
