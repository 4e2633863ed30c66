package deploy_test

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hanzoai/lsp/deploy/internal/dockerfile"
	"github.com/hanzoai/lsp/deploy/internal/kube"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The kustomizations, rendered with kustomize in memory and decoded
// strictly, then held to the service's invariants.

// renderings are the kustomizations checked: the base, the production
// overlay, and production with each optional component and all of them.
var renderings = []struct {
	name, dir  string
	components []string
}{
	{"base", "base", nil},
	{"production", "overlays/production", nil},
	{"production+cert-manager", "overlays/production", []string{"cert-manager"}},
	{"production+migrate-job", "overlays/production", []string{"migrate-job"}},
	{"production+cloudnative-pg", "overlays/production", []string{"cloudnative-pg"}},
	{"production+all", "overlays/production", []string{"cert-manager", "migrate-job", "cloudnative-pg"}},
}

func TestManifests(t *testing.T) {
	k8sDir, err := filepath.Abs("k8s")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range renderings {
		t.Run(r.name, func(t *testing.T) {
			fsys, err := kube.LoadDir(k8sDir)
			if err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(k8sDir, r.dir)
			if len(r.components) > 0 {
				// What an operator does: list the components in the
				// overlay's kustomization (in the in-memory copy only).
				kpath := filepath.Join(dir, "kustomization.yaml")
				k, err := fsys.ReadFile(kpath)
				if err != nil {
					t.Fatal(err)
				}
				add := "\ncomponents:\n"
				for _, c := range r.components {
					add += "  - ../../components/" + c + "\n"
				}
				if err := fsys.WriteFile(kpath, append(k, add...)); err != nil {
					t.Fatal(err)
				}
			}
			objs, err := kube.Build(fsys, dir)
			if err != nil {
				t.Fatal(err)
			}
			m := index(t, objs)
			t.Logf("%d objects: %s", len(objs), m.kinds())
			t.Run("namespace", func(t *testing.T) { m.checkNamespace(t) })
			t.Run("security", func(t *testing.T) { m.checkSecurity(t) })
			t.Run("resources", func(t *testing.T) { m.checkResources(t) })
			t.Run("env", func(t *testing.T) { m.checkEnv(t) })
			t.Run("probes", func(t *testing.T) { m.checkProbes(t) })
			t.Run("shutdown", func(t *testing.T) { m.checkShutdown(t) })
			t.Run("shards", func(t *testing.T) { m.checkShards(t) })
			t.Run("selectors", func(t *testing.T) { m.checkSelectors(t) })
			t.Run("networkpolicies", func(t *testing.T) { m.checkNetworkPolicies(t) })
			t.Run("references", func(t *testing.T) { m.checkReferences(t) })
			t.Run("certificates", func(t *testing.T) { m.checkCertificates(t) })
			t.Run("postgres", func(t *testing.T) { m.checkPostgres(t) })
			if strings.HasPrefix(r.name, "production") {
				t.Run("release", func(t *testing.T) { m.checkRelease(t) })
			}
		})
	}
}

// manifest is one rendering, indexed.
type manifest struct {
	objs         []kube.Object
	namespaces   []*corev1.Namespace
	deployments  []*appsv1.Deployment
	statefulsets []*appsv1.StatefulSet
	jobs         []*batchv1.Job
	services     []*corev1.Service
	configmaps   []*corev1.ConfigMap
	secrets      []*corev1.Secret
	hpas         []*autoscalingv2.HorizontalPodAutoscaler
	pdbs         []*policyv1.PodDisruptionBudget
	netpols      []*networkingv1.NetworkPolicy
	certs        []*kube.Certificate
	issuers      []*kube.Issuer
	clusters     []*kube.PGCluster
}

func index(t testing.TB, objs []kube.Object) *manifest {
	m := &manifest{objs: objs}
	for _, o := range objs {
		switch v := o.Value.(type) {
		case *corev1.Namespace:
			m.namespaces = append(m.namespaces, v)
		case *appsv1.Deployment:
			m.deployments = append(m.deployments, v)
		case *appsv1.StatefulSet:
			m.statefulsets = append(m.statefulsets, v)
		case *batchv1.Job:
			m.jobs = append(m.jobs, v)
		case *corev1.Service:
			m.services = append(m.services, v)
		case *corev1.ConfigMap:
			m.configmaps = append(m.configmaps, v)
		case *corev1.Secret:
			m.secrets = append(m.secrets, v)
		case *autoscalingv2.HorizontalPodAutoscaler:
			m.hpas = append(m.hpas, v)
		case *policyv1.PodDisruptionBudget:
			m.pdbs = append(m.pdbs, v)
		case *networkingv1.NetworkPolicy:
			m.netpols = append(m.netpols, v)
		case *kube.Certificate:
			m.certs = append(m.certs, v)
		case *kube.Issuer:
			m.issuers = append(m.issuers, v)
		case *kube.PGCluster:
			m.clusters = append(m.clusters, v)
		case *corev1.ServiceAccount:
		default:
			t.Fatalf("%s: not indexed", o.ID())
		}
	}
	return m
}

