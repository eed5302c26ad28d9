package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/e2e/cluster"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// diamondApp is an app of four action components: a, then b and c
// together, then d, which reads b's and c's outputs. b reads the input
// size; a reads a secret and a sensitive input.
var diamondApp = map[string]string{
	"app.toml": "name = \"diamond\"\n[install_defaults]\nparallelism = 2\n",
	"inputs.toml": `[[input]]
name = "size"
type = "number"
default = 1

[[input]]
name = "token"
sensitive = true
required = true
`,
	"secrets.toml": "[[secret]]\nname = \"api_key\"\n",
	"components/a.toml": `type = "action"
[config]
env = { KEY = "{{ .secrets.api_key }}", TOKEN = "{{ .inputs.token }}" }
steps = [{ name = "a", script = "echo key=$KEY token=$TOKEN; echo url=db-$BYOC_INSTALL_ID >> $BYOC_OUTPUTS" }]
`,
	"components/b.toml": `type = "action"
dependencies = ["a"]
[config]
steps = [{ name = "b", script = "echo b size {{ .inputs.size }}; echo x=b{{ .inputs.size }} >> $BYOC_OUTPUTS" }]
`,
	"components/c.toml": `type = "action"
dependencies = ["a"]
[config]
steps = [{ name = "c", script = "sleep 0.5; echo y=c >> $BYOC_OUTPUTS" }]
`,
	"components/d.toml": `type = "action"
[config]
steps = [{ name = "d", script = "echo d {{ .components.b.outputs.x }} {{ .components.c.outputs.y }} {{ .components.a.outputs.url }}" }]
`,
	"installs/acme.toml": "[inputs]\ntoken = \"tok-sensitive-4242\"\n",
}

// The end-to-end test: push an app of four components with a
// diamond dependency, provision an install with a real agent (imsd
// restarted in the middle), change one input, and check that exactly the
// affected components were redeployed.
func TestDiamondProvisionAndInputChange(t *testing.T) {
	skipShort(t)
	opts := fast
	opts.WorkflowInterval = 200 * time.Millisecond
	ims := cluster.StartIMS(t, opts)
	cli := cluster.NewCLI(t, ims)
	run := cli.Run
	pushed := cli.PushApp(diamondApp)
	out := pushed.Output
	if !strings.Contains(out, "+ install acme created from installs/acme.toml") || !strings.Contains(out, "byoc install provision acme") {
		t.Fatalf("push:\n%s", out)
	}
	token := pushed.EnrollToken(t)

	secrets := filepath.Join(t.TempDir(), "secrets")
	os.WriteFile(secrets, []byte("api_key=sk-live-secret-777\n"), 0o600)
	cluster.StartAgent(t, ims.URL(), token, t.TempDir(), "--secrets-file", secrets)

	// The plan before anything is deployed: everything is new.
	out = run(0, "install", "plan", "acme", "--kind", "provision")
	if !planRow(out, "+", "a", "new") || !planRow(out, "+", "d", "new") || !strings.Contains(out, "4 steps; 0 components unchanged") {
		t.Fatalf("provision plan:\n%s", out)
	}

	c := ims.Admin()
	ctx := context.Background()
	res, err := c.StartWorkflow(ctx, connect.NewRequest(&imsv1.StartWorkflowRequest{Install: "acme", Kind: imsv1.WorkflowKind_WORKFLOW_KIND_PROVISION}))
	if err != nil {
		t.Fatal(err)
	}
	id := res.Msg.Workflow.Id
	// imsd goes down once a has been deployed, between steps.
	cluster.Eventually(t, 20*time.Second, "a deployed", func() bool {
		return stepState(t, c, id, "a") == imsv1.StepState_STEP_STATE_SUCCEEDED
	})
	ims.Restart(t)
	c = ims.Admin()
	out = run(0, "workflow", "get", id, "--wait")
	if !strings.Contains(out, "succeeded: 4/4 done") {
		t.Fatalf("provision after restart:\n%s", out)
	}
	jobs := installJobs(t, c)
	if len(jobs) != 4 {
		t.Fatalf("%d jobs after provision, want 4 (one per component, none twice)", len(jobs))
	}
	var comps []string
	for _, j := range jobs {
		comps = append(comps, j.Component)
	}
	if slices.Sort(comps); strings.Join(comps, " ") != "a b c d" {
		t.Fatalf("the jobs' components: %q, want a b c d", comps)
	}
	// From the install's name to a component's log and its newest workflow.
	if out := run(0, "logs", "acme", "--component", "a"); !strings.Contains(out, "key=") || !strings.Contains(out, "(a: ") {
		t.Fatalf("byoc logs acme --component a:\n%s", out)
	}
	if out := run(0, "workflow", "get", "acme"); !strings.Contains(out, id) {
		t.Fatalf("byoc workflow get acme:\n%s", out)
	}
	// The secret and the sensitive input reached the step and were
	// redacted from its log.
	aLog := strings.Join(cluster.Texts(cluster.Logs(t, c, jobOf(t, c, id, "a"))), "\n")
	if !strings.Contains(aLog, "key=") || strings.Contains(aLog, "sk-live-secret-777") || strings.Contains(aLog, "tok-sensitive-4242") {
		t.Fatalf("a's log:\n%s", aLog)
	}
	dLog := strings.Join(cluster.Texts(cluster.Logs(t, c, jobOf(t, c, id, "d"))), "\n")
	if !strings.Contains(dLog, "d b1 c db-ins_") {
		t.Fatalf("d's log does not show b's, c's and a's outputs:\n%s", dLog)
	}
	if out := run(0, "install", "get", "acme"); !strings.Contains(out, "active") || !strings.Contains(out, "App revision") {
		t.Fatalf("install get:\n%s", out)
	}

	// Change one input: the plan names exactly b (changed) and d
	// (downstream); the update redeploys exactly those.
	out = run(0, "install", "plan", "acme", "--input", "size=3")
	if !planRow(out, "~", "b", "changed: config.steps") || !planRow(out, "~", "d", "downstream of b") ||
		planRow(out, "~", "a", "") || planRow(out, "~", "c", "") || !strings.Contains(out, "2 steps; 2 components unchanged (a, c)") {
		t.Fatalf("plan:\n%s", out)
	}
	out = run(0, "install", "update", "acme", "--input", "size=3", "--wait")
	if !strings.Contains(out, "succeeded: 2/2 done") {
		t.Fatalf("update:\n%s", out)
	}
	wfs, err := c.ListWorkflows(ctx, connect.NewRequest(&imsv1.ListWorkflowsRequest{Install: "acme"}))
	if err != nil {
		t.Fatal(err)
	}
	upd, err := c.GetWorkflow(ctx, connect.NewRequest(&imsv1.GetWorkflowRequest{Id: wfs.Msg.Workflows[0].Id}))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range upd.Msg.Workflow.Steps {
		names = append(names, s.Name)
	}
	if !slices.Equal(names, []string{"b", "d"}) || upd.Msg.Workflow.Reason != "inputs changed: size" {
		t.Fatalf("update steps %v (reason %q), want exactly b and d", names, upd.Msg.Workflow.Reason)
	}
	if n := len(installJobs(t, c)); n != 6 {
		t.Fatalf("%d jobs after the update, want 6", n)
	}
	dLog = strings.Join(cluster.Texts(cluster.Logs(t, c, jobOf(t, c, upd.Msg.Workflow.Id, "d"))), "\n")
	if !strings.Contains(dLog, "d b3 c") {
		t.Fatalf("d's log after the update:\n%s", dLog)
	}

	// A bad input is refused before anything runs, naming it.
	out = run(1, "install", "update", "acme", "--input", "size=big")
	if !strings.Contains(out, `error: --input size: input "size" is a number, not "big"`) || strings.Contains(out, "set_inputs") {
		t.Fatalf("bad input:\n%s", out)
	}
	// Deprovision tears down in reverse: d first, a last.
	out = run(0, "install", "deprovision", "acme", "--yes", "--wait")
	if !strings.Contains(out, "succeeded: 4/4 done") {
		t.Fatalf("deprovision:\n%s", out)
	}
	if out := run(0, "install", "get", "acme"); !strings.Contains(out, "deprovisioned") {
		t.Fatalf("install after deprovision:\n%s", out)
	}
}

