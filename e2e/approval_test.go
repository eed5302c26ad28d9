package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/e2e/cluster"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// localfilePlugin builds the example third-party plugin, registers its
// type with imsd, and returns the agent flags that find and pin it.
func localfilePlugin(t *testing.T, cli *cluster.CLI) []string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "byoc-plugin-localfile")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = filepath.Join(cluster.RepoRoot(), "plugins", "examples", "localfile")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the example plugin: %v\n%s", err, out)
	}
	describe, err := exec.Command(bin, "describe").Output()
	if err != nil {
		t.Fatalf("describe: %v", err)
	}
	reg := cli.Cmd("plugin", "register", "-")
	reg.Stdin = bytes.NewReader(describe)
	if out, err := reg.CombinedOutput(); err != nil {
		t.Fatalf("register: %v\n%s", err, out)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return []string{"--plugin-dir", dir, "--plugin-pin", "localfile=" + hex.EncodeToString(sum[:])}
}

// sum is the hex SHA-256 of s, as the localfile plugin plans a file's
// content.
func sum(s string) string {
	b := sha256.Sum256([]byte(s))
	return hex.EncodeToString(b[:])
}

var (
	workflowID = regexp.MustCompile(`wf_[0-9A-Za-z]+`)
	planDigest = regexp.MustCompile(`sha256:[0-9a-f]{64}`)
)

