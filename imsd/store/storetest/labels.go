// Conformance, install labels: stored with the install, replaced whole,
// validated, audited, and the install-id filters of ListJobs and
// ListWorkflows that label selectors resolve to.

package storetest

import (
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
)

func testInstallLabels(t *testing.T, e *env) {
	ctx := e.ctx()
	ok(t, e.s.CreateApp(ctx, store.App{ID: "app-1", Name: "shop", CreatedAt: T0}))
	tok := func(h string) store.EnrollmentToken {
		return store.EnrollmentToken{Hash: h, ExpiresAt: at(time.Hour), CreatedAt: T0}
	}
	ok(t, e.s.CreateInstall(ctx, store.Install{ID: "inst-1", AppID: "app-1", Name: "acme", CreatedAt: T0,
		Labels: map[string]string{"tier": "canary", "example.com/region": "eu"}}, tok("h1")))
	ok(t, e.s.CreateInstall(ctx, store.Install{ID: "inst-2", AppID: "app-1", Name: "globex", CreatedAt: T0}, tok("h2")))
	wantErr(t, e.s.CreateInstall(ctx, store.Install{ID: "inst-3", AppID: "app-1", Name: "bad", CreatedAt: T0,
		Labels: map[string]string{"Tier!": "x"}}, tok("h3")), errs.Invalid, `label key "Tier!"`)

	got, err := e.s.GetInstall(ctx, "acme")
	ok(t, err)
	equal(t, "labels after create", len(got.Labels), 2)
	equal(t, "tier", got.Labels["tier"], "canary")
	equal(t, "region", got.Labels["example.com/region"], "eu")
	other, err := e.s.GetInstall(ctx, "globex")
	ok(t, err)
	equal(t, "globex's labels", len(other.Labels), 0)

	// SetInstallLabels replaces the set and is audited with its actor;
	// setting the same set again records nothing.
	in, err := e.s.SetInstallLabels(ctx, "inst-2", map[string]string{"tier": "prod", "customer": ""}, "token:ops", at(time.Minute))
	ok(t, err)
	equal(t, "returned labels", in.Labels["tier"]+"|"+in.Labels["customer"], "prod|")
	_, err = e.s.SetInstallLabels(ctx, "inst-2", map[string]string{"customer": "", "tier": "prod"}, "token:ops", at(2*time.Minute))
	ok(t, err)
	evs, err := e.s.ListAuditEvents(ctx, store.AuditFilter{Chain: "inst-2", OneChain: true})
	ok(t, err)
	var labeled []store.AuditEvent
	for _, ev := range evs {
		if ev.Kind == "install.labeled" {
			labeled = append(labeled, ev)
		}
	}
	if len(labeled) != 1 {
		t.Fatalf("install.labeled events = %+v, want one", labeled)
	}
	equal(t, "actor", labeled[0].Actor, "token:ops")
	equal(t, "after", labeled[0].Data["after"], "customer=,tier=prod")
	equal(t, "before", labeled[0].Data["before"], "")

	_, err = e.s.SetInstallLabels(ctx, "inst-2", map[string]string{"tier": strings.Repeat("x", 64)}, "token:ops", at(3*time.Minute))
	wantErr(t, err, errs.Invalid, `label "tier": the value is longer than 63`)
	_, err = e.s.SetInstallLabels(ctx, "inst-9", nil, "token:ops", at(3*time.Minute))
	wantErr(t, err, errs.NotFound, "inst-9")
	// Clearing them all.
	in, err = e.s.SetInstallLabels(ctx, "inst-2", nil, "token:ops", at(4*time.Minute))
	ok(t, err)
	equal(t, "cleared", len(in.Labels), 0)
	all, err := e.s.ListInstalls(ctx, "")
	ok(t, err)
	equal(t, "listed labels", all[0].Labels["tier"], "canary")

	// The install-id filters of the lists.
	e.enqueue("job-1", "inst-1", at(time.Second))
	e.enqueue("job-2", "inst-2", at(2*time.Second))
	jobs, _, err := e.s.ListJobs(ctx, store.JobFilter{InstallIDs: []string{"inst-1"}})
	ok(t, err)
	equal(t, "jobs of inst-1", strings.Join(ids(jobs), ","), "job-1")
	jobs, _, err = e.s.ListJobs(ctx, store.JobFilter{InstallIDs: []string{}})
	ok(t, err)
	equal(t, "jobs of no install", len(jobs), 0)
	jobs, _, err = e.s.ListJobs(ctx, store.JobFilter{InstallIDs: []string{"inst-1", "inst-2"}})
	ok(t, err)
	equal(t, "jobs of both", strings.Join(ids(jobs), ","), "job-2,job-1")
	e.workflow("wf-1", "inst-1", "update", at(time.Second))
	e.workflow("wf-2", "inst-2", "update", at(2*time.Second))
	wfs, err := e.s.ListWorkflows(ctx, store.WorkflowFilter{InstallIDs: []string{"inst-2"}})
	ok(t, err)
	if len(wfs) != 1 || wfs[0].ID != "wf-2" {
		t.Fatalf("workflows of inst-2 = %+v", wfs)
	}
	wfs, err = e.s.ListWorkflows(ctx, store.WorkflowFilter{InstallIDs: []string{}})
	ok(t, err)
	equal(t, "workflows of no install", len(wfs), 0)
}

// A window-bound job is stored with its flag; a claim that holds them
// passes it over (it stays queued in its place) and takes what comes
// after; a claim that does not hold takes it.
func testWindowBoundHold(t *testing.T, e *env) {
	ctx := e.ctx()
	in := e.install("acme")
	e.agent(in, "ag-1")
	bound := newJob("job-1", in, at(time.Second))
	bound.WindowBound = true
	ok(t, e.s.EnqueueJob(ctx, bound))
	e.enqueue("job-2", in, at(2*time.Second))
	equal(t, "stored flag", e.job("job-1").WindowBound, true)
	equal(t, "ordinary job", e.job("job-2").WindowBound, false)
	now := at(time.Minute)
	jobs, err := e.s.ClaimJobsHolding(ctx, in, store.Writer{AgentID: "ag-1"}, 5, now.Add(time.Minute), now, true)
	ok(t, err)
	equal(t, "claimed while holding", strings.Join(ids(jobs), ","), "job-2")
	equal(t, "held job", e.job("job-1").State, store.JobQueued)
	jobs, err = e.s.ClaimJobsHolding(ctx, in, store.Writer{AgentID: "ag-1"}, 5, now.Add(time.Minute), now, false)
	ok(t, err)
	if len(jobs) != 1 || jobs[0].ID != "job-1" || !jobs[0].WindowBound {
		t.Fatalf("claimed once the windows opened: %+v", jobs)
	}

	// A batch enqueue keeps the flag and the release too (PostgreSQL's
	// one-statement insert once dropped both).
	b1, b2 := newJob("job-3", in, at(3*time.Second)), newJob("job-4", in, at(4*time.Second))
	b1.WindowBound, b1.ReleaseID = true, "rel-1"
	_, err = e.s.EnqueueJobs(ctx, []store.NewJob{{Job: b1}, {Job: b2}})
	ok(t, err)
	equal(t, "batch-enqueued flag", e.job("job-3").WindowBound, true)
	equal(t, "batch-enqueued release", e.job("job-3").ReleaseID, "rel-1")
	equal(t, "batch-enqueued ordinary job", e.job("job-4").WindowBound, false)
}