// planRow reports whether a plan table has a row for step with mark and a
// reason starting with why.
func planRow(out, mark, step, why string) bool {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 6 && f[0] == mark && f[1] == step && strings.HasPrefix(strings.Join(f[5:], " "), why) {
			return true
		}
	}
	return false
}

func stepState(t *testing.T, c interface {
	GetWorkflow(context.Context, *connect.Request[imsv1.GetWorkflowRequest]) (*connect.Response[imsv1.GetWorkflowResponse], error)
}, id, step string) imsv1.StepState {
	res, err := c.GetWorkflow(context.Background(), connect.NewRequest(&imsv1.GetWorkflowRequest{Id: id}))
	if err != nil {
		return imsv1.StepState_STEP_STATE_UNSPECIFIED
	}
	for _, s := range res.Msg.Workflow.Steps {
		if s.Name == step {
			return s.State
		}
	}
	return imsv1.StepState_STEP_STATE_UNSPECIFIED
}

func jobOf(t *testing.T, c interface {
	GetWorkflow(context.Context, *connect.Request[imsv1.GetWorkflowRequest]) (*connect.Response[imsv1.GetWorkflowResponse], error)
}, id, step string) string {
	t.Helper()
	res, err := c.GetWorkflow(context.Background(), connect.NewRequest(&imsv1.GetWorkflowRequest{Id: id}))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range res.Msg.Workflow.Steps {
		if s.Name == step {
			return s.JobId
		}
	}
	b, _ := json.Marshal(res.Msg.Workflow)
	t.Fatalf("workflow %s has no step %s: %s", id, step, b)
	return ""
}

func installJobs(t *testing.T, c interface {
	ListJobs(context.Context, *connect.Request[imsv1.ListJobsRequest]) (*connect.Response[imsv1.ListJobsResponse], error)
}) []*imsv1.Job {
	t.Helper()
	res, err := c.ListJobs(context.Background(), connect.NewRequest(&imsv1.ListJobsRequest{Install: "acme"}))
	if err != nil {
		t.Fatal(err)
	}
	return res.Msg.Jobs
}
