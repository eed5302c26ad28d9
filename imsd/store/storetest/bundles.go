package storetest

import (
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
)

// testOfflineStep: a step an agent ran from an offline bundle (byoc
// bundle import-results) is recorded in one go: the step runs with its
// job, which ends at once with the agent's result, attempt 1, fencing
// token 1, its log lines and the audit events, and is never offered to
// an agent to claim. A step no longer pending, or a result that is not
// final, records nothing.
func testOfflineStep(t *testing.T, e *env) {
	ctx := e.ctx()
	ins := e.install("offline")
	e.agent(ins, "ag-off")
	e.workflow("wf-off", ins, "provision", at(0))
	started, err := e.s.StartWorkflow(ctx, "wf-off", planSteps("web", "db"), store.WorkflowRunning, []byte("{}"), at(time.Minute))
	ok(t, err)
	equal(t, "workflow started", started, true)

	job := func(id string) store.Job {
		j := newJob(id, ins, at(time.Minute))
		j.ComponentType, j.Component, j.MaxAttempts = "action", "web", 1
		return j
	}
	res := store.Result{State: store.JobSucceeded, ExitCode: 0, Outputs: map[string]string{"digest": "sha256:abc"}}
	logs := lines(1, 1, 3)
	// A result that is not final, or no end time: nothing is written.
	wantErr(t, e.s.RecordOfflineStep(ctx, "wf-off", "web", job("job-web"), "ag-off", store.Result{State: store.JobRunning}, logs, at(2*time.Minute), at(3*time.Minute)), errs.Invalid, "state")
	wantErr(t, e.s.RecordOfflineStep(ctx, "wf-off", "web", job("job-web"), "ag-off", res, logs, at(2*time.Minute), time.Time{}), errs.Invalid, "ended")
	if _, err := e.s.GetJob(ctx, "job-web"); !errs.Is(err, errs.NotFound) {
		t.Fatalf("a refused record left job-web: %v", err)
	}

	ok(t, e.s.RecordOfflineStep(ctx, "wf-off", "web", job("job-web"), "ag-off", res, logs, at(2*time.Minute), at(3*time.Minute)))
	j := e.job("job-web")
	equal(t, "state", j.State, store.JobSucceeded)
	equal(t, "agent", j.AgentID, "ag-off")
	equal(t, "attempt", j.Attempt, 1)
	equal(t, "fencing token", j.FencingToken, int64(1))
	equal(t, "output", j.Outputs["digest"], "sha256:abc")
	equal(t, "started", j.StartedAt.Equal(at(2*time.Minute)), true)
	equal(t, "ended", j.EndedAt.Equal(at(3*time.Minute)), true)
	equal(t, "log lines", len(e.logs("job-web")), 3)
	_, steps := e.getWorkflow("wf-off")
	equal(t, "web's job", steps["web"].JobID, "job-web")
	equal(t, "web's attempts", steps["web"].Attempts, 1)
	equal(t, "db still pending", steps["db"].State, store.StepPending)

	// Never offered to an agent.
	claimed, err := e.s.ClaimJobs(ctx, ins, store.Writer{AgentID: "ag-off"}, 10, at(time.Hour), at(4*time.Minute))
	ok(t, err)
	equal(t, "jobs claimed", len(claimed), 0)

	// Once: the step is no longer pending, and the second job is not
	// stored.
	wantErr(t, e.s.RecordOfflineStep(ctx, "wf-off", "web", job("job-web-2"), "ag-off", res, nil, at(5*time.Minute), at(6*time.Minute)), errs.Conflict, "not pending")
	if _, err := e.s.GetJob(ctx, "job-web-2"); !errs.Is(err, errs.NotFound) {
		t.Fatalf("a conflicting record left job-web-2: %v", err)
	}
	wantErr(t, e.s.RecordOfflineStep(ctx, "wf-off", "nope", job("job-nope"), "ag-off", res, nil, at(5*time.Minute), at(6*time.Minute)), errs.Conflict)

	// A failed one records its error and exit code.
	fj := job("job-db")
	fj.Component = "db"
	ok(t, e.s.RecordOfflineStep(ctx, "wf-off", "db", fj, "ag-off", store.Result{State: store.JobFailed, ExitCode: 2, Error: "boom"}, nil, at(7*time.Minute), at(8*time.Minute)))
	j = e.job("job-db")
	equal(t, "db state", j.State, store.JobFailed)
	equal(t, "db exit code", j.ExitCode, 2)
	equal(t, "db error", j.Error, "boom")

	evs, err := e.s.ListAuditEvents(ctx, store.AuditFilter{Chain: ins, OneChain: true})
	ok(t, err)
	offline := 0
	for _, ev := range evs {
		if ev.Kind == "step.started" && ev.Data["offline"] == "true" {
			offline++
		}
	}
	equal(t, "offline step.started events", offline, 2)
}

