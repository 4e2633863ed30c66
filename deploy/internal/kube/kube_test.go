package kube

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name, in, err string
	}{
		{"deployment", `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"a"},"spec":{"template":{"spec":{"containers":[{"name":"c","securityContext":{"readOnlyRootFilesystem":false}}]}}}}`, ""},
		{"unknown field", `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"a"},"spec":{"replica":2}}`, `unknown field "replica"`},
		{"misplaced field", `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"a"},"spec":{"template":{"spec":{"runAsNonRoot":true}}}}`, `unknown field "runAsNonRoot"`},
		{"wrong case", `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"a"},"spec":{"Replicas":2}}`, "spec.Replicas"},
		{"unknown kind", `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"}}`, "no type for v1 Pod"},
		{"crd field", `{"apiVersion":"cert-manager.io/v1","kind":"Certificate","metadata":{"name":"a"},"spec":{"secretName":"s","issuerRef":{"name":"i"},"dnsName":["x"]}}`, `unknown field "dnsName"`},
		{"trailing", `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"a"}} {}`, "after top-level value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := Decode([]byte(tc.in))
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				if _, ok := o.Value.(*appsv1.Deployment); !ok {
					t.Fatalf("value %T", o.Value)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err = %v, want %q", err, tc.err)
			}
		})
	}
}

func TestBuildInMemory(t *testing.T) {
	fsys, err := LoadDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"/k/base/kustomization.yaml": "resources: [ns.yaml]\n",
		"/k/base/ns.yaml":            "apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n",
		"/k/bad/kustomization.yaml":  "resources: [../base, cm.yaml]\n",
		"/k/bad/cm.yaml":             "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndatum: {}\n",
	}
	for p, s := range files {
		if err := fsys.WriteFile(p, []byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	objs, err := Build(fsys, "/k/base")
	if err != nil || len(objs) != 1 || objs[0].ID() != "Namespace//x" {
		t.Fatalf("base: %v %v", objs, err)
	}
	if _, err := Build(fsys, "/k/bad"); err == nil || !strings.Contains(err.Error(), `unknown field "datum"`) {
		t.Fatalf("bad: err = %v", err)
	}
}
