package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/byoc-dev/byoc/agentd/auditlog"
	"github.com/byoc-dev/byoc/e2e/cluster"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/imsd/store/pgtest"
	"github.com/byoc-dev/byoc/internal/auditchain"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// byoc audit verify names exactly the record an attacker with access to
// the database edited or deleted (after dropping the triggers that refuse
// it); an export verifies offline, and an edited export line is named
// too; a real agentd's copy of its install's chain verifies, and an edit,
// a deletion and an insertion in imsd's database are each named, as the
// same record, by both byoc audit verify and agentd audit compare; when
// the audit record cannot be written, the operator call does not happen.
func TestAuditVerifyNamesTamperedRecord(t *testing.T) {
	skipShort(t)
	runAuditTamper(t, fast, "")
}

// The same on PostgreSQL.
func TestAuditVerifyNamesTamperedRecordOnPostgres(t *testing.T) {
	skipShort(t)
	dsn := pgtest.Start(t)
	opts := fast
	opts.DatabaseURL = dsn
	runAuditTamper(t, opts, dsn)
}

func runAuditTamper(t *testing.T, opts cluster.Options, dsn string) {
	ims := cluster.StartIMS(t, opts)
	if dsn == "" {
		dsn = filepath.Join(ims.DataDir, "imsd.db")
	}
	cli := cluster.NewCLI(t, ims)
	c := ims.Admin()
	ctx := context.Background()
	in, _ := cluster.NewInstall(t, c, "shop", "acme")
	cfg, _ := structpb.NewStruct(map[string]any{"steps": []any{map[string]any{"name": "noop", "script": "true"}}})
	for range 3 {
		if _, err := c.EnqueueJob(ctx, connect.NewRequest(&imsv1.EnqueueJobRequest{Install: "acme", ComponentType: "action", Operation: "apply", Config: cfg})); err != nil {
			t.Fatal(err)
		}
	}
	// install.created, then per job operator.call and job.queued.
	out := cli.Run(0, "audit", "verify", "--install", "acme")
	if !strings.Contains(out, "chain acme ("+in.Id+"): 7 records verified") {
		t.Fatalf("verify:\n%s", out)
	}
	out = cli.Run(0, "audit", "verify")
	if !strings.Contains(out, "chain vendor:") || !strings.Contains(out, "chain acme ("+in.Id+")") {
		t.Fatalf("verify of every chain:\n%s", out)
	}
	list := cli.Run(0, "audit", "list", "--install", "acme")
	for _, k := range []string{"install.created", "operator.call", "job.queued", "token:"} {
		if !strings.Contains(list, k) {
			t.Errorf("audit list has no %s:\n%s", k, list)
		}
	}
	export := filepath.Join(t.TempDir(), "acme.jsonl")
	cli.Run(0, "audit", "export", "--install", "acme", "-f", export)
	cli.Run(0, "audit", "verify", "--file", export)
	// The few lines of Python of docs/operator/audit.md agree.
	if py, err := exec.LookPath("python3"); err == nil {
		out, err := exec.Command(py, filepath.Join(cluster.RepoRoot(), "docs", "audit_verify.py"), export).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "7 records verified") {
			t.Fatalf("docs/audit_verify.py: %v\n%s", err, out)
		}
	} else {
		t.Log("no python3: the verifier of docs/operator/audit.md not run")
	}

	// The attacker: another connection to the database, triggers dropped.
	st, err := store.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.RawExec(ctx, `UPDATE audit_events SET kind = 'x'`); err == nil || !strings.Contains(err.Error(), "append-only") {
		t.Fatalf("UPDATE with the trigger: %v", err)
	}
	if st.Dialect() == store.DialectPostgres {
		must(t, st.RawExec(ctx, `DROP TRIGGER audit_events_no_update ON audit_events`))
	} else {
		must(t, st.RawExec(ctx, `DROP TRIGGER audit_events_no_update`))
		must(t, st.RawExec(ctx, `DROP TRIGGER audit_events_no_delete`))
	}
	agentCopyTamper(t, ims, cli, st)

	wantVerify := func(what string) {
		t.Helper()
		out, _, code := cli.Exec("audit", "verify", "--install", "acme")
		if code != 1 || !strings.Contains(out, what) {
			t.Fatalf("verify exited %d, want 1 naming %q:\n%s", code, what, out)
		}
	}
	must(t, st.RawExec(ctx, `UPDATE audit_events SET actor = 'token:someone-else' WHERE chain = ? AND seq = 4`, in.Id))
	wantVerify("record 4 changed")
	must(t, st.RawExec(ctx, `DELETE FROM audit_events WHERE chain = ? AND seq = 2`, in.Id))
	wantVerify("record 2 removed")

	// The export taken before still verifies; an edited line is named.
	cli.Run(0, "audit", "verify", "--file", export)
	b, err := os.ReadFile(export)
	must(t, err)
	lines := strings.SplitAfter(string(b), "\n")
	lines[2] = strings.Replace(lines[2], `"job.queued"`, `"job.cancelled"`, 1)
	must(t, os.WriteFile(export, []byte(strings.Join(lines, "")), 0o600))
	out, _, code := cli.Exec("audit", "verify", "--file", export)
	if code != 1 || !strings.Contains(out, "record 3 changed") {
		t.Fatalf("verify of an edited export exited %d:\n%s", code, out)
	}

	// Vault's rule: no audit record, no operation.
	if st.Dialect() == store.DialectPostgres {
		must(t, st.RawExec(ctx, `CREATE TRIGGER audit_events_broken BEFORE INSERT ON audit_events FOR EACH ROW EXECUTE FUNCTION audit_events_append_only()`))
	} else {
		must(t, st.RawExec(ctx, `CREATE TRIGGER audit_events_broken BEFORE INSERT ON audit_events BEGIN SELECT RAISE(ABORT, 'disk full'); END`))
	}
	_, stderr, code := cli.Exec("app", "create", "other")
	if code == 0 || !strings.Contains(stderr, "audit record") {
		t.Fatalf("app create without its audit record exited %d: %s", code, stderr)
	}
	if _, err := c.GetApp(ctx, connect.NewRequest(&imsv1.GetAppRequest{IdOrName: "other"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("app created without its audit record: %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// agentCopyTamper runs jobs on a real agentd until its copy of its
// install's chain holds every record imsd has, then, as an attacker with
// the database (st, triggers dropped), edits, deletes and inserts a record
// of that chain in turn (undoing each): byoc audit verify and agentd
// audit compare must both name exactly that record.
func agentCopyTamper(t *testing.T, ims *cluster.IMS, cli *cluster.CLI, st *store.Store) {
	ctx := context.Background()
	c := ims.Admin()
	in, token := cluster.NewInstall(t, c, "shop", "zeta")
	state := filepath.Join(t.TempDir(), "zeta")
	ag := cluster.StartAgent(t, ims.URL(), token, state)
	waitConnected(t, ims, "zeta")
	for range 2 {
		job := enqueue(t, c, "zeta", "true", 60)
		cluster.WaitJob(t, c, job.Id, 30*time.Second, imsv1.JobState_JOB_STATE_SUCCEEDED)
	}
	copyPath := filepath.Join(auditlog.Dir(state), auditlog.InstallFile)
	var rs []auditchain.Record
	cluster.Eventually(t, 30*time.Second, "the agent's copy to hold imsd's whole chain", func() bool {
		var err error
		rs, err = st.AuditRecords(ctx, in.Id)
		must(t, err)
		local, err := auditlog.ReadFile(copyPath)
		must(t, err)
		return len(local) == len(rs)
	})
	// Every job left assigned, acked and finished in the copy.
	kinds := map[string]int{}
	for _, r := range rs {
		kinds[r.Kind]++
	}
	if kinds["job.assigned"] != 2 || kinds["job.acked"] != 2 || kinds["job.finished"] != 2 {
		t.Fatalf("imsd's chain of zeta: %v", kinds)
	}
	// Stopped, so that nothing moves while the records are tampered with.
	ag.Stop()
	agentd := func(want int, args ...string) string {
		t.Helper()
		cmd := exec.Command(filepath.Join(cluster.Binaries(t), "agentd"), append([]string{"audit", "--state-dir", state}, args...)...)
		out, _ := cmd.CombinedOutput()
		if got := cmd.ProcessState.ExitCode(); got != want {
			t.Fatalf("agentd audit %v exited %d, want %d:\n%s", args, got, want, out)
		}
		return string(out)
	}
	if out := agentd(0, "verify"); !strings.Contains(out, fmt.Sprintf("%d records, intact", len(rs))) ||
		!strings.Contains(out, fmt.Sprintf("every record signed by imsd (checkpoint of record %d)", len(rs))) {
		t.Fatalf("agentd audit verify:\n%s", out)
	}
	// A record forged into the agent's copy (by whoever can write the
	// agent's disk, or, before the channel, a man in the middle) that
	// links correctly: verify names it at once, as no checkpoint of imsd
	// covers it.
	orig, err := os.ReadFile(copyPath)
	must(t, err)
	last := rs[len(rs)-1]
	forged := auditchain.Next(&last, auditchain.Record{Chain: in.Id, At: last.At + 1, Kind: "job.acked", Actor: "agent:forged", Subject: last.Subject, Data: "{}"})
	line, err := json.Marshal(forged)
	must(t, err)
	must(t, os.WriteFile(copyPath, append(slices.Clone(orig), append(line, '\n')...), 0o600))
	if out, want := agentd(1, "verify"), fmt.Sprintf("record %d and those after it carry no signature of imsd (records up to %d do)", forged.Seq, last.Seq); !strings.Contains(out, want) {
		t.Fatalf("agentd audit verify of a forged record that links, want %q:\n%s", want, out)
	}
	must(t, os.WriteFile(copyPath, orig, 0o600))
	if out := agentd(0, "compare"); !strings.Contains(out, "they agree on every record") {
		t.Fatalf("agentd audit compare:\n%s", out)
	}
	wantBoth := func(seq int64, byoc, agent string) {
		t.Helper()
		out, _, code := cli.Exec("audit", "verify", "--install", "zeta")
		if want := fmt.Sprintf("record %d %s", seq, byoc); code != 1 || !strings.Contains(out, want) {
			t.Fatalf("byoc audit verify exited %d, want 1 naming %q:\n%s", code, want, out)
		}
		if out, want := agentd(1, "compare"), fmt.Sprintf("DISAGREE at record %d: %s", seq, agent); !strings.Contains(out, want) {
			t.Fatalf("agentd audit compare, want %q:\n%s", want, out)
		}
	}
	insert := func(r auditchain.Record) {
		must(t, st.RawExec(ctx, `INSERT INTO audit_events (chain, seq, at, kind, actor, subject, data, prev, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			r.Chain, r.Seq, r.At, r.Kind, r.Actor, r.Subject, r.Data, r.Prev, r.Hash))
	}
	// A job's ack record, edited: it now says another agent acked.
	k := slices.IndexFunc(rs, func(r auditchain.Record) bool { return r.Kind == "job.acked" })
	r := rs[k]
	must(t, st.RawExec(ctx, `UPDATE audit_events SET actor = 'agent:someone-else' WHERE chain = ? AND seq = ?`, in.Id, r.Seq))
	wantBoth(r.Seq, "changed", "differs")
	must(t, st.RawExec(ctx, `UPDATE audit_events SET actor = ? WHERE chain = ? AND seq = ?`, r.Actor, in.Id, r.Seq))
	// Deleted.
	must(t, st.RawExec(ctx, `DELETE FROM audit_events WHERE chain = ? AND seq = ?`, in.Id, r.Seq))
	wantBoth(r.Seq, "removed", "missing from imsd")
	insert(r)
	agentd(0, "compare")
	// A record inserted before it, the later ones renumbered, its own hash
	// and link correct.
	must(t, st.RawExec(ctx, `UPDATE audit_events SET seq = seq + 100000 WHERE chain = ? AND seq >= ?`, in.Id, r.Seq))
	must(t, st.RawExec(ctx, `UPDATE audit_events SET seq = seq - 99999 WHERE chain = ? AND seq >= 100000`, in.Id))
	insert(auditchain.Next(&rs[k-1], auditchain.Record{Chain: in.Id, At: r.At, Kind: "job.cancelled", Actor: "imsd", Subject: r.Subject, Data: "{}"}))
	wantBoth(r.Seq, "inserted", "differs")
}

// An admin's live plan (PlanInstall with live set) enqueues plan jobs on
// the install's agent, so it leaves an operator.call record like every
// other call that changes something, in the install's chain; a
// graph-only plan stays a read and leaves none.
func TestLivePlanIsAudited(t *testing.T) {
	ims := cluster.StartIMS(t, fast)
	c := ims.Admin()
	ctx := context.Background()
	files := []*imsv1.AppFile{
		{Path: "app.toml", Content: []byte("name = \"shop\"\n")},
		{Path: "components/db.toml", Content: []byte("type = \"action\"\n[config]\nsteps = [{ name = \"db\", script = \"true\" }]\n")},
		{Path: "installs/acme.toml", Content: []byte("")},
	}
	pushed, err := c.PushAppRevision(ctx, connect.NewRequest(&imsv1.PushAppRevisionRequest{Files: files}))
	if err != nil {
		t.Fatal(err)
	}
	ra := cluster.EnrollRaw(t, ims.URL(), pushed.Msg.Installs[0].EnrollmentToken.Token)
	ra.Connect(t, 10)
	planCalls := func() []*imsv1.AuditEvent {
		t.Helper()
		evs, err := c.ListAuditEvents(ctx, connect.NewRequest(&imsv1.ListAuditEventsRequest{Install: "acme"}))
		if err != nil {
			t.Fatal(err)
		}
		var out []*imsv1.AuditEvent
		for _, e := range evs.Msg.Events {
			if e.Kind == "operator.call" && e.Subject == "PlanInstall" {
				out = append(out, e)
			}
		}
		return out
	}
	if _, err := c.PlanInstall(ctx, connect.NewRequest(&imsv1.PlanInstallRequest{Install: "acme", Kind: imsv1.WorkflowKind_WORKFLOW_KIND_PROVISION})); err != nil {
		t.Fatal(err)
	}
	if evs := planCalls(); len(evs) != 0 {
		t.Fatalf("a graph-only plan was recorded: %v", evs)
	}
	// The agent never answers: the live plan's jobs are cancelled at its
	// timeout; the record was written before the call ran.
	live, err := c.PlanInstall(ctx, connect.NewRequest(&imsv1.PlanInstallRequest{Install: "acme", Kind: imsv1.WorkflowKind_WORKFLOW_KIND_PROVISION, Live: true, TimeoutSeconds: 1}))
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := c.ListJobs(ctx, connect.NewRequest(&imsv1.ListJobsRequest{Install: "acme"}))
	if err != nil {
		t.Fatal(err)
	}
	plans := 0
	for _, j := range jobs.Msg.Jobs {
		if j.Operation == "plan" {
			plans++
		}
	}
	if plans == 0 {
		t.Errorf("the live plan enqueued no plan job: %v", jobs.Msg.Jobs)
	}
	evs := planCalls()
	if len(evs) != 1 || !strings.Contains(evs[0].Data, `"live":"true"`) || !strings.Contains(evs[0].Data, `"role":"admin"`) || !strings.Contains(evs[0].Data, `"install":"acme"`) || !strings.HasPrefix(evs[0].Actor, "token:") {
		t.Errorf("live plan's records: %v (plan %v)", evs, live.Msg)
	}
}
