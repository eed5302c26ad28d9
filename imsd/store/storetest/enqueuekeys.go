package storetest

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
)

// key is an idempotency key for request hash at T0+d, live for a day.
func key(k, hash string, d time.Duration) store.EnqueueKey {
	return store.EnqueueKey{Key: k, RequestHash: hash, At: at(d), ExpiresAt: at(d + 24*time.Hour)}
}

// newJobs makes n jobs of installID with ids prefix-1..n.
func newJobs(prefix, installID string, n int) []store.NewJob {
	out := make([]store.NewJob, n)
	for i := range out {
		out[i] = store.NewJob{Job: newJob(fmt.Sprintf("%s-%d", prefix, i+1), installID, T0)}
	}
	return out
}

// countJobs returns how many jobs installID has.
func (e *env) countJobs(installID string) int {
	e.t.Helper()
	jobs, _, err := e.s.ListJobs(e.ctx(), store.JobFilter{InstallID: installID, Limit: 1000})
	ok(e.t, err)
	return len(jobs)
}

func testEnqueueKeys(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	e.agent(inst, "ag-1")

	// First use: stored, the key recorded with them.
	first := newJobs("job-a", inst, 3)
	first[0].AgentID, first[0].LeaseUntil = "ag-1", at(time.Minute)
	jobs, replayed, err := e.s.EnqueueJobsKeyed(ctx, key("k-1", "h-1", 0), first)
	ok(t, err)
	equal(t, "replayed", replayed, false)
	equal(t, "ids", fmt.Sprint(ids(jobs)), "[job-a-1 job-a-2 job-a-3]")
	equal(t, "first state", jobs[0].State, store.JobAssigned)

	// A retry (new job ids, as a retrying server makes them) gets the
	// first jobs, in order and as they are now, and stores nothing.
	ok(t, e.s.AckJob(ctx, "job-a-1", writer(jobs[0]), at(2*time.Minute), at(time.Second)))
	again, replayed, err := e.s.EnqueueJobsKeyed(ctx, key("k-1", "h-1", time.Hour), newJobs("job-b", inst, 3))
	ok(t, err)
	equal(t, "replayed", replayed, true)
	equal(t, "replayed ids", fmt.Sprint(ids(again)), "[job-a-1 job-a-2 job-a-3]")
	equal(t, "replayed state is the current one", again[0].State, store.JobRunning)
	equal(t, "jobs stored", e.countJobs(inst), 3)

	// The same key with another request is refused, naming the field.
	_, _, err = e.s.EnqueueJobsKeyed(ctx, key("k-1", "h-other", time.Hour), newJobs("job-c", inst, 3))
	wantErr(t, err, errs.Conflict, "idempotency_key", "different request")
	equal(t, "jobs stored", e.countJobs(inst), 3)

	// Another store on the same database (a restart, a replica) knows it.
	again, replayed, err = e.second().EnqueueJobsKeyed(ctx, key("k-1", "h-1", 2*time.Hour), newJobs("job-d", inst, 3))
	ok(t, err)
	equal(t, "replayed after reopen", replayed, true)
	equal(t, "replayed ids after reopen", fmt.Sprint(ids(again)), "[job-a-1 job-a-2 job-a-3]")

	// All or none: a batch that fails records no key, so the same key
	// then stores the corrected batch.
	bad := newJobs("job-e", inst, 2)
	bad[1].InstallID = "inst-nope"
	_, _, err = e.s.EnqueueJobsKeyed(ctx, key("k-2", "h-2", 0), bad)
	wantErr(t, err, errs.NotFound, "jobs[1]")
	_, err = e.s.GetJob(ctx, "job-e-1")
	wantErr(t, err, errs.NotFound)
	jobs, replayed, err = e.s.EnqueueJobsKeyed(ctx, key("k-2", "h-2", 0), newJobs("job-f", inst, 2))
	ok(t, err)
	equal(t, "replayed after a failed first try", replayed, false)
	equal(t, "ids after a failed first try", fmt.Sprint(ids(jobs)), "[job-f-1 job-f-2]")

	// Past its expiry a key is unused: another request may take it.
	jobs, replayed, err = e.s.EnqueueJobsKeyed(ctx, key("k-1", "h-new", 24*time.Hour), newJobs("job-g", inst, 1))
	ok(t, err)
	equal(t, "replayed after expiry", replayed, false)
	equal(t, "ids after expiry", fmt.Sprint(ids(jobs)), "[job-g-1]")
	again, _, err = e.s.EnqueueJobsKeyed(ctx, key("k-1", "h-new", 25*time.Hour), newJobs("job-h", inst, 1))
	ok(t, err)
	equal(t, "replay of the new use", fmt.Sprint(ids(again)), "[job-g-1]")

	// The sweep deletes only expired keys: k-2 (used at T0) but not k-1
	// (taken again at T0+24h).
	n, err := e.s.DeleteExpiredEnqueueKeys(ctx, at(24*time.Hour+time.Minute))
	ok(t, err)
	equal(t, "keys deleted", n, int64(1))
	_, replayed, err = e.s.EnqueueJobsKeyed(ctx, key("k-1", "h-new", 24*time.Hour+2*time.Minute), newJobs("job-i", inst, 1))
	ok(t, err)
	equal(t, "live key survives the sweep", replayed, true)

	// Invalid keys name the field.
	for _, k := range []store.EnqueueKey{
		{RequestHash: "h", At: T0, ExpiresAt: at(time.Hour)},
		{Key: "k", At: T0, ExpiresAt: at(time.Hour)},
		{Key: "k", RequestHash: "h", At: T0, ExpiresAt: T0},
	} {
		_, _, err := e.s.EnqueueJobsKeyed(ctx, k, newJobs("job-z", inst, 1))
		wantErr(t, err, errs.Invalid)
	}
}

// testEnqueueKeysConcurrent sends one keyed request many times at once
// through two stores on one database (two replicas): the jobs are stored
// once and every caller gets the same ids.
func testEnqueueKeysConcurrent(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	stores := []*store.Store{e.s, e.second()}
	const callers = 8
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		got     = map[string]int{}
		fresh   int
		callErr error
	)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			jobs, replayed, err := stores[i%2].EnqueueJobsKeyed(ctx, key("k-race", "h", 0), newJobs(fmt.Sprintf("job-%d", i), inst, 2))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				callErr = err
				return
			}
			got[fmt.Sprint(ids(jobs))]++
			if !replayed {
				fresh++
			}
		}()
	}
	wg.Wait()
	ok(t, callErr)
	equal(t, "callers that stored", fresh, 1)
	equal(t, "distinct answers", len(got), 1)
	equal(t, "jobs stored", e.countJobs(inst), 2)
	for answer := range got {
		stored := []string{}
		jobs, _, err := e.s.ListJobs(ctx, store.JobFilter{InstallID: inst})
		ok(t, err)
		for _, j := range jobs {
			stored = append(stored, j.ID)
		}
		slices.Sort(stored)
		equal(t, "answer is what is stored", answer, fmt.Sprint(stored))
	}
}
