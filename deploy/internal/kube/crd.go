package kube

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The custom resources the manifests use, reduced to the fields they set:
// a field the manifests add that is not declared here fails decoding, and
// must be checked against the resource's own schema before it is declared.

// Certificate is cert-manager.io/v1 Certificate.
type Certificate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              CertificateSpec `json:"spec"`
}

// CertificateSpec is the part of cert-manager's CertificateSpec in use.
type CertificateSpec struct {
	SecretName  string      `json:"secretName"`
	CommonName  string      `json:"commonName,omitempty"`
	DNSNames    []string    `json:"dnsNames,omitempty"`
	IsCA        bool        `json:"isCA,omitempty"`
	Usages      []string    `json:"usages,omitempty"`
	Duration    string      `json:"duration,omitempty"`
	RenewBefore string      `json:"renewBefore,omitempty"`
	PrivateKey  *PrivateKey `json:"privateKey,omitempty"`
	IssuerRef   IssuerRef   `json:"issuerRef"`
}

// PrivateKey is cert-manager's CertificatePrivateKey.
type PrivateKey struct {
	Algorithm      string `json:"algorithm,omitempty"`
	Size           int    `json:"size,omitempty"`
	RotationPolicy string `json:"rotationPolicy,omitempty"`
}

// IssuerRef names an Issuer or ClusterIssuer.
type IssuerRef struct {
	Name  string `json:"name"`
	Kind  string `json:"kind,omitempty"`
	Group string `json:"group,omitempty"`
}

// Issuer is cert-manager.io/v1 Issuer: self-signed or a CA from a Secret.
type Issuer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		SelfSigned *struct{} `json:"selfSigned,omitempty"`
		CA         *struct {
			SecretName string `json:"secretName"`
		} `json:"ca,omitempty"`
	} `json:"spec"`
}

// PGCluster is postgresql.cnpg.io/v1 Cluster.
type PGCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              PGClusterSpec `json:"spec"`
}

// PGClusterSpec is the part of CloudNativePG's ClusterSpec in use.
type PGClusterSpec struct {
	Instances             int    `json:"instances"`
	PrimaryUpdateStrategy string `json:"primaryUpdateStrategy,omitempty"`
	Bootstrap             *struct {
		InitDB *struct {
			Database string `json:"database"`
			Owner    string `json:"owner"`
		} `json:"initdb,omitempty"`
	} `json:"bootstrap,omitempty"`
	PostgreSQL *struct {
		Parameters map[string]string `json:"parameters,omitempty"`
	} `json:"postgresql,omitempty"`
	Storage struct {
		Size         string  `json:"size"`
		StorageClass *string `json:"storageClass,omitempty"`
	} `json:"storage"`
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`
}

// AppSecret is the Secret CloudNativePG generates for the application
// user, whose key "uri" is a connection URL.
func (c *PGCluster) AppSecret() string { return c.Name + "-app" }
