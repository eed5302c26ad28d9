// Conformance, fleet: the per-app fleet summary (Fleet).

package storetest

import (
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/store"
)

func testFleet(t *testing.T, e *env) {
	ctx := e.ctx()
	a := e.install("acme")
	b := e.install("globex")
	e.install("initech")
	e.agent(a, "ag-old")
	e.agent(a, "ag-new")
	e.agent(b, "ag-b")
	e.enqueue("job-1", a, T0)
	e.enqueue("job-2", a, at(time.Second))
	e.enqueue("job-3", a, at(2*time.Second))
	e.enqueue("job-4", b, T0)
	e.claimOne(a, "ag-new", at(time.Minute))
	cb := e.claimOne(b, "ag-b", at(time.Minute))
	_, err := e.s.FinishJob(ctx, cb.ID, writer(cb), store.Result{State: store.JobSucceeded}, at(2*time.Minute))
	ok(t, err)

	fs, err := e.s.Fleet(ctx, "")
	ok(t, err)
	equal(t, "installs", len(fs.Installs), 3)
	equal(t, "acme agents", len(fs.Agents[a]), 2)
	equal(t, "globex agents", len(fs.Agents[b]), 1)
	equal(t, "acme queued", fs.Queued[a], 2)
	equal(t, "acme active", fs.Active[a], 1)
	equal(t, "globex queued (its job ended)", fs.Queued[b], 0)
	equal(t, "globex active", fs.Active[b], 0)

	fs, err = e.s.Fleet(ctx, "no-such-app")
	ok(t, err)
	equal(t, "installs of another app", len(fs.Installs), 0)
}
