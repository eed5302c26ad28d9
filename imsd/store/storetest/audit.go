package storetest

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/internal/auditchain"
)

// kinds returns the kinds of chain's events, in order.
func (e *env) kinds(chain string) []string {
	e.t.Helper()
	evs, err := e.s.ListAuditEvents(e.ctx(), store.AuditFilter{Chain: chain, OneChain: true})
	ok(e.t, err)
	var out []string
	for _, ev := range evs {
		out = append(out, ev.Kind)
	}
	return out
}

// verify checks chain as stored and returns its first problem.
func (e *env) verify(chain string) *auditchain.Problem {
	e.t.Helper()
	rs, err := e.s.AuditRecords(e.ctx(), chain)
	ok(e.t, err)
	return auditchain.Verify(rs)
}

func wantKinds(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	for _, k := range want {
		if !slices.Contains(got, k) {
			t.Errorf("%s: no %s event in %v", what, k, got)
		}
	}
}

// testAuditEvents: each kind of change leaves its event in the right
// chain, in the transaction of the change, and the chains verify.
func testAuditEvents(t *testing.T, e *env) {
	ctx := e.ctx()
	ok(t, e.s.CreateAPIToken(ctx, store.APIToken{ID: "tok-1", Name: "ci", Role: store.RoleAdmin, CreatedAt: T0}, "h1"))
	inst := e.install("acme")
	_, _, err := e.s.CreateAppRevision(ctx, store.AppRevision{AppID: "app-1", Digest: "d1", Version: "1", Files: map[string][]byte{"app.toml": []byte("x")}, CreatedAt: T0, CreatedBy: "ci"})
	ok(t, err)
	_, err = e.s.UpdateInstall(ctx, inst, map[string]string{"size": "3"}, store.InstallSettings{}, at(time.Second))
	ok(t, err)
	e.agent(inst, "ag-1")
	ok(t, e.s.SetAgentPermissions(ctx, "ag-1", store.Permissions{}, at(2*time.Second)))
	ok(t, e.s.RecordAgentConflict(ctx, "ag-1", "two processes", at(3*time.Second)))

	// Jobs: queued, assigned (claim), acked, finished; assigned at
	// enqueue; refused; a lease that expires.
	e.enqueue("job-1", inst, T0)
	j := e.claimOne(inst, "ag-1", at(time.Minute))
	ok(t, e.s.AckJob(ctx, "job-1", writer(j), at(3*time.Minute), at(2*time.Minute)))
	_, err = e.s.FinishJob(ctx, "job-1", writer(j), store.Result{State: store.JobSucceeded}, at(4*time.Minute))
	ok(t, err)
	j2, assigned, err := e.s.EnqueueAssigned(ctx, newJob("job-2", inst, at(5*time.Minute)), "ag-1", at(6*time.Minute))
	ok(t, err)
	equal(t, "assigned", assigned, true)
	_, err = e.s.FinishJob(ctx, "job-2", writer(j2), store.Result{State: store.JobRefused, Error: "mode off"}, at(5*time.Minute))
	ok(t, err)
	e.enqueue("job-3", inst, at(6*time.Minute))
	e.claimOne(inst, "ag-1", at(6*time.Minute))
	_, err = e.s.ExpireLeases(ctx, at(20*time.Minute))
	ok(t, err)

	// A workflow and its step.
	wf := store.Workflow{ID: "wf-1", InstallID: inst, Kind: "action", Action: "backup", Parallelism: 1, CreatedAt: at(30 * time.Minute), CreatedBy: "ci"}
	ok(t, e.s.CreateWorkflow(ctx, wf))
	started, err := e.s.StartWorkflow(ctx, "wf-1", []store.Step{{Name: "backup", ComponentType: "action", Operation: "apply", Timeout: time.Minute}}, store.WorkflowRunning, nil, at(31*time.Minute))
	ok(t, err)
	equal(t, "workflow started", started, true)
	started, err = e.s.StartStep(ctx, "wf-1", "backup", newJob("job-4", inst, at(32*time.Minute)), at(32*time.Minute))
	ok(t, err)
	equal(t, "step started", started, true)
	done, err := e.s.FinishStep(ctx, "wf-1", "backup", "job-4", store.StepSucceeded, "", nil, "", at(33*time.Minute))
	ok(t, err)
	equal(t, "step finished", done, true)
	ended, err := e.s.EndWorkflow(ctx, "wf-1", store.WorkflowSucceeded, "", "", 0, at(34*time.Minute))
	ok(t, err)
	equal(t, "workflow ended", ended, true)
	ok(t, e.s.RecordAudit(ctx, store.AuditEvent{Chain: inst, At: at(35 * time.Minute), Kind: "breakglass.granted", Actor: "customer", Subject: "grant:g1"}))
	// Approval and cancellation of a workflow, cancellation of jobs, a
	// registered type.
	ok(t, e.s.CreateWorkflow(ctx, store.Workflow{ID: "wf-2", InstallID: inst, Kind: "update", Parallelism: 1, CreatedAt: at(36 * time.Minute), CreatedBy: "ci"}))
	_, err = e.s.StartWorkflow(ctx, "wf-2", nil, store.WorkflowAwaitingApproval, nil, at(36*time.Minute))
	ok(t, err)
	_, err = e.s.ApproveWorkflow(ctx, "wf-2", "ci", nil, at(37*time.Minute))
	ok(t, err)
	_, err = e.s.RequestWorkflowCancel(ctx, "wf-2", "wrong plan", "ops", at(38*time.Minute))
	ok(t, err)
	e.enqueue("job-5", inst, at(39*time.Minute))
	_, err = e.s.RequestCancel(ctx, "job-5", "not needed", "ops", at(39*time.Minute))
	ok(t, err)
	_, _, err = e.s.EnqueueAssigned(ctx, newJob("job-6", inst, at(39*time.Minute)), "ag-1", at(41*time.Minute))
	ok(t, err)
	_, err = e.s.RequestCancel(ctx, "job-6", "stop", "ops", at(40*time.Minute))
	ok(t, err)
	_, _, err = e.s.PutPluginType(ctx, store.PluginType{Type: "greeting", Version: "1.0.0", Protocol: "1.1", Description: "{}", RegisteredAt: T0, RegisteredBy: "ci"})
	ok(t, err)

	ok(t, e.s.DeletePluginType(ctx, "greeting", at(42*time.Minute)))
	wantKinds(t, "vendor chain", e.kinds(store.VendorChain), "token.created", "app.created", "app.pushed", "plugin_type.registered", "plugin_type.deleted")
	got := e.kinds(inst)
	wantKinds(t, "install chain", got, "install.created", "install.updated", "agent.enrolled", "agent.permissions_changed",
		"agent.identity_conflict", "job.queued", "job.assigned", "job.acked", "job.finished", "job.refused", "job.lease_expired",
		"workflow.created", "workflow.started", "step.started", "step.ended", "workflow.ended", "breakglass.granted",
		"enrollment_token.created", "workflow.approved", "workflow.cancel_requested", "job.cancelled", "job.cancel_requested")
	if n := strings.Count(strings.Join(got, " "), "job.finished"); n != 1 {
		t.Errorf("%d job.finished events, want 1 (succeeded; the refusal is job.refused): %v", n, got)
	}
	evs, err := e.s.ListAuditEvents(ctx, store.AuditFilter{Chain: inst, OneChain: true})
	ok(t, err)
	for _, ev := range evs {
		if ev.Kind == "job.acked" {
			equal(t, "acked token", ev.Data["token"], fmt.Sprint(j.FencingToken))
		}
		switch ev.Kind {
		case "job.cancelled", "job.cancel_requested", "workflow.cancel_requested":
			equal(t, ev.Kind+" actor", ev.Actor, "ops") // who asked, not empty
		}
		if ev.Kind == "job.refused" && ev.Subject == "job:job-2" {
			equal(t, "refused state", ev.Data["state"], "refused")
			equal(t, "refused actor", ev.Actor, "agent:ag-1")
		}
	}
	for i, ev := range evs {
		equal(t, "seq", ev.Seq, int64(i+1))
	}
	since, err := e.s.ListAuditEvents(ctx, store.AuditFilter{Since: at(30 * time.Minute)})
	ok(t, err)
	for _, ev := range since {
		if ev.At.Before(at(30 * time.Minute)) {
			t.Errorf("since: event %s at %s", ev.Kind, ev.At)
		}
	}
	if len(since) < 6 {
		t.Errorf("since: %d events, want at least 6", len(since))
	}
	newest, err := e.s.ListAuditEvents(ctx, store.AuditFilter{NewestFirst: true, Limit: 3})
	ok(t, err)
	equal(t, "newest first", len(newest), 3)
	for i := 1; i < len(newest); i++ {
		if newest[i].At.After(newest[i-1].At) {
			t.Errorf("newest first: %s at %s after %s at %s", newest[i].Kind, newest[i].At, newest[i-1].Kind, newest[i-1].At)
		}
	}
	chains, err := e.s.AuditChains(ctx)
	ok(t, err)
	equal(t, "chains", strings.Join(chains, ","), ","+inst)
	for _, c := range chains {
		if p := e.verify(c); p != nil {
			t.Errorf("verify %q: %v", c, p)
		}
	}
	// A restarted store continues the chains.
	s2 := e.second()
	ok(t, s2.RecordAudit(ctx, store.AuditEvent{Chain: inst, At: at(40 * time.Minute), Kind: "test.after_restart"}))
	if p := e.verify(inst); p != nil {
		t.Errorf("verify after restart: %v", p)
	}
}

