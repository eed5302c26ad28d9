package agent_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/agent"
	"github.com/byoc-dev/byoc/agentd/pluginhost"
	"github.com/byoc-dev/byoc/plugins/sdk"
)

// kubeEnv stands in for the helm type: it reports the KUBECONFIG its
// operation and its process see.
type kubeEnv struct{}

func (kubeEnv) Describe(context.Context, *sdk.DescribeRequest) (*sdk.DescribeResponse, error) {
	return &sdk.DescribeResponse{Type: "helm", Version: "1"}, nil
}

func (kubeEnv) Validate(context.Context, *sdk.ValidateRequest) (*sdk.ValidateResponse, error) {
	return &sdk.ValidateResponse{}, nil
}

func (kubeEnv) Plan(context.Context, *sdk.PlanRequest) (*sdk.PlanResponse, error) {
	return &sdk.PlanResponse{}, nil
}

func (kubeEnv) Apply(_ context.Context, req *sdk.ApplyRequest) (*sdk.ApplyResponse, error) {
	return &sdk.ApplyResponse{Outputs: map[string]string{"op": req.Env["KUBECONFIG"], "process": os.Getenv("KUBECONFIG"),
		"host": os.Getenv("KUBERNETES_SERVICE_HOST") + ":" + os.Getenv("KUBERNETES_SERVICE_PORT")}}, nil
}

// TestKubeconfigOnlyForHelm: the agent's kubeconfig reaches jobs of the
// helm type (operation and process environment), and no other type.
func TestKubeconfigOnlyForHelm(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r := &agent.PluginRunner{
		Loader:     &pluginhost.Loader{SelfExe: self, Builtins: []string{"action", "helm"}},
		WorkRoot:   t.TempDir(),
		Kubeconfig: "/etc/byoc/kubeconfig",
	}
	run := func(typ string, config map[string]any) (agent.Outcome, string) {
		var b strings.Builder
		out := r.Run(t.Context(), agent.Job{ID: "job-" + typ, InstallID: "ins1", Attempt: 1, ComponentType: typ,
			Operation: sdk.OpApply, Config: config, Timeout: time.Minute}, func(_ int32, text string) { b.WriteString(text + "\n") })
		return out, b.String()
	}
	out, log := run("helm", map[string]any{})
	if out.Error != "" {
		t.Fatalf("helm job: %s\n%s", out.Error, log)
	}
	if out.Outputs["op"] != "/etc/byoc/kubeconfig" || out.Outputs["process"] != "/etc/byoc/kubeconfig" {
		t.Fatalf("helm job saw KUBECONFIG %v", out.Outputs)
	}
	out, log = run("action", map[string]any{"steps": []any{map[string]any{"script": `echo "kube=[$KUBECONFIG]"`}}})
	if out.Error != "" {
		t.Fatalf("action job: %s\n%s", out.Error, log)
	}
	if !strings.Contains(log, "kube=[]") {
		t.Fatalf("an action job saw a KUBECONFIG:\n%s", log)
	}
}

// TestInClusterForHelm: with no kubeconfig, a helm job's process gets the
// agent's KUBERNETES_SERVICE_HOST and _PORT, by which the helm type finds
// the pod's in-cluster config; no other type gets them.
func TestInClusterForHelm(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
	t.Setenv("KUBERNETES_SERVICE_PORT", "443")
	r := &agent.PluginRunner{Loader: &pluginhost.Loader{SelfExe: self, Builtins: []string{"action", "helm"}}, WorkRoot: t.TempDir()}
	run := func(typ string, config map[string]any) (agent.Outcome, string) {
		var b strings.Builder
		out := r.Run(t.Context(), agent.Job{ID: "job-" + typ, InstallID: "ins1", Attempt: 1, ComponentType: typ,
			Operation: sdk.OpApply, Config: config, Timeout: time.Minute}, func(_ int32, text string) { b.WriteString(text + "\n") })
		return out, b.String()
	}
	out, log := run("helm", map[string]any{})
	if out.Error != "" || out.Outputs["host"] != "10.96.0.1:443" || out.Outputs["process"] != "" {
		t.Fatalf("helm job: %v %s\n%s", out.Outputs, out.Error, log)
	}
	out, log = run("action", map[string]any{"steps": []any{map[string]any{"script": `echo "host=[$KUBERNETES_SERVICE_HOST]"`}}})
	if out.Error != "" || !strings.Contains(log, "host=[]") {
		t.Fatalf("an action job saw the cluster's address: %s\n%s", out.Error, log)
	}
}
