// Conformance, restart and notifications: what a store reopened on the
// same database (a restarted imsd, or a second replica) keeps and hears
// (Listen).

package storetest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
)

func testRestart(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	e.agent(inst, "ag-1")
	ok(t, e.s.CreateAPIToken(ctx, store.APIToken{ID: "tok-1", Name: "ci", Role: store.RoleAdmin, CreatedAt: T0}, "h1"))
	e.enqueue("job-1", inst, T0)
	e.enqueue("job-2", inst, at(time.Second))
	c := e.claimOne(inst, "ag-1", T0)
	ok(t, e.s.AppendLogs(ctx, "job-1", writer(c), lines(1, 1, 3)))
	before := e.job("job-1")
	ok(t, e.s.Close())

	s := e.reopen()
	t.Cleanup(func() { s.Close() })
	e.s = s
	if _, err := s.GetApp(ctx, "shop"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetInstall(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	a, err := s.GetAgent(ctx, "ag-1")
	ok(t, err)
	equal(t, "agent install", a.InstallID, inst)
	_, err = s.APITokenByHash(ctx, "h1")
	ok(t, err)
	after := e.job("job-1")
	if !slices.Equal(after.Config, before.Config) || after.FencingToken != before.FencingToken || after.State != before.State || !after.LeaseDeadline.Equal(before.LeaseDeadline) {
		t.Fatalf("job changed across restart:\nbefore %+v\nafter  %+v", before, after)
	}
	equal(t, "log lines", len(e.logs("job-1")), 3)
	// The agent carries on with its lease.
	ok(t, s.AppendLogs(ctx, "job-1", writer(c), lines(1, 3, 4)))
	_, err = s.FinishJob(ctx, "job-1", writer(c), store.Result{State: store.JobSucceeded}, at(time.Minute))
	ok(t, err)
	equal(t, "log lines", len(e.logs("job-1")), 4)
	equal(t, "next claim", e.claimOne(inst, "ag-1", at(time.Minute)).ID, "job-2")
	// The used enrolment token stays used.
	_, err = s.Enroll(ctx, "hash-ag-1", store.Agent{ID: "ag-2", PublicKey: []byte{1}}, at(time.Minute))
	wantErr(t, err, errs.PermissionDenied, "already used")
}

func testListen(t *testing.T, e *env) {
	ctx, cancel := context.WithCancel(e.ctx())
	defer cancel()
	if e.s.Dialect() != store.DialectPostgres {
		// One process wakes itself: Listen has nothing to do.
		ok(t, e.s.Listen(ctx, func(string) {}, func(string) {}))
		return
	}
	inst := e.install("acme")
	e.agent(inst, "ag-1")
	jobc, logc := make(chan string, 100), make(chan string, 100)
	done := make(chan error, 1)
	// Notifications come from another replica.
	other := e.second()
	go func() { done <- e.s.Listen(ctx, func(id string) { jobc <- id }, func(id string) { logc <- id }) }()

	// LISTEN starts asynchronously; keep making changes until one arrives.
	deadline := time.After(10 * time.Second)
	for i := 0; ; i++ {
		ok(t, other.EnqueueJob(ctx, newJob(fmt.Sprintf("job-%d", i), inst, T0)))
		select {
		case id := <-jobc:
			equal(t, "install woken", id, inst)
		case <-time.After(100 * time.Millisecond):
			continue
		case <-deadline:
			t.Fatal("no job notification within 10s")
		}
		break
	}
	jobs, err := other.ClaimJobs(ctx, inst, store.Writer{AgentID: "ag-1"}, 1, at(time.Minute), T0)
	ok(t, err)
	ok(t, other.AppendLogs(ctx, jobs[0].ID, writer(jobs[0]), lines(1, 1, 1)))
	select {
	case id := <-logc:
		equal(t, "job woken", id, jobs[0].ID)
	case <-time.After(10 * time.Second):
		t.Fatal("no log notification within 10s")
	}
	cancel()
	select {
	case err := <-done:
		ok(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Listen did not return after its context ended")
	}
}