// testAuditAppendOnly: the database refuses UPDATE and DELETE of audit
// rows.
func testAuditAppendOnly(t *testing.T, e *env) {
	ctx := e.ctx()
	e.install("acme")
	err := e.s.RawExec(ctx, `UPDATE audit_events SET kind = 'x'`)
	if err == nil || !strings.Contains(err.Error(), "append-only") {
		t.Errorf("UPDATE: got %v, want the trigger's refusal", err)
	}
	err = e.s.RawExec(ctx, `DELETE FROM audit_events`)
	if err == nil || !strings.Contains(err.Error(), "append-only") {
		t.Errorf("DELETE: got %v, want the trigger's refusal", err)
	}
	equal(t, "events kept", len(e.kinds("inst-acme")), 1)
}

// dropAuditTriggers acts as an attacker with access to the database.
func (e *env) dropAuditTriggers() {
	e.t.Helper()
	if e.s.Dialect() == store.DialectPostgres {
		ok(e.t, e.s.RawExec(e.ctx(), `DROP TRIGGER audit_events_no_update ON audit_events`))
		return
	}
	ok(e.t, e.s.RawExec(e.ctx(), `DROP TRIGGER audit_events_no_update`))
	ok(e.t, e.s.RawExec(e.ctx(), `DROP TRIGGER audit_events_no_delete`))
}

