package storetest

import (
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/store"
)

// testComponentImport: an import job and what it makes the component are
// stored together; a failed import records nothing, a succeeded one
// records the component as deployed with the job's outputs and audits
// component.imported.
func testComponentImport(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	e.agent(inst, "ag-1")
	importJob := func(id string) (store.Job, store.ComponentImport) {
		j := newJob(id, inst, T0)
		j.Operation, j.MaxAttempts, j.State = store.OpImport, 1, store.JobQueued
		return j, store.ComponentImport{JobID: id, InstallID: inst, Name: "network", ComponentType: "terraform", Digest: "sha256:abc",
			Config: []byte(`{"dir":"infra"}`), Needs: []string{"vpc"}, AppRevision: 3, ImportID: "aws_vpc.main=vpc-1", CreatedAt: T0}
	}
	j, imp := importJob("imp-1")
	imp.JobID = "other"
	if err := e.s.EnqueueImport(ctx, j, imp); err == nil {
		t.Fatal("an import of another job was stored")
	}
	// A failed import records nothing.
	j, imp = importJob("imp-1")
	ok(t, e.s.EnqueueImport(ctx, j, imp))
	c := e.claimOne(inst, "ag-1", at(time.Minute))
	_, err := e.s.FinishJob(ctx, "imp-1", writer(c), store.Result{State: store.JobFailed, ExitCode: 1, Error: "no such vpc"}, at(2*time.Minute))
	ok(t, err)
	comps, err := e.s.InstallComponents(ctx, inst)
	ok(t, err)
	equal(t, "components after a failed import", len(comps), 0)

	j, imp = importJob("imp-2")
	ok(t, e.s.EnqueueImport(ctx, j, imp))
	c = e.claimOne(inst, "ag-1", at(3*time.Minute))
	_, err = e.s.FinishJob(ctx, "imp-2", writer(c), store.Result{State: store.JobSucceeded, Outputs: map[string]string{"id": "vpc-1"}}, at(4*time.Minute))
	ok(t, err)
	comps, err = e.s.InstallComponents(ctx, inst)
	ok(t, err)
	if len(comps) != 1 {
		t.Fatalf("components after the import: %+v", comps)
	}
	d := comps[0]
	if d.Name != "network" || d.ComponentType != "terraform" || d.Digest != "sha256:abc" || string(d.Config) != `{"dir":"infra"}` ||
		d.Outputs["id"] != "vpc-1" || len(d.Needs) != 1 || d.AppRevision != 3 || d.JobID != "imp-2" || d.WorkflowID != "" || !d.DeployedAt.Equal(at(4*time.Minute)) {
		t.Fatalf("imported component: %+v", d)
	}
	evs, err := e.s.ListAuditEvents(ctx, store.AuditFilter{Chain: inst, OneChain: true})
	ok(t, err)
	found := false
	for _, ev := range evs {
		if ev.Kind == "component.imported" {
			found = true
			if ev.Subject != "component:network" || ev.Actor != "tok-admin" || ev.Data["job"] != "imp-2" || ev.Data["import_id"] != "aws_vpc.main=vpc-1" {
				t.Errorf("audit event: %+v", ev)
			}
		}
	}
	if !found {
		t.Error("no component.imported audit event")
	}
}
