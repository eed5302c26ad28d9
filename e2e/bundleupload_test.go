package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/agentd/auditlog"
	"github.com/byoc-dev/byoc/agentd/identity"
	"github.com/byoc-dev/byoc/e2e/cluster"
	"github.com/byoc-dev/byoc/internal/auditchain"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// An agent whose journal outgrew one call to imsd (4 MiB) before its
// first results were imported (it ran online for long, then went
// air-gapped) writes a first results file that carries the whole
// journal: byoc bundle import-results sends it in parts, imsd checks
// the parts and the whole, and records it as it would a small one. A
// copy changed after the agent signed it is refused, recording nothing;
// the same file again changes nothing. The call is audited in the
// install's chain.
func TestBundleResultsOverOneCall(t *testing.T) {
	skipShort(t)
	ctx := context.Background()
	ims, cli, state := shopOffline(t, fast)

	// The agent's own journal grows by 6 MiB (as years of records
	// would), written as the agent writes it.
	id, err := identity.Load(state)
	if err != nil {
		t.Fatal(err)
	}
	l, err := auditlog.Open(filepath.Join(auditlog.Dir(state), auditlog.AgentFile), auditlog.AgentChain(id.AgentID))
	if err != nil {
		t.Fatal(err)
	}
	data, _ := auditlog.EncodeData(map[string]string{"note": strings.Repeat("x", 64<<10)})
	for range 96 {
		if _, err := l.Add(auditchain.Record{Kind: "agent.note", Actor: "agent:" + id.AgentID, Subject: "agent:" + id.AgentID, Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()

	file := filepath.Join(t.TempDir(), "bundle.tar")
	if out := cli.Run(0, "bundle", "create", "shop", "--install", "acme", "-o", file); !strings.Contains(out, "provision workflow of 1 jobs") {
		t.Fatalf("bundle create printed:\n%s", out)
	}
	ims.Stop()
	if out, code := agentdBundle(t, state, "import", file); code != 0 {
		t.Fatalf("import: exit %d:\n%s", code, out)
	}
	results := filepath.Join(t.TempDir(), "results.tar")
	if out, code := agentdBundle(t, state, "export-results", "-o", results); code != 0 {
		t.Fatalf("export-results: exit %d:\n%s", code, out)
	}
	fi, err := os.Stat(results)
	if err != nil || fi.Size() <= 4<<20 {
		t.Fatalf("the results file: %v, %d bytes: want more than 4 MiB", err, fi.Size())
	}
	ims.Restart(t)

	// In one call, as older CLIs send it: too large.
	b, _ := os.ReadFile(results)
	if _, err := ims.Admin().ImportBundleResults(ctx, connect.NewRequest(&imsv1.ImportBundleResultsRequest{Install: "acme", File: b})); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("the results in one call: %v, want it refused as too large", err)
	}
	// Changed after the agent signed it: all parts come, the whole is
	// checked, nothing is recorded.
	bad, _ := tamperFile(t, results, "journal.jsonl", "xxxxxxxx", "xxxxxxxy")
	if _, stderr, code := cli.Exec("bundle", "import-results", bad); code == 0 || !strings.Contains(stderr, "journal.jsonl: sha256 ") || !strings.Contains(stderr, "nothing was recorded") {
		t.Fatalf("changed results: exit %d: %s", code, stderr)
	}
	if jobs := installJobs(t, ims.Admin()); len(jobs) != 0 {
		t.Fatalf("a refused import recorded %d jobs", len(jobs))
	}

	out := cli.Run(0, "bundle", "import-results", results)
	if !strings.Contains(out, " succeeded, 1 jobs; the agent's journal verified") {
		t.Fatalf("import-results printed:\n%s", out)
	}
	jobs := installJobs(t, ims.Admin())
	if len(jobs) != 1 || jobs[0].State != imsv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("imsd's jobs of the install: %v, want the bundle's one, succeeded", jobs)
	}
	if got := cli.Run(0, "install", "get", "acme", "-o", "json"); !strings.Contains(got, `"state": "active"`) && !strings.Contains(got, "INSTALL_STATE_ACTIVE") {
		t.Fatalf("install get after the results:\n%s", got)
	}
	if out := cli.Run(0, "bundle", "import-results", results); !strings.Contains(out, "were imported before") {
		t.Fatalf("second import-results printed:\n%s", out)
	}
	evs, err := ims.Admin().ListAuditEvents(ctx, connect.NewRequest(&imsv1.ListAuditEventsRequest{Install: "acme"}))
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	for _, e := range evs.Msg.Events {
		if e.Kind == "operator.call" && e.Subject == "UploadBundleResults" {
			calls++
		}
	}
	if calls != 3 {
		t.Fatalf("%d UploadBundleResults calls audited in install acme's chain, want 3", calls)
	}
}

// shopOffline starts imsd with o and pushes the one-action app shop with
// install acme, enrols an agent in a state directory of its own and stops
// it once connected: where the offline bundle tests begin.
func shopOffline(t *testing.T, o cluster.Options) (*cluster.IMS, *cluster.CLI, string) {
	t.Helper()
	ims := cluster.StartIMS(t, o)
	cli := cluster.NewCLI(t, ims)
	pushed := cli.PushApp(map[string]string{
		"app.toml": "name = \"shop\"\n",
		"components/hello.toml": `type = "action"
[config]
steps = [{ name = "hello", script = "echo greeting=hello >> $BYOC_OUTPUTS" }]
`,
		"installs/acme.toml": "",
	})
	state := t.TempDir()
	ag := cluster.StartAgent(t, ims.URL(), pushed.EnrollToken(t), state)
	waitConnected(t, ims, "acme")
	ag.Stop()
	return ims, cli, state
}
