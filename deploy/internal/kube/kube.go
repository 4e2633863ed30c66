// Package kube renders kustomizations in memory and decodes what they
// produce strictly: every object into its Kubernetes API type (or, for the
// custom resources the manifests use, a small local struct), refusing
// unknown fields, so a misspelt or misplaced field fails a test instead of
// being dropped by the API server. It is test support for the deploy module
// and never reaches a service binary.
package kube

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// Object is one rendered object.
type Object struct {
	APIVersion, Kind, Name, Namespace string
	// Value is the strictly decoded object: a pointer to its k8s.io/api
	// type or to one of this package's custom-resource types.
	Value any
}

// ID names the object in messages: Kind/namespace/name.
func (o Object) ID() string { return o.Kind + "/" + o.Namespace + "/" + o.Name }

// types maps apiVersion/kind to a constructor of the type it decodes into.
// A kind that is not here fails decoding: nothing is rendered unchecked.
var types = map[string]func() any{
	"v1/Namespace":                           func() any { return &corev1.Namespace{} },
	"v1/ServiceAccount":                      func() any { return &corev1.ServiceAccount{} },
	"v1/Service":                             func() any { return &corev1.Service{} },
	"v1/ConfigMap":                           func() any { return &corev1.ConfigMap{} },
	"v1/Secret":                              func() any { return &corev1.Secret{} },
	"apps/v1/Deployment":                     func() any { return &appsv1.Deployment{} },
	"apps/v1/StatefulSet":                    func() any { return &appsv1.StatefulSet{} },
	"batch/v1/Job":                           func() any { return &batchv1.Job{} },
	"autoscaling/v2/HorizontalPodAutoscaler": func() any { return &autoscalingv2.HorizontalPodAutoscaler{} },
	"policy/v1/PodDisruptionBudget":          func() any { return &policyv1.PodDisruptionBudget{} },
	"networking.k8s.io/v1/NetworkPolicy":     func() any { return &networkingv1.NetworkPolicy{} },
	"cert-manager.io/v1/Certificate":         func() any { return &Certificate{} },
	"cert-manager.io/v1/Issuer":              func() any { return &Issuer{} },
	"postgresql.cnpg.io/v1/Cluster":          func() any { return &PGCluster{} },
}

// Decode decodes one object given as JSON, strictly: unknown fields,
// trailing data and fields that do not survive a round trip through the
// type (encoding/json matches names case-insensitively) are errors.
func Decode(raw []byte) (Object, error) {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return Object{}, fmt.Errorf("decode: %w", err)
	}
	o := Object{APIVersion: head.APIVersion, Kind: head.Kind, Name: head.Metadata.Name, Namespace: head.Metadata.Namespace}
	mk, ok := types[head.APIVersion+"/"+head.Kind]
	if !ok {
		return o, fmt.Errorf("decode %s: no type for %s %s", o.ID(), head.APIVersion, head.Kind)
	}
	v := mk()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return o, fmt.Errorf("decode %s: %w", o.ID(), err)
	}
	if dec.More() {
		return o, fmt.Errorf("decode %s: trailing data", o.ID())
	}
	if lost, err := lostFields(raw, v); err != nil {
		return o, fmt.Errorf("decode %s: %w", o.ID(), err)
	} else if len(lost) > 0 {
		return o, fmt.Errorf("decode %s: fields not in the type (wrong case?): %s", o.ID(), strings.Join(lost, ", "))
	}
	o.Value = v
	return o, nil
}

// lostFields re-encodes v and lists the paths of input fields with a
// non-zero value that the encoding does not have.
func lostFields(raw []byte, v any) ([]string, error) {
	back, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var in, out any
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(back, &out); err != nil {
		return nil, err
	}
	var lost []string
	walkLost("", in, out, &lost)
	sort.Strings(lost)
	return lost, nil
}

func walkLost(path string, in, out any, lost *[]string) {
	switch in := in.(type) {
	case map[string]any:
		om, _ := out.(map[string]any)
		for k, iv := range in {
			ov, ok := om[k]
			if !ok {
				if !isZero(iv) {
					*lost = append(*lost, path+"."+k)
				}
				continue
			}
			walkLost(path+"."+k, iv, ov, lost)
		}
	case []any:
		ol, _ := out.([]any)
		for i, iv := range in {
			if i < len(ol) {
				walkLost(fmt.Sprintf("%s[%d]", path, i), iv, ol[i], lost)
			}
		}
	}
}

func isZero(v any) bool {
	if v == nil {
		return true
	}
	switch v := v.(type) {
	case map[string]any:
		return len(v) == 0
	case []any:
		return len(v) == 0
	}
	return reflect.ValueOf(v).IsZero()
}

// Build renders the kustomization at dir of fsys and decodes every object.
func Build(fsys filesys.FileSystem, dir string) ([]Object, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize %s: %w", dir, err)
	}
	var objs []Object
	var errs []error
	for _, r := range m.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			return nil, fmt.Errorf("kustomize %s: %w", dir, err)
		}
		raw, err := yaml.YAMLToJSON(y)
		if err != nil {
			return nil, fmt.Errorf("kustomize %s: %w", dir, err)
		}
		o, err := Decode(raw)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		objs = append(objs, o)
	}
	return objs, errors.Join(errs...)
}

// LoadDir copies the regular files under dir on disk into a new in-memory
// file system, at the same absolute paths.
func LoadDir(dir string) (filesys.FileSystem, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	mem := filesys.MakeFsInMemory()
	err = filepath.WalkDir(abs, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return mem.WriteFile(p, b)
	})
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", dir, err)
	}
	return mem, nil
}
