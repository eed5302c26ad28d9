package workflow

import (
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/imsd/store"
)

const kyvernoPolicy = `apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: require-team
spec:
  rules:
  - name: team
    validate:
      message: "{{ request.object.metadata.name }} needs a team label"
`

var clusterPolicyApp = map[string][]byte{
	"app.toml":     []byte("name = \"shop\"\n"),
	"sandbox.toml": []byte("type = \"action\"\n[[config.steps]]\nscript = \"true\"\n"),
	"components/web.toml": []byte(`type = "helm"
[config]
release = "web"
chart_dir = "/charts/web"
`),
	"policies.toml": []byte(`[[cluster_policy]]
name = "team"
kind = "kyverno"
file = "policies/team.yaml"
`),
	"policies/team.yaml": []byte(kyvernoPolicy),
}

// Cluster policies are installed after the sandbox and before every
// component, as a helm release of their manifests, verbatim (a Kyverno
// variable is not a byoc reference); they go after the components on
// deprovision.
func TestClusterPoliciesInstalledWithTheSandbox(t *testing.T) {
	inst := store.Install{ID: "ins_1", Name: "acme"}
	app := parse(t, clusterPolicyApp)
	p, err := Make(Provision, Target{App: app, Revision: 1, Install: inst}, nil)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]store.Step{}
	for _, s := range p.Steps {
		byName[s.Name] = s
	}
	cp, ok := byName["cluster_policies"]
	if !ok {
		t.Fatalf("no cluster_policies step in %v", stepNames(p))
	}
	if cp.ComponentType != "helm" || cp.Component != "cluster_policies" || !slices.Equal(cp.Needs, []string{"sandbox"}) {
		t.Fatalf("cluster_policies step: type %s component %s needs %v", cp.ComponentType, cp.Component, cp.Needs)
	}
	if !slices.Contains(byName["web"].Needs, "cluster_policies") {
		t.Fatalf("web needs %v, want cluster_policies among them", byName["web"].Needs)
	}
	var cfg map[string]any
	must(t, json.Unmarshal(cp.Config, &cfg))
	r := &Renderer{InstallID: inst.ID, InstallName: inst.Name}
	rendered, err := r.Config(cp.ComponentType, cfg)
	if err != nil {
		t.Fatalf("render the cluster policies' config: %v", err)
	}
	if rendered["release"] != "byoc-cluster-policies" || rendered["namespace"] != "kube-system" {
		t.Fatalf("cluster policies config: %v", rendered)
	}
	list, _ := rendered["manifests_base64"].([]any)
	if len(list) != 1 {
		t.Fatalf("manifests_base64: %v", rendered["manifests_base64"])
	}
	text, err := base64.StdEncoding.DecodeString(list[0].(string))
	if err != nil || string(text) != kyvernoPolicy {
		t.Fatalf("the policy reached the job changed (%v):\n%s", err, text)
	}

	deployed := deploy(t, p, nil, inst)
	// deploy keeps only the diamond's needs; the engine keeps every
	// component's.
	for i, d := range deployed {
		deployed[i].Needs = nil
		for _, n := range byName[d.Name].Needs {
			if n == "sandbox" || n == "cluster_policies" {
				deployed[i].Needs = append(deployed[i].Needs, n)
			}
		}
	}
	p, err = Make(Deprovision, Target{App: app, Revision: 1, Install: inst}, deployed)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(stepNames(p), " "); got != "web cluster_policies sandbox" {
		t.Fatalf("deprovision steps %q", got)
	}
}
