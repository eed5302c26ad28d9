package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
)

func (e *env) workflow(id, installID, kind string, created time.Time) store.Workflow {
	e.t.Helper()
	wf := store.Workflow{ID: id, InstallID: installID, Kind: kind, AppRevision: 1, Parallelism: 2, CreatedAt: created, CreatedBy: "tok-admin"}
	ok(e.t, e.s.CreateWorkflow(e.ctx(), wf))
	return wf
}

func (e *env) getWorkflow(id string) (store.Workflow, map[string]store.Step) {
	e.t.Helper()
	wf, steps, err := e.s.GetWorkflow(e.ctx(), id)
	ok(e.t, err)
	m := map[string]store.Step{}
	for _, s := range steps {
		m[s.Name] = s
	}
	return wf, m
}

func planSteps(names ...string) []store.Step {
	var out []store.Step
	for i, n := range names {
		st := store.Step{Name: n, Component: n, ComponentType: "action", Operation: "apply", Config: []byte(`{"steps":[]}`), Timeout: time.Minute}
		if i > 0 {
			st.Needs = []string{names[0]}
		}
		out = append(out, st)
	}
	return out
}

// A workflow holds its install: a second one waits until it ends. Steps
// start once (their job is enqueued with them), finish once, and a deploy
// records what the install runs.
func testWorkflowLifecycle(t *testing.T, e *env) {
	ctx := e.ctx()
	ins := e.install("wf")
	e.agent(ins, "agent-wf")
	e.workflow("wf-1", ins, "provision", at(0))
	e.workflow("wf-2", ins, "update", at(time.Second))
	wantErr(t, e.s.CreateWorkflow(ctx, store.Workflow{ID: "wf-1", InstallID: ins, Kind: "update", Parallelism: 1, CreatedAt: T0}), errs.AlreadyExists)
	wantErr(t, e.s.CreateWorkflow(ctx, store.Workflow{ID: "wf-x", InstallID: "nope", Kind: "update", Parallelism: 1, CreatedAt: T0}), errs.NotFound)

	started, err := e.s.StartWorkflow(ctx, "wf-1", planSteps("a", "b", "c"), store.WorkflowRunning, []byte(`{"size":1}`), at(time.Minute))
	ok(t, err)
	equal(t, "wf-1 started", started, true)
	in, err := e.s.GetInstall(ctx, ins)
	ok(t, err)
	equal(t, "install state", in.State, store.InstallProvisioning)
	// The install is busy: wf-2 stays queued.
	started, err = e.s.StartWorkflow(ctx, "wf-2", planSteps("a"), store.WorkflowRunning, nil, at(time.Minute))
	ok(t, err)
	equal(t, "wf-2 started while wf-1 runs", started, false)
	// Starting wf-1 twice writes nothing.
	started, err = e.s.StartWorkflow(ctx, "wf-1", planSteps("x"), store.WorkflowRunning, nil, at(time.Minute))
	ok(t, err)
	equal(t, "wf-1 started again", started, false)

	wf, steps := e.getWorkflow("wf-1")
	equal(t, "state", wf.State, store.WorkflowRunning)
	equal(t, "inputs", string(wf.Inputs), `{"size":1}`)
	equal(t, "steps", len(steps), 3)
	equal(t, "b needs", slices.Equal(steps["b"].Needs, []string{"a"}), true)

	job := newJob("job-a", ins, at(time.Minute))
	started, err = e.s.StartStep(ctx, "wf-1", "a", job, at(time.Minute))
	ok(t, err)
	equal(t, "a started", started, true)
	job.ID = "job-a2"
	started, err = e.s.StartStep(ctx, "wf-1", "a", job, at(time.Minute))
	ok(t, err)
	equal(t, "a started twice", started, false)
	if _, err := e.s.GetJob(ctx, "job-a2"); !errs.Is(err, errs.NotFound) {
		t.Fatalf("a refused start enqueued its job anyway: %v", err)
	}
	equal(t, "job-a queued", e.job("job-a").State, store.JobQueued)

	// Nothing has ended yet; then the agent finishes job-a.
	ids, err := e.s.WorkflowsToAdvance(ctx, true)
	ok(t, err)
	equal(t, "workflows with ended jobs", len(ids), 0)
	j := e.claimOne(ins, "agent-wf", at(2*time.Minute))
	_, err = e.s.FinishJob(ctx, j.ID, writer(j), store.Result{State: store.JobSucceeded, Outputs: map[string]string{"url": "x"}}, at(3*time.Minute))
	ok(t, err)
	ids, err = e.s.WorkflowsToAdvance(ctx, true)
	ok(t, err)
	equal(t, "workflows with ended jobs", slices.Equal(ids, []string{"wf-1"}), true)

	d := &store.InstallComponent{InstallID: ins, Name: "a", ComponentType: "action", Digest: "d1", Config: []byte(`{"k":1}`),
		Outputs: map[string]string{"url": "x"}, Needs: []string{}, AppRevision: 1, WorkflowID: "wf-1", JobID: "job-a", DeployedAt: at(3 * time.Minute)}
	done, err := e.s.FinishStep(ctx, "wf-1", "a", "job-other", store.StepSucceeded, "", d, "", at(3*time.Minute))
	ok(t, err)
	equal(t, "finish with another job", done, false)
	done, err = e.s.FinishStep(ctx, "wf-1", "a", "job-a", store.StepSucceeded, "", d, "", at(3*time.Minute))
	ok(t, err)
	equal(t, "finish", done, true)
	done, err = e.s.FinishStep(ctx, "wf-1", "a", "job-a", store.StepFailed, "late", nil, "", at(4*time.Minute))
	ok(t, err)
	equal(t, "finish twice", done, false)
	comps, err := e.s.InstallComponents(ctx, ins)
	ok(t, err)
	equal(t, "deployed", len(comps), 1)
	equal(t, "deployed output", comps[0].Outputs["url"], "x")
	equal(t, "deployed digest", comps[0].Digest, "d1")

	// A failed b, a skipped c: retry brings both back.
	ok(t, e.s.EndSteps(ctx, "wf-1", []string{"b"}, store.StepFailed, "render: no output", at(4*time.Minute)))
	ok(t, e.s.EndSteps(ctx, "wf-1", []string{"c"}, store.StepSkipped, "not run: b failed", at(4*time.Minute)))
	ended, err := e.s.EndWorkflow(ctx, "wf-1", store.WorkflowFailed, "steps not succeeded: b", store.InstallFailed, 0, at(5*time.Minute))
	ok(t, err)
	equal(t, "ended", ended, true)
	in, _ = e.s.GetInstall(ctx, ins)
	equal(t, "install state", in.State, store.InstallFailed)
	equal(t, "install revision", in.AppRevision, int64(0))

	wf, err = e.s.RetryStep(ctx, "wf-1", "b", at(6*time.Minute))
	wantErr(t, err, errs.Conflict, "workflow wf-2 of the same install came after wf-1")
	_, err = e.s.RequestWorkflowCancel(ctx, "wf-2", "superseded", "ops", at(6*time.Minute))
	ok(t, err)
	wf2, steps2 := e.getWorkflow("wf-2")
	equal(t, "wf-2 state", wf2.State, store.WorkflowCancelled)
	equal(t, "wf-2 steps", len(steps2), 0)
	// Only the newest workflow of an install can be retried; wf-2 is newer.
	_, err = e.s.RetryStep(ctx, "wf-1", "b", at(6*time.Minute))
	wantErr(t, err, errs.Conflict, "came after wf-1")

	e.workflow("wf-3", ins, "update", at(7*time.Minute))
	started, err = e.s.StartWorkflow(ctx, "wf-3", planSteps("b", "c"), store.WorkflowRunning, nil, at(7*time.Minute))
	ok(t, err)
	equal(t, "wf-3 starts once wf-1 has ended", started, true)
	ok(t, e.s.EndSteps(ctx, "wf-3", []string{"b"}, store.StepFailed, "boom", at(8*time.Minute)))
	ok(t, e.s.EndSteps(ctx, "wf-3", []string{"c"}, store.StepSkipped, "not run: b failed", at(8*time.Minute)))
	_, err = e.s.EndWorkflow(ctx, "wf-3", store.WorkflowFailed, "b failed", store.InstallFailed, 0, at(8*time.Minute))
	ok(t, err)
	_, err = e.s.RetryStep(ctx, "wf-3", "a", at(9*time.Minute))
	wantErr(t, err, errs.NotFound, `no step "a"`)
	wf, err = e.s.RetryStep(ctx, "wf-3", "b", at(9*time.Minute))
	ok(t, err)
	equal(t, "retried workflow", wf.State, store.WorkflowRunning)
	_, steps = e.getWorkflow("wf-3")
	equal(t, "b pending", steps["b"].State, store.StepPending)
	equal(t, "c pending", steps["c"].State, store.StepPending)
	_, err = e.s.RetryStep(ctx, "wf-3", "b", at(9*time.Minute))
	wantErr(t, err, errs.Conflict, "only a failed, cancelled or skipped step")

	ended, err = e.s.EndWorkflow(ctx, "wf-3", store.WorkflowSucceeded, "", store.InstallActive, 3, at(10*time.Minute))
	ok(t, err)
	equal(t, "ended", ended, true)
	_, steps = e.getWorkflow("wf-3")
	equal(t, "pending steps end with their workflow", steps["b"].State, store.StepCancelled)
	in, _ = e.s.GetInstall(ctx, ins)
	equal(t, "install state", in.State, store.InstallActive)
	equal(t, "install revision", in.AppRevision, int64(3))
	ended, err = e.s.EndWorkflow(ctx, "wf-3", store.WorkflowFailed, "", store.InstallFailed, 0, at(11*time.Minute))
	ok(t, err)
	equal(t, "ended twice", ended, false)

	active, err := e.s.ListWorkflows(ctx, store.WorkflowFilter{InstallID: ins, Active: true})
	ok(t, err)
	equal(t, "active workflows", len(active), 0)
	all, err := e.s.ListWorkflows(ctx, store.WorkflowFilter{InstallID: ins})
	ok(t, err)
	equal(t, "newest first", all[0].ID, "wf-3")
	equal(t, "all workflows", len(all), 3)
}

