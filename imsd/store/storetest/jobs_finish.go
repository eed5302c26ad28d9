// Conformance, jobs finish and cancel: ack then finish, fencing of stale
// writers, and cancel (the store's jobs_finish.go).

package storetest

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
)

func testAckAndFinish(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	e.agent(inst, "ag-1")
	e.enqueue("job-1", inst, T0)
	j := e.claimOne(inst, "ag-1", at(time.Minute))
	w := writer(j)

	ok(t, e.s.AckJob(ctx, "job-1", w, at(3*time.Minute), at(2*time.Minute)))
	acked := e.job("job-1")
	equal(t, "state", acked.State, store.JobRunning)
	equal(t, "started", acked.StartedAt, at(2*time.Minute))
	equal(t, "lease", acked.LeaseDeadline, at(3*time.Minute))
	ok(t, e.s.AckJob(ctx, "job-1", w, at(9*time.Minute), at(8*time.Minute)))
	again := e.job("job-1")
	equal(t, "re-ack started", again.StartedAt, at(2*time.Minute))
	equal(t, "re-ack lease", again.LeaseDeadline, at(3*time.Minute))

	_, err := e.s.FinishJob(ctx, "job-1", w, store.Result{State: store.JobRunning}, at(4*time.Minute))
	wantErr(t, err, errs.Invalid, "state")

	plan := []store.PlannedChange{
		{Address: "bucket.b1", Action: "create", After: json.RawMessage(`{"name":"b1"}`), Summary: "new"},
		{Address: "policy.p", Action: "update", Before: json.RawMessage(`{"n":1}`), After: json.RawMessage(`{"n":2}`)},
	}
	bad := store.Result{State: store.JobSucceeded, PlannedChanges: []store.PlannedChange{{Address: "x", Action: "create", After: json.RawMessage(`{`)}}}
	_, err = e.s.FinishJob(ctx, "job-1", w, bad, at(4*time.Minute))
	wantErr(t, err, errs.Invalid, "planned_changes[0]")
	res := store.Result{State: store.JobSucceeded, ExitCode: 0, Outputs: map[string]string{"url": "https://x"}, PlannedChanges: plan}
	changed, err := e.s.FinishJob(ctx, "job-1", w, res, at(4*time.Minute))
	ok(t, err)
	equal(t, "changed", changed, true)
	done := e.job("job-1")
	if !reflect.DeepEqual(done.PlannedChanges, plan) {
		t.Fatalf("planned changes %+v, want %+v", done.PlannedChanges, plan)
	}
	equal(t, "state", done.State, store.JobSucceeded)
	equal(t, "ended", done.EndedAt, at(4*time.Minute))
	equal(t, "output", done.Outputs["url"], "https://x")
	equal(t, "lease cleared", done.LeaseDeadline, time.Time{})

	// A resent result changes nothing and is not an error.
	res2 := store.Result{State: store.JobFailed, ExitCode: 3, Error: "boom"}
	changed, err = e.s.FinishJob(ctx, "job-1", w, res2, at(5*time.Minute))
	ok(t, err)
	equal(t, "resent changed", changed, false)
	resent := e.job("job-1")
	equal(t, "resent state", resent.State, store.JobSucceeded)
	equal(t, "resent ended", resent.EndedAt, at(4*time.Minute))

	err = e.s.AckJob(ctx, "job-1", w, at(9*time.Minute), at(8*time.Minute))
	wantErr(t, err, errs.Conflict, "already ended")

	// A failure records its exit code and error.
	e.enqueue("job-2", inst, T0)
	j2 := e.claimOne(inst, "ag-1", at(time.Minute))
	changed, err = e.s.FinishJob(ctx, "job-2", writer(j2), res2, at(2*time.Minute))
	ok(t, err)
	equal(t, "changed", changed, true)
	failed := e.job("job-2")
	equal(t, "failed state", failed.State, store.JobFailed)
	equal(t, "exit code", failed.ExitCode, 3)
	equal(t, "error", failed.Error, "boom")
	equal(t, "no planned changes", len(failed.PlannedChanges), 0)
	_, err = e.s.FinishJob(ctx, "nope", w, res, at(5*time.Minute))
	wantErr(t, err, errs.NotFound)

	// imsd failing a job in its agent's stead (an assignment it could not
	// build) still needs the agent's lease, and audits itself as actor.
	e.enqueue("job-3", inst, T0)
	j3 := e.claimOne(inst, "ag-1", at(time.Minute))
	byIMSD := store.Result{State: store.JobFailed, ExitCode: -1, Error: "imsd cannot send this job", ByIMSD: true}
	_, err = e.s.FinishJob(ctx, "job-3", store.Writer{AgentID: "ag-1", FencingToken: j3.FencingToken + 1}, byIMSD, at(2*time.Minute))
	wantErr(t, err, errs.Conflict)
	changed, err = e.s.FinishJob(ctx, "job-3", writer(j3), byIMSD, at(2*time.Minute))
	ok(t, err)
	equal(t, "changed", changed, true)
	equal(t, "imsd failed state", e.job("job-3").State, store.JobFailed)
	rs, err := e.s.AuditRecords(ctx, inst)
	ok(t, err)
	last := rs[len(rs)-1]
	equal(t, "audit kind", last.Kind, "job.finished")
	equal(t, "audit actor", last.Actor, "imsd")
	equal(t, "audit subject", last.Subject, "job:job-3")
	var data map[string]string
	ok(t, json.Unmarshal([]byte(last.Data), &data))
	equal(t, "audit agent", data["agent"], "ag-1")
	equal(t, "audit error", data["error"], "imsd cannot send this job")
}