func (m *manifest) kinds() string {
	n := map[string]int{}
	for _, o := range m.objs {
		n[o.Kind]++
	}
	var out []string
	for k, c := range n {
		out = append(out, fmt.Sprintf("%s×%d", k, c))
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// workload is a pod template and what owns it.
type workload struct {
	id   string
	name string
	kind string
	pod  *corev1.PodTemplateSpec
	// jailed: the daemon, whose jail needs the documented exceptions.
	jailed bool
	// claims are the StatefulSet's volumeClaimTemplates.
	claims []corev1.PersistentVolumeClaim
}

func (m *manifest) workloads() []workload {
	var out []workload
	for _, d := range m.deployments {
		out = append(out, workload{id: "Deployment/" + d.Name, name: d.Name, kind: "Deployment", pod: &d.Spec.Template})
	}
	for _, s := range m.statefulsets {
		out = append(out, workload{id: "StatefulSet/" + s.Name, name: s.Name, kind: "StatefulSet", pod: &s.Spec.Template,
			jailed: s.Name == "lsp-daemon", claims: s.Spec.VolumeClaimTemplates})
	}
	for _, j := range m.jobs {
		out = append(out, workload{id: "Job/" + j.Name, name: j.Name, kind: "Job", pod: &j.Spec.Template})
	}
	return out
}

func (w workload) containers() []corev1.Container {
	return append(append([]corev1.Container(nil), w.pod.Spec.InitContainers...), w.pod.Spec.Containers...)
}

func (m *manifest) workload(t testing.TB, id string) workload {
	t.Helper()
	for _, w := range m.workloads() {
		if w.id == id {
			return w
		}
	}
	t.Fatalf("no %s", id)
	return workload{}
}

func (m *manifest) namespace() string {
	if len(m.namespaces) == 1 {
		return m.namespaces[0].Name
	}
	return ""
}

func (m *manifest) checkNamespace(t testing.TB) {
	ns := m.namespace()
	if ns == "" {
		t.Fatalf("want exactly one Namespace, have %d", len(m.namespaces))
	}
	for _, o := range m.objs {
		if o.Kind != "Namespace" && o.Namespace != ns {
			t.Errorf("%s: not in namespace %s", o.ID(), ns)
		}
	}
	labels := m.namespaces[0].Labels
	if labels["pod-security.kubernetes.io/warn"] != "restricted" || labels["pod-security.kubernetes.io/audit"] != "restricted" {
		t.Errorf("namespace %s: warn and audit against the restricted Pod Security Standard", ns)
	}
}

// checkSecurity: the restricted Pod Security controls on every workload,
// with the daemon's jail exceptions (user-namespaced pod, unmasked /proc,
// Localhost seccomp profile, AppArmor unconfined) allowed there alone.
func (m *manifest) checkSecurity(t testing.TB) {
	for _, w := range m.workloads() {
		spec := &w.pod.Spec
		if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
			t.Errorf("%s: automountServiceAccountToken must be false", w.id)
		}
		if spec.HostNetwork || spec.HostPID || spec.HostIPC {
			t.Errorf("%s: host namespaces", w.id)
		}
		for _, v := range spec.Volumes {
			if v.HostPath != nil {
				t.Errorf("%s: hostPath volume %s", w.id, v.Name)
			}
		}
		psc := spec.SecurityContext
		if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 ||
			psc.RunAsGroup == nil || *psc.RunAsGroup == 0 {
			t.Errorf("%s: the pod must set runAsNonRoot, a non-zero runAsUser and runAsGroup", w.id)
			continue
		}
		if *psc.RunAsUser != 65532 {
			t.Errorf("%s: runAsUser %d: want 65532, the images' USER", w.id, *psc.RunAsUser)
		}
		switch {
		case w.jailed && (spec.HostUsers == nil || *spec.HostUsers):
			t.Errorf("%s: the jail needs hostUsers: false (a user namespace for the pod)", w.id)
		case !w.jailed && spec.HostUsers != nil:
			t.Errorf("%s: hostUsers is the daemon's exception", w.id)
		}
		checkAppArmor(t, w, "pod", psc.AppArmorProfile)
		for _, c := range w.containers() {
			id := w.id + "/" + c.Name
			sc := c.SecurityContext
			if sc == nil {
				t.Errorf("%s: no securityContext", id)
				continue
			}
			if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
				t.Errorf("%s: allowPrivilegeEscalation must be false", id)
			}
			if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
				t.Errorf("%s: readOnlyRootFilesystem must be true", id)
			}
			if sc.Privileged != nil && *sc.Privileged {
				t.Errorf("%s: privileged", id)
			}
			if sc.RunAsNonRoot != nil && !*sc.RunAsNonRoot || sc.RunAsUser != nil && *sc.RunAsUser == 0 {
				t.Errorf("%s: runs as root", id)
			}
			if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
				t.Errorf("%s: capabilities must drop ALL and add none", id)
			}
			seccomp := psc.SeccompProfile
			if sc.SeccompProfile != nil {
				seccomp = sc.SeccompProfile
			}
			checkSeccomp(t, w, id, seccomp)
			checkAppArmor(t, w, id, sc.AppArmorProfile)
			if sc.ProcMount != nil && *sc.ProcMount != corev1.DefaultProcMount {
				if !w.jailed {
					t.Errorf("%s: procMount %s is the daemon's exception", id, *sc.ProcMount)
				}
			} else if w.jailed {
				t.Errorf("%s: the jail needs procMount: Unmasked (bwrap mounts the jail's /proc)", id)
			}
			checkWritableMounts(t, w, c)
		}
	}
}

func checkSeccomp(t testing.TB, w workload, id string, p *corev1.SeccompProfile) {
	t.Helper()
	switch {
	case p == nil:
		t.Errorf("%s: no seccomp profile", id)
	case p.Type == corev1.SeccompProfileTypeRuntimeDefault:
	case p.Type == corev1.SeccompProfileTypeLocalhost && w.jailed && p.LocalhostProfile != nil:
		// The profile ships in deploy/k8s/seccomp; nodes install it under
		// <kubelet>/seccomp/lsp/.
		if _, err := os.Stat(filepath.Join("k8s", "seccomp", path.Base(*p.LocalhostProfile))); err != nil {
			t.Errorf("%s: seccomp profile %s is not in deploy/k8s/seccomp: %v", id, *p.LocalhostProfile, err)
		}
	default:
		t.Errorf("%s: seccomp profile %s: want RuntimeDefault (Localhost only for the daemon's jail)", id, p.Type)
	}
}

func checkAppArmor(t testing.TB, w workload, id string, p *corev1.AppArmorProfile) {
	t.Helper()
	if p != nil && p.Type == corev1.AppArmorProfileTypeUnconfined && !w.jailed {
		t.Errorf("%s: AppArmor unconfined is the daemon's exception", id)
	}
}

