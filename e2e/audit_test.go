package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/byoc-dev/byoc/e2e/cluster"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/imsd/store/pgtest"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// byoc audit verify names exactly the record an attacker with access to
// the database edited or deleted (after dropping the triggers that refuse
// it); an export verifies offline, and an edited export line is named
// too; when the audit record cannot be written, the operator call does
// not happen.
func TestAuditVerifyNamesTamperedRecord(t *testing.T) {
	skipShort(t)
	runAuditTamper(t, cluster.Options{}, "")
}

// The same on PostgreSQL.
func TestAuditVerifyNamesTamperedRecordOnPostgres(t *testing.T) {
	skipShort(t)
	dsn := pgtest.Start(t)
	runAuditTamper(t, cluster.Options{DatabaseURL: dsn}, dsn)
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
	if !strings.Contains(out, "chain "+in.Id+": 7 records verified") {
		t.Fatalf("verify:\n%s", out)
	}
	out = cli.Run(0, "audit", "verify")
	if !strings.Contains(out, "chain vendor:") || !strings.Contains(out, "chain "+in.Id) {
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
	// The README's few lines of Python agree.
	if py, err := exec.LookPath("python3"); err == nil {
		out, err := exec.Command(py, filepath.Join(cluster.RepoRoot(), "docs", "audit_verify.py"), export).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "7 records verified") {
			t.Fatalf("docs/audit_verify.py: %v\n%s", err, out)
		}
	} else {
		t.Log("no python3: the README's verifier not run")
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
