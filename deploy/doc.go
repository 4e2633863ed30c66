// Package deploy holds the checks that keep the deployment files honest
// without a Docker engine or a cluster: the images under images/ are read as
// text (pinned bases, tool versions equal to the repository's pins, a
// non-root user, nothing secret, a reviewed-server config that names exactly
// the image's servers), and the kustomizations under k8s/ are rendered with
// kustomize, decoded strictly into their Kubernetes API types and held to
// the service's invariants (restricted security contexts, limits, probes on
// real routes, NetworkPolicies, every LSP_* variable documented and read by
// the code). Its own module keeps the Kubernetes libraries away from the
// service binaries. The checks are its tests; README.md is the operator's
// guide.
package deploy
