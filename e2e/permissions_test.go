package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/e2e/cluster"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1/imsv1connect"
)

// permissions runs the real "agentd permissions" on the agent's state dir,
// as the customer's admin would, and returns what it printed.
func permissions(t *testing.T, stateDir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(cluster.Binaries(t), "agentd"), append([]string{"permissions", "--state-dir", stateDir}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("agentd permissions %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func enqueueMode(t *testing.T, c imsv1connect.OperatorServiceClient, install, mode, script string) *imsv1.Job {
	t.Helper()
	r, err := c.EnqueueJob(context.Background(), connect.NewRequest(&imsv1.EnqueueJobRequest{
		Install: install, ComponentType: "action", Operation: "apply", Config: actionConfig(t, script), TimeoutSeconds: 300, Mode: mode,
	}))
	if err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	if r.Msg.Job.Mode != mode {
		t.Fatalf("enqueued job's mode %q, want %q", r.Msg.Job.Mode, mode)
	}
	return r.Msg.Job
}

func agentStatus(t *testing.T, c imsv1connect.OperatorServiceClient, install string) *imsv1.AgentStatus {
	t.Helper()
	r, err := c.GetInstall(context.Background(), connect.NewRequest(&imsv1.GetInstallRequest{IdOrName: install}))
	if err != nil {
		t.Fatal(err)
	}
	return r.Msg.Install.Agent
}

// neverRan checks that nothing of job ran: no process carries mark (its
// script would sleep for minutes), its log holds no line of the script,
// and the agent never started its plugin.
func neverRan(t *testing.T, c imsv1connect.OperatorServiceClient, agent *cluster.AgentProc, job *imsv1.Job, mark string) {
	t.Helper()
	if ps := markerPIDs(mark); len(ps) > 0 {
		t.Fatalf("refused job %s has processes running: %v", job.Id, ps)
	}
	for _, l := range cluster.Logs(t, c, job.Id) {
		if l.Stream != imsv1.LogStream_LOG_STREAM_SYSTEM || strings.Contains(l.Text, "RAN") {
			t.Fatalf("refused job %s logged %v %q", job.Id, l.Stream, l.Text)
		}
	}
	if out := agent.Output(); strings.Contains(out, `msg="job started" job=`+job.Id) {
		t.Fatalf("the agent started refused job %s:\n%s", job.Id, out)
	}
}

// A job queued while the customer has its mode off is refused by the agent
// when it arrives, and never runs: no process, no output, no retry. It
// shows as refused, with the agent's words, in byoc job get; byoc install
// get shows the modes as the agent reported them. A job of a mode that is
// on runs beside it.
func TestModeOffRefusesQueuedJob(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	c := ims.Admin()
	cli := cluster.NewCLI(t, ims)
	_, token := cluster.NewInstall(t, c, "shop", "acme")
	stateDir := filepath.Join(t.TempDir(), "agent")
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out := permissions(t, stateDir, "disable", "maintenance"); !lineWith(out, "maintenance", "off") {
		t.Fatalf("agentd permissions disable maintenance:\n%s", out)
	}

	// Queued before the agent is there, through the CLI (default mode).
	mark := marker()
	id := strings.Fields(cli.Run(0, "action", "run", "acme", "--", "echo RAN; sleep "+mark))[0]
	if j := cluster.WaitJob(t, c, id, 5*time.Second, imsv1.JobState_JOB_STATE_QUEUED); j.Mode != "maintenance" {
		t.Fatalf("a script's mode: %q, want maintenance", j.Mode)
	}
	ok := enqueueMode(t, c, "acme", "provision", "echo provisioned")

	agent := cluster.StartAgent(t, ims.URL(), token, stateDir)
	end := cluster.WaitJob(t, c, id, 30*time.Second, imsv1.JobState_JOB_STATE_REFUSED, imsv1.JobState_JOB_STATE_SUCCEEDED,
		imsv1.JobState_JOB_STATE_FAILED, imsv1.JobState_JOB_STATE_CANCELLED)
	const why = "refused: maintenance is turned off in the customer's account"
	if end.State != imsv1.JobState_JOB_STATE_REFUSED || end.Error != why || end.Attempt != 1 {
		t.Fatalf("job %s: %v attempt %d %q; want refused at attempt 1 with %q", id, end.State, end.Attempt, end.Error, why)
	}
	if _, okEnd := follow(t, c, ok.Id); okEnd.State != imsv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("the provision job ended %v: %s", okEnd.State, okEnd.Error)
	}
	neverRan(t, c, agent, end, mark)
	if lines := cluster.Logs(t, c, id); len(lines) != 1 || lines[0].Text != "[agentd] "+why || lines[0].Stream != imsv1.LogStream_LOG_STREAM_SYSTEM {
		t.Fatalf("refused job's log: %v", lines)
	}

	out := cli.Run(0, "job", "get", id)
	if !lineWith(out, "State", why) || !lineWith(out, "Mode", "maintenance") || strings.Contains(out, "Exit code") {
		t.Fatalf("byoc job get:\n%s", out)
	}
	if out, errOut, code := cli.Exec("job", "logs", "-f", id); code != 1 || !strings.Contains(errOut, "job "+id+" "+why) {
		t.Fatalf("byoc job logs -f of a refused job: exit %d\n%s\n%s", code, out, errOut)
	}
	if out := cli.Run(0, "job", "list", "--state", "refused"); !lineWith(out, id, "refused") || strings.Contains(out, ok.Id) {
		t.Fatalf("byoc job list --state refused:\n%s", out)
	}
	if out := cli.Run(0, "install", "get", "acme"); !lineWith(out, "Permissions", "P · D ·", "maintenance off") || !lineWith(out, "Agent", "connected") {
		t.Fatalf("byoc install get:\n%s", out)
	}

	// Final: two leases and sweeps later it is still refused, attempt 1.
	time.Sleep(2 * fast.LeaseDuration)
	if j := cluster.WaitJob(t, c, id, time.Second, imsv1.JobState_JOB_STATE_REFUSED); j.Attempt != 1 {
		t.Fatalf("the refused job was handed out again: attempt %d", j.Attempt)
	}
	neverRan(t, c, agent, end, mark)

	// With the agent away, a job waiting for it says it will be refused.
	agent.Stop()
	cluster.Eventually(t, 10*time.Second, "imsd to see the agent gone", func() bool { return !agentStatus(t, c, "acme").GetConnected() })
	later := enqueueMode(t, c, "acme", "maintenance", "echo later")
	if out := cli.Run(0, "job", "get", later.Id); !lineWith(out, "Pending", "not connected", "the customer has maintenance turned off (as the agent last reported)") {
		t.Fatalf("byoc job get of a job waiting for an agent with its mode off:\n%s", out)
	}
}

// The kill switch, with the console open in a real terminal: disable-all
// cancels the running job (cancelled, with the reason; its processes
// gone), the agent stays connected and imsd shows it disabled by the
// customer (MODES "disabled" in the console, byoc install get), a new job
// is refused and never runs; enable-all lifts it and jobs run again.
func TestKillSwitch(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	c := ims.Admin()
	cli := cluster.NewCLI(t, ims)
	agent := startAgent(t, ims, "acme")
	cluster.Eventually(t, 10*time.Second, "the agent's permissions to be reported", func() bool {
		return agentStatus(t, c, "acme").GetPermissions() != nil
	})
	if p := agentStatus(t, c, "acme").Permissions; !p.Provision || !p.Maintenance || !p.Deprovision || p.BreakGlass || p.DisabledAll {
		t.Fatalf("default permissions reported: %v", p)
	}
	var term *cluster.Terminal
	if _, err := exec.LookPath("tmux"); err == nil {
		term = cluster.StartTerminal(t, 120, 20, []string{"BYOC_CONFIG=" + filepath.Join(t.TempDir(), "config.json")},
			filepath.Join(cluster.Binaries(t), "byoc"), "--server", ims.URL(), "--token", ims.AdminToken)
		term.WaitFor("acme's modes", func(s string) bool { return lineWith(s, "acme", "online", "P M D ·") })
	} else {
		t.Log("no tmux: the console's MODES column is not checked")
	}

	mark := marker()
	running := enqueue(t, c, "acme", sleeper(mark), 300)
	ps := waitPIDs(t, mark, 4)
	out := permissions(t, agent.StateDir, "disable-all")
	if !strings.Contains(out, "DISABLED") {
		t.Fatalf("agentd permissions disable-all:\n%s", out)
	}
	end := cluster.WaitJob(t, c, running.Id, 20*time.Second, imsv1.JobState_JOB_STATE_CANCELLED, imsv1.JobState_JOB_STATE_FAILED,
		imsv1.JobState_JOB_STATE_SUCCEEDED)
	if end.State != imsv1.JobState_JOB_STATE_CANCELLED || !strings.Contains(end.Error, "the customer has disabled all jobs") {
		t.Fatalf("running job after disable-all: %v %q", end.State, end.Error)
	}
	cluster.Eventually(t, 5*time.Second, "every process of the cancelled job to exit", func() bool {
		for _, p := range ps {
			if alive(p) {
				return false
			}
		}
		return true
	})
	cluster.Eventually(t, 5*time.Second, "imsd to show the kill switch", func() bool {
		a := agentStatus(t, c, "acme")
		return a.GetConnected() && a.GetPermissions().GetDisabledAll()
	})
	if out := cli.Run(0, "install", "get", "acme"); !lineWith(out, "Agent", "disabled by customer") || !strings.Contains(out, "ALL JOBS DISABLED BY THE CUSTOMER") {
		t.Fatalf("byoc install get while disabled:\n%s", out)
	}
	if term != nil {
		term.WaitFor("MODES disabled", func(s string) bool { return lineWith(s, "acme", "online", "disabled") })
	}

	mark2 := marker()
	refused := enqueueMode(t, c, "acme", "provision", "echo RAN; sleep "+mark2)
	// The agent acks before it checks the mode (the refusal is the
	// attempt's result, written under its lease), so the job may show
	// running for a moment: wait for its end; neverRan below checks that
	// nothing of it ran.
	r := cluster.WaitJob(t, c, refused.Id, 20*time.Second, imsv1.JobState_JOB_STATE_REFUSED,
		imsv1.JobState_JOB_STATE_SUCCEEDED, imsv1.JobState_JOB_STATE_FAILED, imsv1.JobState_JOB_STATE_CANCELLED)
	if r.State != imsv1.JobState_JOB_STATE_REFUSED || !strings.Contains(r.Error, "refused: the customer has disabled all jobs") {
		t.Fatalf("a job while disabled: %v %q", r.State, r.Error)
	}
	neverRan(t, c, agent, r, mark2)

	permissions(t, agent.StateDir, "enable-all")
	cluster.Eventually(t, 5*time.Second, "imsd to show the kill switch lifted", func() bool {
		return !agentStatus(t, c, "acme").GetPermissions().GetDisabledAll()
	})
	if term != nil {
		term.WaitFor("MODES back", func(s string) bool { return lineWith(s, "acme", "online", "P M D ·") })
	}
	if _, end := follow(t, c, enqueue(t, c, "acme", "echo back", 60).Id); end.State != imsv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("a job after enable-all: %v %s", end.State, end.Error)
	}
}

