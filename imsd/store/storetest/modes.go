package storetest

import (
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
)

// testModes: a job keeps the permission mode it was enqueued with
// (maintenance when none), by every enqueue path; an unknown mode is
// refused naming the field; a job its agent refused ends refused, is
// final (no requeue at lease expiry, a resent result changes nothing, a
// cancel is a conflict) and listed by its state.
func testModes(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	e.agent(inst, "ag-1")

	plain := newJob("job-plain", inst, T0)
	ok(t, e.s.EnqueueJob(ctx, plain))
	equal(t, "default mode", e.job("job-plain").Mode, store.ModeMaintenance)

	dep := newJob("job-dep", inst, at(time.Second))
	dep.Mode = store.ModeDeprovision
	ok(t, e.s.EnqueueJob(ctx, dep))
	equal(t, "mode", e.job("job-dep").Mode, store.ModeDeprovision)

	prov := newJob("job-prov", inst, at(2*time.Second))
	prov.Mode = store.ModeProvision
	got, assigned, err := e.s.EnqueueAssigned(ctx, prov, "ag-1", at(time.Minute))
	ok(t, err)
	equal(t, "assigned", assigned, true)
	equal(t, "returned mode", got.Mode, store.ModeProvision)
	equal(t, "stored mode", e.job("job-prov").Mode, store.ModeProvision)

	bg := newJob("job-bg", inst, at(3*time.Second))
	bg.Mode = store.ModeBreakGlass
	jobs, err := e.s.EnqueueJobs(ctx, []store.NewJob{{Job: bg}})
	ok(t, err)
	equal(t, "batch mode", jobs[0].Mode, store.ModeBreakGlass)

	bad := newJob("job-bad", inst, at(4*time.Second))
	bad.Mode = "root"
	wantErr(t, e.s.EnqueueJob(ctx, bad), errs.Invalid, "mode", "root")

	// The agent refuses job-plain (claimed first: the oldest).
	j := e.claimOne(inst, "ag-1", at(time.Minute))
	equal(t, "claimed", j.ID, "job-plain")
	equal(t, "claimed mode", j.Mode, store.ModeMaintenance)
	ok(t, e.s.AckJob(ctx, j.ID, writer(j), at(3*time.Minute), at(time.Minute)))
	msg := "refused: maintenance is turned off in the customer's account"
	changed, err := e.s.FinishJob(ctx, j.ID, writer(j), store.Result{State: store.JobRefused, ExitCode: -1, Error: msg}, at(2*time.Minute))
	ok(t, err)
	equal(t, "changed", changed, true)
	r := e.job(j.ID)
	equal(t, "state", r.State, store.JobRefused)
	equal(t, "error", r.Error, msg)
	equal(t, "terminal", r.State.Terminal(), true)
	changed, err = e.s.FinishJob(ctx, j.ID, writer(j), store.Result{State: store.JobFailed}, at(3*time.Minute))
	ok(t, err)
	equal(t, "resent changed", changed, false)
	expired, err := e.s.ExpireLeases(ctx, at(time.Hour))
	ok(t, err)
	for _, x := range expired {
		if x.Job.ID == j.ID {
			t.Fatalf("the sweeper touched a refused job: %+v", x)
		}
	}
	equal(t, "after sweep", e.job(j.ID).State, store.JobRefused)
	_, err = e.s.RequestCancel(ctx, j.ID, "", "ops", at(time.Hour))
	wantErr(t, err, errs.Conflict, "refused")
	list, _, err := e.s.ListJobs(ctx, store.JobFilter{InstallID: inst, States: []store.JobState{store.JobRefused}})
	ok(t, err)
	if len(list) != 1 || list[0].ID != j.ID {
		t.Fatalf("refused jobs listed: %+v", list)
	}
}

// testAgentPermissions: the permission state an agent reports is kept,
// read back with the agent (also by Fleet), replaced by the next report,
// survives a restart, and is nil before any report.
func testAgentPermissions(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	e.agent(inst, "ag-1")
	a, err := e.s.GetAgent(ctx, "ag-1")
	ok(t, err)
	if a.Permissions != nil {
		t.Fatalf("permissions before any report: %+v", a.Permissions)
	}
	p := store.Permissions{Provision: true, Maintenance: false, Deprovision: true, ChangedAt: at(time.Second).UTC()}
	ok(t, e.s.SetAgentPermissions(ctx, "ag-1", p, at(time.Minute)))
	p.DisabledAll = true
	ok(t, e.s.SetAgentPermissions(ctx, "ag-1", p, at(2*time.Minute)))
	wantErr(t, e.s.SetAgentPermissions(ctx, "ag-nobody", p, at(2*time.Minute)), errs.NotFound, "ag-nobody")
	for _, s := range []*store.Store{e.s, e.second()} {
		a, err := s.GetAgent(ctx, "ag-1")
		ok(t, err)
		if a.Permissions == nil || !a.Permissions.Equal(p) {
			t.Fatalf("permissions = %+v, want %+v", a.Permissions, p)
		}
		equal(t, "reported at", a.PermissionsAt, at(2*time.Minute))
		fs, err := s.Fleet(ctx, "")
		ok(t, err)
		if got := fs.Agents[inst][0].Permissions; got == nil || !got.Equal(p) {
			t.Fatalf("fleet permissions = %+v, want %+v", got, p)
		}
	}
}