// checkWritableMounts: the root filesystem is read-only; the writable
// volumes are /tmp and, for the daemon, LSP_DAEMON_ROOT on its claim.
func checkWritableMounts(t testing.TB, w workload, c corev1.Container) {
	t.Helper()
	vols := map[string]corev1.Volume{}
	for _, v := range w.pod.Spec.Volumes {
		vols[v.Name] = v
	}
	claims := map[string]bool{}
	for _, pvc := range w.claims {
		claims[pvc.Name] = true
	}
	root := envValue(c, "LSP_DAEMON_ROOT")
	for _, vm := range c.VolumeMounts {
		v, isVol := vols[vm.Name]
		switch {
		case isVol && (v.Secret != nil || v.ConfigMap != nil):
			if !vm.ReadOnly {
				t.Errorf("%s/%s: %s mounts a Secret or ConfigMap writable", w.id, c.Name, vm.MountPath)
			}
		case vm.ReadOnly:
		case vm.MountPath == "/tmp" && isVol && v.EmptyDir != nil && v.EmptyDir.SizeLimit != nil:
		case claims[vm.Name] && root != "" && vm.MountPath == root:
		default:
			t.Errorf("%s/%s: writable mount %s: only /tmp (a bounded emptyDir) and LSP_DAEMON_ROOT (the claim) may be written", w.id, c.Name, vm.MountPath)
		}
	}
	if w.jailed && root == "" {
		t.Errorf("%s/%s: LSP_DAEMON_ROOT is not set", w.id, c.Name)
	}
}

// checkResources: requests and limits for CPU and memory on every
// container, requests within limits.
func (m *manifest) checkResources(t testing.TB) {
	for _, w := range m.workloads() {
		for _, c := range w.containers() {
			id := w.id + "/" + c.Name
			for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				req, okReq := c.Resources.Requests[r]
				lim, okLim := c.Resources.Limits[r]
				if !okReq || !okLim {
					t.Errorf("%s: %s needs a request and a limit", id, r)
					continue
				}
				if req.Cmp(lim) > 0 {
					t.Errorf("%s: %s request %s above its limit %s", id, r, req.String(), lim.String())
				}
			}
			if w.name == "lsp-proxy" {
				checkPrepareRoom(t, w, c)
			}
			if w.jailed {
				// A shard's memory is its warm workspaces: never overcommit it.
				if !c.Resources.Requests.Memory().Equal(*c.Resources.Limits.Memory()) {
					t.Errorf("%s: memory request must equal the limit", id)
				}
				if c.Resources.Limits.Memory().Cmp(resource.MustParse("4Gi")) < 0 {
					t.Errorf("%s: a shard below 4 GiB holds too few warm workspaces (gopls 200-800 MiB each)", id)
				}
				checkPoolBudgets(t, w, c)
			}
		}
	}
}

// checkPoolBudgets: a shard sets the pool's memory and disk budgets, and
// each fits what the pod has: the servers' memory its container's limit
// less 1 GiB for the daemon and the trees being pushed, trees and homes
// 85 % of its root claim (the filesystem keeps 5 % for root, which the
// daemon is not here; bin/ and the trees being deleted need room too).
// Without them its disk fills until every prepare fails, and the memory
// limit kills servers instead of the pool evicting idle ones.
func checkPoolBudgets(t testing.TB, w workload, c corev1.Container) {
	t.Helper()
	id := w.id + "/" + c.Name
	budget := func(name string) int64 {
		v := envValue(c, name)
		// As the daemon reads them (config.ParseBytes), in binary units.
		for i, unit := range []string{"KiB", "MiB", "GiB", "TiB"} {
			if num, ok := strings.CutSuffix(v, unit); ok {
				if n, err := strconv.ParseInt(num, 10, 64); err == nil && n > 0 {
					return n << (10 * (i + 1))
				}
			}
		}
		t.Errorf("%s: %s=%q: want a whole number of KiB, MiB, GiB or TiB", id, name, v)
		return 0
	}
	if rss, room := budget("LSP_POOL_MAX_RSS"), c.Resources.Limits.Memory().Value()-1<<30; rss > room {
		t.Errorf("%s: LSP_POOL_MAX_RSS %d bytes > the memory limit less 1 GiB (%d)", id, rss, room)
	}
	root := envValue(c, "LSP_DAEMON_ROOT")
	for _, vm := range c.VolumeMounts {
		if vm.MountPath != root {
			continue
		}
		for _, pvc := range w.claims {
			if pvc.Name != vm.Name {
				continue
			}
			size := pvc.Spec.Resources.Requests.Storage().Value()
			if disk := budget("LSP_POOL_MAX_DISK"); disk > size/100*85 {
				t.Errorf("%s: LSP_POOL_MAX_DISK %d bytes > 85 %% of the %s claim (%d)", id, disk, pvc.Name, size)
			}
			return
		}
	}
	t.Errorf("%s: LSP_DAEMON_ROOT=%q is on no claim", id, root)
}

// checkPrepareRoom: the proxy's memory limit and /tmp volume hold
// LSP_MAX_PREPARES trees of LSP_TREE_MAX_BYTES at once (the tree in memory
// while it is pushed, its git pack on disk while it is read), so the
// largest allowed prepares cannot get the proxy killed mid-push.
func checkPrepareRoom(t testing.TB, w workload, c corev1.Container) {
	t.Helper()
	num := func(name string, def int64) int64 {
		v := envValue(c, name)
		if v == "" {
			return def
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", name, v, err)
		}
		return n
	}
	// The README's defaults.
	room := num("LSP_MAX_PREPARES", 8) * num("LSP_TREE_MAX_BYTES", 512<<20)
	if lim := c.Resources.Limits.Memory().Value(); lim < room+256<<20 {
		t.Errorf("%s/%s: memory limit %d bytes < LSP_MAX_PREPARES x LSP_TREE_MAX_BYTES (%d) + 256 MiB", w.id, c.Name, lim, room)
	}
	for _, v := range w.pod.Spec.Volumes {
		for _, vm := range c.VolumeMounts {
			if vm.Name == v.Name && vm.MountPath == "/tmp" && v.EmptyDir != nil && v.EmptyDir.SizeLimit != nil && v.EmptyDir.SizeLimit.Value() < room {
				t.Errorf("%s/%s: /tmp holds %s < LSP_MAX_PREPARES x LSP_TREE_MAX_BYTES", w.id, c.Name, v.EmptyDir.SizeLimit.String())
			}
		}
	}
}