func testFencing(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	other := e.install("globex")
	e.agent(inst, "ag-1")
	e.agent(inst, "ag-2")
	e.agent(other, "ag-x")
	e.enqueue("job-1", inst, T0)
	j := e.claimOne(inst, "ag-1", at(time.Minute))
	stale := store.Writer{AgentID: "ag-1", FencingToken: j.FencingToken + 1}
	now := at(2 * time.Minute)

	writes := []struct {
		name string
		do   func(w store.Writer) error
	}{
		{"ack", func(w store.Writer) error {
			err := e.s.AckJob(ctx, "job-1", w, now.Add(time.Minute), now)
			return err
		}},
		{"logs", func(w store.Writer) error { return e.s.AppendLogs(ctx, "job-1", w, lines(1, 1, 3)) }},
		{"finish", func(w store.Writer) error {
			_, err := e.s.FinishJob(ctx, "job-1", w, store.Result{State: store.JobSucceeded}, now)
			return err
		}},
	}
	for _, wr := range writes {
		t.Run(wr.name, func(t *testing.T) {
			wantErr(t, wr.do(stale), errs.Conflict, "stale fencing token for job job-1: attempt 1 now holds the lease")
			for _, agent := range []string{"ag-2", "ag-x"} {
				err := wr.do(store.Writer{AgentID: agent, FencingToken: j.FencingToken})
				wantErr(t, err, errs.PermissionDenied, "job job-1 does not belong to this agent")
			}
			// Nothing was written.
			got := e.job("job-1")
			if got.State != store.JobAssigned || !got.LeaseDeadline.Equal(j.LeaseDeadline) || got.FencingToken != j.FencingToken {
				t.Fatalf("job changed by refused writes: %+v", got)
			}
			equal(t, "log lines", len(e.logs("job-1")), 0)
		})
	}
	// The holder can still write.
	err := e.s.AckJob(ctx, "job-1", writer(j), now.Add(time.Minute), now)
	ok(t, err)
}

func testCancel(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	e.agent(inst, "ag-1")

	t.Run("queued", func(t *testing.T) {
		e.enqueue("job-q", inst, T0)
		got, err := e.s.RequestCancel(ctx, "job-q", "operator changed their mind", "ops", at(time.Minute))
		ok(t, err)
		equal(t, "state", got.State, store.JobCancelled)
		equal(t, "ended", got.EndedAt, at(time.Minute))
		equal(t, "error", got.Error, "operator changed their mind")
		again, err := e.s.RequestCancel(ctx, "job-q", "again", "ops", at(2*time.Minute))
		ok(t, err)
		equal(t, "cancelled as is", again.EndedAt, at(time.Minute))
		equal(t, "cancelled as is", again.Error, "operator changed their mind")
	})
	t.Run("running", func(t *testing.T) {
		e.enqueue("job-r", inst, at(time.Second))
		c := e.claimOne(inst, "ag-1", at(time.Minute))
		err := e.s.AckJob(ctx, "job-r", writer(c), at(2*time.Minute), at(time.Minute))
		ok(t, err)
		got, err := e.s.RequestCancel(ctx, "job-r", "stop", "ops", at(time.Minute))
		ok(t, err)
		equal(t, "state", got.State, store.JobRunning)
		equal(t, "cancel requested", got.CancelRequested, true)
		equal(t, "reason", got.CancelReason, "stop")
		// The agent reports it stopped.
		_, err = e.s.FinishJob(ctx, "job-r", writer(c), store.Result{State: store.JobCancelled, Error: "stop"}, at(90*time.Second))
		ok(t, err)
		equal(t, "state", e.job("job-r").State, store.JobCancelled)
	})
	t.Run("running, agent gone", func(t *testing.T) {
		e.enqueue("job-g", inst, at(2*time.Second))
		e.claimOne(inst, "ag-1", at(time.Minute))
		_, err := e.s.RequestCancel(ctx, "job-g", "stop", "ops", at(time.Minute))
		ok(t, err)
		changed, err := e.s.ExpireLeases(ctx, at(3*time.Minute))
		ok(t, err)
		if len(changed) != 1 || changed[0].Job.State != store.JobCancelled || changed[0].Requeued {
			t.Fatalf("ExpireLeases = %+v, want job-g cancelled", changed)
		}
	})
	t.Run("terminal", func(t *testing.T) {
		e.enqueue("job-s", inst, at(3*time.Second))
		c := e.claimOne(inst, "ag-1", at(time.Minute))
		_, err := e.s.FinishJob(ctx, "job-s", writer(c), store.Result{State: store.JobSucceeded}, at(time.Minute))
		ok(t, err)
		_, err = e.s.RequestCancel(ctx, "job-s", "late", "ops", at(2*time.Minute))
		wantErr(t, err, errs.Conflict, "job job-s already succeeded")
	})
	t.Run("unknown", func(t *testing.T) {
		_, err := e.s.RequestCancel(ctx, "nope", "", "ops", at(time.Minute))
		wantErr(t, err, errs.NotFound)
	})
}
