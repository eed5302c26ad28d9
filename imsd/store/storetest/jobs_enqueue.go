// Conformance, jobs enqueue: EnqueueJob, EnqueueAssigned and EnqueueJobs,
// and reading a job back (the store's jobs_enqueue.go).

package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
)

func testEnqueueAndGet(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	j := newJob("job-1", inst, T0)
	ok(t, e.s.EnqueueJob(ctx, j))
	got := e.job("job-1")
	equal(t, "state", got.State, store.JobQueued)
	equal(t, "attempt", got.Attempt, 0)
	equal(t, "config", string(got.Config), `{"dir":"infra"}`)
	equal(t, "timeout", got.Timeout, 10*time.Minute)
	equal(t, "max attempts", got.MaxAttempts, 3)
	equal(t, "created at", got.CreatedAt, T0)
	equal(t, "created by", got.CreatedBy, "tok-admin")
	equal(t, "component", got.ComponentType+"/"+got.Operation, "terraform/apply")
	equal(t, "component name", got.Component, "network")
	if got.AgentID != "" || got.FencingToken != 0 || !got.LeaseDeadline.IsZero() || got.CancelRequested || got.Outputs != nil {
		t.Fatalf("fresh job has lease or result fields: %+v", got)
	}

	for _, tc := range []struct {
		name  string
		edit  func(*store.Job)
		code  errs.Code
		field string
	}{
		{"max attempts", func(j *store.Job) { j.MaxAttempts = 0 }, errs.Invalid, "max_attempts"},
		{"timeout", func(j *store.Job) { j.Timeout = 0 }, errs.Invalid, "timeout"},
		{"config", func(j *store.Job) { j.Config = []byte("{") }, errs.Invalid, "config"},
		{"unknown install", func(j *store.Job) { j.InstallID = "inst-nope" }, errs.NotFound, "inst-nope"},
		{"duplicate", func(j *store.Job) { j.ID = "job-1" }, errs.AlreadyExists, "job-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := newJob("job-x", inst, T0)
			tc.edit(&j)
			wantErr(t, e.s.EnqueueJob(ctx, j), tc.code, tc.field)
		})
	}
	_, err := e.s.GetJob(ctx, "nope")
	wantErr(t, err, errs.NotFound, "nope")
}

func testEnqueueAssigned(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	other := e.install("globex")
	e.agent(inst, "ag-1")
	e.agent(other, "ag-2")

	// Handed over at once: stored as a claim would have left it.
	j, assigned, err := e.s.EnqueueAssigned(ctx, newJob("job-1", inst, T0), "ag-1", at(time.Minute))
	ok(t, err)
	equal(t, "assigned", assigned, true)
	stored := e.job("job-1")
	equal(t, "state", stored.State, store.JobAssigned)
	equal(t, "attempt", stored.Attempt, 1)
	equal(t, "agent", stored.AgentID, "ag-1")
	equal(t, "lease", stored.LeaseDeadline, at(time.Minute))
	equal(t, "token", stored.FencingToken, j.FencingToken)
	equal(t, "component name", stored.Component, "network")
	equal(t, "returned state", j.State, store.JobAssigned)
	equal(t, "returned config", string(j.Config), `{"dir":"infra"}`)
	if j.FencingToken <= 0 {
		t.Fatalf("fencing token %d, want positive", j.FencingToken)
	}
	// The holder's writes go through; nothing is left to claim.
	err = e.s.AckJob(ctx, "job-1", writer(j), at(2*time.Minute), at(time.Second))
	ok(t, err)
	none, err := e.s.ClaimJobs(ctx, inst, store.Writer{AgentID: "ag-1"}, 5, at(time.Minute), T0)
	ok(t, err)
	equal(t, "claimable", len(none), 0)

	// An agent of another install, or none at all, never gets the job:
	// it is queued instead.
	for i, agent := range []string{"ag-2", "ag-nope"} {
		id := fmt.Sprintf("job-q%d", i)
		j, assigned, err := e.s.EnqueueAssigned(ctx, newJob(id, inst, T0), agent, at(time.Minute))
		ok(t, err)
		equal(t, "assigned to "+agent, assigned, false)
		equal(t, "returned state", j.State, store.JobQueued)
		got := e.job(id)
		equal(t, "state", got.State, store.JobQueued)
		if got.AgentID != "" || got.FencingToken != 0 || got.Attempt != 0 {
			t.Fatalf("queued job has lease fields: %+v", got)
		}
	}
	claimed := e.claimAll(inst, "ag-1")
	equal(t, "claimable", len(claimed), 2)
	equal(t, "claimed component name", claimed[0].Component, "network")

	// Refusals change nothing.
	_, _, err = e.s.EnqueueAssigned(ctx, newJob("job-1", inst, T0), "ag-1", at(time.Minute))
	wantErr(t, err, errs.AlreadyExists, "job-1")
	_, _, err = e.s.EnqueueAssigned(ctx, newJob("job-x", "inst-nope", T0), "ag-1", at(time.Minute))
	wantErr(t, err, errs.NotFound, "inst-nope")
	_, _, err = e.s.EnqueueAssigned(ctx, newJob("job-x", inst, T0), "ag-1", T0)
	wantErr(t, err, errs.Invalid, "lease_until")
	_, err = e.s.GetJob(ctx, "job-x")
	wantErr(t, err, errs.NotFound)
	equal(t, "job-1 state", e.job("job-1").State, store.JobRunning)
}