func envValue(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

func hasEnv(c corev1.Container, name string) bool {
	for _, e := range c.Env {
		if e.Name == name {
			return true
		}
	}
	return false
}

// daemonConfigInImage is where the daemon image writes the reviewed-server
// config (its ENV LSP_DAEMON_CONFIG).
func daemonConfigInImage(t testing.TB) string {
	t.Helper()
	f := parseDockerfile(t, "daemon.Dockerfile")
	for _, in := range f.Final().Each("ENV") {
		pairs, _ := dockerfile.ParseEnv(in.Args)
		for _, kv := range pairs {
			if kv[0] == "LSP_DAEMON_CONFIG" {
				return kv[1]
			}
		}
	}
	t.Fatal("daemon.Dockerfile sets no LSP_DAEMON_CONFIG")
	return ""
}

// checkEnv: every LSP_* variable is documented and read by the code;
// secrets come from Secrets; file paths point into mounted volumes (or the
// image's own config); nothing switches the jail or development mode on.
func (m *manifest) checkEnv(t testing.TB) {
	imageConfig := daemonConfigInImage(t)
	for _, w := range m.workloads() {
		for _, c := range w.containers() {
			id := w.id + "/" + c.Name
			if len(c.EnvFrom) > 0 {
				t.Errorf("%s: envFrom hides variable names from review; list each", id)
			}
			seen := map[string]bool{}
			for _, e := range c.Env {
				if seen[e.Name] {
					t.Errorf("%s: %s set twice", id, e.Name)
				}
				seen[e.Name] = true
				if !strings.HasPrefix(e.Name, "LSP_") {
					t.Errorf("%s: %s: the services read only LSP_* variables", id, e.Name)
					continue
				}
				checkDocumentedVar(t, id, e.Name)
				secretish := strings.Contains(e.Name, "SECRET") && !strings.HasSuffix(e.Name, "_FILE") ||
					strings.Contains(e.Name, "DATABASE_URL") || strings.Contains(e.Name, "PASSWORD") || strings.Contains(e.Name, "TOKEN")
				if secretish && (e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil) {
					t.Errorf("%s: %s must come from a Secret (secretKeyRef), never a literal", id, e.Name)
				}
				switch e.Name {
				case "LSP_UNJAILED", "LSP_DEV":
					if b, err := strconv.ParseBool(e.Value); err != nil || b {
						t.Errorf("%s: %s=%q in a deployment", id, e.Name, e.Value)
					}
				case "LSP_DAEMON_CONFIG":
					if e.Value != imageConfig {
						t.Errorf("%s: LSP_DAEMON_CONFIG=%q, the image generates %s", id, e.Value, imageConfig)
					}
					continue
				}
				if strings.HasPrefix(e.Value, "/") && e.Name != "LSP_DAEMON_ROOT" {
					if !mounted(c, e.Value) {
						t.Errorf("%s: %s=%s is not under a volume mount", id, e.Name, e.Value)
					}
				}
			}
			// Mirrors of the services' own start-up rules, so that a
			// manifest the service would refuse fails here first.
			if l := envValue(c, "LSP_DAEMON_LISTEN"); l != "" && !strings.HasPrefix(l, "unix://") {
				for _, v := range []string{"LSP_DAEMON_TLS_CERT", "LSP_DAEMON_TLS_KEY", "LSP_DAEMON_TLS_CLIENT_CA"} {
					if !hasEnv(c, v) {
						t.Errorf("%s: a host:port LSP_DAEMON_LISTEN needs %s", id, v)
					}
				}
			}
			if d := envValue(c, "LSP_DAEMONS"); d != "" && !strings.HasPrefix(d, "unix://") {
				for _, v := range []string{"LSP_DAEMON_TLS_CERT", "LSP_DAEMON_TLS_KEY", "LSP_DAEMON_TLS_CA"} {
					if !hasEnv(c, v) {
						t.Errorf("%s: daemons over TCP need %s (mutual TLS)", id, v)
					}
				}
			}
			if w.kind == "Deployment" && c.Name == "lsp-proxy" {
				for _, v := range []string{"LSP_LISTEN", "LSP_DATABASE_URL", "LSP_DAEMONS", "LSP_FORGE_URL", "LSP_JWT_AUDIENCE", "LSP_TENANT_KEY_SECRET"} {
					if !hasEnv(c, v) {
						t.Errorf("%s: %s is required in a deployment", id, v)
					}
				}
				if !hasEnv(c, "LSP_JWT_KEYS") && !hasEnv(c, "LSP_JWKS_URL") {
					t.Errorf("%s: no JWT key source", id)
				}
			}
		}
	}
}

// mounted reports whether p lies under one of c's volume mounts.
func mounted(c corev1.Container, p string) bool {
	for _, vm := range c.VolumeMounts {
		if p == vm.MountPath || strings.HasPrefix(p, strings.TrimSuffix(vm.MountPath, "/")+"/") {
			return true
		}
	}
	return false
}

// listenPort is the port of a host:port or :port listen address.
func listenPort(t testing.TB, addr string) int32 {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("listen address %q: %v", addr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("listen address %q: %v", addr, err)
	}
	return int32(n)
}

// containerPort resolves a probe or Service target port.
func containerPort(c corev1.Container, p intstr.IntOrString) (int32, bool) {
	for _, cp := range c.Ports {
		if p.Type == intstr.String && cp.Name == p.StrVal || p.Type == intstr.Int && cp.ContainerPort == p.IntVal {
			return cp.ContainerPort, true
		}
	}
	return 0, false
}

// checkProbes: the proxy's probes are its real unauthenticated routes,
// liveness /healthz and readiness /readyz, on the port LSP_LISTEN opens;
// the daemon's reach the port LSP_DAEMON_LISTEN opens.
func (m *manifest) checkProbes(t testing.TB) {
	routes := unauthenticatedRoutes(t)
	for _, w := range m.workloads() {
		if w.kind == "Job" {
			continue
		}
		for _, c := range w.pod.Spec.Containers {
			id := w.id + "/" + c.Name
			listen := envValue(c, "LSP_LISTEN")
			if listen == "" {
				listen = envValue(c, "LSP_DAEMON_LISTEN")
			}
			if listen == "" {
				t.Errorf("%s: sets neither LSP_LISTEN nor LSP_DAEMON_LISTEN", id)
				continue
			}
			port := listenPort(t, listen)
			for _, p := range []struct {
				kind, wantPath string
				probe          *corev1.Probe
			}{
				{"liveness", "/healthz", c.LivenessProbe},
				{"readiness", "/readyz", c.ReadinessProbe},
				{"startup", "", c.StartupProbe},
			} {
				if p.probe == nil {
					if p.kind != "startup" {
						t.Errorf("%s: no %s probe", id, p.kind)
					}
					continue
				}
				var target intstr.IntOrString
				switch h := p.probe.ProbeHandler; {
				case h.HTTPGet != nil:
					if !routes[h.HTTPGet.Path] {
						t.Errorf("%s: %s probe %s is not a route the proxy registers without authentication", id, p.kind, h.HTTPGet.Path)
					}
					if p.wantPath != "" && h.HTTPGet.Path != p.wantPath {
						t.Errorf("%s: %s probe on %s, want %s", id, p.kind, h.HTTPGet.Path, p.wantPath)
					}
					target = h.HTTPGet.Port
				case h.TCPSocket != nil:
					if w.name == "lsp-proxy" {
						t.Errorf("%s: %s probe: the proxy has HTTP health routes", id, p.kind)
					}
					target = h.TCPSocket.Port
				default:
					t.Errorf("%s: %s probe: want httpGet or tcpSocket", id, p.kind)
					continue
				}
				if got, ok := containerPort(c, target); !ok || got != port {
					t.Errorf("%s: %s probe port %s is not the listen port %d", id, p.kind, target.String(), port)
				}
			}
		}
	}
}

// checkShutdown: the pod's grace period outlasts the preStop pause plus
// the service's own LSP_SHUTDOWN_GRACE, so in-flight requests and prepares
// finish (and are charged) before the kubelet kills anything.
func (m *manifest) checkShutdown(t testing.TB) {
	defaults := map[string]time.Duration{"lsp-proxy": 30 * time.Second, "lsp-daemon": 20 * time.Second}
	for _, w := range m.workloads() {
		if w.kind == "Job" {
			continue
		}
		period := 30 * time.Second
		if p := w.pod.Spec.TerminationGracePeriodSeconds; p != nil {
			period = time.Duration(*p) * time.Second
		}
		for _, c := range w.pod.Spec.Containers {
			grace := defaults[c.Name]
			if v := envValue(c, "LSP_SHUTDOWN_GRACE"); v != "" {
				d, err := time.ParseDuration(v)
				if err != nil {
					t.Fatalf("%s: LSP_SHUTDOWN_GRACE=%q: %v", w.id, v, err)
				}
				grace = d
			}
			var pause time.Duration
			if c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
				if s := c.Lifecycle.PreStop.Sleep; s != nil {
					pause = time.Duration(s.Seconds) * time.Second
				}
			}
			if period <= pause+grace {
				t.Errorf("%s/%s: terminationGracePeriodSeconds %s must exceed preStop %s + LSP_SHUTDOWN_GRACE %s", w.id, c.Name, period, pause, grace)
			}
		}
	}
}