// oneComponentApp is one action component, for workflow tests.
var oneComponentApp = map[string]string{
	"app.toml": "name = \"shop\"\n",
	"components/db.toml": `type = "action"
[config]
steps = [{ name = "db", script = "echo url=pg >> $BYOC_OUTPUTS" }]
destroy_steps = [{ name = "drop", script = "echo dropping" }]
`,
	"installs/acme.toml": "",
}

// A workflow whose jobs need a mode the customer turned off fails at once
// (the refused job's end wakes the engine: its periodic pass is a minute
// away here), its step saying why; the install keeps its components. With
// the mode back on, the same deprovision runs.
func TestWorkflowStepRefused(t *testing.T) {
	skipShort(t)
	opts := fast
	opts.WorkflowInterval = time.Minute
	ims := cluster.StartIMS(t, opts)
	cli := cluster.NewCLI(t, ims)
	pushed := cli.PushApp(oneComponentApp)
	stateDir := filepath.Join(t.TempDir(), "agent")
	cluster.StartAgent(t, ims.URL(), pushed.EnrollToken(t), stateDir)
	waitConnected(t, ims, "acme")
	if out := cli.Run(0, "install", "provision", "acme", "--wait"); !strings.Contains(out, "succeeded: 1/1 done") {
		t.Fatalf("provision:\n%s", out)
	}
	permissions(t, stateDir, "disable", "deprovision")
	cluster.Eventually(t, 5*time.Second, "imsd to show deprovision off", func() bool {
		p := agentStatus(t, ims.Admin(), "acme").GetPermissions()
		return p != nil && !p.Deprovision
	})
	start := time.Now()
	out, errOut, code := cli.Exec("install", "deprovision", "acme", "--yes", "--wait")
	all := out + errOut
	if code == 0 || !strings.Contains(all, "refused: deprovision is turned off in the customer's account") {
		t.Fatalf("deprovision with deprovision off: exit %d\n%s", code, all)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("the refused deprovision took %s to end", d)
	}
	jobs, err := ims.Admin().ListJobs(context.Background(), connect.NewRequest(&imsv1.ListJobsRequest{States: []imsv1.JobState{imsv1.JobState_JOB_STATE_REFUSED}}))
	if err != nil || len(jobs.Msg.Jobs) != 1 || jobs.Msg.Jobs[0].Mode != "deprovision" || jobs.Msg.Jobs[0].Operation != "destroy" {
		t.Fatalf("refused jobs: %v, %v", jobs.Msg.GetJobs(), err)
	}

	permissions(t, stateDir, "enable", "deprovision")
	cluster.Eventually(t, 5*time.Second, "imsd to show deprovision on", func() bool {
		return agentStatus(t, ims.Admin(), "acme").GetPermissions().GetDeprovision()
	})
	if out := cli.Run(0, "install", "deprovision", "acme", "--yes", "--wait"); !strings.Contains(out, "succeeded: 1/1 done") {
		t.Fatalf("deprovision with deprovision on:\n%s", out)
	}
}