// testOfflineWorkflow: an offline bundle's workflow is recorded whole or
// not at all: a step that cannot be recorded (its job exists already:
// the same jobs passed off as another bundle's) leaves no workflow, no
// step, no job and no audit event; recorded, it has ended with its
// steps; the same workflow again is AlreadyExists and writes nothing.
func testOfflineWorkflow(t *testing.T, e *env) {
	ctx := e.ctx()
	ins := e.install("offline-wf")
	e.agent(ins, "ag-ow")
	job := func(id, comp string) store.Job {
		j := newJob(id, ins, at(time.Minute))
		j.ComponentType, j.Component, j.MaxAttempts = "action", comp, 1
		return j
	}
	res := store.Result{State: store.JobSucceeded, Outputs: map[string]string{"url": "x"}}
	rec := func(id, webJob string) store.OfflineWorkflow {
		return store.OfflineWorkflow{
			Workflow: store.Workflow{ID: id, InstallID: ins, Kind: "provision", AppRevision: 4, Parallelism: 1, CreatedAt: at(time.Minute), CreatedBy: "bundle b"},
			Steps:    planSteps("web", "db"), AgentID: "ag-ow",
			Ran: []store.OfflineStep{{Name: "web", Job: job(webJob, "web"), Result: res, Logs: lines(1, 1, 2), LeftOut: 5, Started: at(2 * time.Minute), Ended: at(3 * time.Minute),
				StepState: store.StepSucceeded, Deployed: &store.InstallComponent{InstallID: ins, Name: "web", ComponentType: "action", Config: []byte("{}"),
					AppRevision: 4, WorkflowID: id, JobID: webJob, DeployedAt: at(3 * time.Minute)}}},
			NotRun: []string{"db"}, NotRunMsg: "not run on the agent",
			State: store.WorkflowFailed, Msg: "steps not succeeded: db", InstallState: store.InstallFailed,
			Audit: store.AuditEvent{Chain: ins, At: at(4 * time.Minute), Kind: "bundle.results_imported", Actor: "imsd", Subject: "bundle:" + id},
			Now:   at(4 * time.Minute),
		}
	}
	events := func() int {
		evs, err := e.s.ListAuditEvents(ctx, store.AuditFilter{Chain: ins, OneChain: true})
		ok(t, err)
		return len(evs)
	}
	// A job of that id exists already: nothing of the workflow is written.
	e.enqueue("job-taken", ins, at(0))
	n := events()
	err := e.s.RecordOfflineWorkflow(ctx, rec("wf-ow-1", "job-taken"))
	if err == nil {
		t.Fatal("a workflow whose job exists already was recorded")
	}
	if _, _, err := e.s.GetWorkflow(ctx, "wf-ow-1"); !errs.Is(err, errs.NotFound) {
		t.Fatalf("the refused record left its workflow: %v", err)
	}
	equal(t, "audit events after the refused record", events(), n)
	comps, err := e.s.InstallComponents(ctx, ins)
	ok(t, err)
	equal(t, "components after the refused record", len(comps), 0)
	equal(t, "log lines dropped by the refused record", e.s.LogLinesDropped(), int64(0))

	// The lines left out before the store (LeftOut) and those its cap
	// drops count in LogLinesDropped (byoc_job_log_lines_dropped_total)
	// once the workflow is recorded: 5, and line 2 of 2 past a cap of 1.
	e.s.SetLogLimits(store.LogLimits{Lines: 1})
	ok(t, e.s.RecordOfflineWorkflow(ctx, rec("wf-ow-2", "job-ow-web")))
	e.s.SetLogLimits(store.LogLimits{})
	equal(t, "log lines dropped", e.s.LogLinesDropped(), int64(6))
	wf, steps := e.getWorkflow("wf-ow-2")
	equal(t, "workflow state", wf.State, store.WorkflowFailed)
	equal(t, "web", steps["web"].State, store.StepSucceeded)
	equal(t, "db", steps["db"].State, store.StepSkipped)
	equal(t, "web's job", e.job("job-ow-web").State, store.JobSucceeded)
	equal(t, "log lines (one, and the cap's marker)", len(e.logs("job-ow-web")), 2)
	comps, err = e.s.InstallComponents(ctx, ins)
	ok(t, err)
	equal(t, "components", len(comps), 1)
	in, err := e.s.GetInstall(ctx, ins)
	ok(t, err)
	equal(t, "install state", in.State, store.InstallFailed)

	n = events()
	wantErr(t, e.s.RecordOfflineWorkflow(ctx, rec("wf-ow-2", "job-ow-web-2")), errs.AlreadyExists)
	equal(t, "audit events after the second record", events(), n)
	if _, err := e.s.GetJob(ctx, "job-ow-web-2"); !errs.Is(err, errs.NotFound) {
		t.Fatalf("the second record left its job: %v", err)
	}

	// A later results file adds db, not run then (RecordOfflineRerun):
	// the workflow runs again and ends as db leaves it; db again is a
	// Conflict that writes nothing.
	rerun := store.OfflineRerun{WorkflowID: "wf-ow-2", AgentID: "ag-ow",
		Ran: []store.OfflineStep{{Name: "db", Job: job("job-ow-db", "db"), Result: res, Logs: lines(1, 1, 1), Started: at(5 * time.Minute), Ended: at(6 * time.Minute),
			StepState: store.StepSucceeded}},
		State: store.WorkflowSucceeded, InstallState: store.InstallActive, Revision: 4,
		Audit: store.AuditEvent{Chain: ins, At: at(7 * time.Minute), Kind: "bundle.results_imported", Actor: "imsd", Subject: "bundle:wf-ow-2"},
		Now:   at(7 * time.Minute)}
	ok(t, e.s.RecordOfflineRerun(ctx, rerun))
	wf, steps = e.getWorkflow("wf-ow-2")
	equal(t, "workflow state after the rerun", wf.State, store.WorkflowSucceeded)
	equal(t, "db after the rerun", steps["db"].State, store.StepSucceeded)
	equal(t, "db's job", e.job("job-ow-db").State, store.JobSucceeded)
	in, err = e.s.GetInstall(ctx, ins)
	ok(t, err)
	equal(t, "install state after the rerun", in.State, store.InstallActive)
	n = events()
	rerun.Ran[0].Job = job("job-ow-db-2", "db")
	wantErr(t, e.s.RecordOfflineRerun(ctx, rerun), errs.Conflict)
	equal(t, "audit events after the refused rerun", events(), n)
	if _, err := e.s.GetJob(ctx, "job-ow-db-2"); !errs.Is(err, errs.NotFound) {
		t.Fatalf("the refused rerun left its job: %v", err)
	}
}