// tamperChain makes a chain of five events and returns its id.
func (e *env) tamperChain() string {
	e.t.Helper()
	inst := e.install("acme") // event 1
	for i := range 4 {
		ok(e.t, e.s.RecordAudit(e.ctx(), store.AuditEvent{Chain: inst, At: at(time.Duration(i+1) * time.Minute), Kind: "test.event",
			Data: map[string]string{"n": string(rune('a' + i))}}))
	}
	if p := e.verify(inst); p != nil {
		e.t.Fatalf("untouched chain: %v", p)
	}
	e.dropAuditTriggers()
	return inst
}

func wantProblem(t *testing.T, p *auditchain.Problem, seq int64, what string) {
	t.Helper()
	if p == nil {
		t.Fatalf("verify found nothing, want record %d %s", seq, what)
	}
	if p.Seq != seq || p.What != what {
		t.Errorf("verify: %v, want record %d %s", p, seq, what)
	}
}

// testAuditTamperEdit: a row edited behind the store's back is named.
func testAuditTamperEdit(t *testing.T, e *env) {
	inst := e.tamperChain()
	ok(t, e.s.RawExec(e.ctx(), `UPDATE audit_events SET data = '{"n":"z"}' WHERE chain = ? AND seq = 3`, inst))
	wantProblem(t, e.verify(inst), 3, "changed")
}