// Approval, and cancelling in every state.
func testWorkflowApproveCancel(t *testing.T, e *env) {
	ctx := e.ctx()
	ins := e.install("wfa")
	e.workflow("wf-a", ins, "update", at(0))
	_, err := e.s.ApproveWorkflow(ctx, "wf-a", "alice", nil, at(time.Minute))
	wantErr(t, err, errs.Conflict, "wf-a is queued, not awaiting approval")
	_, err = e.s.ApproveWorkflow(ctx, "wf-none", "alice", nil, at(time.Minute))
	wantErr(t, err, errs.NotFound)
	started, err := e.s.StartWorkflow(ctx, "wf-a", planSteps("a"), store.WorkflowAwaitingApproval, nil, at(time.Minute))
	ok(t, err)
	equal(t, "started", started, true)
	// A workflow awaiting approval holds the install too.
	e.workflow("wf-b", ins, "update", at(time.Second))
	started, err = e.s.StartWorkflow(ctx, "wf-b", planSteps("a"), store.WorkflowRunning, nil, at(time.Minute))
	ok(t, err)
	equal(t, "wf-b started", started, false)
	// No step starts before approval.
	started, err = e.s.StartStep(ctx, "wf-a", "a", newJob("job-wa", ins, at(time.Minute)), at(time.Minute))
	ok(t, err)
	equal(t, "step started before approval", started, false)
	wf, err := e.s.ApproveWorkflow(ctx, "wf-a", "alice", nil, at(2*time.Minute))
	ok(t, err)
	equal(t, "approved state", wf.State, store.WorkflowRunning)
	equal(t, "approved by", wf.ApprovedBy, "alice")

	// Cancel a running workflow: it is marked; no step starts any more.
	wf, err = e.s.RequestWorkflowCancel(ctx, "wf-a", "wrong plan", "ops", at(3*time.Minute))
	ok(t, err)
	equal(t, "still running", wf.State, store.WorkflowRunning)
	equal(t, "cancel requested", wf.CancelRequested, true)
	started, err = e.s.StartStep(ctx, "wf-a", "a", newJob("job-wa", ins, at(3*time.Minute)), at(3*time.Minute))
	ok(t, err)
	equal(t, "step started after cancel", started, false)
	_, err = e.s.RetryStep(ctx, "wf-a", "a", at(3*time.Minute))
	wantErr(t, err, errs.Conflict)
	_, err = e.s.EndWorkflow(ctx, "wf-a", store.WorkflowCancelled, "cancelled: wrong plan", store.InstallFailed, 0, at(4*time.Minute))
	ok(t, err)
	_, err = e.s.RequestWorkflowCancel(ctx, "wf-a", "", "ops", at(5*time.Minute))
	ok(t, err) // cancelling a cancelled workflow is harmless
	e.workflow("wf-c", ins, "update", at(2*time.Second))
	_, err = e.s.EndWorkflow(ctx, "wf-c", store.WorkflowSucceeded, "", "", 0, at(5*time.Minute))
	ok(t, err)
	_, err = e.s.RequestWorkflowCancel(ctx, "wf-c", "", "ops", at(5*time.Minute))
	wantErr(t, err, errs.Conflict, "already succeeded")

	// UpdateInstall keeps settings and inputs.
	ap := true
	in, err := e.s.UpdateInstall(ctx, ins, map[string]string{"size": "3"}, store.InstallSettings{Parallelism: 8, RequireApproval: &ap,
		Overrides: map[string]map[string]any{"api": {"replicas": 2.0}}, Source: "installs/wfa.toml"}, at(6*time.Minute))
	ok(t, err)
	in, err = e.s.GetInstall(ctx, in.ID)
	ok(t, err)
	equal(t, "input", in.Inputs["size"], "3")
	equal(t, "parallelism", in.Settings.Parallelism, 8)
	equal(t, "approval", *in.Settings.RequireApproval, true)
	equal(t, "override", in.Settings.Overrides["api"]["replicas"], any(2.0))
	equal(t, "source", in.Settings.Source, "installs/wfa.toml")
	_, err = e.s.UpdateInstall(ctx, "nope", nil, store.InstallSettings{}, at(6*time.Minute))
	wantErr(t, err, errs.NotFound)
}