// checkShards: LSP_DAEMONS lists every shard of the StatefulSet, in
// ordinal order, by its stable name under the headless Service, on the
// Service's port — the addresses rendezvous hashing is computed over.
func (m *manifest) checkShards(t testing.TB) {
	proxy := m.workload(t, "Deployment/lsp-proxy")
	var sts *appsv1.StatefulSet
	for _, s := range m.statefulsets {
		if s.Name == "lsp-daemon" {
			sts = s
		}
	}
	if sts == nil {
		t.Fatal("no StatefulSet lsp-daemon")
	}
	var svc *corev1.Service
	for _, s := range m.services {
		if s.Name == sts.Spec.ServiceName {
			svc = s
		}
	}
	if svc == nil {
		t.Fatalf("StatefulSet %s: no Service %q", sts.Name, sts.Spec.ServiceName)
	}
	if svc.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("Service %s: must be headless (clusterIP: None) for per-shard names", svc.Name)
	}
	if ok, _ := kube.Matches(&metav1.LabelSelector{MatchLabels: svc.Spec.Selector}, sts.Spec.Template.Labels); !ok || len(svc.Spec.Selector) == 0 {
		t.Errorf("Service %s does not select the StatefulSet's pods", svc.Name)
	}
	daemon := sts.Spec.Template.Spec.Containers[0]
	listen := listenPort(t, envValue(daemon, "LSP_DAEMON_LISTEN"))
	var port int32
	for _, p := range svc.Spec.Ports {
		if got, ok := containerPort(daemon, p.TargetPort); ok && got == listen {
			port = p.Port
		}
	}
	if port == 0 {
		t.Fatalf("Service %s has no port onto the daemon's listen port %d", svc.Name, listen)
	}
	replicas := int32(1)
	if sts.Spec.Replicas != nil {
		replicas = *sts.Spec.Replicas
	}
	var want []string
	for i := range replicas {
		want = append(want, fmt.Sprintf("%s-%d.%s.%s.svc.cluster.local:%d", sts.Name, i, svc.Name, m.namespace(), port))
	}
	got := strings.Split(envValue(proxy.pod.Spec.Containers[0], "LSP_DAEMONS"), ",")
	if !slices.Equal(got, want) {
		t.Errorf("LSP_DAEMONS = %v\nwant every shard of %d: %v", got, replicas, want)
	}
	if replicas < 2 {
		t.Errorf("StatefulSet %s: %d shard: want at least 2", sts.Name, replicas)
	}
}

