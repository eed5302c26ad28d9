package storetest

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
)

// testPolicyFindings: a job's policy findings are stored with its result,
// read back with the job, and recorded in its job.finished audit event.
func testPolicyFindings(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	e.agent(inst, "ag-1")
	e.enqueue("job-1", inst, T0)
	j := e.claimOne(inst, "ag-1", at(time.Minute))
	findings := []store.PolicyFinding{
		{Policy: "/etc/byoc/policies/maintenance.rego", Source: "customer", Level: "deny", Message: "maintenance mode: x would be deleted"},
		{Policy: "policies/tags.rego", Source: "vendor", Level: "warn", Message: "no owner tag"},
	}
	bad := store.Result{State: store.JobFailed, PolicyFindings: []store.PolicyFinding{{Policy: "p", Source: "imsd", Level: "deny"}}}
	_, err := e.s.FinishJob(ctx, "job-1", writer(j), bad, at(2*time.Minute))
	wantErr(t, err, errs.Invalid, "policy_findings[0].source")
	res := store.Result{State: store.JobFailed, ExitCode: 1, Error: "denied by policy: ...", PolicyFindings: findings}
	_, err = e.s.FinishJob(ctx, "job-1", writer(j), res, at(2*time.Minute))
	ok(t, err)
	got := e.job("job-1")
	if !reflect.DeepEqual(got.PolicyFindings, findings) {
		t.Fatalf("findings %+v, want %+v", got.PolicyFindings, findings)
	}
	// Survives a restart.
	s2 := e.second()
	again, err := s2.GetJob(ctx, "job-1")
	ok(t, err)
	equal(t, "findings after reopen", len(again.PolicyFindings), 2)
	evs, err := e.s.ListAuditEvents(ctx, store.AuditFilter{Chain: inst, OneChain: true})
	ok(t, err)
	var fin *store.AuditEvent
	for i := range evs {
		if evs[i].Kind == "job.finished" && evs[i].Subject == "job:job-1" {
			fin = &evs[i]
		}
	}
	if fin == nil {
		t.Fatal("no job.finished event")
	}
	equal(t, "audit policy", fin.Data["policy"], "1 deny, 1 warn")
	equal(t, "audit policy_deny", fin.Data["policy_deny"], "customer /etc/byoc/policies/maintenance.rego: maintenance mode: x would be deleted")
	equal(t, "audit policy_warn", fin.Data["policy_warn"], "vendor policies/tags.rego: no owner tag")

	// A job without findings stores none.
	e.enqueue("job-2", inst, T0)
	j2 := e.claimOne(inst, "ag-1", at(3*time.Minute))
	_, err = e.s.FinishJob(ctx, "job-2", writer(j2), store.Result{State: store.JobSucceeded}, at(4*time.Minute))
	ok(t, err)
	equal(t, "no findings", len(e.job("job-2").PolicyFindings), 0)
}

func driftJob(id, installID, component string, created time.Time) store.Job {
	j := newJob(id, installID, created)
	j.Operation, j.Component, j.MaxAttempts = "drift", component, 1
	return j
}