func testEnqueueJobs(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	other := e.install("globex")
	e.agent(inst, "ag-1")
	e.agent(other, "ag-2")

	// One batch: assigned where the agent is the install's, queued where
	// it is another install's or none was given; returned in order.
	lease := at(time.Minute)
	jobs, err := e.s.EnqueueJobs(ctx, []store.NewJob{
		{Job: newJob("job-1", inst, T0), AgentID: "ag-1", LeaseUntil: lease},
		{Job: newJob("job-2", other, T0)},
		{Job: newJob("job-3", inst, T0), AgentID: "ag-2", LeaseUntil: lease},
	})
	ok(t, err)
	equal(t, "returned", len(jobs), 3)
	for i, want := range []store.JobState{store.JobAssigned, store.JobQueued, store.JobQueued} {
		id := fmt.Sprintf("job-%d", i+1)
		equal(t, id+" returned id", jobs[i].ID, id)
		equal(t, id+" returned state", jobs[i].State, want)
		equal(t, id+" stored state", e.job(id).State, want)
	}
	stored := e.job("job-1")
	equal(t, "agent", stored.AgentID, "ag-1")
	equal(t, "token", stored.FencingToken, jobs[0].FencingToken)
	equal(t, "lease", stored.LeaseDeadline, lease)
	ok(t, e.s.AckJob(ctx, "job-1", writer(jobs[0]), at(2*time.Minute), at(time.Second)))
	equal(t, "claimable", len(e.claimAll(inst, "ag-1")), 1)

	// All or none: a duplicate id, an unknown install or an invalid job
	// anywhere in the batch stores nothing, and the error says which job.
	for _, c := range []struct {
		bad  store.Job
		code errs.Code
		want string
	}{
		{newJob("job-2", inst, T0), errs.AlreadyExists, "jobs[1]: job \"job-2\" already exists"},
		{newJob("job-y", "inst-nope", T0), errs.NotFound, "jobs[1]: install \"inst-nope\" not found"},
		{func() store.Job { j := newJob("job-y", inst, T0); j.Operation = ""; return j }(), errs.Invalid, "jobs[1].operation"},
	} {
		_, err := e.s.EnqueueJobs(ctx, []store.NewJob{{Job: newJob("job-x", inst, T0), AgentID: "ag-1", LeaseUntil: lease}, {Job: c.bad}})
		wantErr(t, err, c.code, c.want)
		_, err = e.s.GetJob(ctx, "job-x")
		wantErr(t, err, errs.NotFound)
	}
	_, err = e.s.EnqueueJobs(ctx, nil)
	wantErr(t, err, errs.Invalid, "jobs")
	_, err = e.s.EnqueueJobs(ctx, make([]store.NewJob, store.MaxEnqueueBatch+1))
	wantErr(t, err, errs.Invalid, "at most")
}

// claimAll claims up to 100 queued jobs of installID for agentID.
func (e *env) claimAll(installID, agentID string) []store.Job {
	e.t.Helper()
	jobs, err := e.s.ClaimJobs(e.ctx(), installID, store.Writer{AgentID: agentID}, 100, at(time.Hour), at(time.Minute))
	ok(e.t, err)
	return jobs
}