// checkSelectors: Services, PDBs and HPAs point at workloads that exist;
// both long-running workloads have a PDB; the proxy has an HPA.
func (m *manifest) checkSelectors(t testing.TB) {
	selects := func(sel *metav1.LabelSelector) []string {
		var out []string
		for _, w := range m.workloads() {
			if ok, err := kube.Matches(sel, w.pod.Labels); err != nil {
				t.Fatal(err)
			} else if ok {
				out = append(out, w.id)
			}
		}
		return out
	}
	for _, s := range m.services {
		if got := selects(&metav1.LabelSelector{MatchLabels: s.Spec.Selector}); len(s.Spec.Selector) == 0 || len(got) != 1 {
			t.Errorf("Service %s selects %v: want exactly one workload", s.Name, got)
		}
	}
	covered := map[string]bool{}
	for _, p := range m.pdbs {
		got := selects(p.Spec.Selector)
		if len(got) != 1 {
			t.Errorf("PDB %s selects %v: want exactly one workload", p.Name, got)
		}
		for _, id := range got {
			covered[id] = true
		}
	}
	for _, w := range m.workloads() {
		if w.kind != "Job" && !covered[w.id] {
			t.Errorf("%s: no PodDisruptionBudget", w.id)
		}
	}
	var proxyHPA bool
	for _, h := range m.hpas {
		ref := h.Spec.ScaleTargetRef
		if ref.Kind != "Deployment" || ref.Name != "lsp-proxy" {
			t.Errorf("HPA %s scales %s/%s: only the stateless proxy scales on load (shards are addresses)", h.Name, ref.Kind, ref.Name)
			continue
		}
		proxyHPA = true
		if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 2 {
			t.Errorf("HPA %s: minReplicas below 2", h.Name)
		}
	}
	if !proxyHPA {
		t.Error("no HPA for the proxy")
	}
}

// policiesFor are the NetworkPolicies that select a pod.
func (m *manifest) policiesFor(t testing.TB, podLabels map[string]string, typ networkingv1.PolicyType) []*networkingv1.NetworkPolicy {
	var out []*networkingv1.NetworkPolicy
	for _, np := range m.netpols {
		ok, err := kube.Matches(&np.Spec.PodSelector, podLabels)
		if err != nil {
			t.Fatal(err)
		}
		if ok && kube.Has(np, typ) {
			out = append(out, np)
		}
	}
	return out
}

func isKubeDNS(p networkingv1.NetworkPolicyPeer) bool {
	return p.IPBlock == nil && p.NamespaceSelector != nil && p.PodSelector != nil &&
		p.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] == "kube-system" &&
		p.PodSelector.MatchLabels["k8s-app"] == "kube-dns"
}

func portsOf(ps []networkingv1.NetworkPolicyPort) []int32 {
	var out []int32
	for _, p := range ps {
		if p.Port != nil && p.Port.Type == intstr.Int {
			out = append(out, p.Port.IntVal)
		} else {
			out = append(out, -1) // any port, or a named one
		}
	}
	return out
}

func openCIDR(b *networkingv1.IPBlock) bool {
	if b == nil {
		return false
	}
	_, n, err := net.ParseCIDR(b.CIDR)
	if err != nil {
		return true
	}
	ones, _ := n.Mask.Size()
	return ones == 0
}

// checkNetworkPolicies: default deny; daemon ingress from proxy pods only,
// on its port; daemon egress only to DNS and the dependency mirror; proxy
// egress to the daemons, Postgres and the forge; every rule names ports.
func (m *manifest) checkNetworkPolicies(t testing.TB) {
	var deny bool
	for _, np := range m.netpols {
		if len(np.Spec.PodSelector.MatchLabels) == 0 && len(np.Spec.PodSelector.MatchExpressions) == 0 &&
			kube.Has(np, networkingv1.PolicyTypeIngress) && kube.Has(np, networkingv1.PolicyTypeEgress) &&
			len(np.Spec.Ingress) == 0 && len(np.Spec.Egress) == 0 {
			deny = true
		}
		for i, r := range np.Spec.Ingress {
			if len(r.From) == 0 || len(r.Ports) == 0 {
				t.Errorf("NetworkPolicy %s ingress[%d]: open to any source or port", np.Name, i)
			}
		}
		for i, r := range np.Spec.Egress {
			if len(r.To) == 0 || len(r.Ports) == 0 {
				t.Errorf("NetworkPolicy %s egress[%d]: open to any destination or port", np.Name, i)
			}
			for _, p := range r.To {
				if openCIDR(p.IPBlock) {
					t.Errorf("NetworkPolicy %s egress[%d]: %s is the whole internet", np.Name, i, p.IPBlock.CIDR)
				}
			}
		}
	}
	if !deny {
		t.Error("no default-deny NetworkPolicy (empty podSelector, Ingress and Egress, no rules)")
	}

	proxy := m.workload(t, "Deployment/lsp-proxy")
	daemon := m.workload(t, "StatefulSet/lsp-daemon")
	daemonPort := listenPort(t, envValue(daemon.pod.Spec.Containers[0], "LSP_DAEMON_LISTEN"))
	proxyPort := listenPort(t, envValue(proxy.pod.Spec.Containers[0], "LSP_LISTEN"))
	own := func(w workload, typ networkingv1.PolicyType) int {
		n := 0
		for _, np := range m.policiesFor(t, w.pod.Labels, typ) {
			if len(np.Spec.PodSelector.MatchLabels) > 0 {
				n++
			}
		}
		return n
	}
	for _, w := range []workload{proxy, daemon} {
		for _, typ := range []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress} {
			if own(w, typ) == 0 {
				t.Errorf("%s: no NetworkPolicy of its own for %s", w.id, typ)
			}
		}
	}

	// Daemon ingress: the proxy's pods alone, on the daemon's port.
	for _, np := range m.policiesFor(t, daemon.pod.Labels, networkingv1.PolicyTypeIngress) {
		for i, r := range np.Spec.Ingress {
			for _, p := range r.From {
				from, _ := kube.Matches(p.PodSelector, proxy.pod.Labels)
				self, _ := kube.Matches(p.PodSelector, daemon.pod.Labels)
				if p.NamespaceSelector != nil || p.IPBlock != nil || !from || self {
					t.Errorf("NetworkPolicy %s ingress[%d]: a daemon peer other than the proxy's pods", np.Name, i)
				}
			}
			if !slices.Equal(portsOf(r.Ports), []int32{daemonPort}) {
				t.Errorf("NetworkPolicy %s ingress[%d]: ports %v, want the daemon's %d", np.Name, i, portsOf(r.Ports), daemonPort)
			}
		}
	}
	// Daemon egress: DNS and the mirror (addresses outside the cluster).
	var mirror bool
	for _, np := range m.policiesFor(t, daemon.pod.Labels, networkingv1.PolicyTypeEgress) {
		for i, r := range np.Spec.Egress {
			for _, p := range r.To {
				switch {
				case isKubeDNS(p):
					for _, port := range portsOf(r.Ports) {
						if port != 53 {
							t.Errorf("NetworkPolicy %s egress[%d]: DNS rule opens port %d", np.Name, i, port)
						}
					}
				case p.IPBlock != nil && p.PodSelector == nil && p.NamespaceSelector == nil:
					mirror = true
				default:
					t.Errorf("NetworkPolicy %s egress[%d]: the daemon may reach only DNS and the dependency mirror", np.Name, i)
				}
			}
		}
	}
	if !mirror {
		t.Error("no daemon egress rule for the dependency mirror")
	}
	// Proxy ingress on its port only; egress to the daemons, Postgres and the forge.
	for _, np := range m.policiesFor(t, proxy.pod.Labels, networkingv1.PolicyTypeIngress) {
		for i, r := range np.Spec.Ingress {
			if !slices.Equal(portsOf(r.Ports), []int32{proxyPort}) {
				t.Errorf("NetworkPolicy %s ingress[%d]: ports %v, want the proxy's %d", np.Name, i, portsOf(r.Ports), proxyPort)
			}
		}
	}
	reach := map[string]bool{}
	pgPeers := 0
	for _, np := range m.policiesFor(t, proxy.pod.Labels, networkingv1.PolicyTypeEgress) {
		for _, r := range np.Spec.Egress {
			ports := portsOf(r.Ports)
			for _, p := range r.To {
				toDaemon, _ := kube.Matches(p.PodSelector, daemon.pod.Labels)
				switch {
				case toDaemon && p.NamespaceSelector == nil && slices.Equal(ports, []int32{daemonPort}):
					reach["daemons"] = true
				case slices.Equal(ports, []int32{5432}):
					reach["postgres"] = true
					pgPeers++
					for _, c := range m.clusters {
						if p.PodSelector == nil || p.PodSelector.MatchLabels["cnpg.io/cluster"] != c.Name {
							t.Errorf("NetworkPolicy %s: Postgres egress does not point at the CloudNativePG cluster %s", np.Name, c.Name)
						}
					}
				case slices.Equal(ports, []int32{443}) && p.IPBlock != nil:
					reach["forge"] = true
				case isKubeDNS(p):
				default:
					t.Errorf("NetworkPolicy %s: unexpected proxy egress to %+v on %v", np.Name, p, ports)
				}
			}
		}
	}
	for _, want := range []string{"daemons", "postgres", "forge"} {
		if !reach[want] {
			t.Errorf("the proxy's NetworkPolicies do not let it reach the %s", want)
		}
	}
	// Every Postgres client (the migration Job too) may reach Postgres.
	for _, w := range m.workloads() {
		if !hasEnv(w.pod.Spec.Containers[0], "LSP_DATABASE_URL") {
			continue
		}
		var ok bool
		for _, np := range m.policiesFor(t, w.pod.Labels, networkingv1.PolicyTypeEgress) {
			for _, r := range np.Spec.Egress {
				ok = ok || slices.Equal(portsOf(r.Ports), []int32{5432})
			}
		}
		if !ok {
			t.Errorf("%s: uses LSP_DATABASE_URL but no NetworkPolicy lets it reach Postgres", w.id)
		}
	}
}