// testAuditTamperDelete: a deleted row is named.
func testAuditTamperDelete(t *testing.T, e *env) {
	inst := e.tamperChain()
	ok(t, e.s.RawExec(e.ctx(), `DELETE FROM audit_events WHERE chain = ? AND seq = 3`, inst))
	wantProblem(t, e.verify(inst), 3, "removed")
}

// testAuditTamperInsert: a row inserted in the middle (the later ones
// renumbered, the new one's own hash and link correct) is named.
func testAuditTamperInsert(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.tamperChain()
	rs, err := e.s.AuditRecords(ctx, inst)
	ok(t, err)
	ok(t, e.s.RawExec(ctx, `UPDATE audit_events SET seq = seq + 100 WHERE chain = ? AND seq >= 3`, inst))
	ok(t, e.s.RawExec(ctx, `UPDATE audit_events SET seq = seq - 99 WHERE chain = ? AND seq >= 100`, inst))
	forged := auditchain.Next(&rs[1], auditchain.Record{Chain: inst, At: rs[1].At, Kind: "test.forged", Data: "{}"})
	ok(t, e.s.RawExec(ctx, `INSERT INTO audit_events (chain, seq, at, kind, actor, subject, data, prev, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		forged.Chain, forged.Seq, forged.At, forged.Kind, forged.Actor, forged.Subject, forged.Data, forged.Prev, forged.Hash))
	wantProblem(t, e.verify(inst), 3, "inserted")
}

// testAuditWriteFailure: when the audit record cannot be written, the
// change it records does not happen (Vault's rule).
func testAuditWriteFailure(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	e.agent(inst, "ag-1")
	e.enqueue("job-1", inst, T0)
	j := e.claimOne(inst, "ag-1", at(time.Minute))
	if e.s.Dialect() == store.DialectPostgres {
		ok(t, e.s.RawExec(ctx, `CREATE TRIGGER audit_events_broken BEFORE INSERT ON audit_events FOR EACH ROW EXECUTE FUNCTION audit_events_append_only()`))
	} else {
		ok(t, e.s.RawExec(ctx, `CREATE TRIGGER audit_events_broken BEFORE INSERT ON audit_events BEGIN SELECT RAISE(ABORT, 'audit disk full'); END`))
	}
	before := len(e.kinds(inst))

	err := e.s.EnqueueJob(ctx, newJob("job-2", inst, at(time.Minute)))
	if err == nil {
		t.Error("enqueue succeeded without its audit record")
	}
	_, err = e.s.GetJob(ctx, "job-2")
	wantErr(t, err, errs.NotFound)

	if err := e.s.AckJob(ctx, "job-1", writer(j), at(3*time.Minute), at(2*time.Minute)); err == nil {
		t.Error("ack succeeded without its audit record")
	}
	equal(t, "state after a failed ack", e.job("job-1").State, store.JobAssigned)

	if err := e.s.CreateAPIToken(ctx, store.APIToken{ID: "tok-x", Name: "x", Role: store.RoleViewer, CreatedAt: T0}, "hx"); err == nil {
		t.Error("token created without its audit record")
	}
	_, err = e.s.APITokenByHash(ctx, "hx")
	wantErr(t, err, errs.NotFound)

	if err := e.s.SetAgentPermissions(ctx, "ag-1", store.Permissions{}, at(2*time.Minute)); err == nil {
		t.Error("permissions recorded without their audit record")
	}
	a, err := e.s.GetAgent(ctx, "ag-1")
	ok(t, err)
	if a.Permissions != nil {
		t.Errorf("permissions recorded without their audit record: %+v", a.Permissions)
	}
	equal(t, "events", len(e.kinds(inst)), before)

	// Once records can be written again, the chain goes on from its last
	// committed record (no head of a failed write was kept).
	if e.s.Dialect() == store.DialectPostgres {
		ok(t, e.s.RawExec(ctx, `DROP TRIGGER audit_events_broken ON audit_events`))
	} else {
		ok(t, e.s.RawExec(ctx, `DROP TRIGGER audit_events_broken`))
	}
	ok(t, e.s.AckJob(ctx, "job-1", writer(j), at(3*time.Minute), at(2*time.Minute)))
	equal(t, "events after", len(e.kinds(inst)), before+1)
	if p := e.verify(inst); p != nil {
		t.Errorf("verify after failures: %v", p)
	}
}

// testAuditConcurrent: many writers on many chains at once (group
// commits, savepoints, refusals among them) leave every chain intact.
func testAuditConcurrent(t *testing.T, e *env) {
	ctx := e.ctx()
	var insts []string
	for i := range 4 {
		inst := e.install(fmt.Sprintf("c%d", i))
		e.agent(inst, fmt.Sprintf("ag-c%d", i))
		insts = append(insts, inst)
	}
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			inst := insts[w%len(insts)]
			for i := range 10 {
				id := fmt.Sprintf("job-c%d-%d", w, i)
				if err := e.s.EnqueueJob(ctx, newJob(id, inst, at(time.Duration(i)*time.Second))); err != nil {
					t.Error(err)
					return
				}
				// A duplicate id: refused, and its event with it.
				if err := e.s.EnqueueJob(ctx, newJob(id, inst, at(time.Duration(i)*time.Second))); err == nil {
					t.Error("duplicate job id accepted")
					return
				}
				_ = e.s.RecordAudit(ctx, store.AuditEvent{Chain: store.VendorChain, At: at(time.Minute), Kind: "test.vendor"})
			}
		}()
	}
	wg.Wait()
	for _, inst := range insts {
		if p := e.verify(inst); p != nil {
			t.Errorf("verify %s: %v", inst, p)
		}
		// install.created, enrollment_token.created, agent.enrolled, then
		// a job.queued per job of its four writers.
		equal(t, "events of "+inst, len(e.kinds(inst)), 3+4*10)
	}
	if p := e.verify(store.VendorChain); p != nil {
		t.Errorf("verify vendor: %v", p)
	}
}

// nilProblem turns a verification problem into an error (nil for none).
func nilProblem(p *auditchain.Problem) error {
	if p == nil {
		return nil
	}
	return p
}

// testAuditRecordsAfter: AuditRecordsAfter returns every record after the
// one asked, as stored, whichever store (replica) appended them, and
// nothing after the last; AuditRecordsToSend never sends a record out of
// order and always the store's own newest.
func testAuditRecordsAfter(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme") // record 1
	ev := func(s *store.Store, n int) {
		ok(t, s.RecordAudit(ctx, store.AuditEvent{Chain: inst, At: at(time.Duration(n) * time.Second), Kind: "test.event",
			Data: map[string]string{"n": fmt.Sprint(n)}}))
	}
	for n := range 3 {
		ev(e.s, n) // records 2-4
	}
	want, err := e.s.AuditRecords(ctx, inst)
	ok(t, err)
	check := func(what string, s *store.Store, after int64, n int) {
		t.Helper()
		got, err := s.AuditRecordsAfter(ctx, inst, after, store.MaxAuditPage)
		ok(t, err)
		if len(got) != n {
			t.Fatalf("%s: %d records after %d, want %d", what, len(got), after, n)
		}
		for i, r := range got {
			equal(t, what, r, want[int(after)+i])
		}
	}
	check("after 2", e.s, 2, 2)
	check("after 4", e.s, 4, 0)
	check("after 0", e.s, 0, 4)
	// Another replica appends; then this one does: every record, in order.
	s2 := e.second()
	ev(s2, 10) // record 5
	ev(e.s, 11)
	want, err = e.s.AuditRecords(ctx, inst)
	ok(t, err)
	equal(t, "records", len(want), 6)
	check("after the second replica's", e.s, 3, 3)
	check("the second replica", s2, 4, 2)
	// What is sent to an agent: never out of order; this store's own
	// records always; another's may come later.
	for _, st := range []*store.Store{e.s, s2} {
		for after := int64(0); after <= 6; after++ {
			got, err := st.AuditRecordsToSend(ctx, inst, after)
			ok(t, err)
			for i, r := range got {
				equal(t, "sent record", r, want[int(after)+i])
			}
		}
	}
	got, err := e.s.AuditRecordsToSend(ctx, inst, 5)
	ok(t, err)
	equal(t, "this store's newest record is sent", len(got), 1)
	if p := auditchain.Verify(want); p != nil {
		t.Fatalf("verify: %v", p)
	}
}

// testCallRecordInWrite: an operator call's record given with
// WithCallRecord is appended by the call's enqueue, in its transaction,
// once, before the job's own record; an enqueue that fails leaves it
// unwritten (for the Auditor to append afterwards), and the next write
// under the same context takes it; each of the four enqueue writes takes
// it.
func testCallRecordInWrite(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	e.agent(inst, "ag-1")
	call := func(n int) store.AuditEvent {
		return store.AuditEvent{Chain: inst, At: at(time.Duration(n) * time.Second), Kind: "operator.call", Actor: "tok-admin", Subject: fmt.Sprintf("call-%d", n)}
	}
	before := len(e.kinds(inst))
	want := func(what string, kinds ...string) {
		t.Helper()
		got := e.kinds(inst)[before:]
		if !slices.Equal(got, kinds) {
			t.Fatalf("%s: events %v, want %v", what, got, kinds)
		}
		before += len(got)
	}

	// A failed enqueue (a job of an unknown install) leaves the record
	// free; the next enqueue under the same context appends it, once.
	cctx, c := store.WithCallRecord(ctx, call(1))
	err := e.s.EnqueueJob(cctx, newJob("job-x", "inst-none", T0))
	wantErr(t, err, errs.NotFound)
	equal(t, "written after a failed enqueue", c.Written(), false)
	want("failed enqueue")
	ok(t, e.s.EnqueueJob(cctx, newJob("job-1", inst, T0)))
	equal(t, "written", c.Written(), true)
	want("EnqueueJob", "operator.call", "job.queued")
	ok(t, e.s.EnqueueJob(cctx, newJob("job-2", inst, T0)))
	want("a second enqueue under the same context", "job.queued")

	cctx, c = store.WithCallRecord(ctx, call(2))
	_, assigned, err := e.s.EnqueueAssigned(cctx, newJob("job-3", inst, T0), "ag-1", at(time.Hour))
	ok(t, err)
	equal(t, "assigned", assigned, true)
	equal(t, "written", c.Written(), true)
	want("EnqueueAssigned", "operator.call", "job.assigned")

	cctx, c = store.WithCallRecord(ctx, call(3))
	_, err = e.s.EnqueueJobs(cctx, newJobs("batch", inst, 2))
	ok(t, err)
	equal(t, "written", c.Written(), true)
	want("EnqueueJobs", "operator.call", "job.queued", "job.queued")

	key := store.EnqueueKey{Key: "k1", RequestHash: "h1", At: T0, ExpiresAt: at(time.Hour)}
	cctx, c = store.WithCallRecord(ctx, call(4))
	_, _, err = e.s.EnqueueJobsKeyed(cctx, key, newJobs("keyed", inst, 1))
	ok(t, err)
	equal(t, "written", c.Written(), true)
	want("EnqueueJobsKeyed", "operator.call", "job.queued")
	// A replay stores no job, and still appends its call's record.
	cctx, c = store.WithCallRecord(ctx, call(5))
	_, replayed, err := e.s.EnqueueJobsKeyed(cctx, key, newJobs("keyed", inst, 1))
	ok(t, err)
	equal(t, "replayed", replayed, true)
	equal(t, "written", c.Written(), true)
	want("replay", "operator.call")
	if p := e.verify(inst); p != nil {
		t.Fatalf("chain: %v", p)
	}
}
