// Conformance, jobs lease: claim order and exclusivity, lease expiry,
// attempts, the timeout backstop, renewal and which installs have queued
// jobs (the store's jobs_lease.go).

package storetest

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
)

func testClaimOrder(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	other := e.install("globex")
	e.agent(inst, "ag-1")
	// Enqueued out of order; equal times are ordered by ID.
	e.enqueue("job-c", inst, at(3*time.Second))
	e.enqueue("job-b", inst, at(time.Second))
	e.enqueue("job-a2", inst, at(time.Second))
	e.enqueue("job-o", other, T0)

	now := at(time.Minute)
	w := store.Writer{AgentID: "ag-1"}
	got, err := e.s.ClaimJobs(ctx, inst, w, 2, now.Add(30*time.Second), now)
	ok(t, err)
	if len(got) != 2 || got[0].ID != "job-a2" || got[1].ID != "job-b" {
		t.Fatalf("claimed %v, want job-a2, job-b", ids(got))
	}
	for _, j := range got {
		equal(t, "state", j.State, store.JobAssigned)
		equal(t, "attempt", j.Attempt, 1)
		equal(t, "agent", j.AgentID, "ag-1")
		equal(t, "lease", j.LeaseDeadline, now.Add(30*time.Second))
		if j.FencingToken <= 0 {
			t.Fatalf("fencing token %d, want positive", j.FencingToken)
		}
		equal(t, "stored token", e.job(j.ID).FencingToken, j.FencingToken)
	}
	if got[0].FencingToken == got[1].FencingToken {
		t.Fatal("two jobs share a fencing token")
	}
	got, err = e.s.ClaimJobs(ctx, inst, w, 5, now.Add(30*time.Second), now)
	ok(t, err)
	equal(t, "second claim", strings.Join(ids(got), ","), "job-c")
	got, err = e.s.ClaimJobs(ctx, inst, w, 5, now.Add(30*time.Second), now)
	ok(t, err)
	equal(t, "third claim", len(got), 0)
	equal(t, "other install untouched", e.job("job-o").State, store.JobQueued)
}