// checkReferences: every Secret and ConfigMap a workload uses is made in
// the rendering (by cert-manager or CloudNativePG) or listed in
// deploy/README.md among what the operator creates.
func (m *manifest) checkReferences(t testing.TB) {
	made := map[string]bool{}
	for _, c := range m.certs {
		made["Secret/"+c.Spec.SecretName] = true
	}
	for _, c := range m.clusters {
		made["Secret/"+c.AppSecret()] = true
	}
	for _, s := range m.secrets {
		made["Secret/"+s.Name] = true
	}
	for _, c := range m.configmaps {
		made["ConfigMap/"+c.Name] = true
	}
	readme := readRepoFile(t, "deploy/README.md")
	check := func(id, kind, name string) {
		if !made[kind+"/"+name] && !strings.Contains(readme, "`"+name+"`") {
			t.Errorf("%s: %s %s is neither rendered nor listed in deploy/README.md", id, kind, name)
		}
	}
	for _, w := range m.workloads() {
		for _, v := range w.pod.Spec.Volumes {
			if v.Secret != nil {
				check(w.id, "Secret", v.Secret.SecretName)
			}
			if v.ConfigMap != nil {
				check(w.id, "ConfigMap", v.ConfigMap.Name)
			}
		}
		for _, c := range w.containers() {
			for _, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					check(w.id, "Secret", e.ValueFrom.SecretKeyRef.Name)
				}
				if e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil {
					check(w.id, "ConfigMap", e.ValueFrom.ConfigMapKeyRef.Name)
				}
			}
		}
	}
}

func secretVolume(w workload, mountPath string) string {
	c := w.pod.Spec.Containers[0]
	for _, vm := range c.VolumeMounts {
		if vm.MountPath != mountPath {
			continue
		}
		for _, v := range w.pod.Spec.Volumes {
			if v.Name == vm.Name && v.Secret != nil {
				return v.Secret.SecretName
			}
		}
	}
	return ""
}

