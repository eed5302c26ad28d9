package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
)

func (e *env) release(id string, installs []string, waves []store.ReleaseWave, state store.ReleaseState) {
	e.t.Helper()
	var rows []store.ReleaseInstall
	for i, in := range installs {
		w := 0
		if i >= waves[0].Size {
			w = 1
		}
		rows = append(rows, store.ReleaseInstall{InstallID: in, Wave: w, Position: i, FromRevision: 1, ToRevision: 2})
	}
	ok(e.t, e.s.CreateRelease(e.ctx(), store.Release{ID: id, AppID: "app-1", AppRevision: 2, Kind: "release", State: state,
		Waves: waves, MaxFailures: 1, MaxFailuresSpec: "1", RequireApproval: state == store.ReleaseAwaitingApproval,
		PlanGroups: []store.PlanGroup{{Steps: []string{"web apply changed"}, Installs: len(installs)}}, CreatedAt: T0, CreatedBy: "tok-admin"}, rows))
}

func releaseStart(rel, install string, n int) store.ReleaseStart {
	return store.ReleaseStart{InstallID: install, Workflow: store.Workflow{ID: fmt.Sprintf("wf-%s-%s-%d", rel, install, n), InstallID: install,
		Kind: "update", AppRevision: 2, Parallelism: 1, CreatedAt: at(time.Minute), CreatedBy: "release " + rel, ReleaseID: rel}}
}