func testClaimExclusive(t *testing.T, e *env) {
	inst := e.install("acme")
	const jobs = 60
	for i := range jobs {
		e.enqueue(fmt.Sprintf("job-%03d", i), inst, at(time.Duration(i)*time.Millisecond))
	}
	// Two replicas, four claimers each, claiming until the queue is empty.
	stores := []*store.Store{e.s, e.second()}
	var (
		mu      sync.Mutex
		claimed = map[string]string{}
		wg      sync.WaitGroup
		errc    = make(chan error, 8)
	)
	now := at(time.Minute)
	for i := range 8 {
		agent := fmt.Sprintf("ag-%d", i)
		wg.Go(func() {
			for {
				got, err := stores[i%2].ClaimJobs(e.ctx(), inst, store.Writer{AgentID: agent}, 3, now.Add(time.Minute), now)
				if err != nil {
					errc <- err
					return
				}
				if len(got) == 0 {
					return
				}
				mu.Lock()
				for _, j := range got {
					if prev, dup := claimed[j.ID]; dup {
						errc <- fmt.Errorf("job %s claimed by %s and %s", j.ID, prev, agent)
					}
					claimed[j.ID] = agent
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	equal(t, "jobs claimed", len(claimed), jobs)
	for id, agent := range claimed {
		j := e.job(id)
		if j.AgentID != agent || j.Attempt != 1 || j.State != store.JobAssigned {
			t.Fatalf("job %s = agent %s attempt %d state %s, want agent %s attempt 1 assigned", id, j.AgentID, j.Attempt, j.State, agent)
		}
	}
}

func testLeaseExpiryRequeues(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	e.agent(inst, "ag-1")
	e.agent(inst, "ag-2")
	e.enqueue("job-1", inst, T0)
	first := e.claimOne(inst, "ag-1", at(time.Minute)) // lease until T0+2m
	err := e.s.AckJob(ctx, "job-1", writer(first), at(2*time.Minute), at(time.Minute))
	ok(t, err)
	ok(t, e.s.AppendLogs(ctx, "job-1", writer(first), lines(1, 1, 2)))

	// Not expired yet: the deadline itself is still inside the lease.
	changed, err := e.s.ExpireLeases(ctx, at(2*time.Minute))
	ok(t, err)
	equal(t, "expired before deadline", len(changed), 0)

	changed, err = e.s.ExpireLeases(ctx, at(2*time.Minute+time.Second))
	ok(t, err)
	if len(changed) != 1 || !changed[0].Requeued || changed[0].Job.ID != "job-1" {
		t.Fatalf("ExpireLeases = %+v, want job-1 requeued", changed)
	}
	q := e.job("job-1")
	equal(t, "state", q.State, store.JobQueued)
	equal(t, "attempt", q.Attempt, 1)
	equal(t, "agent", q.AgentID, "")
	if !q.LeaseDeadline.IsZero() {
		t.Fatalf("lease %v, want cleared", q.LeaseDeadline)
	}
	installs, err := e.s.QueuedJobInstalls(ctx)
	ok(t, err)
	equal(t, "queued installs", strings.Join(installs, ","), inst)

	// The requeued job cannot be written by its old holder.
	err = e.s.AckJob(ctx, "job-1", writer(first), at(4*time.Minute), at(3*time.Minute))
	wantErr(t, err, errs.Conflict, "stale fencing token")

	second := e.claimOne(inst, "ag-1", at(3*time.Minute))
	equal(t, "attempt", second.Attempt, 2)
	if second.FencingToken == first.FencingToken {
		t.Fatal("a new attempt kept the old fencing token")
	}
	// The same agent with attempt 1's token is a stale writer.
	_, err = e.s.FinishJob(ctx, "job-1", writer(first), store.Result{State: store.JobSucceeded}, at(3*time.Minute))
	wantErr(t, err, errs.Conflict, "stale fencing token for job job-1: attempt 2 now holds the lease")
	wantErr(t, e.s.AppendLogs(ctx, "job-1", writer(first), lines(1, 3, 4)), errs.Conflict, "attempt 2")

	ok(t, e.s.AppendLogs(ctx, "job-1", writer(second), lines(1, 1, 1))) // Attempt field ignored
	got := e.logs("job-1")
	equal(t, "lines", len(got), 3)
	equal(t, "last line attempt", got[2].Attempt, 2)
	_, err = e.s.FinishJob(ctx, "job-1", writer(second), store.Result{State: store.JobSucceeded}, at(4*time.Minute))
	ok(t, err)
	equal(t, "state", e.job("job-1").State, store.JobSucceeded)

	// Another agent of the install claims a requeued job just the same.
	e.enqueue("job-2", inst, T0)
	j := e.claimOne(inst, "ag-1", at(5*time.Minute))
	_, err = e.s.ExpireLeases(ctx, at(7*time.Minute))
	ok(t, err)
	j2 := e.claimOne(inst, "ag-2", at(8*time.Minute))
	equal(t, "attempt", j2.Attempt, 2)
	err = e.s.AckJob(ctx, "job-2", writer(j), at(9*time.Minute), at(8*time.Minute))
	wantErr(t, err, errs.Conflict, "stale fencing token")
}

// testExpiredRunningSaysWhy: a running job whose lease ran out on its last
// attempt says the agent stopped renewing it, with when it was last seen.
func testExpiredRunningSaysWhy(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	e.agent(inst, "ag-1")
	j := newJob("job-1", inst, T0)
	j.MaxAttempts = 1
	ok(t, e.s.EnqueueJob(ctx, j))
	c := e.claimOne(inst, "ag-1", at(time.Minute))
	ok(t, e.s.AckJob(ctx, "job-1", writer(c), at(2*time.Minute), at(time.Minute)))
	ok(t, e.s.TouchAgent(ctx, "ag-1", at(time.Minute)))
	changed, err := e.s.ExpireLeases(ctx, at(3*time.Minute))
	ok(t, err)
	if len(changed) != 1 {
		t.Fatalf("ExpireLeases changed %d jobs, want 1", len(changed))
	}
	want := "lease expired on attempt 1 of 1: agent ag-1 stopped renewing it (last seen " + at(time.Minute).UTC().Format(time.RFC3339) + ")"
	if !strings.HasPrefix(changed[0].Job.Error, want) {
		t.Fatalf("error = %q, want it to start with %q", changed[0].Job.Error, want)
	}
}

func testMaxAttempts(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	e.agent(inst, "ag-1")
	j := newJob("job-1", inst, T0)
	j.MaxAttempts = 2
	ok(t, e.s.EnqueueJob(ctx, j))
	for attempt := 1; attempt <= 2; attempt++ {
		now := at(time.Duration(attempt) * time.Hour)
		c := e.claimOne(inst, "ag-1", now)
		equal(t, "attempt", c.Attempt, attempt)
		changed, err := e.s.ExpireLeases(ctx, now.Add(2*time.Minute))
		ok(t, err)
		if len(changed) != 1 {
			t.Fatalf("ExpireLeases changed %d jobs, want 1", len(changed))
		}
		if attempt == 1 {
			equal(t, "requeued", changed[0].Requeued, true)
			continue
		}
		got := changed[0]
		equal(t, "requeued", got.Requeued, false)
		equal(t, "state", got.Job.State, store.JobFailed)
		// Claimed, never acked: the error says the agent never took it.
		if want := "lease expired on attempt 2 of 2: agent ag-1 never acknowledged the assignment"; !strings.HasPrefix(got.Job.Error, want) {
			t.Fatalf("error = %q, want it to start with %q", got.Job.Error, want)
		}
		equal(t, "ended", got.Job.EndedAt, now.Add(2*time.Minute))
		equal(t, "stored state", e.job("job-1").State, store.JobFailed)
		// The agent's late result is refused: the job ended without it.
		_, err = e.s.FinishJob(ctx, "job-1", writer(c), store.Result{State: store.JobSucceeded}, now.Add(3*time.Minute))
		wantErr(t, err, errs.Conflict, "job job-1 already ended")
	}
	claimed, err := e.s.ClaimJobs(ctx, inst, store.Writer{AgentID: "ag-1"}, 5, at(10*time.Hour), at(9*time.Hour))
	ok(t, err)
	equal(t, "claimable", len(claimed), 0)
}

func testTimeoutBackstop(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	e.agent(inst, "ag-1")
	e.enqueue("job-1", inst, T0) // 10m timeout
	c := e.claimOne(inst, "ag-1", T0)
	err := e.s.AckJob(ctx, "job-1", writer(c), at(time.Hour), T0)
	ok(t, err)
	// Lease kept alive, but past timeout + grace.
	changed, err := e.s.ExpireLeases(ctx, at(11*time.Minute))
	ok(t, err)
	equal(t, "changed within grace", len(changed), 0)
	changed, err = e.s.ExpireLeases(ctx, at(11*time.Minute+time.Second))
	ok(t, err)
	if len(changed) != 1 || changed[0].Requeued {
		t.Fatalf("ExpireLeases = %+v, want one job ended", changed)
	}
	got := changed[0].Job
	equal(t, "state", got.State, store.JobTimedOut)
	if !strings.Contains(got.Error, "10m0s timeout") || !strings.Contains(got.Error, "ag-1") {
		t.Fatalf("error %q should name the timeout and the agent", got.Error)
	}
}

func testRenewLeases(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	e.agent(inst, "ag-1")
	e.agent(inst, "ag-2")
	for _, id := range []string{"job-1", "job-2", "job-3", "job-4"} {
		e.enqueue(id, inst, T0)
	}
	j1 := e.claimOne(inst, "ag-1", T0)
	j2 := e.claimOne(inst, "ag-1", T0)
	j3 := e.claimOne(inst, "ag-2", T0)
	j4 := e.claimOne(inst, "ag-1", T0)
	_, err := e.s.FinishJob(ctx, j4.ID, writer(j4), store.Result{State: store.JobSucceeded}, T0)
	ok(t, err)
	renewed, lost, err := e.s.RenewLeases(ctx, "ag-1", []store.Lease{
		{JobID: j1.ID, FencingToken: j1.FencingToken},
		{JobID: j2.ID, FencingToken: j2.FencingToken + 1}, // stale
		{JobID: j3.ID, FencingToken: j3.FencingToken},     // another agent's
		{JobID: j4.ID, FencingToken: j4.FencingToken},     // finished
		{JobID: "job-nope", FencingToken: 1},
	}, at(time.Hour))
	ok(t, err)
	equal(t, "renewed", strings.Join(renewed, ","), j1.ID)
	equal(t, "lost", strings.Join(lost, ","), strings.Join([]string{j2.ID, j3.ID, j4.ID, "job-nope"}, ","))
	equal(t, "renewed lease", e.job(j1.ID).LeaseDeadline, at(time.Hour))
	equal(t, "stale lease", e.job(j2.ID).LeaseDeadline, j2.LeaseDeadline)
	equal(t, "other's lease", e.job(j3.ID).LeaseDeadline, j3.LeaseDeadline)
}

func testQueuedJobInstalls(t *testing.T, e *env) {
	ctx := e.ctx()
	a := e.install("acme")
	b := e.install("globex")
	e.install("initech")
	e.agent(a, "ag-1")
	got, err := e.s.QueuedJobInstalls(ctx)
	ok(t, err)
	equal(t, "none", len(got), 0)
	e.enqueue("job-1", a, T0)
	e.enqueue("job-2", b, T0)
	e.enqueue("job-3", b, T0)
	got, err = e.s.QueuedJobInstalls(ctx)
	ok(t, err)
	equal(t, "installs", strings.Join(got, ","), strings.Join([]string{a, b}, ","))
	e.claimOne(a, "ag-1", T0)
	got, err = e.s.QueuedJobInstalls(ctx)
	ok(t, err)
	equal(t, "installs", strings.Join(got, ","), b)
}
