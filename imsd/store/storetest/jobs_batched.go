package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
)

// testBatchedRefusals sends the job hot path's writes at once, so that
// the group commit (SQLite's, and PostgreSQL's, which reruns a batch
// whose transaction a failed statement aborted) puts them in shared
// transactions: duplicate ids (a statement PostgreSQL refuses), acks
// with a stale token (a refusal that changes nothing), a batch enqueue
// with a duplicate (all or none) and good writes. Each write gets its
// own answer, every good one is stored with its audit event, and the
// chain verifies.
func testBatchedRefusals(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	e.agent(inst, "ag-1")
	const n = 48
	jobs := make([]store.Job, n)
	for i := range jobs {
		j, assigned, err := e.s.EnqueueAssigned(ctx, newJob(fmt.Sprintf("seed-%02d", i), inst, T0), "ag-1", at(time.Hour))
		ok(t, err)
		equal(t, "assigned", assigned, true)
		jobs[i] = j
	}
	for round := range 3 {
		errc := make(chan error, 4*n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(4)
			go func() { // a new job: stored
				defer wg.Done()
				errc <- e.s.EnqueueJob(ctx, newJob(fmt.Sprintf("new-%d-%02d", round, i), inst, T0))
			}()
			go func() { // a duplicate id: refused alone
				defer wg.Done()
				err := e.s.EnqueueJob(ctx, newJob(fmt.Sprintf("seed-%02d", i), inst, T0))
				if !errs.Is(err, errs.AlreadyExists) {
					err = fmt.Errorf("duplicate seed-%02d: got %v, want already exists", i, err)
				} else {
					err = nil
				}
				errc <- err
			}()
			go func() { // a batch with a duplicate: nothing stored
				defer wg.Done()
				_, err := e.s.EnqueueJobs(ctx, []store.NewJob{{Job: newJob(fmt.Sprintf("lost-%d-%02d", round, i), inst, T0)},
					{Job: newJob(fmt.Sprintf("seed-%02d", i), inst, T0)}})
				if !errs.Is(err, errs.AlreadyExists) {
					err = fmt.Errorf("batch with seed-%02d: got %v, want already exists", i, err)
				} else {
					err = nil
				}
				errc <- err
			}()
			go func() { // an ack: the right token once, a stale one after
				defer wg.Done()
				w := writer(jobs[i])
				if round > 0 {
					w.FencingToken++
				}
				err := e.s.AckJob(ctx, jobs[i].ID, w, at(2*time.Hour), at(time.Second))
				if round > 0 {
					if !errs.Is(err, errs.Conflict) {
						err = fmt.Errorf("stale ack of %s: got %v, want a refusal", jobs[i].ID, err)
					} else {
						err = nil
					}
				}
				errc <- err
			}()
		}
		wg.Wait()
		close(errc)
		for err := range errc {
			ok(t, err)
		}
	}
	for round := range 3 {
		for i := range n {
			equal(t, "new job state", e.job(fmt.Sprintf("new-%d-%02d", round, i)).State, store.JobQueued)
			if _, err := e.s.GetJob(ctx, fmt.Sprintf("lost-%d-%02d", round, i)); !errs.Is(err, errs.NotFound) {
				t.Fatalf("lost-%d-%02d: got %v, want not found", round, i, err)
			}
		}
	}
	for _, j := range jobs {
		equal(t, "acked state", e.job(j.ID).State, store.JobRunning)
	}
	if p := e.verify(inst); p != nil {
		t.Fatalf("chain does not verify: %+v", p)
	}
	count := map[string]int{}
	for _, k := range e.kinds(inst) {
		count[k]++
	}
	equal(t, "job.queued events", count["job.queued"], 3*n)
	equal(t, "job.acked events", count["job.acked"], n)
	equal(t, "job.assigned events", count["job.assigned"], n)
}