// With approval required, a real agent plans the component before anyone
// approves (the plan shown by workflow get), the approval binds the plan's
// digest (audited, carried by the apply job), and when what the component
// manages changes between the approval and the apply, the apply's fresh
// plan differs: nothing is applied, the workflow awaits approval again
// with the new plan, and approving that one applies it.
func TestApprovalBindsThePlan(t *testing.T) {
	skipShort(t)
	opts := fast
	opts.WorkflowInterval = 200 * time.Millisecond
	ims := cluster.StartIMS(t, opts)
	cli := cluster.NewCLI(t, ims)
	target := filepath.Join(t.TempDir(), "motd")
	// The plugin writes a file outside the agent: the customer lets it.
	flags := append(localfilePlugin(t, cli), "--sandbox-writable", filepath.Dir(target))
	token := cli.PushApp(map[string]string{
		"app.toml":             "name = \"notes\"\n[install_defaults]\nrequire_approval = true\n",
		"components/motd.toml": "type = \"localfile\"\n[config]\npath = \"" + target + "\"\ncontent = \"hello\\n\"\nmode = \"0644\"\n",
		"installs/acme.toml":   "",
	}).EnrollToken(t)
	agentState := t.TempDir()
	cluster.StartAgent(t, ims.URL(), token, agentState, flags...)

	// provision --wait waits for the plan and shows it.
	out := cli.Run(3, "install", "provision", "acme", "--wait")
	id := workflowID.FindString(out)
	for _, want := range []string{"Plan of motd (localfile, step motd): planned sha256:",
		"Plan: 1 to create, 0 to update, 0 to delete, 0 to replace", "  + " + target, `      sha256 = "` + sum("hello\n") + `"`, "awaits approval of its plan"} {
		if !strings.Contains(out, want) {
			t.Fatalf("provision --wait lacks %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Fatalf("the plan created the file: %v", err)
	}
	c := ims.Admin()
	ctx := context.Background()
	step := func() *imsv1.WorkflowStep {
		res, err := c.GetWorkflow(ctx, connect.NewRequest(&imsv1.GetWorkflowRequest{Id: id}))
		if err != nil {
			t.Fatal(err)
		}
		return res.Msg.Workflow.Steps[0]
	}
	first := step()
	if first.PlanState != "planned" || !planDigest.MatchString(first.PlanDigest) {
		t.Fatalf("step before approval: %v", first)
	}
	// The plan artifact stays on the agent, in the component's state dir.
	if _, err := os.Stat(filepath.Join(agentState, "components", "motd", ".byoc-plans", strings.TrimPrefix(first.PlanDigest, "sha256:"))); err != nil {
		t.Fatalf("the plan's artifact dir on the agent: %v", err)
	}
	if out := cli.Run(0, "workflow", "get", id); !strings.Contains(out, "Plan of motd (localfile, step motd): planned "+first.PlanDigest[:19]) ||
		!strings.Contains(out, "  + "+target) {
		t.Fatalf("workflow get:\n%s", out)
	}

	// Someone writes the file after the plan was shown: the approved plan
	// (create) is no longer what an apply would do (update).
	os.WriteFile(target, []byte("intruder\n"), 0o600)
	out = cli.Run(0, "workflow", "approve", id)
	if !strings.Contains(out, "Approved 1 plan of workflow "+id) || !strings.Contains(out, "motd: "+first.PlanDigest[:19]+" (1 to create)") {
		t.Fatalf("approve:\n%s", out)
	}
	var again *imsv1.WorkflowStep
	cluster.Eventually(t, 30*time.Second, "the workflow to await approval again", func() bool {
		again = step()
		return again.PlanDigest != first.PlanDigest && again.PlanState == "planned"
	})
	job, err := c.GetJob(ctx, connect.NewRequest(&imsv1.GetJobRequest{Id: again.JobId}))
	if err != nil {
		t.Fatal(err)
	}
	if j := job.Msg.Job; j.ApprovedPlanDigest != first.PlanDigest || j.PlanDigest != again.PlanDigest ||
		!strings.Contains(j.Error, "plan changed since approval") || len(j.PlannedChanges) != 1 || j.PlannedChanges[0].Action != "update" {
		t.Fatalf("the apply job: %v", j)
	}
	if b, _ := os.ReadFile(target); string(b) != "intruder\n" {
		t.Fatalf("a changed plan was applied: %q", b)
	}
	out = cli.Run(0, "workflow", "get", id)
	for _, want := range []string{"awaiting approval", "Plan: 0 to create, 1 to update", `sha256: "` + sum("intruder\n") + `" → "` + sum("hello\n") + `"`} {
		if !strings.Contains(out, want) {
			t.Fatalf("workflow get after the change lacks %q:\n%s", want, out)
		}
	}
	// Approving a plan other than the one now shown is refused.
	_, err = c.ApproveWorkflow(ctx, connect.NewRequest(&imsv1.ApproveWorkflowRequest{Id: id, PlanDigests: map[string]string{"motd": first.PlanDigest}}))
	if err == nil || !strings.Contains(err.Error(), "changed since it was shown") {
		t.Fatalf("approving the stale plan: %v", err)
	}
	if out := cli.Run(0, "workflow", "approve", id, "--wait"); !strings.Contains(out, "succeeded") {
		t.Fatalf("second approval:\n%s", out)
	}
	if b, _ := os.ReadFile(target); string(b) != "hello\n" {
		t.Fatalf("after the approved apply the file holds %q", b)
	}
	final := step()
	if final.ApprovedPlanDigest != again.PlanDigest || final.State != imsv1.StepState_STEP_STATE_SUCCEEDED {
		t.Fatalf("final step: %v", final)
	}
	// The plugin got the approved plan's saved directory and applied
	// what it saved.
	var lines []string
	for _, l := range cluster.Logs(t, c, final.JobId) {
		lines = append(lines, l.Text)
	}
	applyLog := strings.Join(lines, "\n")
	for _, want := range []string{"planning again before applying", "the plan is the approved one (" + again.PlanDigest + ")",
		"applying the approved plan " + again.PlanDigest} {
		if !strings.Contains(applyLog, want) {
			t.Fatalf("apply log of %s lacks %q:\n%s", final.JobId, want, applyLog)
		}
	}
	// The audit log binds both approvals to their plans, and records the
	// change in between.
	out = cli.Run(0, "audit", "list", "--install", "acme", "-o", "json")
	var events []struct {
		Kind string `json:"kind"`
		Data string `json:"data"`
	}
	if err := json.Unmarshal([]byte(out), &events); err != nil {
		t.Fatalf("audit list: %v\n%s", err, out)
	}
	var approved []string
	changed := ""
	for _, e := range events {
		var data map[string]string
		json.Unmarshal([]byte(e.Data), &data)
		switch e.Kind {
		case "workflow.approved":
			approved = append(approved, data["plans"])
		case "workflow.plan_changed":
			changed = data["approved_plan_digest"] + " -> " + data["plan_digest"]
		}
	}
	if len(approved) != 2 || !strings.Contains(strings.Join(approved, " "), "motd="+first.PlanDigest) ||
		!strings.Contains(strings.Join(approved, " "), "motd="+again.PlanDigest) || changed != first.PlanDigest+" -> "+again.PlanDigest {
		t.Fatalf("audit: approvals %q, change %q", approved, changed)
	}

	// A deprovision is planned too (issue 29: it awaited approval of an
	// empty plan): the plan names the file it removes, and the approved
	// destroy is planned again before the plugin's Destroy runs.
	permissions(t, agentState, "enable", "deprovision")
	out = cli.Run(3, "install", "deprovision", "acme", "--yes", "--wait")
	for _, want := range []string{"Plan of motd (localfile, step motd): planned sha256:", "Plan: 0 to create, 0 to update, 1 to delete, 0 to replace",
		"  - " + target, "awaits approval of its plan"} {
		if !strings.Contains(out, want) {
			t.Fatalf("deprovision --wait lacks %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(target); err != nil {
		t.Fatalf("the destroy plan removed the file: %v", err)
	}
	deprov := workflowID.FindString(out)
	if out := cli.Run(0, "workflow", "approve", deprov, "--wait"); !strings.Contains(out, "succeeded") {
		t.Fatalf("approve the deprovision:\n%s", out)
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Fatalf("the approved destroy left the file: %v", err)
	}
}

// byoc install plan --live asks each install's agent for a real plan and,
// across installs, groups those whose plans are identical: acme and beta
// would write the same file the same way, gamma (another input) not.
func TestLivePlanGroupsInstalls(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	cli := cluster.NewCLI(t, ims)
	dir := t.TempDir()
	flags := append(localfilePlugin(t, cli), "--sandbox-writable", dir)
	cli.PushApp(map[string]string{
		"app.toml":             "name = \"notes\"\n",
		"inputs.toml":          "[[input]]\nname = \"greeting\"\ndefault = \"hello\"\n",
		"components/motd.toml": "type = \"localfile\"\n[config]\npath = \"" + filepath.Join(dir, "motd") + "\"\ncontent = \"{{ .inputs.greeting }}\\n\"\nmode = \"0644\"\n",
		"installs/acme.toml":   "",
		"installs/beta.toml":   "",
		"installs/gamma.toml":  "[inputs]\ngreeting = \"howdy\"\n",
	})
	c := ims.Admin()
	for _, in := range []string{"acme", "beta", "gamma"} {
		tok, err := c.CreateEnrollmentToken(context.Background(), connect.NewRequest(&imsv1.CreateEnrollmentTokenRequest{Install: in}))
		if err != nil {
			t.Fatal(err)
		}
		cluster.StartAgent(t, ims.URL(), tok.Msg.EnrollmentToken.Token, t.TempDir(), flags...)
	}
	// An install without an agent cannot be planned live: said at once.
	cli.PushApp(map[string]string{"app.toml": "name = \"lonely\"\n", "components/motd.toml": "type = \"localfile\"\n[config]\npath = \"/tmp/x\"\ncontent = \"x\"\nmode = \"0644\"\n",
		"installs/solo.toml": ""})
	if out := cli.Run(1, "install", "plan", "solo", "--live", "--kind", "provision"); !strings.Contains(out, "install solo has no agent enrolled") {
		t.Fatalf("live plan without an agent:\n%s", out)
	}
	// Without --live: the graph only, no job.
	if out := cli.Run(0, "install", "plan", "acme", "--kind", "provision"); strings.Contains(out, "Plan of motd") || !strings.Contains(out, "motd") {
		t.Fatalf("plan without --live:\n%s", out)
	}
	// An enrolled agent that is offline: said at once too, naming the agent
	// and since when, with nothing enqueued for it, while the other
	// installs are still planned.
	tok, err := c.CreateEnrollmentToken(context.Background(), connect.NewRequest(&imsv1.CreateEnrollmentTokenRequest{Install: "solo"}))
	if err != nil {
		t.Fatal(err)
	}
	solo := cluster.StartAgent(t, ims.URL(), tok.Msg.EnrollmentToken.Token, t.TempDir(), flags...)
	waitConnected(t, ims, "solo")
	solo.Kill()
	cluster.Eventually(t, 30*time.Second, "the agent of solo to be offline", func() bool {
		r, err := c.GetInstall(context.Background(), connect.NewRequest(&imsv1.GetInstallRequest{IdOrName: "solo"}))
		return err == nil && r.Msg.Install.Agent != nil && !r.Msg.Install.Agent.Connected
	})
	start := time.Now()
	out := cli.Run(1, "install", "plan", "acme", "solo", "--live", "--kind", "provision", "--timeout", "60s")
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("a live plan with an offline agent took %s (the timeout is 60s)", took)
	}
	for _, want := range []string{"1 install, 1 distinct plan.\n", "Plan of motd (localfile, step motd): planned sha256:",
		"Not planned: solo: ", "agent agt_", " of install solo is offline since ", "(byoc install plan solo without --live)", "1 of 2 installs could not be planned"} {
		if !strings.Contains(out, want) {
			t.Fatalf("live plan with an offline agent lacks %q:\n%s", want, out)
		}
	}
	if jobs, err := c.ListJobs(context.Background(), connect.NewRequest(&imsv1.ListJobsRequest{Install: "solo"})); err != nil || len(jobs.Msg.Jobs) != 0 {
		t.Fatalf("jobs of solo after a live plan with its agent offline: %v %v", jobs, err)
	}
	out = cli.Run(0, "install", "plan", "--live", "--app", "notes", "--kind", "provision", "--timeout", "60s")
	for _, want := range []string{"3 installs, 2 distinct plans.", "=== Plan 1 of 2: 2 installs: acme, beta", "=== Plan 2 of 2: 1 install: gamma\n",
		`      sha256 = "` + sum("hello\n") + `"`, `      sha256 = "` + sum("howdy\n") + `"`, "Plan of motd (localfile, step motd): planned sha256:"} {
		if !strings.Contains(out, want) {
			t.Fatalf("live plan lacks %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "motd")); !os.IsNotExist(err) {
		t.Fatalf("a live plan wrote the file: %v", err)
	}
	// One install: its real planned changes, through the API too.
	res, err := c.PlanInstall(context.Background(), connect.NewRequest(&imsv1.PlanInstallRequest{Install: "gamma",
		Kind: imsv1.WorkflowKind_WORKFLOW_KIND_PROVISION, Live: true}))
	if err != nil {
		t.Fatal(err)
	}
	st := res.Msg.Steps[0]
	job, err := c.GetJob(context.Background(), connect.NewRequest(&imsv1.GetJobRequest{Id: st.PlanJobId}))
	if err != nil {
		t.Fatal(err)
	}
	if st.PlanState != "planned" || job.Msg.Job.Operation != "plan" || job.Msg.Job.PlanDigest != st.PlanDigest ||
		job.Msg.Job.PlannedChanges[0].GetAfter().GetStructValue().GetFields()["sha256"].GetStringValue() != sum("howdy\n") {
		t.Fatalf("live plan of gamma: %v\njob %v", st, job.Msg.Job)
	}
}

// Cancelling a workflow that awaits approval cancels its plan jobs still
// waiting for the agent (here there is none).
func TestCancelAwaitingApprovalCancelsPlans(t *testing.T) {
	skipShort(t)
	opts := fast
	opts.WorkflowInterval = 100 * time.Millisecond
	ims := cluster.StartIMS(t, opts)
	cli := cluster.NewCLI(t, ims)
	cli.PushApp(map[string]string{
		"app.toml":            "name = \"notes\"\n[install_defaults]\nrequire_approval = true\n",
		"components/web.toml": "type = \"action\"\n[config]\nsteps = [{ name = \"hi\", script = \"echo hi\" }]\n",
		"installs/acme.toml":  "",
	})
	id := workflowID.FindString(cli.Run(0, "install", "provision", "acme"))
	c := ims.Admin()
	ctx := context.Background()
	var plan string
	cluster.Eventually(t, 10*time.Second, "the plan job to be queued", func() bool {
		res, err := c.GetWorkflow(ctx, connect.NewRequest(&imsv1.GetWorkflowRequest{Id: id}))
		if err != nil || len(res.Msg.Workflow.Steps) == 0 {
			return false
		}
		plan = res.Msg.Workflow.Steps[0].PlanJobId
		return plan != "" && res.Msg.Workflow.Steps[0].PlanState == "planning"
	})
	// Approving while the plan is being made is refused.
	if out := cli.Run(1, "workflow", "approve", id); !strings.Contains(out, "still planning web") {
		t.Fatalf("approve while planning:\n%s", out)
	}
	cli.Run(0, "workflow", "cancel", id)
	job, err := c.GetJob(ctx, connect.NewRequest(&imsv1.GetJobRequest{Id: plan}))
	if err != nil {
		t.Fatal(err)
	}
	if job.Msg.Job.State != imsv1.JobState_JOB_STATE_CANCELLED || job.Msg.Job.Operation != "plan" {
		t.Fatalf("the plan job after the cancel: %v", job.Msg.Job)
	}
}
