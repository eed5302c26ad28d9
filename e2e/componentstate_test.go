package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/e2e/cluster"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// stateApp has one action component that keeps a file in its state
// directory on apply and reads it back on destroy; what it leaves in its
// work dir is gone by then.
var stateApp = map[string]string{
	"app.toml": "name = \"keeper\"\n",
	"components/store.toml": `type = "action"
[config]
steps = [{ name = "keep", script = "echo applied-by-$BYOC_JOB_ID > $BYOC_STATE_DIR/applied; touch scratch; echo state=$BYOC_STATE_DIR" }]
destroy_steps = [{ name = "find", script = "echo found $(cat $BYOC_STATE_DIR/applied); test -e scratch && echo scratch survived || echo no scratch" }]
`,
	"installs/acme.toml": "",
}

// A real agent gives every job of a component the same state directory,
// STATE/components/<component>/, kept from the provision's apply to the
// deprovision's destroy, while each job's work dir is new.
func TestComponentStateAcrossJobs(t *testing.T) {
	skipShort(t)
	opts := fast
	opts.WorkflowInterval = 200 * time.Millisecond
	ims := cluster.StartIMS(t, opts)
	cli := cluster.NewCLI(t, ims)
	token := cli.PushApp(stateApp).EnrollToken(t)
	stateDir := t.TempDir()
	cluster.StartAgent(t, ims.URL(), token, stateDir)

	if out := cli.Run(0, "install", "provision", "acme", "--wait"); !strings.Contains(out, "succeeded: 1/1 done") {
		t.Fatalf("provision:\n%s", out)
	}
	c := ims.Admin()
	ctx := context.Background()
	wfs, err := c.ListWorkflows(ctx, connect.NewRequest(&imsv1.ListWorkflowsRequest{Install: "acme"}))
	if err != nil {
		t.Fatal(err)
	}
	applyJob := jobOf(t, c, wfs.Msg.Workflows[0].Id, "store")
	want := filepath.Join(stateDir, "components", "store")
	applyLog := strings.Join(cluster.Texts(cluster.Logs(t, c, applyJob)), "\n")
	if !strings.Contains(applyLog, "state="+want) {
		t.Fatalf("apply's log does not name %s:\n%s", want, applyLog)
	}
	if b, err := os.ReadFile(filepath.Join(want, "applied")); err != nil || strings.TrimSpace(string(b)) != "applied-by-"+applyJob {
		t.Fatalf("state file on the agent: %q, %v", b, err)
	}

	if out := cli.Run(0, "install", "deprovision", "acme", "--yes", "--wait"); !strings.Contains(out, "succeeded: 1/1 done") {
		t.Fatalf("deprovision:\n%s", out)
	}
	wfs, err = c.ListWorkflows(ctx, connect.NewRequest(&imsv1.ListWorkflowsRequest{Install: "acme"}))
	if err != nil {
		t.Fatal(err)
	}
	destroyLog := strings.Join(cluster.Texts(cluster.Logs(t, c, jobOf(t, c, wfs.Msg.Workflows[0].Id, "store"))), "\n")
	if !strings.Contains(destroyLog, "found applied-by-"+applyJob) || !strings.Contains(destroyLog, "no scratch") {
		t.Fatalf("destroy's log:\n%s", destroyLog)
	}
}
