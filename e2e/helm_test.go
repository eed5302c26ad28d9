package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/e2e/cluster"
	"github.com/byoc-dev/byoc/plugins/helm/kubetest"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// helmApp is one helm component (the helm plugin's test chart, with its
// greeting from an input) and a cluster policy that denies ConfigMaps
// greeting "forbidden".
func helmApp(chart string) map[string]string {
	return map[string]string{
		"app.toml":    "name = \"shop\"\n",
		"inputs.toml": "[[input]]\nname = \"greeting\"\ndefault = \"hello\"\n[[input]]\nname = \"deployment\"\ntype = \"bool\"\ndefault = false\n",
		"components/web.toml": `type = "helm"
timeout = "10m"
[config]
release = "web"
namespace = "shop"
create_namespace = true
chart_dir = "` + chart + `"
timeout = "2m"
values = { greeting = "{{ .inputs.greeting }}", deployment = "{{ .inputs.deployment }}" }
`,
		"policies.toml": `[[cluster_policy]]
name = "greetings"
kind = "validating_admission_policy"
file = "policies/greetings.yaml"
`,
		"policies/greetings.yaml": `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: deny-forbidden-greeting
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE", "UPDATE"]
      resources: ["configmaps"]
  validations:
  - expression: "!has(object.data) || !('greeting' in object.data) || object.data.greeting != 'forbidden'"
    message: "greeting 'forbidden' is not allowed here"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: deny-forbidden-greeting
spec:
  policyName: deny-forbidden-greeting
  validationActions: [Deny]
`,
		"installs/acme.toml": "parallelism = 2\n",
	}
}

// The helm type through a real imsd and agentd against a real
// kube-apiserver: the agent's --kubeconfig reaches the built-in helm
// plugin; provision installs the app's cluster policy first
// (cluster_policies, a ValidatingAdmissionPolicy) and then the chart; an
// update the policy denies fails with the API server's message and
// leaves the release as it was; an operator's cancel of an upgrade
// waiting for readiness ends the job at once, and the next update
// recovers from the release the cancel left.
func TestHelmThroughTheAgent(t *testing.T) {
	skipShort(t)
	kube := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	opts := fast
	opts.WorkflowInterval = 200 * time.Millisecond
	ims := cluster.StartIMS(t, opts)
	cli := cluster.NewCLI(t, ims)
	chart, _ := filepath.Abs(filepath.Join("..", "plugins", "helm", "testdata", "web"))
	pushed := cli.PushApp(helmApp(chart))
	// The chart is read from a directory on the agent (chart_dir, for
	// development): the customer lets plugins read it.
	cluster.StartAgent(t, ims.URL(), pushed.EnrollToken(t), t.TempDir(), "--kubeconfig", kube.Kubeconfig, "--cancel-grace", "30s",
		"--sandbox-read-only", chart)
	greeting := func() string {
		t.Helper()
		out, err := kube.Kubectl(ctx, nil, "-n", "shop", "get", "configmap", "web-config", "-o", "jsonpath={.data.greeting}")
		if err != nil {
			t.Fatal(err)
		}
		return out
	}

	if out := cli.Run(0, "install", "provision", "acme", "--wait"); !strings.Contains(out, "succeeded: 2/2 done") {
		t.Fatalf("provision:\n%s", out)
	}
	if g := greeting(); g != "hello" {
		t.Fatalf("greeting %q after provision", g)
	}
	if _, err := kube.Kubectl(ctx, nil, "get", "validatingadmissionpolicy", "deny-forbidden-greeting"); err != nil {
		t.Fatalf("the cluster policy is not installed: %v", err)
	}
	c := ims.Admin()

	// The admission plugin loads a new policy within a moment; the
	// update may race it only if it came sooner than this.
	cluster.Eventually(t, time.Minute, "the policy to take effect", func() bool {
		_, err := kube.Kubectl(ctx, nil, "-n", "shop", "create", "configmap", "probe", "--from-literal=greeting=forbidden", "--dry-run=server")
		return err != nil && strings.Contains(err.Error(), "not allowed here")
	})
	out, errOut, code := cli.Exec("install", "update", "acme", "--input", "greeting=forbidden", "--wait")
	if code != 1 {
		t.Fatalf("update the cluster policy denies: exit %d\n%s%s", code, out, errOut)
	}
	var denied *imsv1.Job
	for _, j := range installJobs(t, c) {
		if j.State == imsv1.JobState_JOB_STATE_FAILED {
			denied = j
		}
	}
	if denied == nil || !strings.Contains(denied.Error, "greeting 'forbidden' is not allowed here") {
		t.Fatalf("the denied update's job: %+v", denied)
	}
	if g := greeting(); g != "hello" {
		t.Fatalf("greeting %q after the denied update", g)
	}

	// Cancel an upgrade while it waits for a Deployment that never
	// becomes ready (no controllers on this control plane).
	if _, _, code := cli.Exec("install", "update", "acme", "--input", "greeting=hi", "--input", "deployment=true"); code != 0 {
		t.Fatalf("queue the update: exit %d", code)
	}
	var job string
	cluster.Eventually(t, 2*time.Minute, "the upgrade to wait for readiness", func() bool {
		if _, err := kube.Kubectl(ctx, nil, "-n", "shop", "get", "deployment", "web"); err != nil {
			return false
		}
		for _, j := range installJobs(t, c) {
			if j.State == imsv1.JobState_JOB_STATE_RUNNING {
				job = j.Id
			}
		}
		return job != ""
	})
	cancelled := time.Now()
	cli.Run(0, "job", "cancel", job, "--reason", "test cancel")
	cluster.WaitJob(t, c, job, time.Minute, imsv1.JobState_JOB_STATE_CANCELLED)
	t.Logf("job cancelled %s after the request", time.Since(cancelled).Round(time.Millisecond))
	t.Logf("the cancelled job's log: %q", cluster.Texts(cluster.Logs(t, c, job)))
	if out := cli.Run(0, "install", "update", "acme", "--input", "greeting=again", "--input", "deployment=false", "--wait"); !strings.Contains(out, "succeeded") {
		t.Fatalf("update after the cancel:\n%s", out)
	}
	if g := greeting(); g != "again" {
		t.Fatalf("greeting %q after the last update", g)
	}
}

