package storetest

import (
	"reflect"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/store"
)

// testArtifactVerifications: what a job's result says the agent verified
// of its artifact is stored as its component's latest (a later job's
// replaces it), survives a restart, and its verdict and failed rules are
// in the job's audit record. The history keeps every one.
func testArtifactVerifications(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	e.agent(inst, "ag-1")
	none, err := e.s.ArtifactVerifications(ctx, inst)
	ok(t, err)
	equal(t, "none yet", len(none), 0)
	e.enqueue("job-1", inst, T0)
	j := e.claimOne(inst, "ag-1", at(time.Minute))
	refused := store.ArtifactVerification{Artifact: "modules/net@sha256:aa", Digest: "sha256:aa", Verdict: "refused",
		Failed: []string{"require-signature: it has no signature"}}
	_, err = e.s.FinishJob(ctx, "job-1", writer(j), store.Result{State: store.JobFailed, Error: "supply-chain policy ...",
		Verifications: []store.ArtifactVerification{refused}}, at(2*time.Minute))
	ok(t, err)
	got, err := e.s.ArtifactVerifications(ctx, inst)
	ok(t, err)
	want := refused
	want.Attestations, want.JobID, want.VerifiedAt = []string{}, "job-1", at(2*time.Minute)
	if !reflect.DeepEqual(got["network"], want) {
		t.Fatalf("verification %+v, want %+v", got["network"], want)
	}
	evs, err := e.s.ListAuditEvents(ctx, store.AuditFilter{Chain: inst, OneChain: true})
	ok(t, err)
	var fin *store.AuditEvent
	for i := range evs {
		if evs[i].Kind == "job.finished" && evs[i].Subject == "job:job-1" {
			fin = &evs[i]
		}
	}
	if fin == nil {
		t.Fatal("no job.finished event")
	}
	equal(t, "audit supply_chain", fin.Data["supply_chain"], "refused")
	equal(t, "audit supply_chain_failed", fin.Data["supply_chain_failed"], "require-signature: it has no signature")
	equal(t, "audit supply_chain_artifact", fin.Data["supply_chain_artifact"], "modules/net@sha256:aa sha256:aa")

	e.enqueue("job-2", inst, T0)
	j2 := e.claimOne(inst, "ag-1", at(3*time.Minute))
	good := store.ArtifactVerification{Artifact: "modules/net@sha256:bb", Digest: "sha256:bb", KeyID: "k1", Verdict: "verified",
		Attestations: []string{"https://slsa.dev/provenance/v1"}}
	_, err = e.s.FinishJob(ctx, "job-2", writer(j2), store.Result{State: store.JobSucceeded, Verifications: []store.ArtifactVerification{good}}, at(4*time.Minute))
	ok(t, err)
	again, err := e.second().ArtifactVerifications(ctx, inst)
	ok(t, err)
	want = good
	want.Failed, want.JobID, want.VerifiedAt = []string{}, "job-2", at(4*time.Minute)
	if len(again) != 1 || !reflect.DeepEqual(again["network"], want) {
		t.Fatalf("after the second job: %+v, want %+v", again, want)
	}

	// The history keeps both, newest first, with the job's component
	// type.
	h, err := e.second().VerificationHistory(ctx, inst, 10)
	ok(t, err)
	equal(t, "history length", len(h), 2)
	equal(t, "newest", h[0].JobID+" "+h[0].Component+" "+h[0].ComponentType+" "+h[0].Verdict+" "+h[0].KeyID, "job-2 network "+h[0].ComponentType+" verified k1")
	equal(t, "oldest", h[1].JobID+" "+h[1].Verdict+" "+h[1].Failed[0], "job-1 refused require-signature: it has no signature")
	equal(t, "oldest's time", h[1].VerifiedAt, at(2*time.Minute))
	if h[0].ComponentType == "" || h[0].AgentID != "" {
		t.Fatalf("history row %+v: want the job's component type and no agent", h[0])
	}
}