// testDrift: drift ticks fire once across stores, a tick is skipped while
// the previous check runs, and each check's result becomes the
// component's latest (not an older one's).
func testDrift(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	e.agent(inst, "ag-1")
	tick := store.DriftTick{InstallID: inst, Component: "db", At: at(time.Hour)}

	_, err := e.s.FireDrift(ctx, tick, newJob("wrong", inst, T0), at(time.Hour))
	wantErr(t, err, errs.Invalid, "job")
	res, err := e.s.FireDrift(ctx, tick, driftJob("d-1", inst, "db", at(time.Hour)), at(time.Hour))
	ok(t, err)
	equal(t, "first fire", res, store.TickFired)
	// Another replica with the same tick: taken, no second job.
	res, err = e.second().FireDrift(ctx, tick, driftJob("d-1b", inst, "db", at(time.Hour)), at(time.Hour))
	ok(t, err)
	equal(t, "same tick", res, store.TickTaken)
	_, err = e.s.GetJob(ctx, "d-1b")
	wantErr(t, err, errs.NotFound)
	// The next tick while d-1 is still queued: skipped.
	res, err = e.s.FireDrift(ctx, store.DriftTick{InstallID: inst, Component: "db", At: at(2 * time.Hour)}, driftJob("d-2", inst, "db", at(2*time.Hour)), at(2*time.Hour))
	ok(t, err)
	equal(t, "busy", res, store.TickSkipped)
	ticks, err := e.s.LastDriftTicks(ctx)
	ok(t, err)
	equal(t, "last tick", ticks[inst]["db"], at(2*time.Hour))

	drift, err := e.s.ListDrift(ctx, inst)
	ok(t, err)
	if len(drift) != 1 || drift[0].Status != store.DriftUnchecked || drift[0].TickJobID != "" {
		t.Fatalf("drift before a result: %+v", drift)
	}

	// d-1 reports drift.
	j := e.claimOne(inst, "ag-1", at(2*time.Hour))
	equal(t, "claimed", j.ID, "d-1")
	changes := []store.PlannedChange{{Address: "local_file.cfg", Action: "update", Before: json.RawMessage(`{"content":"a"}`), After: json.RawMessage(`{"content":"b"}`)}}
	_, err = e.s.FinishJob(ctx, "d-1", writer(j), store.Result{State: store.JobSucceeded, Drifted: true, PlannedChanges: changes}, at(2*time.Hour+time.Minute))
	ok(t, err)
	drift, err = e.s.ListDrift(ctx, inst)
	ok(t, err)
	if len(drift) != 1 || drift[0].Status != store.DriftDrifted || drift[0].JobID != "d-1" || drift[0].CheckedAt != at(2*time.Hour+time.Minute) ||
		!reflect.DeepEqual(drift[0].Changes, changes) {
		t.Fatalf("drift after d-1: %+v", drift)
	}

	// The next tick fires again, and its check is in sync.
	res, err = e.s.FireDrift(ctx, store.DriftTick{InstallID: inst, Component: "db", At: at(3 * time.Hour)}, driftJob("d-3", inst, "db", at(3*time.Hour)), at(3*time.Hour))
	ok(t, err)
	equal(t, "after the check", res, store.TickFired)
	j = e.claimOne(inst, "ag-1", at(3*time.Hour))
	_, err = e.s.FinishJob(ctx, "d-3", writer(j), store.Result{State: store.JobSucceeded}, at(3*time.Hour+time.Minute))
	ok(t, err)
	drift, err = e.second().ListDrift(ctx, inst)
	ok(t, err)
	if len(drift) != 1 || drift[0].Status != store.DriftInSync || drift[0].JobID != "d-3" || len(drift[0].Changes) != 0 {
		t.Fatalf("drift after d-3: %+v", drift)
	}

	// A failed check says so, with its error; an apply job's end touches
	// no drift state.
	ok(t, e.s.EnqueueJob(ctx, driftJob("d-4", inst, "web", at(4*time.Hour))))
	j = e.claimOne(inst, "ag-1", at(4*time.Hour))
	_, err = e.s.FinishJob(ctx, "d-4", writer(j), store.Result{State: store.JobFailed, ExitCode: 1, Error: "no state"}, at(4*time.Hour+time.Minute))
	ok(t, err)
	e.enqueue("apply-1", inst, at(5*time.Hour))
	j = e.claimOne(inst, "ag-1", at(5*time.Hour))
	_, err = e.s.FinishJob(ctx, "apply-1", writer(j), store.Result{State: store.JobSucceeded, Drifted: true}, at(5*time.Hour+time.Minute))
	ok(t, err)
	drift, err = e.s.ListDrift(ctx, inst)
	ok(t, err)
	if len(drift) != 2 || drift[0].Component != "db" || drift[0].Status != store.DriftInSync ||
		drift[1].Component != "web" || drift[1].Status != store.DriftFailed || drift[1].Error != "no state" {
		t.Fatalf("drift: %+v", drift)
	}
	_, err = e.s.FireDrift(ctx, store.DriftTick{InstallID: "nope", Component: "db", At: at(time.Hour)}, driftJob("d-x", "nope", "db", T0), at(time.Hour))
	if err == nil {
		t.Fatal("a drift tick of an unknown install was recorded")
	}
}