// A helm component on an agent with no kubeconfig, outside a pod: its job
// fails naming agentd --kubeconfig (not client-go's dial to
// localhost:8080), the job's own log ends with that error, byoc logs
// finds it by the install's name, and a live plan of it exits 1.
func TestHelmWithoutKubeconfig(t *testing.T) {
	skipShort(t)
	t.Setenv("KUBECONFIG", "")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	ims := cluster.StartIMS(t, fast)
	cli := cluster.NewCLI(t, ims)
	chart, _ := filepath.Abs(filepath.Join("..", "plugins", "helm", "testdata", "web"))
	pushed := cli.PushApp(map[string]string{
		"app.toml":            "name = \"shop\"\n",
		"components/web.toml": "type = \"helm\"\n[config]\nrelease = \"web\"\nnamespace = \"shop\"\nchart_dir = \"" + chart + "\"\n",
		"installs/acme.toml":  "",
	})
	cluster.StartAgent(t, ims.URL(), pushed.EnrollToken(t), t.TempDir())
	out, errOut, code := cli.Exec("install", "provision", "acme", "--wait")
	if code != 1 || !strings.Contains(out+errOut, "agentd with --kubeconfig") || strings.Contains(out+errOut, "8080") {
		t.Fatalf("provision with no kubeconfig: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = cli.Exec("logs", "acme", "--component", "web")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || !strings.HasPrefix(lines[len(lines)-1], "==> [agentd] ") || !strings.Contains(lines[len(lines)-1], "agentd with --kubeconfig FILE (or set KUBECONFIG") ||
		!strings.Contains(errOut, "(web: helm apply), failed") {
		t.Fatalf("byoc logs acme --component web: exit %d\n%s\nstderr:\n%s", code, out, errOut)
	}
	out, errOut, code = cli.Exec("install", "plan", "acme", "--live", "--kind", "provision", "--timeout", "60s")
	if code != 1 || !strings.Contains(errOut, "1 of 1 component plans failed (web)") {
		t.Fatalf("live plan with no kubeconfig: exit %d\n%s%s", code, out, errOut)
	}
}