// checkCertificates (with cert-manager): the Secrets the daemon and the
// proxy mount for mutual TLS are issued by one CA; the daemon's covers
// every LSP_DAEMONS host for server auth, the proxy's is for client auth.
func (m *manifest) checkCertificates(t testing.TB) {
	if len(m.certs) == 0 {
		t.Skip("no cert-manager component in this rendering")
	}
	proxy := m.workload(t, "Deployment/lsp-proxy")
	daemon := m.workload(t, "StatefulSet/lsp-daemon")
	bySecret := map[string]*kube.Certificate{}
	for _, c := range m.certs {
		bySecret[c.Spec.SecretName] = c
	}
	issuers := map[string]*kube.Issuer{}
	for _, i := range m.issuers {
		issuers[i.Name] = i
	}
	dir := func(c corev1.Container, v string) string { return path.Dir(envValue(c, v)) }
	dc := daemon.pod.Spec.Containers[0]
	pc := proxy.pod.Spec.Containers[0]
	server := bySecret[secretVolume(daemon, dir(dc, "LSP_DAEMON_TLS_CERT"))]
	client := bySecret[secretVolume(proxy, dir(pc, "LSP_DAEMON_TLS_CERT"))]
	if server == nil || client == nil {
		t.Fatalf("the daemon's and the proxy's TLS Secrets must both be cert-manager Certificates (have %v, %v)", server, client)
	}
	if !slices.Contains(server.Spec.Usages, "server auth") || !slices.Contains(client.Spec.Usages, "client auth") {
		t.Errorf("usages: daemon %v (want server auth), proxy %v (want client auth)", server.Spec.Usages, client.Spec.Usages)
	}
	if server.Spec.IssuerRef.Name != client.Spec.IssuerRef.Name {
		t.Errorf("the daemon's and the proxy's certificates come from different issuers: the CA each trusts must be the other's")
	}
	ca := issuers[server.Spec.IssuerRef.Name]
	if ca == nil || ca.Spec.CA == nil || bySecret[ca.Spec.CA.SecretName] == nil || !bySecret[ca.Spec.CA.SecretName].Spec.IsCA {
		t.Errorf("issuer %s: want a CA Issuer whose Secret is an isCA Certificate", server.Spec.IssuerRef.Name)
	}
	for _, addr := range strings.Split(envValue(pc, "LSP_DAEMONS"), ",") {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(server.Spec.DNSNames, func(n string) bool { return dnsMatch(n, host) }) {
			t.Errorf("daemon certificate %v does not cover %s", server.Spec.DNSNames, host)
		}
	}
	for _, c := range m.certs {
		if c.Spec.IssuerRef.Name == "" || issuers[c.Spec.IssuerRef.Name] == nil {
			t.Errorf("Certificate %s: issuer %q is not rendered", c.Name, c.Spec.IssuerRef.Name)
		}
	}
}

// dnsMatch is certificate name matching: a leading "*." covers one label.
func dnsMatch(pattern, host string) bool {
	if rest, ok := strings.CutPrefix(pattern, "*."); ok {
		_, after, found := strings.Cut(host, ".")
		return found && after == rest
	}
	return pattern == host
}

// checkPostgres: every LSP_DATABASE_URL names the same Secret; with
// CloudNativePG it is the cluster's generated application Secret.
func (m *manifest) checkPostgres(t testing.TB) {
	refs := map[string]bool{}
	for _, w := range m.workloads() {
		for _, c := range w.containers() {
			for _, e := range c.Env {
				if e.Name == "LSP_DATABASE_URL" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					refs[e.ValueFrom.SecretKeyRef.Name+"/"+e.ValueFrom.SecretKeyRef.Key] = true
				}
			}
		}
	}
	if len(refs) != 1 {
		t.Errorf("LSP_DATABASE_URL comes from %v: want one Secret for every client", refs)
	}
	for _, c := range m.clusters {
		if !refs[c.AppSecret()+"/uri"] {
			t.Errorf("with CloudNativePG cluster %s, LSP_DATABASE_URL must come from %s/uri, have %v", c.Name, c.AppSecret(), refs)
		}
		if c.Spec.Instances < 2 {
			t.Errorf("cluster %s: one instance has no failover", c.Name)
		}
	}
}

// checkRelease: a production rendering runs released images.
func (m *manifest) checkRelease(t testing.TB) {
	for _, w := range m.workloads() {
		for _, c := range w.containers() {
			ref, err := dockerfile.ParseRef(c.Image)
			if err != nil {
				t.Fatal(err)
			}
			if ref.Digest == "" && (ref.Tag == "" || ref.Tag == "latest" || ref.Tag == "dev") {
				t.Errorf("%s/%s: image %s: production runs a release tag or digest", w.id, c.Name, c.Image)
			}
		}
	}
}

// TestSeccompProfile: the daemon's Localhost profile lets through what
// bubblewrap needs to build a jail and denies the rest of what the
// runtime's default profile denies.
func TestSeccompProfile(t *testing.T) {
	b, err := os.ReadFile("k8s/seccomp/lsp-daemon-bwrap.json")
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		DefaultAction string   `json:"defaultAction"`
		Architectures []string `json:"architectures"`
		Syscalls      []struct {
			Names    []string `json:"names"`
			Action   string   `json:"action"`
			ErrnoRet int      `json:"errnoRet"`
		} `json:"syscalls"`
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatal(err)
	}
	if p.DefaultAction != "SCMP_ACT_ALLOW" {
		t.Fatalf("defaultAction %s: the checks below assume a deny list", p.DefaultAction)
	}
	denied := map[string]bool{}
	for _, s := range p.Syscalls {
		if s.Action != "SCMP_ACT_ERRNO" || s.ErrnoRet == 0 {
			t.Errorf("syscalls %v: action %s errno %d: want SCMP_ACT_ERRNO with an errno", s.Names, s.Action, s.ErrnoRet)
		}
		for _, n := range s.Names {
			denied[n] = true
		}
	}
	// What bwrap 0.8 calls to build the jail (strace of the daemon's
	// bwrap arguments), and what the daemon's jail launcher needs.
	for _, n := range []string{"clone", "clone3", "unshare", "mount", "umount2", "pivot_root", "sethostname", "prctl", "seccomp", "setrlimit", "prlimit64", "execve"} {
		if denied[n] {
			t.Errorf("%s is denied: bubblewrap needs it", n)
		}
	}
	for _, n := range []string{"ptrace", "keyctl", "add_key", "bpf", "kexec_load", "init_module", "finit_module", "perf_event_open",
		"userfaultfd", "open_by_handle_at", "setns", "process_vm_readv", "process_vm_writev", "io_uring_setup", "reboot", "swapon"} {
		if !denied[n] {
			t.Errorf("%s is allowed: the default profile denies it and nothing here uses it", n)
		}
	}
	if !slices.Contains(p.Architectures, "SCMP_ARCH_X86_64") || !slices.Contains(p.Architectures, "SCMP_ARCH_AARCH64") {
		t.Errorf("architectures %v: want x86_64 and aarch64", p.Architectures)
	}
}