// breakGlassApp has one break-glass action.
var breakGlassApp = map[string]string{
	"app.toml": "name = \"shop\"\n",
	"actions/debug.toml": `description = "Opens a debug shell."
mode = "break_glass"
[[step]]
name = "debug"
script = "echo RAN"
`,
	"installs/acme.toml": "",
}

// A break-glass action without a grant is refused by the agent: with
// break_glass off (the default) because it is off, and with it on because
// no grant is live. The run's job needs
// break_glass, from the action's declared mode.
func TestBreakGlassActionWithoutGrantIsRefused(t *testing.T) {
	skipShort(t)
	opts := fast
	opts.WorkflowInterval = 200 * time.Millisecond
	ims := cluster.StartIMS(t, opts)
	cli := cluster.NewCLI(t, ims)
	pushed := cli.PushApp(breakGlassApp)
	stateDir := filepath.Join(t.TempDir(), "agent")
	cluster.StartAgent(t, ims.URL(), pushed.EnrollToken(t), stateDir)
	waitConnected(t, ims, "acme")

	out, errOut, code := cli.Exec("action", "run", "acme", "debug", "--wait")
	if code == 0 || !strings.Contains(out+errOut, "refused: break_glass is turned off in the customer's account") {
		t.Fatalf("a break-glass action with break_glass off: exit %d\n%s%s", code, out, errOut)
	}
	permissions(t, stateDir, "enable", "break_glass")
	out, errOut, code = cli.Exec("action", "run", "acme", "debug", "--wait")
	if code == 0 || !strings.Contains(out+errOut, "refused: break_glass jobs need a live break-glass grant approved by the customer") {
		t.Fatalf("a break-glass action with break_glass on and no grant: exit %d\n%s%s", code, out, errOut)
	}
	jobs, err := ims.Admin().ListJobs(context.Background(), connect.NewRequest(&imsv1.ListJobsRequest{}))
	if err != nil || len(jobs.Msg.Jobs) != 2 {
		t.Fatalf("jobs: %v, %v", jobs.Msg.GetJobs(), err)
	}
	for _, j := range jobs.Msg.Jobs {
		if j.Mode != "break_glass" || j.State != imsv1.JobState_JOB_STATE_REFUSED {
			t.Fatalf("job %s: mode %q, %v", j.Id, j.Mode, j.State)
		}
		for _, l := range cluster.Logs(t, ims.Admin(), j.Id) {
			if strings.Contains(l.Text, "RAN") && !strings.HasPrefix(l.Text, "[agentd]") {
				t.Fatalf("a refused break-glass job ran: %q", l.Text)
			}
		}
	}
}
