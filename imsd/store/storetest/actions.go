package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
)

func actionRun(id, installID, action string, created time.Time) store.Workflow {
	return store.Workflow{ID: id, InstallID: installID, Kind: "action", Action: action, Trigger: "cron", Mode: "maintenance",
		AppRevision: 1, Parallelism: 1, CreatedAt: created, CreatedBy: "cron"}
}

// A cron tick fires once: a second insert of the same tick (another
// replica, or after a restart) and an older tick are refused and change
// nothing; concurrent inserts of one tick from two stores on the same
// database queue exactly one run. A tick while the action's run is still
// active is recorded without a run.
func testTriggerTicks(t *testing.T, e *env) {
	ctx := e.ctx()
	ins := e.install("cron")
	tick := store.Tick{InstallID: ins, Action: "check", At: at(time.Minute)}

	res, err := e.s.FireTick(ctx, tick, actionRun("run-1", ins, "check", at(61*time.Second)), at(61*time.Second))
	ok(t, err)
	equal(t, "first fire", res, store.TickFired)
	wf, _ := e.getWorkflow("run-1")
	equal(t, "run kind", wf.Kind, "action")
	equal(t, "run action", wf.Action, "check")
	equal(t, "run trigger", wf.Trigger, "cron")
	equal(t, "run mode", wf.Mode, "maintenance")

	// The same tick again, after a restart: refused, and the run it
	// carried is not stored.
	s2 := e.second()
	res, err = s2.FireTick(ctx, tick, actionRun("run-dup", ins, "check", at(62*time.Second)), at(62*time.Second))
	ok(t, err)
	equal(t, "same tick again", res, store.TickTaken)
	_, _, err = s2.GetWorkflow(ctx, "run-dup")
	wantErr(t, err, errs.NotFound)

	// run-1 has not ended: the next tick is recorded, skipped.
	res, err = e.s.FireTick(ctx, store.Tick{InstallID: ins, Action: "check", At: at(2 * time.Minute)},
		actionRun("run-2", ins, "check", at(121*time.Second)), at(121*time.Second))
	ok(t, err)
	equal(t, "tick while running", res, store.TickSkipped)
	wantKinds(t, "install chain after a skipped tick", e.kinds(ins), "action.tick_skipped")
	_, _, err = e.s.GetWorkflow(ctx, "run-2")
	wantErr(t, err, errs.NotFound)
	ended, err := e.s.EndActionRun(ctx, "run-1", store.WorkflowSucceeded, "", nil, at(3*time.Minute))
	ok(t, err)
	equal(t, "run-1 ended", ended, true)

	// An older tick than the latest recorded is refused.
	res, err = e.s.FireTick(ctx, tick, actionRun("run-old", ins, "check", at(4*time.Minute)), at(4*time.Minute))
	ok(t, err)
	equal(t, "older tick", res, store.TickTaken)

	last, err := e.s.LastTicks(ctx)
	ok(t, err)
	equal(t, "last tick", last[ins]["check"].Equal(at(2*time.Minute)), true)

	// Two stores race for one tick, many times: one run per tick.
	other := e.second()
	for i := range 10 {
		tick := store.Tick{InstallID: ins, Action: "race", At: at(time.Duration(10+i) * time.Minute)}
		var wg sync.WaitGroup
		results := make([]store.TickResult, 2)
		for j, st := range []*store.Store{e.s, other} {
			wg.Go(func() {
				id := fmt.Sprintf("race-%d-%d", i, j)
				var err error
				results[j], err = st.FireTick(ctx, tick, actionRun(id, ins, "race", tick.At), tick.At)
				if err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		fired := 0
		for j, r := range results {
			if r == store.TickFired {
				fired++
				ended, err := e.s.EndActionRun(ctx, fmt.Sprintf("race-%d-%d", i, j), store.WorkflowSucceeded, "", nil, tick.At)
				ok(t, err)
				equal(t, "race run ended", ended, true)
			}
		}
		equal(t, fmt.Sprintf("runs fired for tick %d", i), fired, 1)
	}
	runs, err := e.s.ListActionRuns(ctx, store.ActionRunFilter{InstallID: ins, Action: "race"})
	ok(t, err)
	equal(t, "race runs", len(runs), 10)
}

// Action runs list newest first with their step's job outputs; a
// health-check run's end sets the install's health with the run.
func testActionRunsAndHealth(t *testing.T, e *env) {
	ctx := e.ctx()
	ins := e.install("health")
	e.agent(ins, "agent-health")
	for i, id := range []string{"ar-1", "ar-2"} {
		ok(t, e.s.CreateWorkflow(ctx, actionRun(id, ins, "check", at(time.Duration(i)*time.Minute))))
	}
	ok(t, e.s.CreateWorkflow(ctx, actionRun("ar-other", ins, "other", at(5*time.Minute))))
	started, err := e.s.StartWorkflow(ctx, "ar-1", []store.Step{{Name: "check", Action: "check", ComponentType: "action",
		Operation: "apply", Config: []byte(`{"steps":[]}`), Timeout: time.Minute}}, store.WorkflowRunning, []byte(`{}`), at(time.Minute))
	ok(t, err)
	equal(t, "ar-1 started", started, true)
	j := newJob("job-ar-1", ins, at(time.Minute))
	began, err := e.s.StartStep(ctx, "ar-1", "check", j, at(time.Minute))
	ok(t, err)
	equal(t, "step started", began, true)
	claimed := e.claimOne(ins, "agent-health", at(time.Minute))
	_, err = e.s.FinishJob(ctx, claimed.ID, writer(claimed), store.Result{State: store.JobSucceeded, Outputs: map[string]string{"status": "ok"}}, at(2*time.Minute))
	ok(t, err)

	runs, err := e.s.ListActionRuns(ctx, store.ActionRunFilter{InstallID: ins, Action: "check"})
	ok(t, err)
	equal(t, "runs", len(runs), 2)
	equal(t, "newest first", runs[0].Workflow.ID, "ar-2")
	equal(t, "ar-1 job", runs[1].JobID, "job-ar-1")
	equal(t, "ar-1 output", runs[1].Outputs["status"], "ok")
	all, err := e.s.ListActionRuns(ctx, store.ActionRunFilter{InstallID: ins})
	ok(t, err)
	equal(t, "all runs", len(all), 3)

	ended, err := e.s.EndActionRun(ctx, "ar-1", store.WorkflowFailed, "check failed: exit 3",
		&store.InstallHealth{State: store.HealthUnhealthy, At: at(3 * time.Minute), Error: "exit 3", WorkflowID: "ar-1"}, at(3*time.Minute))
	ok(t, err)
	equal(t, "ended", ended, true)
	in, err := e.s.GetInstall(ctx, ins)
	ok(t, err)
	equal(t, "health", in.Health.State, store.HealthUnhealthy)
	equal(t, "health error", in.Health.Error, "exit 3")
	equal(t, "health run", in.Health.WorkflowID, "ar-1")
	equal(t, "health time", in.Health.At.Equal(at(3*time.Minute)), true)
	// Ending it again changes nothing, health included.
	ended, err = e.s.EndActionRun(ctx, "ar-1", store.WorkflowSucceeded, "",
		&store.InstallHealth{State: store.HealthHealthy, At: at(4 * time.Minute), WorkflowID: "ar-1"}, at(4*time.Minute))
	ok(t, err)
	equal(t, "ended twice", ended, false)
	in, err = e.s.GetInstall(ctx, ins)
	ok(t, err)
	equal(t, "health unchanged", in.Health.State, store.HealthUnhealthy)
	_, err = e.s.EndActionRun(ctx, "ar-2", store.WorkflowSucceeded, "", &store.InstallHealth{State: "fine", At: at(time.Hour)}, at(time.Hour))
	wantErr(t, err, errs.Invalid, "health.state")
}