// A release's installs start once each, even when two replicas start them
// at once, and only in the release's current wave; ends are recorded
// once; operator changes move it only from the states that allow them,
// and every change is an audit event.
func testReleases(t *testing.T, e *env) {
	ctx := e.ctx()
	a, b, c := e.install("rel-a"), e.install("rel-b"), e.install("rel-c")
	waves := []store.ReleaseWave{{Name: "canary", Spec: "1", Size: 1}, {Name: "rest", Spec: "100%", Size: 2}}
	e.release("rel-1", []string{a, b, c}, waves, store.ReleaseRunning)
	wantErr(t, e.s.CreateRelease(ctx, store.Release{ID: "rel-1", AppID: "app-1", Kind: "release", State: store.ReleaseRunning, Waves: waves, CreatedAt: T0}, nil),
		errs.AlreadyExists)

	// Wave 2's installs do not start while wave 1 runs.
	started, err := e.s.StartReleaseInstalls(ctx, "rel-1", 1, []store.ReleaseStart{releaseStart("rel-1", b, 0)}, at(time.Minute))
	ok(t, err)
	equal(t, "wave 2 started early", len(started), 0)
	// Two replicas start the canary at once: one wins.
	other := e.second()
	var wg sync.WaitGroup
	wins := make([]int, 2)
	for i, s := range []*store.Store{e.s, other} {
		wg.Go(func() {
			got, err := s.StartReleaseInstalls(ctx, "rel-1", 0, []store.ReleaseStart{releaseStart("rel-1", a, i)}, at(time.Minute))
			ok(t, err)
			wins[i] = len(got)
		})
	}
	wg.Wait()
	equal(t, "canary starts", wins[0]+wins[1], 1)
	rel, ins, err := e.s.GetRelease(ctx, "rel-1")
	ok(t, err)
	equal(t, "canary state", ins[0].State, store.RIRunning)
	equal(t, "canary install name", ins[0].InstallName, "rel-a")
	equal(t, "plan groups", len(rel.PlanGroups), 1)
	wfs, err := e.s.ListWorkflows(ctx, store.WorkflowFilter{InstallID: a})
	ok(t, err)
	equal(t, "canary workflows", len(wfs), 1)
	equal(t, "workflow release", wfs[0].ReleaseID, "rel-1")

	// Its workflow ends: recorded once.
	_, err = e.s.EndWorkflow(ctx, wfs[0].ID, store.WorkflowSucceeded, "", store.InstallActive, 2, at(2*time.Minute))
	ok(t, err)
	n, err := e.s.RecordReleaseInstalls(ctx, "rel-1", at(2*time.Minute))
	ok(t, err)
	equal(t, "recorded", n, 1)
	n, err = e.s.RecordReleaseInstalls(ctx, "rel-1", at(2*time.Minute))
	ok(t, err)
	equal(t, "recorded again", n, 0)

	// The next wave starts once.
	moved, err := e.s.StartNextWave(ctx, "rel-1", 0, "rest", 2, at(3*time.Minute))
	ok(t, err)
	equal(t, "next wave", moved, true)
	moved, err = e.s.StartNextWave(ctx, "rel-1", 0, "rest", 2, at(3*time.Minute))
	ok(t, err)
	equal(t, "next wave twice", moved, false)
	ok(t, e.s.WaitReleaseInstalls(ctx, "rel-1", []store.ReleaseWait{{InstallID: c, OpensAt: at(time.Hour), Why: "customer window"}}))
	started, err = e.s.StartReleaseInstalls(ctx, "rel-1", 1, []store.ReleaseStart{releaseStart("rel-1", b, 0)}, at(3*time.Minute))
	ok(t, err)
	equal(t, "wave 2 started", len(started), 1)
	_, ins, err = e.s.GetRelease(ctx, "rel-1")
	ok(t, err)
	equal(t, "waiting", ins[2].State, store.RIWaiting)
	equal(t, "opens", ins[2].WindowOpensAt, at(time.Hour))

	// b fails: halted; a pause is refused; resume accepts the failure.
	_, err = e.s.EndWorkflow(ctx, "wf-rel-1-"+b+"-0", store.WorkflowFailed, "boom", store.InstallFailed, 0, at(4*time.Minute))
	ok(t, err)
	_, err = e.s.RecordReleaseInstalls(ctx, "rel-1", at(4*time.Minute))
	ok(t, err)
	halted, err := e.s.HaltRelease(ctx, "rel-1", "1 failed", at(4*time.Minute))
	ok(t, err)
	equal(t, "halted", halted, true)
	_, err = e.s.ChangeRelease(ctx, "rel-1", store.ReleasePause, "tok-admin", "", at(5*time.Minute))
	wantErr(t, err, errs.Conflict, "halted")
	rel, err = e.s.ChangeRelease(ctx, "rel-1", store.ReleaseResume, "tok-admin", "accept", at(5*time.Minute))
	ok(t, err)
	equal(t, "resumed", rel.State, store.ReleaseRunning)
	equal(t, "accepted failures", rel.FailuresBase, 1)
	// A retry runs b again, from its wave.
	rel, err = e.s.ChangeRelease(ctx, "rel-1", store.ReleaseRetry, "tok-admin", "fixed", at(6*time.Minute))
	ok(t, err)
	equal(t, "failures after retry", rel.FailuresBase, 0)
	_, ins, err = e.s.GetRelease(ctx, "rel-1")
	ok(t, err)
	equal(t, "retried install", ins[1].State, store.RIPending)
	_, err = e.s.ChangeRelease(ctx, "rel-1", store.ReleaseRetry, "tok-admin", "", at(6*time.Minute))
	wantErr(t, err, errs.Conflict, "no failed")

	// Cancel: what has not started ends; the release ends once.
	rel, err = e.s.ChangeRelease(ctx, "rel-1", store.ReleaseCancel, "tok-admin", "stop", at(7*time.Minute))
	ok(t, err)
	equal(t, "cancel requested", rel.CancelRequested, true)
	started, err = e.s.StartReleaseInstalls(ctx, "rel-1", 1, []store.ReleaseStart{releaseStart("rel-1", b, 1)}, at(7*time.Minute))
	ok(t, err)
	equal(t, "started while cancelling", len(started), 0)
	ended, err := e.s.EndRelease(ctx, "rel-1", store.ReleaseCancelled, "stop", at(8*time.Minute))
	ok(t, err)
	equal(t, "ended", ended, true)
	ended, err = e.s.EndRelease(ctx, "rel-1", store.ReleaseFailed, "", at(8*time.Minute))
	ok(t, err)
	equal(t, "ended twice", ended, false)

	// A rollback marks the release it undoes, once.
	e.release("rel-2", []string{a}, []store.ReleaseWave{{Name: "all", Spec: "100%", Size: 1}}, store.ReleaseAwaitingApproval)
	back := store.Release{ID: "rel-3", AppID: "app-1", Kind: "rollback", RollbackOf: "rel-2", State: store.ReleaseRunning,
		Waves: []store.ReleaseWave{{Name: "undo all", Size: 1}}, CreatedAt: at(9 * time.Minute), CreatedBy: "tok-admin"}
	ok(t, e.s.CreateRelease(ctx, back, []store.ReleaseInstall{{InstallID: a, FromRevision: 2, ToRevision: 1}}))
	back.ID = "rel-4"
	wantErr(t, e.s.CreateRelease(ctx, back, nil), errs.Conflict, "already rolled back")
	// After a restart the store reads the same releases.
	s2 := e.second()
	rel, _, err = s2.GetRelease(ctx, "rel-2")
	ok(t, err)
	equal(t, "rolled back by", rel.RolledBackBy, "rel-3")
	equal(t, "rolled back release cancelling", rel.CancelRequested, true)
	active, err := s2.ListReleases(ctx, store.ReleaseFilter{Active: true})
	ok(t, err)
	equal(t, "active releases", len(active), 2)
	counts, err := s2.CountReleaseInstalls(ctx, []string{"rel-1"})
	ok(t, err)
	equal(t, "succeeded in wave 1", counts["rel-1"][0][store.RISucceeded], 1)

	events, err := e.s.ListAuditEvents(ctx, store.AuditFilter{Chain: store.VendorChain, OneChain: true})
	ok(t, err)
	kinds := map[string]bool{}
	for _, ev := range events {
		kinds[ev.Kind] = true
	}
	for _, k := range []string{"release.created", "release.wave_started", "release.halted", "release.resumed", "release.retried",
		"release.cancelled", "release.ended", "release.rolled_back"} {
		if !kinds[k] {
			t.Errorf("no %s audit event", k)
		}
	}
}
