package kube

import (
	"fmt"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Matches reports whether sel selects a pod with podLabels. A nil selector
// selects nothing; an empty one selects everything.
func Matches(sel *metav1.LabelSelector, podLabels map[string]string) (bool, error) {
	if sel == nil {
		return false, nil
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return false, fmt.Errorf("selector: %w", err)
	}
	return s.Matches(labels.Set(podLabels)), nil
}

// Has reports whether a NetworkPolicy's policyTypes include t.
func Has(np *networkingv1.NetworkPolicy, t networkingv1.PolicyType) bool {
	for _, x := range np.Spec.PolicyTypes {
		if x == t {
			return true
		}
	}
	return false
}
