package config

import (
	"encoding/base64"
	"path"
)

// ClusterPoliciesName is the name of the component that installs an
// app's cluster policies; no other component may take it.
const ClusterPoliciesName = "cluster_policies"

// ClusterPoliciesRelease and ClusterPoliciesNamespace are the helm release
// that holds the cluster policies, and its namespace (where Helm keeps
// the release's history).
const (
	ClusterPoliciesRelease   = "byoc-cluster-policies"
	ClusterPoliciesNamespace = "kube-system"
)

// clusterPoliciesComponent returns the helm component that installs the
// cluster policies, nil when there are none. Each policy's manifests go
// base64-encoded (the helm type's manifests_base64), because their text
// is the cluster's, not byoc's: a Kyverno variable such as {{
// request.object }} must reach the cluster as written and never be read
// as a byoc reference. A missing file is left out here; the validator
// reports it.
func clusterPoliciesComponent(policies []ClusterPolicy, files map[string][]byte) *Component {
	if len(policies) == 0 {
		return nil
	}
	var manifests []any
	for _, p := range policies {
		text := []byte(p.Contents)
		if p.File != "" {
			text = files[path.Clean(p.File)]
		}
		if len(text) > 0 {
			manifests = append(manifests, base64.StdEncoding.EncodeToString(text))
		}
	}
	return &Component{
		Name:        ClusterPoliciesName,
		Type:        "helm",
		Description: "The app's cluster policies (policies.toml), installed with the sandbox.",
		Config: map[string]any{
			"release":          ClusterPoliciesRelease,
			"namespace":        ClusterPoliciesNamespace,
			"manifests_base64": manifests,
		},
	}
}
