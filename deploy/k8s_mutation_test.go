package deploy_test

import (
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/hanzoai/lsp/deploy/internal/kube"
)

// recorder collects a check's failures instead of failing the test, so a
// test can assert that a check fails.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper()             {}
func (r *recorder) Logf(string, ...any) {}
func (r *recorder) Error(a ...any)      { r.errs = append(r.errs, fmt.Sprint(a...)) }
func (r *recorder) Errorf(f string, a ...any) {
	r.errs = append(r.errs, fmt.Sprintf(f, a...))
}
func (r *recorder) Fatal(a ...any)            { r.Error(a...); runtime.Goexit() }
func (r *recorder) Fatalf(f string, a ...any) { r.Errorf(f, a...); runtime.Goexit() }
func (r *recorder) Skip(...any)               { runtime.Goexit() }

// run runs check on its own goroutine (Fatal ends it) and returns what it
// reported.
func (r *recorder) run(check func(testing.TB)) []string {
	done := make(chan struct{})
	go func() {
		defer close(done)
		check(r)
	}()
	<-done
	return r.errs
}

// TestManifestChecksCatchMistakes breaks the base one way at a time, in an
// in-memory copy, and expects the named check to say so: the invariants
// are not vacuous.
func TestManifestChecksCatchMistakes(t *testing.T) {
	k8sDir, err := filepath.Abs("k8s")
	if err != nil {
		t.Fatal(err)
	}
	type check func(*manifest, testing.TB)
	for _, tc := range []struct {
		name, file, old, new string
		check                check
		want                 string
	}{
		{"writable root", "daemon.yaml", "readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false",
			(*manifest).checkSecurity, "readOnlyRootFilesystem must be true"},
		{"escalation", "proxy.yaml", "allowPrivilegeEscalation: false", "allowPrivilegeEscalation: true",
			(*manifest).checkSecurity, "allowPrivilegeEscalation must be false"},
		{"no user namespace", "daemon.yaml", "      hostUsers: false\n", "      hostUsers: true\n",
			(*manifest).checkSecurity, "hostUsers: false"},
		{"proxy unconfined", "proxy.yaml", "            seccompProfile:\n              type: RuntimeDefault\n          volumeMounts:",
			"            seccompProfile:\n              type: RuntimeDefault\n            appArmorProfile:\n              type: Unconfined\n          volumeMounts:",
			(*manifest).checkSecurity, "AppArmor unconfined is the daemon's exception"},
		{"root user", "proxy.yaml", "runAsUser: 65532", "runAsUser: 0",
			(*manifest).checkSecurity, "non-zero runAsUser"},
		{"no memory limit", "proxy.yaml", "              memory: 2Gi\n", "",
			(*manifest).checkResources, "memory needs a request and a limit"},
		{"too many prepares", "proxy.yaml", "- name: LSP_MAX_PREPARES\n              value: \"3\"", "- name: LSP_MAX_PREPARES\n              value: \"8\"",
			(*manifest).checkResources, "memory limit"},
		{"unbounded tmp", "daemon.yaml", "          emptyDir:\n            sizeLimit: 1Gi", "          emptyDir: {}",
			(*manifest).checkSecurity, "writable mount /tmp"},
		{"probe on a missing route", "proxy.yaml", "path: /readyz", "path: /ready",
			(*manifest).checkProbes, "not a route the proxy registers"},
		{"probe on the wrong port", "daemon.yaml", "containerPort: 7443", "containerPort: 7444",
			(*manifest).checkProbes, "is not the listen port"},
		{"one shard missing", "proxy.yaml", ",lsp-daemon-1.lsp-daemon.lsp.svc.cluster.local:7443", "",
			(*manifest).checkShards, "want every shard of 2"},
		{"jail off", "daemon.yaml", "            - name: LSP_LOG_LEVEL\n", "            - name: LSP_UNJAILED\n              value: \"1\"\n            - name: LSP_LOG_LEVEL\n",
			(*manifest).checkEnv, "LSP_UNJAILED=\"1\""},
		{"undocumented variable", "proxy.yaml", "            - name: LSP_LOG_LEVEL\n", "            - name: LSP_NO_SUCH_THING\n              value: x\n            - name: LSP_LOG_LEVEL\n",
			(*manifest).checkEnv, "LSP_NO_SUCH_THING is not in README.md"},
		{"literal secret", "proxy.yaml", "            - name: LSP_TENANT_KEY_SECRET\n              valueFrom:\n                secretKeyRef:\n                  name: lsp-tenant-key\n                  key: secret\n",
			"            - name: LSP_TENANT_KEY_SECRET\n              value: hunter2\n",
			(*manifest).checkEnv, "must come from a Secret"},
		{"unmounted file", "proxy.yaml", "value: /etc/lsp/jwt/keys.pem", "value: /etc/elsewhere/keys.pem",
			(*manifest).checkEnv, "is not under a volume mount"},
		{"short grace", "proxy.yaml", "terminationGracePeriodSeconds: 45", "terminationGracePeriodSeconds: 30",
			(*manifest).checkShutdown, "must exceed"},
		{"no default deny", "networkpolicies.yaml", "  name: default-deny\nspec:\n  podSelector: {}\n  policyTypes: [\"Ingress\", \"Egress\"]\n",
			"  name: default-deny\nspec:\n  podSelector: {}\n  policyTypes: [\"Ingress\"]\n",
			(*manifest).checkNetworkPolicies, "no default-deny"},
		{"daemon open to the namespace", "networkpolicies.yaml", "    # The proxy alone.\n    - from:\n        - podSelector:\n            matchLabels:\n              app.kubernetes.io/name: lsp-proxy\n",
			"    # The proxy alone.\n    - from:\n        - podSelector: {}\n",
			(*manifest).checkNetworkPolicies, "a daemon peer other than the proxy's pods"},
		{"daemon egress to the internet", "networkpolicies.yaml", "cidr: 198.51.100.0/24", "cidr: 0.0.0.0/0",
			(*manifest).checkNetworkPolicies, "the whole internet"},
		{"proxy cannot reach daemons", "networkpolicies.yaml", "    - to:\n        - podSelector:\n            matchLabels:\n              app.kubernetes.io/name: lsp-daemon\n      ports:\n        - protocol: TCP\n          port: 7443\n", "",
			(*manifest).checkNetworkPolicies, "do not let it reach the daemons"},
		{"unlisted secret", "proxy.yaml", "secretName: lsp-proxy-tls", "secretName: some-other-tls",
			(*manifest).checkReferences, "Secret some-other-tls is neither rendered nor listed"},
		{"scaled shards", "daemon.yaml", "  replicas: 2\n", "  replicas: 2\n  # scaled by hand\n",
			nil, ""}, // a no-op edit renders and passes
	} {
		t.Run(tc.name, func(t *testing.T) {
			fsys, err := kube.LoadDir(k8sDir)
			if err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(k8sDir, "base", tc.file)
			b, err := fsys.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b), tc.old) {
				t.Fatalf("%s does not contain %q: update the mutation", tc.file, tc.old)
			}
			if err := fsys.WriteFile(p, []byte(strings.Replace(string(b), tc.old, tc.new, 1))); err != nil {
				t.Fatal(err)
			}
			objs, err := kube.Build(fsys, filepath.Join(k8sDir, "base"))
			if err != nil {
				t.Fatal(err)
			}
			m := index(t, objs)
			if tc.check == nil {
				return
			}
			r := &recorder{TB: t}
			got := strings.Join(r.run(func(tb testing.TB) { tc.check(m, tb) }), "\n")
			if !strings.Contains(got, tc.want) {
				t.Fatalf("want a failure containing %q, the check said:\n%s", tc.want, got)
			}
		})
	}
}

// TestManifestsDecodeStrictly: a misspelt field in a manifest fails the
// rendering rather than vanishing.
func TestManifestsDecodeStrictly(t *testing.T) {
	k8sDir, err := filepath.Abs("k8s")
	if err != nil {
		t.Fatal(err)
	}
	fsys, err := kube.LoadDir(k8sDir)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(k8sDir, "base", "daemon.yaml")
	b, err := fsys.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(string(b), "readOnlyRootFilesystem: true", "readOnlyRootFilesytem: true", 1)
	if err := fsys.WriteFile(p, []byte(bad)); err != nil {
		t.Fatal(err)
	}
	_, err = kube.Build(fsys, filepath.Join(k8sDir, "base"))
	if err == nil || !strings.Contains(err.Error(), `unknown field "readOnlyRootFilesytem"`) {
		t.Fatalf("err = %v, want the unknown field named", err)
	}
}
